import { type Database, open, type RootDatabase } from 'lmdb';
import type { Logger } from 'pino';
import type { ProjectionStore, StoredProjection } from '../projection-store/port.ts';
import { requireWritableEnvironment } from './lmdb-writable.ts';
import {
  commitCause,
  ignoreStrayCommitRejections,
  isStorageFull,
  lowOnSpace,
  StorageFullState,
} from './storage-full.ts';

/**
 * Projection snapshots in a sub-database of an LMDB environment: usually the event store's own
 * (`LmdbEventStore.projectionStore()`), so one data directory holds the log and its projections;
 * or an environment of its own (`LmdbProjectionStore.open`) beside a remote event store.
 *
 * A save on a full disk is refused with a retryable StorageFullError (the runner keeps its state
 * in memory and saves again later) and never ends the process: lmdb-js also rejects an internal
 * promise nobody holds when a commit fails, which the same guard as the event store's absorbs.
 */
export class LmdbProjectionStore implements ProjectionStore {
  private readonly db: Database<StoredProjection<unknown>, string>;
  private readonly space: StorageFullState;

  /** `ownsEnvironment`: close() closes the environment too (only when this store opened it). */
  constructor(
    private readonly root: RootDatabase,
    private readonly ownsEnvironment = false,
    private readonly options: { path?: string; logger?: Logger } = {},
  ) {
    this.db = root.openDB<StoredProjection<unknown>, string>({ name: 'projections' });
    this.space = new StorageFullState(`LMDB projection store at ${options.path ?? '?'}`, options.logger);
    ignoreStrayCommitRejections(options.logger);
  }

  /** A projection store in its own LMDB environment at directory `path`. */
  static open(path: string, logger?: Logger): LmdbProjectionStore {
    requireWritableEnvironment(path);
    return new LmdbProjectionStore(open({ path, noSubdir: false, maxDbs: 4 }), true, {
      path,
      ...(logger ? { logger } : {}),
    });
  }

  async load<S>(name: string): Promise<StoredProjection<S> | null> {
    const stored = this.db.get(name);
    return stored ? (stored as StoredProjection<S>) : null;
  }

  /** One put of the whole snapshot: version, checkpoint and state commit together or not at all. */
  async save<S>(name: string, snapshot: StoredProjection<S>): Promise<void> {
    await this.write(async () => {
      await this.db.put(name, {
        version: snapshot.version,
        checkpoint: snapshot.checkpoint,
        state: snapshot.state,
      });
      await this.root.flushed;
    });
  }

  async delete(name: string): Promise<void> {
    await this.write(async () => {
      await this.db.remove(name);
      await this.root.flushed;
    });
  }

  async close(): Promise<void> {
    if (this.ownsEnvironment) await this.root.close();
  }

  private async write(run: () => Promise<void>): Promise<void> {
    try {
      await run();
    } catch (err) {
      const cause = await commitCause(err);
      if (isStorageFull(cause) || isStorageFull(err) || (cause !== err && (await this.lowOnSpace())))
        throw this.space.failed(cause);
      throw err;
    }
    this.space.succeeded();
  }

  private async lowOnSpace(): Promise<boolean> {
    return this.options.path ? lowOnSpace(this.options.path) : false;
  }
}
