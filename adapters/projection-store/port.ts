/**
 * Where projections keep their state together with their checkpoint. `save` writes both in one
 * atomic step, so after a crash a projection resumes from a checkpoint that matches its state.
 */
export interface ProjectionStore {
  load<S>(name: string): Promise<StoredProjection<S> | null>;
  save<S>(name: string, snapshot: StoredProjection<S>): Promise<void>;
  delete(name: string): Promise<void>;
}

export interface StoredProjection<S> {
  /** Projection version: a changed fold bumps it, forcing a rebuild. */
  version: number;
  /** Global position of the last event folded into `state` (0 = none). */
  checkpoint: number;
  state: S;
}
