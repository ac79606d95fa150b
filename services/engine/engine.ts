import type { Logger } from 'pino';
import type { z } from 'zod';
import { beforeAbort } from '../../adapters/before-abort.ts';
import { type EventStore, EventStoreUnavailableError } from '../../adapters/event-store/port.ts';
import {
  MarketDataError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
} from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import { OUTCOME_AFTER_CANDLES, REPLAY_LAP_INPUT } from '../../contracts/history.ts';
import {
  type Exchange,
  type MarketInfo,
  type MarketKey,
  marketKey,
  TIMEFRAME_MS,
  type Timeframe,
} from '../../contracts/market.ts';
import type { CalibrationTable, PerpContext, Verdict, VolatilityForecast } from '../../contracts/signals.ts';
import {
  GetMarketRegimeInput,
  GetRiskForecastInput,
  GetTradeCallInput,
  type RegimeReading,
  type RiskForecast,
  type ScanFundingArbInput,
  type ScanFundingArbOutput,
  ScanTradeCallsInput,
  type ScanTradeCallsOutput,
  type TradeCall,
} from '../../contracts/tools.ts';
import { verdictVerifyUrl } from '../../contracts/verify-url.ts';
import { WorkSlices } from '../shared/stoppable-work.ts';
import { keptAnswer } from './answer-revisions.ts';
import { forEachLimited } from './for-each-limited.ts';
import { isFresh } from './funding-arb.ts';
import { scanFundingArb } from './funding-scan.ts';
import { MarketStates, warmupCandles } from './market-states.ts';
import { describeFailure } from './operation-errors.ts';
import type { EngineOperations, OperationContext } from './operations.ts';
import { recordedVolatility } from './recorded-volatility.ts';
import { rankedScan, type ScanRow } from './scan-ranking.ts';
import { cellDecision } from './signals/calibration.ts';
import {
  computeRegime,
  computeRiskHorizons,
  computeVerdict,
  createMarketState,
  defaultCalibration,
  ENGINE_VERSION,
  labelEvidenceText,
  type MarketState,
  recordedMeaning,
  recordedReasoning,
  riskEvidenceText,
} from './signals/index.ts';
import { sizedCopy, sizeFor } from './sizing.ts';
import { PERP_VENUES, SCAN_CONCURRENCY } from './venues.ts';
import {
  lastVerdict,
  type RecordedVerdict,
  recordVerdict,
  type VerdictDraft,
  verdictStream,
} from './verdict-recorder.ts';

/** A restart after a long outage backfills at most this many closes per market (older ones stay missing). */
const MAX_BACKFILL_CANDLES = 500;

/** The spot book used for the basis of a perpetual, where the feed has one. */
const SPOT_OF: Partial<Record<Exchange, Exchange>> = { BINANCE: 'BINANCE_SPOT' };

export interface SignalEngineOptions {
  feed: MarketFeed;
  store: EventStore;
  calibration?: CalibrationTable;
  /** This service's public address; trade calls then carry their verify link. */
  publicBaseUrl?: string;
  logger?: Logger;
  /**
   * What the engine role's scheduler records a verdict for on every close (scheduledMarkets,
   * SCHEDULE_TOP_N), whichever process runs it: a request on one of those markets first
   * backfills, as the scheduler's call does, the closes its chain is missing.
   */
  schedule?: { exchanges: Exchange[]; timeframes: Timeframe[]; topN: number };
  /**
   * Where the market states' band scales are saved (saveBandScales) and read back when a state is
   * rebuilt: the projection snapshots' store, so that a restart keeps the scales it served.
   */
  bandScales?: ProjectionStore;
}

type Trigger = 'request' | 'schedule';

/** How long a venue's scheduled coins are reused by requests checking for a gap (behindSchedule). */
const SCHEDULED_TOP_TTL_MS = 10 * 60_000;

/** An answer of one candle of one market, served until the next close. */
interface Kept<T> {
  closeTime: number;
  value: T;
}

/** A trade call as the engine keeps it per candle: sized per call, for the caller's budget. */
type UnsizedTradeCall = Omit<TradeCall, 'volatility'> & { volatility?: VolatilityForecast };
/** A risk forecast as the engine keeps it per candle: sized per call, for the caller's budget. */
type UnsizedRiskForecast = Omit<RiskForecast, 'horizons'> & {
  horizons: Omit<RiskForecast['horizons'][number], 'sizing'>[];
};

interface CachedCall {
  closeTime: number;
  call: UnsizedTradeCall;
  /** The call without its reasoning, made when first asked for. */
  withoutReasoning?: UnsizedTradeCall;
}

/**
 * The four sold operations over one market feed. Verdicts are computed once per closed candle
 * per market, recorded as VerdictRecorded (hash-chained, with RegimeShifted when the regime
 * turns) before they are served, and then served from memory until the next candle closes.
 */
export class SignalEngine implements EngineOperations {
  readonly feed: MarketFeed;
  private readonly store: EventStore;
  private readonly calibration: CalibrationTable;
  private readonly logger: Logger | undefined;
  private readonly publicBaseUrl: string | undefined;
  private readonly schedule: SignalEngineOptions['schedule'];
  private readonly states: MarketStates;
  private readonly calls = new Map<string, CachedCall>();
  private readonly regimes = new Map<string, Kept<RegimeReading>>();
  private readonly scheduledTops = new Map<Exchange, { at: number; coins: Set<string> }>();
  private readonly forecasts = new Map<string, Kept<UnsizedRiskForecast>>();

  constructor(options: SignalEngineOptions) {
    this.feed = options.feed;
    this.store = options.store;
    this.calibration = options.calibration ?? defaultCalibration;
    this.logger = options.logger;
    this.publicBaseUrl = options.publicBaseUrl;
    this.schedule = options.schedule;
    this.states = new MarketStates(options.feed, options.logger, options.bandScales);
  }

  /**
   * The venue for a request that names none: on the replay feed BINANCE_SPOT when the data has
   * spot candles (they build every timeframe from 5m up; the perpetual's replay candles are 1h
   * only), otherwise the USDT-M perpetual, as on the live feed.
   */
  defaultExchange(): Exchange {
    return defaultExchange(this.feed);
  }

  /** The verdict of the market's last close, with the sizing for the caller's budget added. */
  async getTradeCall(raw: GetTradeCallInput, ctx: OperationContext = {}): Promise<TradeCall> {
    const input = this.withExchange(parsedInput(GetTradeCallInput, raw, ctx));
    return sizedCall(await this.tradeCall(input, 'request', ctx), input.riskBudgetUsd);
  }

  /**
   * The scheduler's entry: the same computation, recorded with trigger "schedule". `signal` is
   * the scheduler's stop: a backfill of hundreds of closes gives way to it between records.
   */
  async scheduledTradeCall(raw: GetTradeCallInput, signal?: AbortSignal): Promise<UnsizedTradeCall> {
    return this.tradeCall(this.withExchange(GetTradeCallInput.parse(raw)), 'schedule', {}, signal);
  }

  private withExchange<T extends { exchange?: Exchange | undefined }>(input: T): T & { exchange: Exchange } {
    return { ...input, exchange: input.exchange ?? this.defaultExchange() };
  }

  /** Computed once per candle close of the market, then the same answer until the next. */
  async getMarketRegime(raw: GetMarketRegimeInput, ctx: OperationContext = {}): Promise<RegimeReading> {
    const input = this.withExchange(parsedInput(GetMarketRegimeInput, raw, ctx));
    return this.perClose(this.regimes, input, (state, closeTime) => {
      const reading = computeRegime(state);
      return keptAnswer<RegimeReading>({
        coin: input.coin,
        timeframe: input.timeframe,
        exchange: input.exchange,
        regime: reading.regime,
        confidence: reading.confidence,
        suggestion: reading.suggestion,
        metrics: { ...reading.metrics, held_candles: reading.held_candles },
        price: state.snapshot()!.close,
        timestamp: Math.floor(closeTime / 1000),
        feed: this.feed.kind,
        volatility: reading.volatility,
        label_evidence: labelEvidenceText(state.volatility, input.timeframe),
        confidence_meaning: reading.confidence_meaning,
      });
    });
  }

  /**
   * Computed once per candle close of the market, then the same answer until the next; sized for
   * the caller's budget once per answer and budget.
   */
  async getRiskForecast(raw: GetRiskForecastInput, ctx: OperationContext = {}): Promise<RiskForecast> {
    const input = this.withExchange(parsedInput(GetRiskForecastInput, raw, ctx));
    const forecast = await this.perClose(this.forecasts, input, (state, closeTime) => {
      // A state built without its 1h candles (the venue failed them) has no σ to serve on the
      // rows that read them, or one from a warm-up without its hours: the venue's failure is the
      // answer (retryable), not insufficient_history, and nothing is kept for this close.
      const missingHours = this.states.hoursFailure(state);
      if (missingHours !== undefined) throw missingHours;
      const reading = computeRegime(state);
      return {
        coin: input.coin,
        timeframe: input.timeframe,
        exchange: input.exchange,
        price: state.snapshot()!.close,
        timestamp: Math.floor(closeTime / 1000),
        feed: this.feed.kind,
        horizons: computeRiskHorizons(state),
        percentile: reading.volatility.percentile,
        regime: reading.regime,
        label_evidence: labelEvidenceText(state.volatility, input.timeframe),
        evidence: riskEvidenceText(state.volatility, input.timeframe),
      };
    });
    return sizedForecast(forecast, input.riskBudgetUsd);
  }

  /** The market's answer kept in `cache` for its last closed candle, computed when that candle is new. */
  private async perClose<T>(
    cache: Map<string, Kept<T>>,
    input: { exchange: Exchange; coin: string; timeframe: Timeframe },
    compute: (state: MarketState, closeTime: number) => T,
  ): Promise<T> {
    const state = await this.states.advance(input.exchange, input.coin, input.timeframe);
    const closeTime = state.lastCloseTime!;
    const key = marketKey(input.exchange, input.coin, input.timeframe);
    const kept = cache.get(key);
    if (kept && kept.closeTime === closeTime) return kept.value;
    const value = compute(state, closeTime);
    cache.set(key, { closeTime, value });
    return value;
  }

  async scanTradeCalls(raw: ScanTradeCallsInput, ctx: OperationContext = {}): Promise<ScanTradeCallsOutput> {
    const input = this.withExchange(parsedInput(ScanTradeCallsInput, raw, ctx));
    const markets = rankMarkets(await this.feed.markets(input.exchange)).slice(0, input.topN);
    const skipped: ScanTradeCallsOutput['skipped'] = [];
    const rows: ScanRow[] = [];
    const refused = new Map<string, Error>();
    await forEachLimited(markets, SCAN_CONCURRENCY, async (market) => {
      if (!market.hasCandles) {
        skipped.push({ coin: market.coin, reason: `no candles for ${market.coin} on ${input.exchange}` });
        return;
      }
      try {
        const call = await this.tradeCall(
          {
            coin: market.coin,
            timeframe: input.timeframe,
            exchange: input.exchange,
            includeReasoning: false,
          },
          'request',
          ctx,
        );
        rows.push({
          rank: 0,
          coin: call.coin,
          call: call.call,
          confidence: call.confidence,
          score: call.score,
          regime: call.regime,
          price: call.price,
          timestamp: call.timestamp,
          quoteVolume24h: market.quoteVolume24h,
          verdictId: call.verdictId,
          expectedMovePct: call.volatility?.expected_move_pct ?? null,
          lean: call.lean,
          confidence_meaning: call.confidence_meaning,
          volume: market.quoteVolume24h ?? 0,
        });
      } catch (err) {
        // An expected per-market failure (no history yet, venue down) is reported, not fatal.
        const failure = describeFailure(err);
        if (!failure) throw err;
        if (isUnserved(err)) refused.set(market.coin, err);
        skipped.push({ coin: market.coin, reason: failure.message });
      }
    });
    const unserved = await unservedScan(this.feed, input, markets, refused);
    if (unserved) throw unserved;
    return {
      timeframe: input.timeframe,
      exchange: input.exchange,
      feed: this.feed.kind,
      timestamp: Math.floor(this.feed.now() / 1000),
      scanned: markets.length,
      ...rankedScan(rows, skipped, input, markets.length),
    };
  }

  scanFundingArb(raw: ScanFundingArbInput): Promise<ScanFundingArbOutput> {
    return scanFundingArb(this.feed, raw, this.logger);
  }

  /**
   * Records, in order, a verdict for every candle of a market that closed after the last verdict
   * on record and before `before` (default: the latest close): the candles that closed while no
   * engine ran, or while a run was busy. `before` itself is left to the caller's normal path.
   * Backfilled verdicts use the candles alone (the funding and basis of those past moments are
   * not re-read) and say so in their inputs. They are this engine's verdicts, labelled with its
   * version, whichever version recorded the last one on record: after an upgrade the closes missed
   * while no engine ran are recorded by the new engine, so the chain has no hole at the upgrade
   * and shows it at its first verdict of the new version. Returns how many were recorded. The
   * candles are fed a slice of work at a time (WorkSlices), and an aborted `signal` stops it at
   * the next candle, in the warm-up or between two records (it throws the signal's reason): what
   * it recorded is an unbroken run after the last verdict, and the next backfill goes on from there.
   */
  async backfill(
    market: { exchange: Exchange; coin: string; timeframe: Timeframe },
    options: { before?: number; signal?: AbortSignal } = {},
  ): Promise<number> {
    const { exchange, coin, timeframe } = market;
    const tfMs = TIMEFRAME_MS[timeframe];
    const { last } = await lastVerdict(this.store, verdictStream(market));
    if (!last) return 0;
    const nowClose = this.feed.now() - (this.feed.now() % tfMs);
    const latestClose = options.before ?? nowClose;
    const missed = Math.round((latestClose - last.data.candleCloseTime) / tfMs) - 1;
    if (missed <= 0) return 0;
    const take = Math.min(missed, MAX_BACKFILL_CANDLES);
    // The feed hands out the newest candles: reach back past the closes after `before` as well.
    const beyond = Math.max(0, Math.round((nowClose - latestClose) / tfMs));
    const candles = await beforeAbort(
      this.feed.candles(exchange, coin, timeframe, {
        limit: warmupCandles(timeframe) + take + 1 + beyond,
        signal: options.signal,
      }),
      options.signal,
    );
    const state = createMarketState({ exchange, coin, timeframe });
    // The band scales the engine saved (at its last run or stop, before the closes missed) go on
    // here too, as in a rebuilt state: the backfilled verdicts' bands are not ones started at 1.
    const saved = await this.states.loadBandScales(marketKey(exchange, coin, timeframe));
    let recorded = 0;
    const slices = new WorkSlices(options.signal);
    for (const candle of candles) {
      if (slices.due()) await slices.turn();
      state.update(candle);
      const closeTime = candle.openTime + tfMs;
      if (saved !== null && closeTime === saved.closeTime) state.resumeBandScales(saved);
      if (closeTime <= last.data.candleCloseTime || closeTime >= latestClose) continue;
      if (state.missingForVerdict().length > 0) continue;
      const verdict = computeVerdict(state, undefined, this.calibration, { includeReasoning: false });
      await recordVerdict(this.store, verdictDraft(market, verdict, this.feed, 'schedule', true));
      recorded++;
    }
    if (recorded > 0) {
      this.logger?.info(
        {
          market: marketKey(exchange, coin, timeframe),
          recorded,
          missed,
          ...(last.data.engineVersion === ENGINE_VERSION
            ? {}
            : { engineVersion: ENGINE_VERSION, lastEngineVersion: last.data.engineVersion }),
        },
        'backfilled verdicts for candles that closed while the engine was down',
      );
    }
    return recorded;
  }

  /**
   * Saves the band scales of the market states that closed a candle since their last save (the
   * engine role does after each scheduled run and at its stop), so that a state rebuilt after a
   * restart goes on with them. Returns how many markets were saved.
   */
  saveBandScales(): Promise<number> {
    return this.states.saveBandScales();
  }

  async close(): Promise<void> {
    await this.feed.close();
  }

  private async tradeCall(
    input: Omit<ReturnType<typeof GetTradeCallInput.parse>, 'riskBudgetUsd'> & { exchange: Exchange },
    trigger: Trigger,
    ctx: OperationContext,
    signal?: AbortSignal,
  ): Promise<UnsizedTradeCall> {
    const key = marketKey(input.exchange, input.coin, input.timeframe);
    // Stopped during the state's warm-up: it ends at the next candle, and nothing is recorded.
    const state = await this.states.advance(input.exchange, input.coin, input.timeframe, signal);
    const closeTime = state.lastCloseTime!;
    const cached = this.calls.get(key);
    if (cached && cached.closeTime === closeTime) {
      if (input.includeReasoning) return cached.call;
      // One copy without the reasoning per revision, like the call itself: what is served from
      // it (its answer JSON, the track-record join) is then made once per revision too.
      cached.withoutReasoning ??= withReasoning(cached.call, false);
      return cached.withoutReasoning;
    }

    const context = await this.perpContext(
      input.exchange,
      input.coin,
      input.timeframe,
      state.snapshot()?.close,
    );
    const verdict = computeVerdict(state, context, this.calibration, { includeReasoning: true });
    // A scheduled verdict first records every close between the last one on record and its own
    // (a restart, a run slower than a candle): bounded by this very close, so a close that passes
    // meanwhile cannot slip between the backfill and this record and leave a hole for good.
    if (trigger === 'schedule') {
      await this.backfill(input, { before: closeTime, signal });
      // Stopped while backfilling: this close's record would leave the closes not yet
      // backfilled as a hole for good (the chain only grows forward).
      signal?.throwIfAborted();
    } else {
      // A request on a scheduled market the scheduler has not caught up on (a restart, a stopped
      // backfill): its record of this close would leave the closes before it unrecorded for
      // good, so it backfills them first, as the scheduler's call would. A market no scheduler
      // holds records only the closes asked for, as before. If the venue's ranking or a candle
      // read fails, the call is still served and this close recorded: a hole the log names is
      // better than a trade call refused for want of the closes before it.
      try {
        if (await this.behindSchedule(input, closeTime)) await this.backfill(input, { before: closeTime });
      } catch (err) {
        // The event store out of reach (an outage, a failover): the call is refused as unavailable
        // (retryable) rather than record this close past the closes the backfill could not write,
        // a hole for good if the store answered again in between. Before, each such call logged
        // that the closes 'stay unrecorded', and then failed on its own record anyway.
        if (err instanceof EventStoreUnavailableError) throw err;
        this.logger?.warn(
          { market: key, err: describeFailure(err) },
          'backfill before a requested verdict failed; the closes before it stay unrecorded',
        );
      }
    }
    const recorded = await recordVerdict(this.store, verdictDraft(input, verdict, this.feed, trigger), {
      correlationId: ctx.requestId,
    });
    const call = toTradeCall(recorded, verdict, this.publicBaseUrl, this.calibration);
    this.calls.set(key, { closeTime, call });
    if (recorded.data.candleCloseTime === verdict.candle_close_time) {
      this.logger?.debug(
        { market: key, call: call.call, confidence: call.confidence, trigger },
        'verdict recorded',
      );
    }
    return withReasoning(call, input.includeReasoning);
  }

  /**
   * Whether the scheduler records every close of this market (its venue and timeframe scheduled,
   * its coin among the venue's top N) and its chain on record stops short of the close before
   * `closeTime`. The venue's listing is read only then, and reused (scheduledTop).
   */
  private async behindSchedule(market: MarketKey, closeTime: number): Promise<boolean> {
    const schedule = this.schedule;
    if (!schedule?.exchanges.includes(market.exchange) || !schedule.timeframes.includes(market.timeframe)) {
      return false;
    }
    const { last } = await lastVerdict(this.store, verdictStream(market));
    if (!last || last.data.candleCloseTime >= closeTime - TIMEFRAME_MS[market.timeframe]) return false;
    return (await this.scheduledTop(market.exchange, schedule.topN)).has(market.coin);
  }

  /**
   * The coins the scheduler holds on a venue, kept for SCHEDULED_TOP_TTL_MS: the listing is a
   * venue-wide ticker read, and requests on coins outside the top N (whose chains have gaps by
   * nature) would otherwise make one on every close.
   */
  private async scheduledTop(exchange: Exchange, topN: number): Promise<Set<string>> {
    const kept = this.scheduledTops.get(exchange);
    if (kept && Date.now() - kept.at < SCHEDULED_TOP_TTL_MS) return kept.coins;
    const coins = new Set(scheduledCoins(await this.feed.markets(exchange), topN).map((m) => m.coin));
    this.scheduledTops.set(exchange, { at: Date.now(), coins });
    return coins;
  }

  /** Funding and basis for a perpetual; missing data leaves the lean out, it is never guessed. */
  private async perpContext(
    exchange: Exchange,
    coin: string,
    timeframe: Timeframe,
    perpClose: number | undefined,
  ): Promise<PerpContext | undefined> {
    if (!PERP_VENUES.includes(exchange)) return undefined;
    const context: PerpContext = {};
    try {
      const [latest] = (await this.feed.funding(exchange, coin, { limit: 1 })).slice(-1);
      if (latest && isFresh(latest, this.feed.now())) {
        context.funding = { rate: latest.rate, intervalHours: latest.intervalHours };
      }
    } catch (err) {
      if (!(err instanceof MarketDataError)) throw err;
    }
    const spot = SPOT_OF[exchange];
    if (spot && perpClose !== undefined) {
      try {
        const [candle] = (await this.feed.candles(spot, coin, timeframe, { limit: 1 })).slice(-1);
        if (candle) {
          context.perpClose = perpClose;
          context.spotClose = candle.close;
        }
      } catch (err) {
        if (!(err instanceof MarketDataError)) throw err;
      }
    }
    return Object.keys(context).length > 0 ? context : undefined;
  }
}

export async function createSignalEngine(options: SignalEngineOptions): Promise<SignalEngine> {
  return new SignalEngine(options);
}

/** The venue a call naming none is answered for: the replay's spot book where it holds one, else the perpetual. */
export function defaultExchange(feed: MarketFeed): Exchange {
  return feed.kind === 'replay' && feed.exchanges().includes('BINANCE_SPOT') ? 'BINANCE_SPOT' : 'BINANCE';
}

/** The feed's refusal of a venue or timeframe it does not serve: what get_trade_call answers for them. */
function isUnserved(err: unknown): err is UnsupportedExchangeError | UnsupportedTimeframeError {
  return err instanceof UnsupportedExchangeError || err instanceof UnsupportedTimeframeError;
}

/**
 * Why a scan is refused when its venue and timeframe serve none of its top-N markets: the feed's
 * refusal of the first one (`refused`, from its trade call), or, when none of them has candles
 * there (a funding-only venue), the feed's refusal of the venue's candles, the very answer
 * get_trade_call gives for that venue and timeframe. Null when some market is served: its
 * failures and the markets without candles stay named in `skipped`.
 */
async function unservedScan(
  feed: MarketFeed,
  input: { exchange: Exchange; timeframe: Timeframe },
  markets: readonly MarketInfo[],
  refused: ReadonlyMap<string, Error>,
): Promise<Error | null> {
  if (markets.length === 0 || markets.some((m) => m.hasCandles && !refused.has(m.coin))) return null;
  const first = markets.find((m) => refused.has(m.coin));
  if (first) return refused.get(first.coin)!;
  try {
    await feed.candles(input.exchange, markets[0]!.coin, input.timeframe, { limit: 1 });
  } catch (err) {
    if (isUnserved(err)) return err;
    if (!(err instanceof MarketDataError)) throw err;
  }
  return null;
}

/** The markets a scan names none of looks at: its default top N. */
const SCAN_TOP_N = ScanTradeCallsInput.parse({}).topN;

/**
 * Whether a venue serves a timeframe, judged as scan_trade_calls judges it (unservedScan), for a
 * caller naming a venue or timeframe without a coin (the history's filters, get_track_record):
 * the venue's top markets asked for one candle each, in rank order, until one is served. The
 * feed's refusal (UnsupportedExchangeError / UnsupportedTimeframeError) is what the scan and
 * get_trade_call of the venue's first market answer, code and words; null when some market is
 * served, or when the feed cannot tell (a venue down, too little history): a caller is not
 * refused because a venue is unreachable.
 */
export async function unservedVenue(
  feed: MarketFeed,
  input: { exchange: Exchange; timeframe: Timeframe },
): Promise<Error | null> {
  let markets: MarketInfo[];
  try {
    markets = rankMarkets(await feed.markets(input.exchange)).slice(0, SCAN_TOP_N);
  } catch (err) {
    if (isUnserved(err)) return err;
    if (err instanceof MarketDataError) return null;
    throw err;
  }
  const refused = new Map<string, Error>();
  for (const market of markets) {
    if (!market.hasCandles) continue;
    try {
      await feed.candles(input.exchange, market.coin, input.timeframe, { limit: 1 });
      return null;
    } catch (err) {
      if (!isUnserved(err)) {
        if (err instanceof MarketDataError) return null;
        throw err;
      }
      refused.set(market.coin, err);
    }
  }
  return unservedScan(feed, input, markets, refused);
}

/** Open interest when the venue reports it for every market, otherwise 24 h quote volume. */
export function rankMarkets(markets: MarketInfo[]): MarketInfo[] {
  const byOi = markets.length > 0 && markets.every((m) => m.openInterest !== null);
  const measure = (m: MarketInfo) => (byOi ? m.openInterest! : (m.quoteVolume24h ?? -1));
  return [...markets].sort((a, b) => measure(b) - measure(a) || a.coin.localeCompare(b.coin));
}

/** The markets of a venue the scheduler records on every close: its top N with candles. */
export function scheduledCoins(markets: MarketInfo[], topN: number): MarketInfo[] {
  return rankMarkets(markets)
    .filter((m) => m.hasCandles)
    .slice(0, topN);
}

/** What a verdict records: its market, its call and the inputs it was computed from. */
function verdictDraft(
  market: MarketKey,
  verdict: Verdict,
  feed: MarketFeed,
  trigger: Trigger,
  backfilled = false,
): VerdictDraft {
  const inputs = inputsSummary(verdict);
  // A looping replay's later lap serves its data again after its end: a verdict whose candle or
  // whose outcome's (24 candles on) falls there says so, and the track record leaves it out.
  const lap = feed.lapAt?.(
    verdict.candle_close_time + OUTCOME_AFTER_CANDLES * TIMEFRAME_MS[market.timeframe],
  );
  if (lap !== undefined && lap > 0) inputs[REPLAY_LAP_INPUT] = lap;
  return {
    exchange: market.exchange,
    coin: market.coin,
    timeframe: market.timeframe,
    call: verdict.call,
    confidence: verdict.confidence,
    score: verdict.score,
    regime: verdict.regime,
    price: verdict.price,
    candleCloseTime: verdict.candle_close_time,
    feed: feed.kind,
    engineVersion: ENGINE_VERSION,
    inputs: backfilled ? { ...inputs, backfilled: true } : inputs,
    trigger,
  };
}

function inputsSummary(verdict: Verdict): Record<string, number | string | boolean | null> {
  const out: Record<string, number | string | boolean | null> = {};
  for (const [k, v] of Object.entries(verdict.indicators))
    out[k] = v === null || Number.isFinite(v) ? v : null;
  out.perp_lean = verdict.perp_lean;
  out.calibrated_probability = verdict.calibration.probability;
  out.edge_cell = verdict.edge.cell;
  out.edge_measured = verdict.edge.measured;
  const v = verdict.volatility;
  out.vol_horizon_candles = v.horizon_candles;
  out.vol_expected_move_pct = v.expected_move_pct;
  out.vol_band_low = v.band_low;
  out.vol_band_high = v.band_high;
  out.vol_band_coverage = v.band_coverage;
  out.vol_percentile = v.percentile;
  return out;
}

/** Inputs that are the verdict's forecasts and gate rather than indicator readings. */
const NOT_INDICATORS = /^(vol_|edge_)/;

function toTradeCall(
  recorded: RecordedVerdict,
  computed: Verdict,
  publicBaseUrl: string | undefined,
  table: CalibrationTable,
): UnsizedTradeCall {
  const d = recorded.data;
  const same = d.candleCloseTime === computed.candle_close_time;
  const indicators: Record<string, number | null> = {};
  for (const [k, v] of Object.entries(d.inputs)) {
    // The replay lap is where the feed was, not a market reading.
    if (NOT_INDICATORS.test(k) || k === REPLAY_LAP_INPUT) continue;
    if (typeof v === 'number' || v === null) indicators[k] = v;
  }
  const volatility = same ? computed.volatility : recordedVolatility(d.inputs, d.timeframe);
  const edge =
    typeof d.inputs.edge_cell === 'string' && typeof d.inputs.edge_measured === 'boolean'
      ? {
          cell: d.inputs.edge_cell,
          measured: d.inputs.edge_measured,
          reason: same ? computed.edge.reason : recordedEdgeReason(d, d.inputs.edge_measured, table),
        }
      : undefined;
  // A verdict another replica recorded for this close is answered as the log holds it: its
  // lean and the words for its confidence come from its recorded score and engine's table.
  const meaning =
    same && computed.confidence_meaning
      ? { lean: computed.lean ?? null, confidence_meaning: computed.confidence_meaning }
      : recordedMeaning(d, table);
  return {
    coin: d.coin,
    timeframe: d.timeframe,
    exchange: d.exchange,
    call: d.call,
    confidence: d.confidence,
    score: d.score,
    regime: d.regime,
    price: d.price,
    timestamp: Math.floor(d.candleCloseTime / 1000),
    feed: d.feed,
    // A verdict recorded for another close is explained in the same words from its recorded figures.
    reasoning: same ? computed.reasoning : recordedReasoning(d, { volatility, edge, ...meaning }, table),
    indicators,
    verdictId: recorded.id,
    signalHash: d.hash,
    ...(publicBaseUrl ? { verifyUrl: verdictVerifyUrl(publicBaseUrl, recorded) } : {}),
    engineVersion: d.engineVersion,
    ...(volatility ? { volatility } : {}),
    ...(edge ? { edge } : {}),
    ...meaning,
  };
}

/**
 * Why a verdict the log holds for another close is what it is: its cell's reason in this engine's
 * table (the words it was computed with, "not measurable" with the interval included) when this
 * engine recorded it; a verdict of another engine version gets the bare gate outcome.
 */
function recordedEdgeReason(d: RecordedVerdict['data'], measured: boolean, table: CalibrationTable): string {
  if (d.engineVersion === table.engineVersion)
    return cellDecision(table, d.exchange, d.timeframe, Math.abs(d.score)).reason;
  return measured ? 'measured edge' : 'no measured edge here';
}

/** The input as its schema outputs it: parsed here unless the channel parsed it already. */
function parsedInput<S extends z.ZodType>(schema: S, raw: z.input<S>, ctx: OperationContext): z.output<S> {
  return ctx.parsed ? (raw as z.output<S>) : schema.parse(raw);
}

function withReasoning(call: UnsizedTradeCall, include: boolean): UnsizedTradeCall {
  if (include) return call;
  const { reasoning: _reasoning, ...rest } = call;
  return rest;
}

/**
 * A kept call with its volatility block sized for `budget`: one copy per call object and budget,
 * so what is served from it (its answer JSON, the track-record join) is made once too. The budget
 * is the caller's, never part of the recorded verdict.
 */
function sizedCall(call: UnsizedTradeCall, budget: number): TradeCall {
  return sizedCopy(call, budget, () => {
    const v = call.volatility;
    if (v === undefined) return call as TradeCall;
    const sizing = sizeFor({
      price: call.price,
      expectedMovePct: v.expected_move_pct,
      bandLow: v.band_low,
      bandHigh: v.band_high,
      budgetUsd: budget,
    });
    return { ...call, volatility: { ...v, sizing } };
  });
}

/** A kept forecast with every horizon sized for `budget`, kept (and named) like the forecast itself. */
function sizedForecast(forecast: UnsizedRiskForecast, budget: number): RiskForecast {
  return sizedCopy(forecast, budget, () =>
    keptAnswer<RiskForecast>({
      ...forecast,
      horizons: forecast.horizons.map((h) => ({
        ...h,
        sizing: sizeFor({
          price: forecast.price,
          expectedMovePct: h.expected_move_pct,
          bandLow: h.band_low,
          bandHigh: h.band_high,
          budgetUsd: budget,
        }),
      })),
    }),
  );
}
