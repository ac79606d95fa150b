import type { Logger } from 'pino';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { MarketDataError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { type Exchange, type MarketInfo, marketKey, type Timeframe } from '../../contracts/market.ts';
import type { CalibrationTable, PerpContext, Verdict } from '../../contracts/signals.ts';
import {
  GetMarketRegimeInput,
  GetTradeCallInput,
  type RegimeReading,
  type ScanFundingArbInput,
  type ScanFundingArbOutput,
  ScanTradeCallsInput,
  type ScanTradeCallsOutput,
  type TradeCall,
} from '../../contracts/tools.ts';
import { verdictVerifyUrl } from '../api/verify/url.ts';
import { forEachLimited } from './for-each-limited.ts';
import { isFresh } from './funding-arb.ts';
import { scanFundingArb } from './funding-scan.ts';
import { MarketStates } from './market-states.ts';
import { describeFailure } from './operation-errors.ts';
import type { OperationContext, SignalOperations } from './operations.ts';
import { computeRegime, computeVerdict, defaultCalibration, ENGINE_VERSION } from './signals/index.ts';
import { PERP_VENUES, SCAN_CONCURRENCY } from './venues.ts';
import { type RecordedVerdict, recordVerdict } from './verdict-recorder.ts';

/** The spot book used for the basis of a perpetual, where the feed has one. */
const SPOT_OF: Partial<Record<Exchange, Exchange>> = { BINANCE: 'BINANCE_SPOT' };

export interface SignalEngineOptions {
  feed: MarketFeed;
  store: EventStore;
  calibration?: CalibrationTable;
  /** This service's public address; trade calls then carry their verify link. */
  publicBaseUrl?: string;
  logger?: Logger;
}

type Trigger = 'request' | 'schedule';

interface CachedCall {
  closeTime: number;
  call: TradeCall;
}

/**
 * The four sold operations over one market feed. Verdicts are computed once per closed candle
 * per market, recorded as VerdictRecorded (hash-chained, with RegimeShifted when the regime
 * turns) before they are served, and then served from memory until the next candle closes.
 */
export class SignalEngine implements SignalOperations {
  readonly feed: MarketFeed;
  private readonly store: EventStore;
  private readonly calibration: CalibrationTable;
  private readonly logger: Logger | undefined;
  private readonly publicBaseUrl: string | undefined;
  private readonly states: MarketStates;
  private readonly calls = new Map<string, CachedCall>();

  constructor(options: SignalEngineOptions) {
    this.feed = options.feed;
    this.store = options.store;
    this.calibration = options.calibration ?? defaultCalibration;
    this.logger = options.logger;
    this.publicBaseUrl = options.publicBaseUrl;
    this.states = new MarketStates(options.feed);
  }

  async getTradeCall(raw: GetTradeCallInput, ctx: OperationContext = {}): Promise<TradeCall> {
    return this.tradeCall(GetTradeCallInput.parse(raw), 'request', ctx);
  }

  /** The scheduler's entry: the same computation, recorded with trigger "schedule". */
  async scheduledTradeCall(raw: GetTradeCallInput): Promise<TradeCall> {
    return this.tradeCall(GetTradeCallInput.parse(raw), 'schedule', {});
  }

  async getMarketRegime(raw: GetMarketRegimeInput): Promise<RegimeReading> {
    const input = GetMarketRegimeInput.parse(raw);
    const state = await this.states.advance(input.exchange, input.coin, input.timeframe);
    const reading = computeRegime(state);
    const snapshot = state.snapshot();
    return {
      coin: input.coin,
      timeframe: input.timeframe,
      exchange: input.exchange,
      regime: reading.regime,
      confidence: reading.confidence,
      suggestion: reading.suggestion,
      metrics: { ...reading.metrics, held_candles: reading.held_candles },
      price: snapshot!.close,
      timestamp: Math.floor(state.lastCloseTime! / 1000),
      feed: this.feed.kind,
    };
  }

  async scanTradeCalls(raw: ScanTradeCallsInput, ctx: OperationContext = {}): Promise<ScanTradeCallsOutput> {
    const input = ScanTradeCallsInput.parse(raw);
    const markets = rankMarkets(await this.feed.markets(input.exchange)).slice(0, input.topN);
    const skipped: ScanTradeCallsOutput['skipped'] = [];
    const rows: (ScanTradeCallsOutput['calls'][number] & { volume: number })[] = [];
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
          quoteVolume24h: market.quoteVolume24h,
          verdictId: call.verdictId,
          volume: market.quoteVolume24h ?? 0,
        });
      } catch (err) {
        // An expected per-market failure (no history yet, venue down) is reported, not fatal.
        const failure = describeFailure(err);
        if (!failure) throw err;
        skipped.push({ coin: market.coin, reason: failure.message });
      }
    });
    const kept = rows
      .filter((r) => (input.includeHolds || r.call !== 'HOLD') && r.confidence >= input.minConfidence)
      .sort((a, b) =>
        input.rankBy === 'volume'
          ? b.volume - a.volume || a.coin.localeCompare(b.coin)
          : b.confidence - a.confidence ||
            Math.abs(b.score) - Math.abs(a.score) ||
            a.coin.localeCompare(b.coin),
      )
      .slice(0, input.limit)
      .map(({ volume: _volume, ...row }, i) => ({ ...row, rank: i + 1 }));
    return {
      timeframe: input.timeframe,
      exchange: input.exchange,
      feed: this.feed.kind,
      timestamp: Math.floor(this.feed.now() / 1000),
      scanned: markets.length,
      calls: kept,
      skipped: skipped.sort((a, b) => a.coin.localeCompare(b.coin)),
    };
  }

  scanFundingArb(raw: ScanFundingArbInput): Promise<ScanFundingArbOutput> {
    return scanFundingArb(this.feed, raw, this.logger);
  }

  async close(): Promise<void> {
    await this.feed.close();
  }

  private async tradeCall(
    input: ReturnType<typeof GetTradeCallInput.parse>,
    trigger: Trigger,
    ctx: OperationContext,
  ): Promise<TradeCall> {
    const key = marketKey(input.exchange, input.coin, input.timeframe);
    const state = await this.states.advance(input.exchange, input.coin, input.timeframe);
    const closeTime = state.lastCloseTime!;
    const cached = this.calls.get(key);
    if (cached && cached.closeTime === closeTime) return withReasoning(cached.call, input.includeReasoning);

    const context = await this.perpContext(
      input.exchange,
      input.coin,
      input.timeframe,
      state.snapshot()?.close,
    );
    const verdict = computeVerdict(state, context, this.calibration, { includeReasoning: true });
    const recorded = await recordVerdict(
      this.store,
      {
        exchange: input.exchange,
        coin: input.coin,
        timeframe: input.timeframe,
        call: verdict.call,
        confidence: verdict.confidence,
        score: verdict.score,
        regime: verdict.regime,
        price: verdict.price,
        candleCloseTime: verdict.candle_close_time,
        feed: this.feed.kind,
        engineVersion: ENGINE_VERSION,
        inputs: inputsSummary(verdict),
        trigger,
      },
      { correlationId: ctx.requestId },
    );
    const call = toTradeCall(recorded, verdict, this.publicBaseUrl);
    this.calls.set(key, { closeTime, call });
    if (recorded.data.candleCloseTime === verdict.candle_close_time) {
      this.logger?.debug(
        { market: key, call: call.call, confidence: call.confidence, trigger },
        'verdict recorded',
      );
    }
    return withReasoning(call, input.includeReasoning);
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

/** Open interest when the venue reports it for every market, otherwise 24 h quote volume. */
export function rankMarkets(markets: MarketInfo[]): MarketInfo[] {
  const byOi = markets.length > 0 && markets.every((m) => m.openInterest !== null);
  const measure = (m: MarketInfo) => (byOi ? m.openInterest! : (m.quoteVolume24h ?? -1));
  return [...markets].sort((a, b) => measure(b) - measure(a) || a.coin.localeCompare(b.coin));
}

function inputsSummary(verdict: Verdict): Record<string, number | null> {
  const out: Record<string, number | null> = {};
  for (const [k, v] of Object.entries(verdict.indicators))
    out[k] = v === null || Number.isFinite(v) ? v : null;
  out.perp_lean = verdict.perp_lean;
  out.calibrated_probability = verdict.calibration.probability;
  return out;
}

function toTradeCall(
  recorded: RecordedVerdict,
  computed: Verdict,
  publicBaseUrl: string | undefined,
): TradeCall {
  const d = recorded.data;
  const same = d.candleCloseTime === computed.candle_close_time;
  const indicators: Record<string, number | null> = {};
  for (const [k, v] of Object.entries(d.inputs)) if (typeof v === 'number' || v === null) indicators[k] = v;
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
    // Reasoning is text about this computation; a verdict recorded by another replica has none here.
    ...(same ? { reasoning: computed.reasoning } : {}),
    indicators,
    verdictId: recorded.id,
    signalHash: d.hash,
    ...(publicBaseUrl ? { verifyUrl: verdictVerifyUrl(publicBaseUrl, recorded) } : {}),
    engineVersion: d.engineVersion,
  };
}

function withReasoning(call: TradeCall, include: boolean): TradeCall {
  if (include) return call;
  const { reasoning: _reasoning, ...rest } = call;
  return rest;
}
