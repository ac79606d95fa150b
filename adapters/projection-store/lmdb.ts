import { type Database, open, type RootDatabase } from 'lmdb';
import type { ProjectionStore, StoredProjection } from './port.ts';

/**
 * Projection snapshots in a sub-database of an LMDB environment: usually the event store's own
 * (`LmdbEventStore.projectionStore()`), so one data directory holds the log and its projections;
 * or an environment of its own (`LmdbProjectionStore.open`) beside a remote event store.
 */
export class LmdbProjectionStore implements ProjectionStore {
  private readonly db: Database<StoredProjection<unknown>, string>;

  /** `ownsEnvironment`: close() closes the environment too (only when this store opened it). */
  constructor(
    private readonly root: RootDatabase,
    private readonly ownsEnvironment = false,
  ) {
    this.db = root.openDB<StoredProjection<unknown>, string>({ name: 'projections' });
  }

  /** A projection store in its own LMDB environment at directory `path`. */
  static open(path: string): LmdbProjectionStore {
    return new LmdbProjectionStore(open({ path, noSubdir: false, maxDbs: 4 }), true);
  }

  async load<S>(name: string): Promise<StoredProjection<S> | null> {
    const stored = this.db.get(name);
    return stored ? (stored as StoredProjection<S>) : null;
  }

  /** One put of the whole snapshot: version, checkpoint and state commit together or not at all. */
  async save<S>(name: string, snapshot: StoredProjection<S>): Promise<void> {
    await this.db.put(name, {
      version: snapshot.version,
      checkpoint: snapshot.checkpoint,
      state: snapshot.state,
    });
    await this.root.flushed;
  }

  async delete(name: string): Promise<void> {
    await this.db.remove(name);
    await this.root.flushed;
  }

  async close(): Promise<void> {
    if (this.ownsEnvironment) await this.root.close();
  }
}
