import type pg from 'pg';
import type { ProjectionStore, StoredProjection } from '../projection-store/port.ts';

/**
 * Projection snapshots in the `projections` table of the event store's schema. Version,
 * checkpoint and state are one row written by one statement, so they commit together or not at
 * all, as the LMDB store's single put does.
 */
export class PostgresProjectionStore implements ProjectionStore {
  constructor(
    private readonly pool: pg.Pool,
    private readonly schema: string,
    private readonly retry: <T>(run: () => Promise<T>) => Promise<T> = (run) => run(),
  ) {}

  async load<S>(name: string): Promise<StoredProjection<S> | null> {
    const { rows } = await this.retry(() =>
      this.pool.query<{ version: number; checkpoint: string; state: S }>(
        `SELECT version, checkpoint, state FROM ${this.schema}.projections WHERE name = $1`,
        [name],
      ),
    );
    const row = rows[0];
    return row ? { version: row.version, checkpoint: Number(row.checkpoint), state: row.state } : null;
  }

  /**
   * Committed without waiting for the disk: a snapshot is derived from the log, and one lost in a
   * crash of the database server is folded again from the one before it. It can never survive
   * ahead of the events it folded: those committed before it, earlier in the same write-ahead log.
   * Waiting for the flush made each save (the relay checkpoints several times a second under load)
   * a disk flush and a few hundred µs of the server's CPU.
   */
  async save<S>(name: string, snapshot: StoredProjection<S>): Promise<void> {
    await this.retry(() =>
      this.pool.query({
        name: `ps_save_${this.schema.replaceAll('"', '')}`,
        text: `WITH async AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
               INSERT INTO ${this.schema}.projections (name, version, checkpoint, state)
               SELECT $1, $2, $3, $4::json FROM async
               ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, checkpoint = EXCLUDED.checkpoint, state = EXCLUDED.state`,
        values: [name, snapshot.version, snapshot.checkpoint, JSON.stringify(snapshot.state)],
      }),
    );
  }

  async delete(name: string): Promise<void> {
    await this.retry(() => this.pool.query(`DELETE FROM ${this.schema}.projections WHERE name = $1`, [name]));
  }
}
