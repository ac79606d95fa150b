import { MarketDataError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import {
  type Exchange,
  type FeedKind,
  marketKey,
  TIMEFRAME_MS,
  type Timeframe,
} from '../../contracts/market.ts';
import type { CalibrationTable } from '../../contracts/signals.ts';
import { ScanTradeCallsInput, type ScanTradeCallsOutput } from '../../contracts/tools.ts';
import type { LatestVerdicts } from '../../projections/latest-verdicts.ts';
import { rankedScan, type ScanRow } from '../engine/scan-ranking.ts';
import { defaultCalibration, recordedMeaning } from '../engine/signals/index.ts';
import type { RankedMarket } from './ranking.ts';

/**
 * How long a digest scan waits for the verdict projection to reach the log's head, and for the
 * verdicts of the close at its period's start, once the engine in its process (if any) has
 * evaluated that close.
 */
export const DIGEST_CATCH_UP_MS = 5_000;

/**
 * How long, at most, a digest scan waits for the engine in its process to evaluate the close at its
 * period's start. A restart's catch-up (the closes missed while down, each market's warm-up) takes
 * seconds past the start, more than DIGEST_CATCH_UP_MS on `npm start`'s replay; a digest built
 * before it would name every market in skipped. The wait ends as soon as the engine's run of that
 * close has ended, or the engine stops.
 */
export const DIGEST_ENGINE_WAIT_MS = 60_000;

/** The scheduler of the engine running in the digest's process (VerdictScheduler.closeEvaluated). */
export interface EngineProgress {
  closeEvaluated(
    exchange: Exchange,
    timeframe: Timeframe,
    close: number,
    options: { timeoutMs: number; signal?: AbortSignal },
  ): Promise<'evaluated' | 'unscheduled' | 'stopped' | 'timeout'>;
}

/** The engine in the digest's process stopped (the process is stopping) before it evaluated the close. */
export class EngineStoppedError extends Error {
  constructor(close: number) {
    super(`the engine stopped before evaluating the close at ${new Date(close).toISOString()}`);
    this.name = 'EngineStoppedError';
  }
}

/**
 * The dispatcher's digest scan: the venue ranking, then the verdicts as the log holds them now.
 * It throws rather than report nothing, so the dispatcher retries the digest on its next tick
 * instead of claiming (and never re-sending) an empty or stale one: when no ranking could be
 * loaded, when the verdict projection does not reach the log's head within `catchUpMs`, or when
 * the engine stops (or `signal` aborts) before evaluating the period's close.
 */
export function rankedDigestScan(deps: {
  ranking: {
    prepare(exchange: string, asOf: number): Promise<void>;
    ranked(exchange: string): readonly RankedMarket[];
  };
  verdicts: {
    readonly state: LatestVerdicts;
    /** The last log position folded into `state`. */
    readonly checkpoint: number;
    waitFor(position: number, timeoutMs?: number): Promise<void>;
  };
  headPosition: () => Promise<number>;
  /** With `candles`, a market without a verdict is named with the feed's refusal when it has one. */
  feed: { readonly kind: FeedKind; now(): number; candles?: MarketFeed['candles'] };
  catchUpMs?: number;
  /**
   * The engine's scheduler when it runs in this process: a digest first waits (up to `engineWaitMs`)
   * for it to have evaluated the close at its period's start. Without it (the engine role in
   * another process) only `catchUpMs` is waited.
   */
  engine?: EngineProgress;
  engineWaitMs?: number;
  /**
   * How many of the venue's top markets the engine records every close of (SCHEDULE_TOP_N): the
   * wait for the close's verdicts is for those; a market past them has none coming (default: all).
   */
  scheduledTopN?: number;
}): (
  input: ScanTradeCallsInput,
  period?: { start: number; signal?: AbortSignal },
) => Promise<ScanTradeCallsOutput> {
  return async (input, period) => {
    const exchange = input.exchange!;
    // The venue's top-N as the scheduler ranks it at this close (it reads the ranking on every
    // close): a ranking read before it would list a market the engine no longer records, with its
    // last verdict, hours old, as the latest, and leave out the one that took its place.
    await deps.ranking.prepare(exchange, period?.start ?? Number.POSITIVE_INFINITY);
    const ranked = deps.ranking.ranked(exchange);
    if (ranked.length === 0) throw new Error(`no market ranking for ${exchange} loaded yet`);
    const volumes = new Map(ranked.map((m) => [m.coin, m.quoteVolume24h]));
    const { topN, timeframe } = ScanTradeCallsInput.parse({ ...input, exchange });
    // The engine records each scheduled market's verdict of a close moments after that close, so
    // a digest built at its period's start can find the close before it still the latest on
    // record: it waits for the verdicts of the close at the start rather than list the previous
    // candle's as the latest. The engine in this process says when it has evaluated that close
    // (after a restart, once it has caught up on the closes missed while down); then, within
    // `catchUpMs`, the projection folds its verdicts.
    // A market still behind it after the wait is named in skipped (projectedScan's `close`).
    const close = period
      ? Math.floor(period.start / TIMEFRAME_MS[timeframe]) * TIMEFRAME_MS[timeframe]
      : undefined;
    if (close !== undefined && deps.engine) {
      const outcome = await deps.engine.closeEvaluated(exchange, timeframe, close, {
        timeoutMs: deps.engineWaitMs ?? DIGEST_ENGINE_WAIT_MS,
        ...(period?.signal ? { signal: period.signal } : {}),
      });
      period?.signal?.throwIfAborted();
      if (outcome === 'stopped') throw new EngineStoppedError(close);
    }
    const catchUpMs = deps.catchUpMs ?? DIGEST_CATCH_UP_MS;
    const deadline = Date.now() + catchUpMs;
    await deps.verdicts.waitFor(await deps.headPosition(), catchUpMs);
    if (close !== undefined) {
      // Only the markets the engine schedules: a top_n past them would otherwise spend the whole
      // budget on every digest waiting for verdicts no one records.
      const awaited = ranked.slice(0, Math.min(topN, deps.scheduledTopN ?? topN));
      const behind = () =>
        awaited.some(({ coin }) => {
          const verdict = deps.verdicts.state[marketKey(exchange, coin, timeframe)];
          return verdict !== undefined && verdict.candleCloseTime < close;
        });
      // Each turn waits for the projection's next fold (any page of the log past what it holds).
      while (behind() && Date.now() < deadline) {
        await deps.verdicts
          .waitFor(deps.verdicts.checkpoint + 1, Math.max(1, deadline - Date.now()))
          .catch(() => undefined);
      }
    }
    const verdicts = deps.verdicts.state;
    // A market the feed cannot build this timeframe for (a coin with 1h candles only, on 15m) never
    // has a verdict: it is named with the feed's own refusal, the words scan_trade_calls gives it,
    // not as if one were merely not recorded yet.
    const whyMissing = new Map<string, string>();
    const candles = deps.feed.candles?.bind(deps.feed);
    if (candles) {
      for (const { coin } of ranked.slice(0, topN)) {
        if (verdicts[marketKey(exchange, coin, timeframe)]) continue;
        try {
          await candles(exchange, coin, timeframe, { limit: 1 });
        } catch (err) {
          if (err instanceof MarketDataError) whyMissing.set(coin, err.message);
        }
      }
    }
    return projectedScan(
      { ...input, exchange },
      {
        verdicts,
        whyMissing,
        ranked: ranked.map((m) => m.coin),
        volumeOf: (coin) => volumes.get(coin) ?? null,
        feed: deps.feed.kind,
        now: deps.feed.now(),
        ...(close === undefined ? {} : { close }),
      },
    );
  };
}

/**
 * A digest's scan read from the projected verdicts: the venue's top-N markets as the ranking
 * lists them, each with the latest verdict on record (HOLD included), filtered and ordered like a
 * live scan; a market without a verdict, or left out by the filter, is named in `skipped`. The
 * dispatcher computes nothing: verdicts are the engine role's to record, so a digest reports what
 * the log holds at its period's end.
 */
export function projectedScan(
  raw: ScanTradeCallsInput & { exchange: Exchange },
  deps: {
    verdicts: LatestVerdicts;
    ranked: readonly string[];
    volumeOf: (coin: string) => number | null;
    feed: FeedKind;
    now: number;
    /** The engine's calibration table (default: the shipped one), which states each row's meaning. */
    table?: CalibrationTable;
    /** Why a market has no verdict, where the feed said (else: none is recorded). */
    whyMissing?: ReadonlyMap<string, string>;
    /**
     * The close (Unix ms) the digest is of: a market whose latest verdict is of an earlier close is
     * named in skipped, not listed. The engine records every close only for the markets it
     * schedules (SCHEDULE_TOP_N of them), so a wider top_n, or an engine behind or stopped, would
     * otherwise list a verdict days old beside the current ones, its price, call and expected move
     * read as now (a payload version 1 row names no close of its own; from version 2 on its
     * `candle_close_time` is that close).
     */
    close?: number;
  },
): ScanTradeCallsOutput {
  const input = { ...ScanTradeCallsInput.parse(raw), exchange: raw.exchange };
  const markets = deps.ranked.slice(0, input.topN);
  const skipped: ScanTradeCallsOutput['skipped'] = [];
  const rows: ScanRow[] = [];
  for (const coin of markets) {
    const verdict = deps.verdicts[marketKey(input.exchange, coin, input.timeframe)];
    if (!verdict) {
      skipped.push({
        coin,
        reason:
          deps.whyMissing?.get(coin) ??
          `no verdict recorded for ${coin} ${input.timeframe} on ${input.exchange}`,
      });
      continue;
    }
    if (deps.close !== undefined && verdict.candleCloseTime < deps.close) {
      skipped.push({
        coin,
        reason: `no verdict recorded for ${coin} ${input.timeframe} on ${input.exchange} at this digest's close, ${new Date(deps.close).toISOString()}: the latest on record is of ${new Date(verdict.candleCloseTime).toISOString()}`,
      });
      continue;
    }
    const quoteVolume24h = deps.volumeOf(coin);
    rows.push({
      rank: 0,
      coin: verdict.coin,
      call: verdict.call,
      confidence: verdict.confidence,
      score: verdict.score,
      regime: verdict.regime,
      price: verdict.price,
      timestamp: Math.floor(verdict.candleCloseTime / 1000),
      quoteVolume24h,
      verdictId: verdict.verdictId,
      expectedMovePct: verdict.expectedMovePct,
      ...recordedMeaning(verdict, deps.table ?? defaultCalibration),
      volume: quoteVolume24h ?? 0,
    });
  }
  const ranked = rankedScan(rows, skipped, input, markets.length);
  const notes = [fewerRanked(input.exchange, markets.length, input.topN), ranked.note].filter(
    (note) => note !== undefined,
  );
  return {
    timeframe: input.timeframe,
    exchange: input.exchange,
    feed: deps.feed,
    timestamp: Math.floor(deps.now / 1000),
    scanned: markets.length,
    ...ranked,
    ...(notes.length > 0 ? { note: notes.join('; ') } : {}),
  };
}

/**
 * Why a digest lists fewer markets than its top_n when the venue ranks fewer (25 asked, 23
 * ranked): `calls` and `skipped` together hold every market ranked, and nothing else would say
 * why they hold fewer than top_n. None when the ranking fills top_n (or lists none: the scan's own
 * note says so).
 */
function fewerRanked(exchange: string, ranked: number, topN: number): string | undefined {
  if (ranked === 0 || ranked >= topN) return undefined;
  const covered = ranked === 1 ? 'it' : `all ${ranked}`;
  return `${exchange} ranks ${ranked} market${ranked === 1 ? '' : 's'}, fewer than top_n ${topN}: this digest covers ${covered}`;
}
