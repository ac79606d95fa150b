import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { setImmediate as nextTurn } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import type { Logger } from 'pino';
import { OUTCOME_AFTER_CANDLES } from '../../contracts/history.ts';
import {
  type Candle,
  type CandleClose,
  EXCHANGES,
  type Exchange,
  type FundingRate,
  type MarketInfo,
  type NextFunding,
  TIMEFRAME_MS,
  TIMEFRAMES,
  type Timeframe,
  type VenueStatus,
} from '../../contracts/market.ts';
import { aggregateCandles, sourceTimeframe } from './aggregate.ts';
import { CandleColumns } from './candle-columns.ts';
import { assertCandleLimit, closedCandles, lastBoundary, requestedTimeframe } from './candle-window.ts';
import { readCandleColumns, readFundingFile } from './csv.ts';
import {
  InsufficientHistoryError,
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
  VenueUnavailableError,
} from './errors.ts';
import { firstAfter, HOUR_MS, mergeFundingSources, roundToMinute } from './funding-series.ts';
import type { CandleQuery, FundingQuery, ListingQuery, MarketFeed } from './port.ts';
import type { ReplayAnchor } from './replay-anchor.ts';
import { ReplayClock } from './replay-clock.ts';
import {
  dataTime,
  type Laps,
  lapOf,
  lappedCandles,
  lappedFunding,
  lapsFor,
  nextLappedFunding,
  priceDecimals,
  seamFactor,
} from './replay-laps.ts';
import {
  CANDLE_FOLDERS,
  FUNDING_FOLDERS,
  parseCandleFileName,
  parseFundingFileName,
} from './replay-layout.ts';

/** The slice shipped with the repository (sample-data/market). */
export const SHIPPED_MARKET_DIR = fileURLToPath(new URL('../../sample-data/market', import.meta.url));

const DAY_MS = 86_400_000;
/**
 * Default start: this long before the end of the data. An outcome comes due 24 candles after its
 * verdict's close (24 days on 1d) and one due past the end falls in a looped lap, which the track
 * record counts in no figure: a week's lead left 8h, 12h and 1d without a record for good. This
 * leaves the coarsest timeframe, 1d, a week of closes whose outcomes come due before the data ends.
 */
export const DEFAULT_REPLAY_LEAD_MS = (OUTCOME_AFTER_CANDLES + 7) * DAY_MS;

export interface ReplayFeedOptions {
  /** Data directory in the shared layout; default the shipped slice. */
  dir?: string;
  /** Feed time to start at; default DEFAULT_REPLAY_LEAD_MS before the end of the data. */
  start?: number;
  /** Acceleration: feed ms per wall ms (1 = real time, 3600 = an hour per second). */
  speed?: number;
  /** Start the clock running at once (default true); tests step it by hand instead. */
  run?: boolean;
  wallNow?: () => number;
  logger?: Logger;
  /**
   * At the end of the data, loop (default): feed time keeps moving forward and the data is served
   * again shifted by whole days (see replay-laps.ts). false stops the clock at the end instead.
   */
  loop?: boolean;
  /**
   * Wall time (Unix ms) at which feed time stood at `start`: every process given the same anchor
   * shares one clock, and a restart resumes where the clock is now instead of rewinding.
   */
  anchor?: number;
  /**
   * Where the deployment keeps its clock when no anchor is configured (the event log, see
   * replay-anchor.ts): given this process's proposal, returns the anchor on record.
   */
  anchorStore?: (proposal: ReplayAnchor) => Promise<ReplayAnchor>;
  /**
   * A later lap's prices as scaled, each with its float tail, rather than rounded to the data's
   * decimals (the default): what a lapped verdict recorded without the rounding was told, which
   * `history verify --data` recomputes such an outcome from.
   */
  exactLaps?: boolean;
}

interface CoinCandles {
  files: Map<Timeframe, string>;
}

interface VenueIndex {
  candles: Map<string, CoinCandles>;
  funding: Map<string, string[]>;
}

type VenueState = { ok: boolean; lastError?: string; lastOkAt?: number };

/** Lists what the directory holds, per venue. Files are read only when first asked for. */
function indexDirectory(dir: string): Map<Exchange, VenueIndex> {
  const index = new Map<Exchange, VenueIndex>();
  const venue = (exchange: Exchange) => {
    let v = index.get(exchange);
    if (v === undefined) {
      v = { candles: new Map(), funding: new Map() };
      index.set(exchange, v);
    }
    return v;
  };
  const list = (path: string) => {
    try {
      return statSync(path).isDirectory() ? readdirSync(path).sort() : [];
    } catch {
      return [];
    }
  };
  for (const [folder, exchange] of Object.entries(CANDLE_FOLDERS)) {
    for (const name of list(join(dir, 'candles', folder))) {
      const parsed = parseCandleFileName(name);
      if (parsed === undefined) continue;
      const v = venue(exchange);
      let coin = v.candles.get(parsed.coin);
      if (coin === undefined) {
        coin = { files: new Map() };
        v.candles.set(parsed.coin, coin);
      }
      coin.files.set(parsed.timeframe, join(dir, 'candles', folder, name));
    }
  }
  const ranked = Object.entries(FUNDING_FOLDERS).sort((a, b) => a[1].rank - b[1].rank);
  for (const [folder, { exchange, quote }] of ranked) {
    for (const name of list(join(dir, 'funding', folder))) {
      const parsed = parseFundingFileName(name, quote);
      if (parsed === undefined) continue;
      const v = venue(exchange);
      const paths = v.funding.get(parsed.coin) ?? [];
      paths.push(join(dir, 'funding', folder, name));
      v.funding.set(parsed.coin, paths);
    }
  }
  return index;
}

/**
 * Feed time range of the data: the reference series is the coarsest file of the first coin.
 * `loopFrom` is where that coin's finest file starts: a loop replays only what every one of its
 * timeframes covers (the shipped slice has 1h from March, 5m from late September).
 */
async function dataRange(
  index: Map<Exchange, VenueIndex>,
  dir: string,
): Promise<{ start: number; end: number; loopFrom: number }> {
  for (const exchange of ['BINANCE_SPOT', 'BINANCE'] as const) {
    const coins = index.get(exchange)?.candles;
    if (coins === undefined || coins.size === 0) continue;
    const coin = coins.get('BTC') ?? [...coins.values()][0]!;
    const files = [...coin.files.entries()].sort((a, b) => TIMEFRAME_MS[b[0]] - TIMEFRAME_MS[a[0]]);
    const [timeframe, path] = files[0]!;
    const { openTime } = await readCandleColumns(path);
    if (openTime.length === 0) break;
    let loopFrom = openTime[0]!;
    for (const [, other] of files.slice(1)) {
      const first = (await readCandleColumns(other)).openTime[0];
      if (first !== undefined) loopFrom = Math.max(loopFrom, first);
    }
    return {
      start: openTime[0]!,
      end: openTime[openTime.length - 1]! + TIMEFRAME_MS[timeframe],
      loopFrom,
    };
  }
  throw new Error(`replay: no candle files under ${dir}/candles/{${Object.keys(CANDLE_FOLDERS).join(',')}}`);
}

/**
 * Replays a directory of real market data as if it were live, on its own clock. It answers
 * only from what had closed or settled by the clock's now(): nothing from the future leaks.
 */
export class ReplayFeed implements MarketFeed {
  readonly kind = 'replay' as const;
  /** Every candle file read so far (and the series built from it), as columns: see CandleColumns. */
  readonly #candleCache = new Map<string, Promise<CandleColumns>>();
  readonly #fundingCache = new Map<string, Promise<FundingRate[]>>();
  readonly #status = new Map<Exchange, VenueState>();
  /** Per coin, the factor each lap re-bases its prices by (see #seamFactor). */
  readonly #factors = new Map<string, Promise<number>>();
  /** Per venue and coin, the decimals its lapped prices are rounded to (see #priceDecimals). */
  readonly #decimals = new Map<string, Promise<number | null>>();
  #lap = 0;

  constructor(
    readonly dir: string,
    readonly clock: ReplayClock,
    private readonly index: Map<Exchange, VenueIndex>,
    private readonly logger?: Logger,
    readonly laps: Laps | null = null,
    /** Lapped prices as scaled, not rounded to the data's decimals (ReplayFeedOptions.exactLaps). */
    readonly exactLaps = false,
  ) {
    for (const exchange of index.keys()) this.#status.set(exchange, { ok: true });
  }

  now(): number {
    const t = this.clock.now();
    if (this.laps !== null) {
      const lap = lapOf(this.laps, t);
      if (lap > this.#lap) {
        this.#lap = lap;
        // A loop is a visible event, never a silent one: the data starts over at a later time.
        this.logger?.info(
          {
            lap,
            feedTime: iso(t),
            replaying: iso(dataTime(this.laps, t)),
            periodDays: this.laps.period / DAY_MS,
          },
          'replay reached the end of its data and loops: the same candles again, shifted forward in time',
        );
      }
    }
    return t;
  }

  /**
   * Candles of a market closed by feed time `until`, across laps when looping, later laps' prices
   * re-based so each lap carries on from the close the one before ended on. Every candle the
   * replay answers with (and every figure made of their prices) comes through here.
   */
  async #closed(
    exchange: Exchange,
    coin: string,
    series: CandleColumns,
    tf: Timeframe,
    until: number,
    limit: number,
  ): Promise<Candle[]> {
    if (this.laps === null || lapOf(this.laps, until) === 0) return closedCandles(series, tf, until, limit);
    return lappedCandles(
      series,
      tf,
      until,
      limit,
      this.laps,
      await this.#seamFactor(exchange, coin),
      this.exactLaps ? null : await this.#priceDecimals(exchange, coin),
    );
  }

  /**
   * The decimals a lapped price of the market is rounded to (priceDecimals): read from the venue's
   * own finest file of the coin, so every timeframe of it rounds alike and a perpetual keeps its
   * own tick. null (no rounding) when the file holds no candle before the data's end.
   */
  #priceDecimals(exchange: Exchange, coin: string): Promise<number | null> {
    return this.#ofFinest(this.#decimals, exchange, coin, null, (series, finest, laps) =>
      priceDecimals(series, finest, laps.end),
    );
  }

  /**
   * One factor per coin, for every timeframe and for spot and perpetual alike: read from the
   * finest spot file of the coin where there is one (else the venue's own finest), so aggregated
   * timeframes agree and the perpetual/spot basis stays the data's in every lap (a factor per
   * series would drift it by f_perp/f_spot per lap, up to 11 bp on the shipped slice). The
   * perpetual's seam then moves by the basis change over the period (at most 11 bp there).
   */
  #seamFactor(exchange: Exchange, coin: string): Promise<number> {
    const reference: Exchange = this.index.get('BINANCE_SPOT')?.candles.has(coin) ? 'BINANCE_SPOT' : exchange;
    return this.#ofFinest(this.#factors, reference, coin, 1, seamFactor);
  }

  /**
   * `of` over the finest candle file `exchange` holds of `coin`, read once per venue and coin and
   * kept in `cache`; `none` when not looping or without such a file. A file that could not be read
   * is tried again next time, as #load does.
   */
  #ofFinest<T>(
    cache: Map<string, Promise<T>>,
    exchange: Exchange,
    coin: string,
    none: T,
    of: (series: CandleColumns, finest: Timeframe, laps: Laps) => T,
  ): Promise<T> {
    const laps = this.laps;
    if (laps === null) return Promise.resolve(none);
    const key = `${exchange}:${coin}`;
    let figure = cache.get(key);
    if (figure === undefined) {
      const files = this.index.get(exchange)?.candles.get(coin)?.files;
      const finest = [...(files?.keys() ?? [])].sort((a, b) => TIMEFRAME_MS[a] - TIMEFRAME_MS[b])[0];
      if (files === undefined || finest === undefined) return Promise.resolve(none);
      const path = files.get(finest)!;
      figure = this.#load(exchange, this.#candleCache, path, () => readCandleColumns(path)).then((series) =>
        of(series, finest, laps),
      );
      cache.set(key, figure);
      figure.catch(() => cache.delete(key));
    }
    return figure;
  }

  /** The lap feed time `t` falls in: 0 up to the end of the data (always, when not looping). */
  lapAt(t: number): number {
    return this.laps === null ? 0 : lapOf(this.laps, t);
  }

  /** Data time that feed time `t` replays (t itself when not looping). */
  #local(t: number): number {
    return this.laps === null ? t : dataTime(this.laps, t);
  }

  exchanges(): Exchange[] {
    return EXCHANGES.filter((e) => this.index.has(e));
  }

  venues(): VenueStatus[] {
    return this.exchanges().map((exchange) => ({ exchange, ...this.#status.get(exchange)! }));
  }

  onCandleClose(timeframe: Timeframe, listener: (close: CandleClose) => void): () => void {
    return this.clock.onCandleClose(timeframe, listener);
  }

  async close(): Promise<void> {
    this.clock.stop();
  }

  async candles(
    exchange: Exchange,
    coin: string,
    timeframe: Timeframe,
    options: CandleQuery,
  ): Promise<Candle[]> {
    const symbol = coin.toUpperCase();
    const tf = requestedTimeframe(timeframe, exchange);
    const venue = this.#venue(exchange);
    if (venue.candles.size === 0) {
      throw new UnsupportedExchangeError(
        exchange,
        'replay',
        `the replay data has no ${exchange} candles (funding only); candles are served for ${this.#venuesWith('candles')}`,
      );
    }
    const files = venue.candles.get(symbol)?.files;
    if (files === undefined) {
      throw new UnknownCoinError(
        exchange,
        symbol,
        `the replay data has no ${exchange} candles of it; coins served there: ${[...venue.candles.keys()].sort().join(', ')}`,
      );
    }
    const available = [...files.keys()];
    const from = sourceTimeframe(tf, available);
    if (from === undefined) {
      const elsewhere = [...this.index]
        .filter(([, v]) => {
          const other = v.candles.get(symbol)?.files;
          return other !== undefined && sourceTimeframe(tf, [...other.keys()]) !== undefined;
        })
        .map(([name]) => name);
      // The same words whichever coin was asked when every coin here has the same files, or when
      // no coin here builds the timeframe (then of the files the venue's coins hold together): a
      // scan or the track record, naming no coin, is refused with its top market's refusal, and
      // must not read as being about a coin the caller never named. Only where another coin here
      // builds it is the refusal about the coin asked.
      const coins = [...venue.candles.values()];
      const sameEverywhere = coins.every((c) => sameKeys(c.files, files));
      const builtHere = coins.some((c) => sourceTimeframe(tf, [...c.files.keys()]) !== undefined);
      const held =
        sameEverywhere || builtHere ? available : [...new Set(coins.flatMap((c) => [...c.files.keys()]))];
      const whose = sameEverywhere
        ? 'of every coin here'
        : builtHere
          ? `of ${symbol} here`
          : 'here (not every coin has each)';
      throw new UnsupportedTimeframeError(
        tf,
        exchange,
        `the replay data holds ${[...held].sort((a, b) => TIMEFRAME_MS[a] - TIMEFRAME_MS[b]).join(', ')} candles ${whose}, which build ${buildable(held).join(', ')}` +
          `; ${tf} ${elsewhere.length > 0 ? `is served on ${elsewhere.join(', ')}` : 'is served by no replayed venue'} (or on the live feed)`,
      );
    }
    assertCandleLimit(options.limit);
    const min = options.min ?? 1;
    const until = Math.min(options.until ?? this.now(), this.now());
    const path = files.get(from)!;
    // Stopped (options.signal): no file is read, series built or seam factor read after it. A
    // read under way finishes (another caller may share it) and is kept whole.
    const signal = options.signal;
    signal?.throwIfAborted();
    const source = await this.#load(exchange, this.#candleCache, path, () => readCandleColumns(path));
    signal?.throwIfAborted();
    const series =
      from === tf
        ? source
        : await this.#load(exchange, this.#candleCache, `${path}#${tf}`, async () =>
            CandleColumns.from(aggregateCandles(source.slice(), from, tf)),
          );
    signal?.throwIfAborted();
    const what = `${tf} candles`;
    const sourceEnd =
      source.length === 0
        ? Number.NEGATIVE_INFINITY
        : source.openTime[source.length - 1]! + TIMEFRAME_MS[from];
    if (lastBoundary(tf, this.#local(until)) > sourceEnd) {
      throw new InsufficientHistoryError(
        exchange,
        symbol,
        what,
        min,
        0,
        `replay data ends at ${iso(sourceEnd)}, before ${iso(until)}`,
      );
    }
    const out = await this.#closed(exchange, symbol, series, tf, until, options.limit);
    if (out.length < min) {
      throw new InsufficientHistoryError(
        exchange,
        symbol,
        what,
        min,
        out.length,
        `closed by ${iso(until)} in the replay data`,
      );
    }
    return out;
  }

  async funding(exchange: Exchange, coin: string, options: FundingQuery = {}): Promise<FundingRate[]> {
    const { series, symbol } = await this.#fundingSeries(exchange, coin);
    const now = this.now();
    const local = this.#local(now);
    const end = firstAfter(series, local);
    this.#assertFundingCurrent(exchange, symbol, series, end, local);
    const limit = options.limit ?? 100;
    const since = options.since ?? Number.NEGATIVE_INFINITY;
    if (this.laps !== null) {
      return lappedFunding(series, now, limit, this.laps).filter((f) => f.fundingTime >= since);
    }
    let start = Math.max(0, end - limit);
    while (start < end && series[start]!.fundingTime < since) start++;
    return series.slice(start, end);
  }

  async nextFunding(exchange: Exchange, coin: string): Promise<NextFunding> {
    const { series, symbol } = await this.#fundingSeries(exchange, coin);
    const now = this.now();
    const local = this.#local(now);
    const end = firstAfter(series, local);
    this.#assertFundingCurrent(exchange, symbol, series, end, local);
    // The schedule of the next settlement is public in advance; its rate is not, so it stays null.
    const next = this.laps === null ? series[end] : nextLappedFunding(series, now, this.laps, true);
    if (next !== undefined) {
      return {
        exchange,
        coin: symbol,
        nextFundingTime: roundToMinute(next.fundingTime),
        intervalHours: next.intervalHours,
        predictedRate: null,
      };
    }
    const last = this.laps === null ? series[end - 1]! : lappedFunding(series, now, 1, this.laps)[0]!;
    return {
      exchange,
      coin: symbol,
      nextFundingTime: roundToMinute(last.fundingTime) + last.intervalHours * HOUR_MS,
      intervalHours: last.intervalHours,
      predictedRate: null,
    };
  }

  /**
   * Ranks the coins by their last day's volume, read from each coin's finest candle file (gunzip
   * and parse, up to some 100 ms a file on the full data set, all of it on the event loop). Before
   * each file not read yet the event loop has its turn, and an aborted `options.signal` ends the
   * listing there (it throws the signal's reason): a listing nobody waits for any more (a stopping
   * scheduler's) reads no further file. The file under way is read whole and kept, as any read is;
   * the listing itself keeps nothing, so the next one lists every coin.
   */
  async markets(exchange: Exchange, options: ListingQuery = {}): Promise<MarketInfo[]> {
    const signal = options.signal;
    signal?.throwIfAborted();
    const venue = this.#venue(exchange);
    const coins = [...new Set([...venue.candles.keys(), ...venue.funding.keys()])].sort();
    const now = this.now();
    const out: MarketInfo[] = [];
    for (const coin of coins) {
      const files = venue.candles.get(coin)?.files;
      let quoteVolume24h: number | null = null;
      if (files !== undefined) {
        const from = [...files.keys()].sort((a, b) => TIMEFRAME_MS[a] - TIMEFRAME_MS[b])[0]!;
        const path = files.get(from)!;
        if (!this.#candleCache.has(path)) {
          await nextTurn();
          signal?.throwIfAborted();
        }
        const candles = await this.#load(exchange, this.#candleCache, path, () => readCandleColumns(path));
        // Past the end of the data, the day's candles need the coin's seam factor (another file).
        signal?.throwIfAborted();
        const perDay = DAY_MS / TIMEFRAME_MS[from];
        const day = await this.#closed(exchange, coin, candles, from, now, perDay);
        // Estimated as volume × close per candle: the files carry base volume only. A day not
        // fully covered by the data gives no figure rather than a low one.
        if (
          day.length === perDay &&
          day[day.length - 1]!.openTime + TIMEFRAME_MS[from] > now - TIMEFRAME_MS[from]
        ) {
          quoteVolume24h = day.reduce((sum, c) => sum + c.volume * c.close, 0);
        }
      }
      out.push({
        exchange,
        coin,
        symbol: exchange === 'HYPERLIQUID' ? coin : `${coin}USDT`,
        quoteVolume24h,
        openInterest: null,
        hasCandles: files !== undefined,
        hasFunding: venue.funding.has(coin),
      });
    }
    return out;
  }

  #venue(exchange: Exchange): VenueIndex {
    const venue = this.index.get(exchange);
    if (venue === undefined) {
      if (!(EXCHANGES as readonly string[]).includes(exchange)) {
        throw new UnsupportedExchangeError(
          exchange,
          'replay',
          `unknown venue; served: ${this.#servedVenues()}`,
        );
      }
      // Never the data directory: a refusal goes to callers, and a server path is nothing of theirs.
      throw new UnsupportedExchangeError(
        exchange,
        'replay',
        `the replay data has no ${exchange} files; served: ${this.#servedVenues()}`,
      );
    }
    return venue;
  }

  /** The venues whose replay data holds `kind`, for a refusal. */
  #venuesWith(kind: 'candles' | 'funding'): string {
    return [...this.index]
      .filter(([, v]) => v[kind].size > 0)
      .map(([name]) => name)
      .join(', ');
  }

  /** Every venue of the replay data and what it holds, for a refusal. */
  #servedVenues(): string {
    return [...this.index]
      .map(([name, v]) => {
        const held = [v.candles.size > 0 ? 'candles' : null, v.funding.size > 0 ? 'funding' : null];
        return `${name} (${held.filter((h) => h !== null).join(' and ')})`;
      })
      .join(', ');
  }

  async #fundingSeries(exchange: Exchange, coin: string): Promise<{ series: FundingRate[]; symbol: string }> {
    const symbol = coin.toUpperCase();
    if (exchange === 'BINANCE_SPOT') {
      throw new UnsupportedExchangeError(
        exchange,
        'replay',
        'a spot venue has no funding; use BINANCE for the perpetual',
      );
    }
    const venue = this.#venue(exchange);
    if (venue.funding.size === 0) {
      throw new UnsupportedExchangeError(
        exchange,
        'replay',
        `the replay data has no ${exchange} funding; funding is served for ${this.#venuesWith('funding')}`,
      );
    }
    const paths = venue.funding.get(symbol);
    if (paths === undefined) {
      throw new UnknownCoinError(
        exchange,
        symbol,
        `the replay data has no ${exchange} funding of it; coins served there: ${[...venue.funding.keys()].sort().join(', ')}`,
      );
    }
    const key = paths.join('|');
    const series = await this.#load(exchange, this.#fundingCache, key, async () =>
      mergeFundingSources(await Promise.all(paths.map((p) => readFundingFile(p)))),
    );
    return { series, symbol };
  }

  /** Funding data that stopped before now would pass an old rate off as current. */
  #assertFundingCurrent(
    exchange: Exchange,
    symbol: string,
    series: FundingRate[],
    end: number,
    now: number,
  ): void {
    const last = series[end - 1];
    if (last === undefined) {
      throw new InsufficientHistoryError(
        exchange,
        symbol,
        'funding settlements',
        1,
        0,
        `none by ${iso(now)}`,
      );
    }
    const stale =
      end === series.length && roundToMinute(last.fundingTime) + last.intervalHours * HOUR_MS < now;
    if (stale) {
      throw new InsufficientHistoryError(
        exchange,
        symbol,
        'funding settlements',
        1,
        0,
        `replay funding data ends at ${iso(last.fundingTime)}, before ${iso(now)}`,
      );
    }
  }

  async #load<T>(
    exchange: Exchange,
    cache: Map<string, Promise<T>>,
    key: string,
    read: () => Promise<T>,
  ): Promise<T> {
    let pending = cache.get(key);
    if (pending === undefined) {
      pending = read();
      cache.set(key, pending);
    }
    try {
      const value = await pending;
      // On the feed's clock (Unix ms), as every time it answers with: a scan's `timestamp` is that
      // clock's, and the wall clock beside it would put the read months or a lap away from it.
      this.#status.set(exchange, { ok: true, lastOkAt: this.clock.now() });
      return value;
    } catch (error) {
      cache.delete(key);
      const message = error instanceof Error ? error.message : String(error);
      this.#status.set(exchange, { ...this.#status.get(exchange), ok: false, lastError: message });
      this.logger?.error({ err: error, exchange, file: key }, 'replay file unreadable');
      // The reason names the file (a server path): it stays in the log, the caller gets the venue.
      throw new VenueUnavailableError(exchange, 'its replay data could not be read', { cause: error });
    }
  }
}

function iso(t: number): string {
  return Number.isFinite(t) ? new Date(t).toISOString() : String(t);
}

/** Opens a replay feed over `dir` (default the shipped slice) with its clock. */
export async function openReplayFeed(options: ReplayFeedOptions = {}): Promise<ReplayFeed> {
  const dir = options.dir ?? SHIPPED_MARKET_DIR;
  const index = indexDirectory(dir);
  const range = await dataRange(index, dir);
  let start = options.start ?? Math.max(range.start, range.end - DEFAULT_REPLAY_LEAD_MS);
  let speed = options.speed ?? 1;
  let anchor = options.anchor;
  if (anchor === undefined && options.anchorStore && (options.run ?? true)) {
    const wall = (options.wallNow ?? Date.now)();
    const held = await options.anchorStore({ anchor: wall, start, speed, dir });
    if (held.start !== start || held.speed !== speed) {
      options.logger?.info(
        { recorded: held, configured: { start, speed } },
        'replay clock: the deployment recorded another start/speed first; using the recorded clock',
      );
    }
    ({ anchor, start, speed } = held);
  }
  const loop = options.loop ?? true;
  if (start < range.start || start > range.end) {
    throw new RangeError(
      `replay start ${iso(start)} is outside the data (${iso(range.start)} to ${iso(range.end)})`,
    );
  }
  const logger = options.logger;
  const clock = new ReplayClock({
    start,
    end: loop ? Number.POSITIVE_INFINITY : range.end,
    speed,
    ...(anchor !== undefined ? { anchor } : {}),
    ...(options.wallNow ? { wallNow: options.wallNow } : {}),
    onListenerError: (error, close) => {
      if (logger) logger.error({ err: error, close }, 'candle-close listener failed');
      else process.emitWarning(`candle-close listener failed at ${iso(close.closeTime)}: ${String(error)}`);
    },
  });
  const feed = new ReplayFeed(
    dir,
    clock,
    index,
    logger,
    loop ? lapsFor({ start: range.loopFrom, end: range.end }) : null,
    options.exactLaps ?? false,
  );
  if (options.run ?? true) clock.run();
  logger?.info(
    {
      dir,
      start: iso(start),
      now: iso(feed.now()),
      dataEnd: iso(range.end),
      atEnd: loop ? 'loop' : 'stop',
      anchor: anchor === undefined ? null : iso(anchor),
      speed: clock.speed,
      venues: feed.exchanges(),
    },
    'replay feed opened',
  );
  return feed;
}

/** Whether two coins' candle files are of the same timeframes. */
function sameKeys(a: ReadonlyMap<Timeframe, string>, b: ReadonlyMap<Timeframe, string>): boolean {
  return a.size === b.size && [...a.keys()].every((tf) => b.has(tf));
}

/** The timeframes candles of these timeframes build (each a whole multiple of one of them). */
function buildable(available: readonly Timeframe[]): Timeframe[] {
  return TIMEFRAMES.filter((tf) => sourceTimeframe(tf, available) !== undefined);
}
