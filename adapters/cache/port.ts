/**
 * The cache/quota port. Its primitives are atomic on every adapter, so quota checks cannot
 * be raced by concurrent requests or replicas. All keys live under the adapter's prefix.
 */
export interface Cache {
  readonly kind: 'memory' | 'redis';
  get(key: string): Promise<string | null>;
  set(key: string, value: string, options?: { ttlMs?: number }): Promise<void>;
  /** Sets only when absent; true when this call set it. */
  setIfAbsent(key: string, value: string, options?: { ttlMs?: number }): Promise<boolean>;
  delete(key: string): Promise<void>;
  /**
   * Atomically checks every window and, only if all have room, adds `amount` to each.
   * A window's counter expires at `expiresAt` (Unix ms). Returns each window's count after the
   * call (unchanged when refused) and whether the debit happened.
   */
  debitWindows(windows: QuotaWindow[], amount: number): Promise<DebitResult>;
  /**
   * Atomically gives back up to `amount` on each existing counter (never below 0, never creating
   * one): the refund of a debit whose work failed. Returns each counter after the call.
   */
  releaseWindows(keys: string[], amount: number): Promise<number[]>;
  /** Reads the counters of the given windows without changing them. */
  readWindows(keys: string[]): Promise<number[]>;
  /** Sets counters outright (the chat quota's rebuild from events). */
  setWindows(windows: { key: string; count: number; expiresAt: number }[]): Promise<void>;

  // Generations of counters: a family of counters (the quota) lives in one generation at a time,
  // named by a marker key. The marker disappears with the data when the server loses it, so a
  // missing marker means "counters unknown" rather than "nothing used"; and a rebuild fills a new
  // generation beside the live one and switches the marker to it in one step, so debits made
  // during the rebuild are never overwritten.

  /** The live generation of `family`, or null: never built, or the server lost it. */
  liveGeneration(family: string): Promise<CounterGeneration | null>;
  /**
   * debitWindows on the live generation's counters, resolved in the same atomic step as the
   * marker. Throws CounterStateLostError when `family` has no live generation.
   */
  debitLive(
    family: string,
    windows: QuotaWindow[],
    amount: number,
  ): Promise<DebitResult & { generation: string }>;
  /**
   * releaseWindows on `generation`'s counters, and off its debit count, only while it is still
   * live: a replaced generation was rebuilt from the log, which never had the debit given back.
   * Returns whether it released.
   */
  releaseLive(family: string, generation: string, keys: string[], amount: number): Promise<boolean>;
  /**
   * A refund that is logged on its own (a chat given back): gives back up to `amount` on the live
   * generation's counters and counts it among that generation's logged operations (see
   * generationDebits), in one atomic step. Returns the generation it was given back on, or null
   * when none is live (the rebuild then folds the refund from the log). With `id`, a refund is
   * applied once however often it is sent within REFUND_ID_TTL_MS, and each try answers the
   * generation the first was given back on: a caller whose first try's answer was lost (a timeout
   * after Redis ran it) sends it again under the same id.
   */
  refundLive(family: string, keys: string[], amount: number, id?: string): Promise<string | null>;
  /** readWindows on the live generation's counters; throws CounterStateLostError when there is none. */
  readLive(family: string, keys: string[]): Promise<number[]>;
  /**
   * Marks `generation` as being built: switchGeneration makes it live only while the mark is
   * there, so a generation partly lost with the server's data mid-build never goes live.
   */
  beginGeneration(generation: string): Promise<void>;
  /**
   * Adds to counters of a generation, creating missing ones with the given expiry: how a rebuild
   * fills one. A negative count gives back (never below 0, never creating a counter).
   */
  addToGeneration(
    generation: string,
    windows: { key: string; count: number; expiresAt: number }[],
  ): Promise<void>;
  /**
   * Makes `next` the live generation of `family` only if the live one is still `expected` (null:
   * none) and `next` is still marked as being built (beginGeneration). False when another switch,
   * or a loss, came first.
   */
  switchGeneration(family: string, expected: string | null, next: CounterGeneration): Promise<boolean>;
  /**
   * Units debitLive and refundLive have counted on a generation, each of which leaves one logged
   * event (final once it is no longer live); null when unknown.
   */
  generationDebits(generation: string): Promise<number | null>;
  /** Deletes the counters of a generation that is no longer live. */
  dropGeneration(generation: string): Promise<void>;
  /**
   * `listener` runs each time a connection is (re)established after it is registered: whatever
   * lived only in the server may be gone. Never called by the in-process adapter.
   */
  onReconnect(listener: () => void): void;
  /** `cause`: the error behind a failure (/readyz shows the reason its code gives, the log its words). */
  health(): Promise<{ ok: boolean; detail?: string; cause?: unknown }>;
  close(): Promise<void>;
}

export interface CounterGeneration {
  /** Letters, digits and dashes; names the generation's keys. */
  id: string;
  /** Log position the rebuild that filled it had folded up to when it went live. */
  position: number;
}

export interface QuotaWindow {
  key: string;
  limit: number;
  expiresAt: number;
}

export interface DebitResult {
  ok: boolean;
  counts: number[];
  /** Index of the first window that had no room, when refused. */
  refusedBy: number | null;
}

/** The `component` of a cache adapter's log lines (its connection's state). */
export const CACHE_LOG_COMPONENT = 'cache';

/**
 * The cache could not be reached or did not answer in time. Callers treat it as retryable: the
 * operation may or may not have been applied when the connection broke mid-command, except a
 * debit (debitWindows, debitLive): one whose answer was lost is given back by the adapter that
 * sent it once the cache answers it again within an hour, on the windows still open, so a caller
 * told unavailable that calls again is counted once. A process that stops before then leaves the
 * debit counted until its window ends.
 */
export class CacheUnavailableError extends Error {
  override readonly name: string = 'CacheUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/**
 * How long a refund's id is remembered (see Cache.refundLive). A caller's retries under one id
 * (QuotaMeter's give-back: three tries an idle period apart) end long before it, so a retry never
 * outlives the id it relies on.
 */
export const REFUND_ID_TTL_MS = 3_600_000;

/**
 * A family of counters has no live generation: never built, or the server lost its data. Serving
 * from empty counters would give calls away, so callers treat it as unavailable until a rebuild.
 */
export class CounterStateLostError extends CacheUnavailableError {
  override readonly name: string = 'CounterStateLostError';
  constructor(readonly family: string) {
    super(`no live generation of the ${family} counters: they must be rebuilt from the log`);
  }
}
