import { statfsSync } from 'node:fs';
import { statfs } from 'node:fs/promises';
import type { Logger } from 'pino';
import { ignoreStrayRejections } from '../stray-rejections.ts';
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
 * Free space below which a failed write counts as a full disk, whatever errno it came with: writes
 * to a full file system also surface as EIO.
 */
const MIN_FREE_BYTES = 1024 * 1024;

/** Whether the file system holding `path` has less than MIN_FREE_BYTES free. */
export async function lowOnSpace(path: string): Promise<boolean> {
  const { bavail, bsize } = await statfs(path);
  return bavail * bsize < MIN_FREE_BYTES;
}

/** lowOnSpace, for a caller that cannot wait (false when the file system cannot be read). */
export function lowOnSpaceSync(path: string): boolean {
  try {
    const { bavail, bsize } = statfsSync(path);
    return bavail * bsize < MIN_FREE_BYTES;
  } catch {
    return false;
  }
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

/**
 * lmdb-js rejects a failed commit with a generic "Commit failed" error whose `commitError`
 * promise rejects with the cause (ENOSPC, MDB_MAP_FULL...). Bounded: not every failure sets it.
 */
export async function commitCause(error: unknown): Promise<unknown> {
  const pending = (error as { commitError?: Promise<unknown> } | null)?.commitError;
  if (!pending || typeof pending.then !== 'function') return error;
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      pending.then(
        () => error,
        (cause: unknown) => cause,
      ),
      new Promise((resolve) => {
        timer = setTimeout(() => resolve(error), 1_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * When a commit fails, lmdb-js also rejects an internal promise nobody holds, with the same
 * "Commit failed" error the appender already received and answered; Node would end the process
 * over it. Only that error is ignored (see adapters/stray-rejections.ts).
 */
export function ignoreStrayCommitRejections(logger?: Logger): void {
  ignoreStrayRejections(
    'lmdb-js commit',
    (reason) => reason instanceof Error && 'commitError' in reason,
    logger,
  );
}
