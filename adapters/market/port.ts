import type {
  Candle,
  CandleClose,
  Exchange,
  FeedKind,
  FundingRate,
  MarketInfo,
  NextFunding,
  Timeframe,
  VenueStatus,
} from '../../contracts/market.ts';

/**
 * The market-data port: candles and funding from live venues (ccxt) or from replay files.
 * Every method answers in the feed's own time (`now()`), so a replayed month behaves like the
 * live present. Failures are the typed errors of `errors.ts`; no method ever substitutes data of
 * another venue, coin or timeframe.
 */
export interface MarketFeed {
  /** Which feed this is; every figure derived from it must carry this label. */
  readonly kind: FeedKind;

  /** The feed's clock, Unix ms: wall time live, the replay clock in replay. */
  now(): number;

  /**
   * A looping replay's lap at feed time `t`: 0 while it serves its data as it is, then 1, 2, …
   * for the data served again after its end (adapters/market/replay-laps.ts). Absent on a feed
   * that never loops (live, or a replay told not to).
   */
  lapAt?(t: number): number;

  /** Venues this feed can answer for (others throw UnsupportedExchangeError). */
  exchanges(): Exchange[];

  /**
   * The last `limit` CLOSED candles (close time = openTime + TIMEFRAME_MS <= `until`, default
   * now()), oldest first. Fewer are returned when less history exists; fewer than `min`
   * (default 1) throws InsufficientHistoryError, as does data that ends before `until`.
   * `coin` is the base symbol (BTC). An aborted `options.signal` ends the read at the next file or
   * request it would start (it throws the signal's reason).
   */
  candles(exchange: Exchange, coin: string, timeframe: Timeframe, options: CandleQuery): Promise<Candle[]>;

  /**
   * Settled funding of a perpetual, oldest first: the last `limit` (default 100) settlements
   * with since <= fundingTime <= now(). Each carries the interval it covered for that symbol.
   */
  funding(exchange: Exchange, coin: string, options?: FundingQuery): Promise<FundingRate[]>;

  /** The next settlement after now() and its interval. */
  nextFunding(exchange: Exchange, coin: string): Promise<NextFunding>;

  /**
   * The venue's markets with 24 h quote volume (feed time) for ranking top-N. An aborted
   * `options.signal` ends the listing at the next file or request it would start (it throws the
   * signal's reason): the replay reads each coin's finest candle file to rank them, and a listing
   * nobody waits for any more reads no further. A listing cut short answers nothing and keeps
   * nothing of its own: the next one lists every market again.
   */
  markets(exchange: Exchange, options?: ListingQuery): Promise<MarketInfo[]>;

  /**
   * Health per venue, as last seen. The live feed also asks a venue that is not up again in the
   * background (at most every 30 s), so health read by readiness recovers without traffic.
   */
  venues(): VenueStatus[];

  /**
   * Calls `listener` each time a candle of `timeframe` closes in feed time (after the feed has
   * had a chance to see it). Returns the unsubscribe function.
   */
  onCandleClose(timeframe: Timeframe, listener: (close: CandleClose) => void): () => void;

  /** Stops timers and releases connections. */
  close(): Promise<void>;
}

export interface CandleQuery {
  limit: number;
  until?: number;
  min?: number;
  /** Aborted: the read stops before the next file or request (a stop does not wait for it). */
  signal?: AbortSignal;
}

export interface ListingQuery {
  /** Aborted: the listing stops before the next file or request (a stop does not wait for it). */
  signal?: AbortSignal;
}

export interface FundingQuery {
  since?: number;
  limit?: number;
}
