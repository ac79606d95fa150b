import type { Logger } from 'pino';
import { beforeAbort } from '../../adapters/before-abort.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import type { Config } from '../../contracts/config.ts';
import { type Exchange, marketKey, type Timeframe } from '../../contracts/market.ts';
import type { RunFailure } from '../shared/run-failure.ts';
import { defaultExchange, type SignalEngine, scheduledCoins } from './engine.ts';
import { forEachLimited } from './for-each-limited.ts';
import { describeFailure } from './operation-errors.ts';

export interface SchedulerOptions {
  engine: SignalEngine;
  feed: MarketFeed;
  timeframes: Timeframe[];
  exchange: Exchange;
  /** Venues scheduled in this process (default: `exchange` alone); the top N of each. */
  exchanges?: Exchange[];
  topN: number;
  /**
   * Verdicts computed and recorded at once in a run (default 16): a burst of closes (every
   * timeframe at midnight) is not done one market after another, each waiting for its own
   * flushed append; concurrent appends share one commit on an embedded store.
   */
  concurrency?: number;
  logger?: Logger;
  /** Wall-clock delay before a failed run is tried again (doubling up to 30 s). Default 1 s. */
  retryMs?: number;
}

const MAX_RETRY_MS = 30_000;

/**
 * The venues and timeframes the engine records a verdict for on each close: SCHEDULE_EXCHANGE
 * (default the feed's default venue) × SCHEDULE_TIMEFRAMES. What the engine role schedules, and
 * what a digest, which lists recorded verdicts, can list.
 */
export function scheduledMarkets(
  config: Pick<Config, 'SCHEDULE_EXCHANGE' | 'SCHEDULE_TIMEFRAMES'>,
  feed: MarketFeed,
): { exchanges: Exchange[]; timeframes: Timeframe[] } {
  return {
    exchanges: config.SCHEDULE_EXCHANGE ?? [defaultExchange(feed)],
    timeframes: config.SCHEDULE_TIMEFRAMES,
  };
}

export interface SchedulerStats {
  runs: number;
  verdicts: number;
  skipped: number;
  lastRunAt: number | null;
  /** The last failed run's words while it failed: read from lastFailure, never set apart from it. */
  readonly lastError: string | null;
}

function statsOf(failure: () => RunFailure | null): SchedulerStats {
  return {
    runs: 0,
    verdicts: 0,
    skipped: 0,
    lastRunAt: null,
    get lastError() {
      const last = failure();
      if (last === null) return null;
      return last.error instanceof Error ? last.error.message : String(last.error);
    },
  };
}

/**
 * Computes and records a verdict for each of the venue's top-N markets whenever a candle of a
 * scheduled timeframe closes (in feed time, so a replay at 3600× closes an hour a second).
 * Ticks that arrive while a timeframe's run is still going are coalesced into one more run,
 * so a fast replay never piles up work.
 */
export class VerdictScheduler {
  private readonly unsubscribe: (() => void)[] = [];
  private readonly busy = new Map<Timeframe, Promise<void>>();
  /**
   * The run asked for while one was under way, per timeframe: it starts when that one ends, and
   * every ask made meanwhile waits for it (one run, however many asked).
   */
  private readonly next = new Map<Timeframe, Promise<void>>();
  private stopped = false;
  /**
   * Aborted by stop(): a run gives way instead of finishing. It stops waiting for the venue's
   * listing and for a market's candles, and its warm-ups and backfills end at the candle they are
   * on (MarketStates.advance, SignalEngine.backfill): no verdict of a market cut short is recorded.
   */
  private stopping = new AbortController();
  /** A failed run (the store away, say) is retried on a timer, not left to the next candle close. */
  private retryTimer: NodeJS.Timeout | null = null;
  private retryDelay: number;
  readonly stats: SchedulerStats = statsOf(() => this.lastFailure);
  /**
   * The last run's failure while it failed (null once a run succeeds), whatever it threw: the
   * readiness check carries its error as its cause, so /readyz shows its reason and the log its words.
   */
  lastFailure: RunFailure | null = null;
  /** The round start() runs of every timeframe: resolves once each has run (or failed). */
  firstRound: Promise<unknown> = Promise.resolve();
  /**
   * Per timeframe, the feed time at which the latest run that ran to its end began: every close up
   * to it was evaluated then for each scheduled market (its verdict recorded, or skipped with its
   * reason), the closes missed while down included.
   */
  private readonly evaluatedTo = new Map<Timeframe, number>();
  /** closeEvaluated's waits, each told when a run ends or the scheduler stops. */
  private readonly evaluatedWaits = new Set<() => void>();

  constructor(private readonly options: SchedulerOptions) {
    this.retryDelay = options.retryMs ?? 1000;
  }

  /** Subscribes to candle closes and runs every timeframe once at once, so verdicts flow from the start. */
  start(): void {
    this.stopped = false;
    if (this.stopping.signal.aborted) this.stopping = new AbortController();
    const round: Promise<void>[] = [];
    for (const tf of this.options.timeframes) {
      this.unsubscribe.push(this.options.feed.onCandleClose(tf, () => this.tick(tf)));
      round.push(this.tick(tf));
    }
    this.firstRound = Promise.allSettled(round);
  }

  /**
   * Runs one timeframe now (also what a candle close and a failed run's retry trigger), resolving
   * when a run that began at or after the call has ended: asked while a run is under way, the run
   * that follows it, not the one begun before the ask.
   */
  tick(timeframe: Timeframe): Promise<void> {
    const running = this.busy.get(timeframe);
    if (running) {
      let next = this.next.get(timeframe);
      if (!next) {
        const follow = (): Promise<void> | undefined => {
          this.next.delete(timeframe);
          return this.stopped ? undefined : this.tick(timeframe);
        };
        next = running.then(follow, follow);
        this.next.set(timeframe, next);
      }
      return next;
    }
    const run = this.run(timeframe).finally(() => this.busy.delete(timeframe));
    this.busy.set(timeframe, run);
    return run;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
    for (const off of this.unsubscribe.splice(0)) off();
    for (const wake of [...this.evaluatedWaits]) wake();
    await Promise.all(this.busy.values());
  }

  /**
   * Waits until this scheduler has evaluated the close at `close` (feed time, Unix ms) of
   * `timeframe` on `exchange`: a run that began at or after it ran to its end, having recorded the
   * verdict of that close (and of every close before it missed while down) for each scheduled market
   * or skipped the market with its reason. 'unscheduled' at once when the scheduler does not record
   * that venue and timeframe; 'stopped' when it stops first; 'timeout' after `timeoutMs` (a run
   * failing, the store away, is retried meanwhile) or once `signal` aborts.
   */
  closeEvaluated(
    exchange: Exchange,
    timeframe: Timeframe,
    close: number,
    options: { timeoutMs: number; signal?: AbortSignal },
  ): Promise<'evaluated' | 'unscheduled' | 'stopped' | 'timeout'> {
    const exchanges = this.options.exchanges ?? [this.options.exchange];
    if (!exchanges.includes(exchange) || !this.options.timeframes.includes(timeframe)) {
      return Promise.resolve('unscheduled');
    }
    const state = () =>
      (this.evaluatedTo.get(timeframe) ?? Number.NEGATIVE_INFINITY) >= close
        ? 'evaluated'
        : this.stopped
          ? 'stopped'
          : null;
    const now = state();
    if (now) return Promise.resolve(now);
    const { signal } = options;
    if (signal?.aborted) return Promise.resolve('timeout');
    return new Promise((resolve) => {
      const finish = (outcome: 'evaluated' | 'stopped' | 'timeout') => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', aborted);
        this.evaluatedWaits.delete(wake);
        resolve(outcome);
      };
      const wake = () => {
        const outcome = state();
        if (outcome) finish(outcome);
      };
      const aborted = () => finish('timeout');
      const timer = setTimeout(() => finish('timeout'), options.timeoutMs);
      timer.unref();
      signal?.addEventListener('abort', aborted, { once: true });
      this.evaluatedWaits.add(wake);
    });
  }

  private async run(timeframe: Timeframe): Promise<void> {
    const { engine, feed, topN, logger } = this.options;
    this.stats.runs += 1;
    const startedAt = feed.now();
    this.stats.lastRunAt = startedAt;
    try {
      const exchanges = this.options.exchanges ?? [this.options.exchange];
      // The listing can take seconds (the replay reads each coin's finest candle file to rank
      // them): a stop does not wait for it, and the listing reads no file past the stop.
      const signal = this.stopping.signal;
      const lists = await beforeAbort(
        Promise.all(
          exchanges.map(async (exchange) =>
            scheduledCoins(await feed.markets(exchange, { signal }), topN).map((m) => ({
              exchange,
              coin: m.coin,
            })),
          ),
        ),
        signal,
      );
      await forEachLimited(lists.flat(), this.options.concurrency ?? 16, async ({ exchange, coin }) => {
        if (this.stopped) return;
        try {
          // Closes missed while down (or while a run was busy) are backfilled by the call, in order.
          const call = await engine.scheduledTradeCall(
            { coin, timeframe, exchange, includeReasoning: false },
            this.stopping.signal,
          );
          this.stats.verdicts += 1;
          logger?.info(
            {
              market: marketKey(exchange, call.coin, timeframe),
              call: call.call,
              confidence: call.confidence,
              regime: call.regime,
              feed: call.feed,
              at: new Date(call.timestamp * 1000).toISOString(),
            },
            'scheduled verdict',
          );
        } catch (err) {
          if (this.stopping.signal.aborted) return;
          const failure = describeFailure(err);
          if (!failure) throw err;
          this.stats.skipped += 1;
          logger?.debug(
            { market: marketKey(exchange, coin, timeframe), reason: failure.message },
            'scheduled verdict skipped',
          );
        }
      });
      // The band scales the run's closes moved, kept for a restart (MarketStates.saveBandScales,
      // which logs a market whose save fails and goes on with the others).
      await engine.saveBandScales();
      this.lastFailure = null;
      this.retryDelay = this.options.retryMs ?? 1000;
      // A run a stop cut short evaluated only some of its markets.
      if (!this.stopping.signal.aborted) {
        const before = this.evaluatedTo.get(timeframe) ?? Number.NEGATIVE_INFINITY;
        this.evaluatedTo.set(timeframe, Math.max(before, startedAt));
        for (const wake of [...this.evaluatedWaits]) wake();
      }
    } catch (err) {
      // Stopped: no failure of the run, and nothing to retry.
      if (this.stopping.signal.aborted) return;
      this.lastFailure = { error: err };
      logger?.error({ err, timeframe }, 'scheduled run failed');
      // Closes that pass while the store is away are backfilled, in order, by the retry's calls.
      this.scheduleRetry();
    }
  }

  private scheduleRetry(): void {
    if (this.stopped || this.retryTimer) return;
    const delay = this.retryDelay;
    this.retryDelay = Math.min(delay * 2, MAX_RETRY_MS);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      if (this.stopped) return;
      // Every scheduled timeframe: a store outage fails them all, whichever ran last.
      for (const tf of this.options.timeframes) void this.tick(tf);
    }, delay);
    this.retryTimer.unref();
  }
}
