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
  /** Sets counters outright (used when rebuilding the quota projection from events). */
  setWindows(windows: { key: string; count: number; expiresAt: number }[]): Promise<void>;
  health(): Promise<{ ok: boolean; detail?: string }>;
  close(): Promise<void>;
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

/**
 * The cache could not be reached or did not answer in time. Callers treat it as retryable: the
 * operation may or may not have been applied when the connection broke mid-command.
 */
export class CacheUnavailableError extends Error {
  override readonly name = 'CacheUnavailableError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}
