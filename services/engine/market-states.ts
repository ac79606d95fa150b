import type { Logger } from 'pino';
import { beforeAbort } from '../../adapters/before-abort.ts';
import { EventStoreUnavailableError } from '../../adapters/event-store/port.ts';
import { KeyedLock } from '../../adapters/keyed-lock.ts';
import { MarketDataError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import {
  type Candle,
  type Exchange,
  marketKey,
  TIMEFRAME_MS,
  type Timeframe,
} from '../../contracts/market.ts';
import { WorkSlices } from '../shared/stoppable-work.ts';
import { createMarketState, ENGINE_VERSION, type MarketState } from './signals/index.ts';
import type { SavedBandScales } from './signals/market-state.ts';
import { longestVarianceHalfLife } from './signals/volatility.ts';

/** Closed candles enough for SMA200 and the 200-candle percentile windows. */
const INDICATOR_WARMUP = 500;

/** Half-lives of its longest variance a new state is fed: its start then weighs 2^-15 (3e-5). */
const VARIANCE_WARMUP_HALF_LIVES = 15;

/**
 * At most this many (5m's need): a 1m state would need 21,600 (22 venue requests before a first
 * answer). 3m states get nine half-lives, 1m states three: their day rows, never evaluated, still
 * carry part of their warm-up's first day after a restart.
 */
const MAX_WARMUP = 4_320;

/**
 * Closed candles fed to a new state: the indicators' windows, and fifteen half-lives of its
 * longest variance (1,800 candles; 4,320 on 5m, whose day model reads an hourly variance with a
 * one-day half-life). Fed 500, a state rebuilt after a restart served a σ 0.89–1.22× that of a
 * state fed the whole history (the evaluator's) on the 1h day row and 0.33–1.27× on the 5m day
 * row, at sample closes of the shared data's spot coins; fed ten half-lives, 5m day rows still
 * read 0.93–0.99× eleven days after the October 2025 crash, whose hourly squared returns were
 * many times a quiet day's (served-sigma.int.test.ts holds it within 0.5 %).
 */
export function warmupCandles(timeframe: Timeframe): number {
  const variances = Math.ceil(VARIANCE_WARMUP_HALF_LIVES * longestVarianceHalfLife(timeframe));
  return Math.min(MAX_WARMUP, Math.max(INDICATOR_WARMUP, variances));
}

/**
 * 1h candles a new 2h…1d state reads for its fine variance (a one-day EWMA: 500 hours leave the
 * hours before them a weight under 1e-6).
 */
const FINE_WARMUP_HOURS = 500;

const HOUR_MS = TIMEFRAME_MS['1h'];

/** The snapshot store's name for a market's band scales (MarketStates.saveBandScales). */
export const bandScalesName = (key: string) => `band-scales:${key}`;
/** Bumped when what is saved changes shape; a snapshot of another version is not resumed. */
export const BAND_SCALES_VERSION = 1;

/** A read of a market's saved band scales; `unread`: the store was out of reach. */
interface BandScalesRead {
  saved: SavedBandScales | null;
  unread: boolean;
}

/** A market's band scales as kept in the snapshot store, with the engine that served them. */
interface KeptBandScales extends SavedBandScales {
  engineVersion: string;
}

/**
 * Streaming indicator state per (exchange, coin, timeframe), advanced lazily: a request or a
 * scheduled tick asks the feed only for the candles closed since the state last saw one, so
 * each candle is folded in exactly once (O(1) per candle, no recompute of history).
 */
export class MarketStates {
  private readonly states = new Map<string, MarketState>();
  private readonly lock = new KeyedLock();
  /**
   * The last 1h read per (exchange, coin) and the hour it was made in: a market's 2h…1d states
   * advance together (a day's close closes all five), and one read serves them all instead of
   * five of the same hours from the venue. One entry per market, replaced at the next hour.
   */
  private readonly hourReads = new Map<string, { hour: number; limit: number; read: Promise<Candle[]> }>();
  /** A new state built without its 1h candles, and the venue's failure that left them out. */
  private readonly withoutHours = new WeakMap<MarketState, MarketDataError>();

  /**
   * States built while the snapshot store was out of reach, their saved band scales unread: kept
   * and advanced as any state, not saved over the saved scales, and each advance tries the read
   * again (only the read: no candles, no fold) until the store answers.
   */
  private readonly scalesUnread = new WeakSet<MarketState>();
  /** A retried read of a market's saved band scales in flight (advance). */
  private readonly scaleRetries = new Map<string, Promise<BandScalesRead>>();

  /** The close each market's band scales were last saved at (saveBandScales). */
  private readonly scalesSaved = new Map<string, number>();

  /**
   * `bandScales`: where each market's band scales are saved and read back (the projection
   * snapshots' store), so that a state rebuilt after a restart goes on with the scales its
   * predecessor served rather than starting again at 1 at its warm-up's first close.
   */
  constructor(
    private readonly feed: MarketFeed,
    private readonly logger?: Logger,
    private readonly bandScales?: ProjectionStore,
  ) {}

  get size(): number {
    return this.states.size;
  }

  /**
   * The state advanced to the last candle closed at the feed's now(). The candles are fed a slice
   * of work at a time (WorkSlices), the event loop given its turn between slices. An aborted
   * `signal` (the scheduler's stop) ends the advance at once, without waiting for the feed's read
   * under way, or at the next candle: a new state (a warm-up of up to 4,320 candles) is then
   * dropped, never kept, served or saved, and the next advance builds it again; a kept state stays
   * at the last candle fed, as if advanced then, and the next advance feeds it from there.
   */
  advance(
    exchange: Exchange,
    coin: string,
    timeframe: Timeframe,
    signal?: AbortSignal,
  ): Promise<MarketState> {
    const key = marketKey(exchange, coin, timeframe);
    // Already at the last close and nothing advancing it: the state as it is, without a turn of
    // the lock (four promises and a task per call, on every keyed call of a market between its
    // closes). While an advance is queued or running, a call waits for it as before. A state whose
    // saved band scales are unread takes the lock to try them again.
    if (this.lock.idle(key)) {
      const existing = this.states.get(key);
      if (existing && !this.scalesUnread.has(existing) && this.closesBehind(existing, timeframe) <= 0) {
        return Promise.resolve(existing);
      }
    }
    // A read of the saved scales already under way when this call came answers it too: the calls
    // queued behind it on the lock do not each wait for one more read of a store out of reach.
    const retrying = this.scaleRetries.get(key);
    return this.lock.run(key, async () => {
      const tfMs = TIMEFRAME_MS[timeframe];
      const existing = this.states.get(key);
      const last = existing?.lastCloseTime ?? null;
      const behind = existing ? this.closesBehind(existing, timeframe) : Number.POSITIVE_INFINITY;
      // A state built while the store was out of reach tries its saved scales again. Read, they are
      // resumed by building the state once more from its warm-up (they apply at their close, which
      // the state has passed), as after a restart; none saved, the state goes on with its own.
      let reread: SavedBandScales | null = null;
      if (existing && this.scalesUnread.has(existing)) {
        const read = await (retrying ?? this.retryBandScales(key));
        if (!read.unread) {
          if (read.saved === null) this.scalesUnread.delete(existing);
          else reread = read.saved;
        }
      }
      if (existing && behind <= 0 && reread === null) return existing;
      // A state far behind (a long pause) is rebuilt rather than fed a gap it cannot see.
      const warmup = warmupCandles(timeframe);
      const fresh = !existing || behind > warmup || reread !== null;
      const state = fresh ? createMarketState({ exchange, coin, timeframe }) : existing;
      const candles = await beforeAbort(
        this.feed.candles(exchange, coin, timeframe, { limit: fresh ? warmup : behind + 1, signal }),
        signal,
      );
      // A state on 2h…1d also reads the same market's 1h candles (its fine variance), each fed
      // before the candle holding its close; its earlier candles count their own squared return.
      // Only the risk forecast's next-candle and day rows read them: a venue that fails the 1h
      // read (a timeout, a rate limit, no such market) must not cost the market its verdict,
      // regime and scans, so the state advances without them (those candles fall back to their
      // own squared return) and the failure is logged. A new state built so is served this once
      // and not kept: its warm-up's variance would lack every hour for weeks (a 1d state's risk
      // rows stayed unavailable), so the next request builds it again with them.
      let hoursMissing = false;
      const hours = state.readsHours
        ? await beforeAbort(
            this.hoursOf(
              exchange,
              coin,
              Math.min(FINE_WARMUP_HOURS, fresh ? FINE_WARMUP_HOURS : (behind + 1) * (tfMs / HOUR_MS) + 1),
            ).catch((err: unknown) => {
              this.logger?.warn(
                { err, exchange, coin, timeframe },
                'market state: 1h candles unavailable, advancing without them',
              );
              hoursMissing = true;
              if (fresh && err instanceof MarketDataError) this.withoutHours.set(state, err);
              return [];
            }),
            signal,
          )
        : [];
      // A new state goes on with the band scales saved at a close of its warm-up, from that close.
      // Saved scales that could not be read (the store out of reach) leave the state kept with
      // scales of its own, marked unread (scalesUnread) until a later advance reads them.
      const read: BandScalesRead = !fresh
        ? { saved: null, unread: false }
        : reread !== null
          ? { saved: reread, unread: false }
          : await this.readBandScales(key);
      const { saved } = read;
      let resumed = false;
      let h = 0;
      const seen = fresh ? null : last;
      const slices = new WorkSlices(signal);
      for (const candle of candles) {
        if (slices.due()) await slices.turn();
        if (seen === null || candle.openTime + tfMs > seen) {
          h = state.updateHours(hours, h, candle.openTime + tfMs);
          state.update(candle);
          if (saved !== null && candle.openTime + tfMs === saved.closeTime) {
            resumed = state.resumeBandScales(saved);
          }
        }
      }
      if (saved !== null) {
        this.logger?.debug(
          { market: key, savedAt: new Date(saved.closeTime).toISOString(), resumed },
          resumed
            ? 'market state: band scales resumed from their last save'
            : 'market state: saved band scales not resumed (saved outside the warm-up, or for other bands)',
        );
      }
      if (fresh && hoursMissing) this.states.delete(key);
      else {
        if (fresh && read.unread) this.scalesUnread.add(state);
        this.states.set(key, state);
      }
      return state;
    });
  }

  /**
   * Why a state's risk rows are not to be served: it was built just now without the 1h candles
   * its fine variance reads, the venue having failed them (undefined for every other state).
   */
  hoursFailure(state: MarketState): MarketDataError | undefined {
    return this.withoutHours.get(state);
  }

  /** The market's last `limit` closed 1h candles, read once per hour for all its states. */
  private async hoursOf(exchange: Exchange, coin: string, limit: number): Promise<Candle[]> {
    const key = `${exchange}:${coin}`;
    const hour = Math.floor(this.feed.now() / HOUR_MS);
    const known = this.hourReads.get(key);
    if (known !== undefined && known.hour === hour && known.limit >= limit) {
      const hours = await known.read;
      return hours.length > limit ? hours.slice(-limit) : hours;
    }
    const read = this.feed.candles(exchange, coin, '1h', { limit });
    this.hourReads.set(key, { hour, limit, read });
    // A failed read is not kept: the next state asks the venue again.
    read.catch(() => {
      if (this.hourReads.get(key)?.read === read) this.hourReads.delete(key);
    });
    return read;
  }

  /**
   * Saves the band scales of every state that has closed a candle since its last save, one
   * snapshot per market; returns how many were saved. Nothing without a store. Saves run one after
   * another (a timeframe's run and the stop can ask at once): two overlapping saves of a market
   * could otherwise store the older close last. A market whose save fails is logged and left for
   * the next save; the other markets are still saved.
   */
  saveBandScales(): Promise<number> {
    const run = this.saving.then(() => this.saveChangedBandScales());
    this.saving = run.catch(() => undefined);
    return run;
  }

  private saving: Promise<unknown> = Promise.resolve();

  private async saveChangedBandScales(): Promise<number> {
    const store = this.bandScales;
    if (!store) return 0;
    let saved = 0;
    const failed: string[] = [];
    let firstError: unknown;
    for (const [key, state] of this.states) {
      // Scales started while the saved ones were unread would replace them for good.
      if (this.scalesUnread.has(state)) continue;
      const scales = state.savedBandScales();
      if (scales === null || this.scalesSaved.get(key) === scales.closeTime) continue;
      const kept: KeptBandScales = { engineVersion: ENGINE_VERSION, ...scales };
      try {
        // Not a projection of the log: no position in it (the close is in the state).
        await store.save(bandScalesName(key), { version: BAND_SCALES_VERSION, checkpoint: 0, state: kept });
      } catch (err) {
        if (failed.length === 0) firstError = err;
        failed.push(key);
        continue;
      }
      this.scalesSaved.set(key, scales.closeTime);
      saved++;
    }
    // One line per save, not per market: a store out of reach fails every market at once.
    if (failed.length > 0) {
      this.logger?.warn(
        { err: firstError, markets: failed.length, failed: failed.slice(0, 10), saved },
        'market state: band scales not saved; a restart before the next save resumes an older save',
      );
    }
    return saved;
  }

  /**
   * The market's band scales as last saved by this engine version; null when there are none. A
   * state built from candles (a rebuilt state, a backfill's) resumes them at their close.
   */
  async loadBandScales(key: string): Promise<SavedBandScales | null> {
    return (await this.readBandScales(key)).saved;
  }

  /** One read of the market's saved band scales for a state that could not read them, shared. */
  private retryBandScales(key: string): Promise<BandScalesRead> {
    const read = this.readBandScales(key, true);
    this.scaleRetries.set(key, read);
    void read.finally(() => {
      if (this.scaleRetries.get(key) === read) this.scaleRetries.delete(key);
    });
    return read;
  }

  /**
   * loadBandScales, and whether the store failed to answer (`unread`: the state starts them
   * afresh). `retry`: a kept state's read again, whose failure is logged at debug (the store logs
   * its outage, and the state's first read logged the warning).
   */
  private async readBandScales(key: string, retry = false): Promise<BandScalesRead> {
    if (!this.bandScales) return { saved: null, unread: false };
    try {
      const stored = await this.bandScales.load<KeptBandScales>(bandScalesName(key));
      if (stored === null || stored.version !== BAND_SCALES_VERSION) return { saved: null, unread: false };
      const { engineVersion, ...saved } = stored.state;
      return { saved: engineVersion === ENGINE_VERSION ? saved : null, unread: false };
    } catch (err) {
      // The state starts its scales afresh, as without a save. Only the store's outage (it passes)
      // leaves them to be read again: a failure that stays (a save that does not parse, a role that
      // lost its grant) would have every advance of the market read them again.
      const unread = err instanceof EventStoreUnavailableError;
      if (retry && unread) {
        this.logger?.debug({ err, market: key }, 'market state: saved band scales still unreadable');
      } else {
        this.logger?.warn(
          { err, market: key },
          'market state: saved band scales unreadable, starting them afresh',
        );
      }
      return { saved: null, unread };
    }
  }

  /** Candles of `timeframe` closed since the state's last one (infinite before any). */
  private closesBehind(state: MarketState, timeframe: Timeframe): number {
    const last = state.lastCloseTime;
    return last == null
      ? Number.POSITIVE_INFINITY
      : Math.floor((this.feed.now() - last) / TIMEFRAME_MS[timeframe]);
  }
}
