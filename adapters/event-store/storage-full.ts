import type { Logger } from 'pino';
import { type HealthReport, StorageFullError } from './port.ts';

/** lmdb-js reports the errno as a number (ENOSPC is 28 on Linux); MDB_MAP_FULL is -30792. */
const FULL_CODES = new Set<unknown>(['ENOSPC', 28, -30792, 'MDB_MAP_FULL', '53100', 'EDQUOT', 122]);

/** A write failed because the disk, the quota or LMDB's map is full (PostgreSQL: SQLSTATE 53100). */
export function isStorageFull(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (FULL_CODES.has((error as { code?: unknown }).code)) return true;
  return /No space left on device|MDB_MAP_FULL|could not extend file|disk quota exceeded/i.test(
    error.message,
  );
}

/**
 * Whether a store's writes are failing for lack of space, from the outcome of its writes: the
 * first failure is logged once and makes health() not ok; the next write that succeeds (or a
 * probe the store runs from health()) clears it, logged once too.
 */
export class StorageFullState {
  private since: number | null = null;
  private lastCause = '';

  constructor(
    private readonly where: string,
    private readonly logger?: Logger,
  ) {}

  get full(): boolean {
    return this.since !== null;
  }

  /** Records a write that failed for lack of space; returns the error to give the writer. */
  failed(cause: unknown): StorageFullError {
    this.lastCause = cause instanceof Error ? cause.message : String(cause);
    if (this.since === null) {
      this.since = Date.now();
      this.logger?.error(
        { store: this.where, cause: this.lastCause },
        'event store out of space: writes are refused (503, retryable) until space returns; reads go on',
      );
    }
    return new StorageFullError(`${this.where} is out of space; nothing was written; retry later`, {
      cause,
    });
  }

  succeeded(): void {
    if (this.since === null) return;
    this.logger?.info(
      { store: this.where, fullForMs: Date.now() - this.since },
      'event store has space again: writes accepted',
    );
    this.since = null;
  }

  /** The health to report while full, or null when writes are not known to fail. */
  health(): HealthReport | null {
    if (this.since === null) return null;
    return {
      ok: false,
      detail: `out of space since ${new Date(this.since).toISOString()}: writes refused (${this.lastCause})`,
    };
  }
}
