import type { ProjectionStore, StoredProjection } from './port.ts';

/** Snapshots held in this process; copies in and out so callers cannot mutate what is stored. */
export class MemoryProjectionStore implements ProjectionStore {
  private readonly snapshots = new Map<string, StoredProjection<unknown>>();

  async load<S>(name: string): Promise<StoredProjection<S> | null> {
    const stored = this.snapshots.get(name);
    return stored ? (structuredClone(stored) as StoredProjection<S>) : null;
  }

  async save<S>(name: string, snapshot: StoredProjection<S>): Promise<void> {
    this.snapshots.set(
      name,
      structuredClone({ version: snapshot.version, checkpoint: snapshot.checkpoint, state: snapshot.state }),
    );
  }

  async delete(name: string): Promise<void> {
    this.snapshots.delete(name);
  }
}
