import { randomUUID } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { AppendResult, ExpectedRevision, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { PostgresProjectionStore } from '../projection-store/postgres.ts';
import { AppendSignal, catchUpSubscription } from './catch-up.ts';
import {
  type EventStore,
  EventStoreUnavailableError,
  type HealthReport,
  IdempotencyConflictError,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';
import { MIGRATIONS, migrationLockKey, type SchemaNames, schemaNames } from './postgres-schema.ts';
import { isStorageFull, StorageFullState } from './storage-full.ts';

export interface PostgresEventStoreOptions {
  /** postgres://user@host:port/database */
  url: string;
  /** Schema holding the log, the projections and the migrations table (created when missing). */
  schema: string;
  /** Connections in the pool (appends, reads, projection saves). */
  poolSize?: number;
  /** Fallback poll of a live subscription when a NOTIFY is missed (listener reconnecting). */
  pollMs?: number;
  /** How long a query waits for a free or new connection before the store counts as unavailable. */
  connectTimeoutMs?: number;
  logger?: Logger;
}

/** Connection-level failures: the outcome of the statement is unknown, a retry may pass. */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  '57P01', // admin_shutdown: pg_terminate_backend
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '08000',
  '08003',
  '08006',
  '08001',
  '08004',
]);

export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: string }).code;
  if (code && CONNECTION_CODES.has(code)) return true;
  return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i.test(
    error.message,
  );
}

/** Opens the pool, applies pending migrations and starts listening for appends. */
export async function openPostgresEventStore(
  options: PostgresEventStoreOptions,
): Promise<PostgresEventStore> {
  const names = schemaNames(options.schema);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2_000,
    application_name: `es:${options.schema}`.slice(0, 63),
  });
  // A pooled idle connection that dies (terminated backend, server restart) is dropped by the
  // pool; without this listener its error would crash the process.
  pool.on('error', (err) => options.logger?.warn({ err }, 'postgres: idle connection lost'));
  try {
    await migrate(pool, options.schema, names, options.logger);
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
  const store = new PostgresEventStore(pool, options, names);
  await store.listen();
  return store;
}

/** Applies every migration newer than the schema's recorded version; safe to run concurrently. */
export async function migrate(pool: pg.Pool, schema: string, names: SchemaNames, logger?: Logger) {
  const client = await pool.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [migrationLockKey(schema).toString()]);
    try {
      await client.query(`CREATE SCHEMA IF NOT EXISTS ${names.schema}`);
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${names.schema}.schema_migrations (
           version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`,
      );
      const { rows } = await client.query<{ version: number }>(
        `SELECT version FROM ${names.schema}.schema_migrations`,
      );
      const applied = new Set(rows.map((r) => r.version));
      for (const migration of MIGRATIONS) {
        if (applied.has(migration.version)) continue;
        await client.query('BEGIN');
        try {
          await client.query(migration.sql(names));
          await client.query(
            `INSERT INTO ${names.schema}.schema_migrations (version, name) VALUES ($1, $2)`,
            [migration.version, migration.name],
          );
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw err;
        }
        logger?.info(
          { schema, version: migration.version, name: migration.name },
          'postgres: migration applied',
        );
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [migrationLockKey(schema).toString()]);
    }
  } finally {
    client.release();
  }
}

interface EventRow {
  position: string;
  id: string;
  stream: string;
  revision: string;
  type: string;
  recorded_at: Date;
  correlation_id: string;
  causation_id: string | null;
  data: unknown;
}

const COLUMNS = 'position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data';

/**
 * The event store on PostgreSQL, for several hosts sharing one log. Every append is one call of
 * the schema's `append_events` function, which takes a transaction-scoped advisory lock, checks
 * idempotency and the expected revision, and inserts the batch at the next positions. Serialised
 * appends are the gap-free technique: positions are handed out in commit order, so a catch-up
 * reader never skips an event that commits late with a lower position. The function NOTIFYs the
 * schema's channel on commit; a dedicated listening connection wakes live subscriptions, and a
 * slow poll covers the time the listener is reconnecting.
 *
 * Connection failures are retried with the same event ids (ids are fixed before the first try),
 * so an append whose commit was lost in transit is answered from the idempotency check, never
 * written twice. When the server stays unreachable the store throws EventStoreUnavailableError.
 */
export class PostgresEventStore implements EventStore {
  readonly kind = 'postgres' as const;
  /** Each append takes the head + 1, 2... under the advisory lock (postgres-schema.ts). */
  readonly densePositions = true;
  private readonly signal = new AppendSignal();
  private readonly pollMs: number;
  private readonly logger: Logger | undefined;
  private listener: pg.Client | null = null;
  private listenerRetry: NodeJS.Timeout | null = null;
  private closed = false;
  private readonly space: StorageFullState;
  private lastFullAt = 0;
  private readonly q: {
    append: string;
    readAll: string;
    readStream: string;
    revision: string;
    head: string;
  };

  constructor(
    readonly pool: pg.Pool,
    private readonly options: PostgresEventStoreOptions,
    readonly names: SchemaNames,
  ) {
    this.pollMs = options.pollMs ?? 1_000;
    this.logger = options.logger;
    this.space = new StorageFullState('PostgreSQL', options.logger);
    const s = names.schema;
    this.q = {
      append: `SELECT next_revision, head FROM ${s}.append_events($1, $2, $3::text[], $4::text[], $5::text[], $6::text[], $7::json[])`,
      readAll: `SELECT ${COLUMNS} FROM ${s}.events WHERE position > $1 ORDER BY position LIMIT $2`,
      readStream: `SELECT ${COLUMNS} FROM ${s}.events WHERE stream = $1 AND revision >= $2 ORDER BY revision LIMIT $3`,
      revision: `SELECT max(revision) AS revision FROM ${s}.events WHERE stream = $1`,
      head: `SELECT coalesce(max(position), 0) AS head FROM ${s}.events`,
    };
  }

  /** Projection snapshots in the same schema, so the log and its folds share one database. */
  projectionStore(): PostgresProjectionStore {
    return new PostgresProjectionStore(this.pool, this.names.schema, (fn) => this.withRetry('save', fn));
  }

  async append(
    stream: string,
    events: NewEvent[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResult> {
    const expected = options.expectedRevision ?? 'any';
    const ids = events.map((e) => e.id ?? randomUUID());
    const values = [
      stream,
      String(expected),
      ids,
      events.map((e) => e.type),
      events.map((e) => e.correlationId ?? null),
      events.map((e) => e.causationId ?? null),
      events.map((e) => JSON.stringify(e.data ?? null)),
    ];
    try {
      const { rows } = await this.withRetry('append', () =>
        this.pool.query<{ next_revision: string; head: string }>({
          name: 'es_append',
          text: this.q.append,
          values,
        }),
      );
      const row = rows[0]!;
      this.space.succeeded();
      return { nextRevision: Number(row.next_revision), position: Number(row.head) };
    } catch (err) {
      if (isStorageFull(err)) {
        this.lastFullAt = Date.now();
        throw this.space.failed(err);
      }
      const code = (err as { code?: string }).code;
      const detail = (err as { detail?: string }).detail ?? '';
      if (code === 'ES001') {
        throw new WrongExpectedRevisionError(stream, expected, detail === '' ? null : Number(detail));
      }
      if (code === 'ES002') throw new IdempotencyConflictError(stream, detail);
      throw err;
    }
  }

  async readStream(stream: string, options: { fromRevision?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? null;
    if (maxCount !== null && maxCount <= 0) return [];
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<EventRow>({
        name: 'es_read_stream',
        text: this.q.readStream,
        values: [stream, options.fromRevision ?? 0, Number.isFinite(maxCount) ? maxCount : null],
      }),
    );
    return rows.map(toRecorded);
  }

  async readAll(options: { after?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? null;
    if (maxCount !== null && maxCount <= 0) return [];
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<EventRow>({
        name: 'es_read_all',
        text: this.q.readAll,
        values: [options.after ?? 0, Number.isFinite(maxCount) ? maxCount : null],
      }),
    );
    return rows.map(toRecorded);
  }

  /**
   * A subscription outlives an outage of the server: reads that find it unreachable are retried
   * every poll interval, so projections keep their state (and keep serving it) and resume from
   * their position when PostgreSQL is back, instead of failing.
   */
  subscribeToAll(options: { after?: number } = {}): Subscription {
    let closed = false;
    const patientRead = async (after: number, maxCount: number): Promise<RecordedEvent[]> => {
      for (;;) {
        try {
          return await this.readAll({ after, maxCount });
        } catch (err) {
          if (!(err instanceof EventStoreUnavailableError) || closed || this.closed) throw err;
          const wait = this.signal.wait(this.pollMs);
          await wait.promise;
          if (closed || this.closed) return [];
        }
      }
    };
    const sub = catchUpSubscription(patientRead, this.signal, { ...options, pollMs: this.pollMs });
    return {
      [Symbol.asyncIterator]: () => sub[Symbol.asyncIterator](),
      close: async () => {
        closed = true;
        this.signal.notify();
        await sub.close();
      },
    };
  }

  async streamRevision(stream: string) {
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<{ revision: string | null }>({
        name: 'es_revision',
        text: this.q.revision,
        values: [stream],
      }),
    );
    const revision = rows[0]?.revision ?? null;
    return revision === null ? null : Number(revision);
  }

  async headPosition() {
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<{ head: string }>({ name: 'es_head', text: this.q.head }),
    );
    return Number(rows[0]!.head);
  }

  async health(): Promise<HealthReport> {
    if (this.closed) return { ok: false, detail: 'closed' };
    // Without a write to probe with, a full disk (SQLSTATE 53100) is reported for a while after
    // the last refused write, then the replica is offered writes again to find out.
    if (this.space.full && Date.now() - this.lastFullAt < 10_000) return this.space.health()!;
    try {
      const { rows } = await this.pool.query<{ head: string }>({ name: 'es_head', text: this.q.head });
      return {
        ok: true,
        detail: `head position ${rows[0]!.head}${this.listener ? '' : ' (listener reconnecting, polling)'}`,
      };
    } catch (error) {
      return { ok: false, detail: `postgres: ${(error as Error).message}` };
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    if (this.listenerRetry) clearTimeout(this.listenerRetry);
    this.signal.notify();
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => undefined);
    await this.pool.end();
  }

  /** Opens the LISTEN connection; on loss, subscriptions fall back to polling until it is back. */
  async listen(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: this.options.url,
      connectionTimeoutMillis: this.options.connectTimeoutMs ?? 2_000,
      application_name: `es-listen:${this.options.schema}`.slice(0, 63),
    });
    const lost = (err?: Error) => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.logger?.warn({ err }, 'postgres: listener lost, polling until it reconnects');
      // Anything appended while the listener was down is picked up by this wake-up.
      this.signal.notify();
      this.scheduleListen();
    };
    client.on('notification', () => this.signal.notify());
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`LISTEN ${this.names.channel}`);
      this.listener = client;
      this.signal.notify();
    } catch (err) {
      client.end().catch(() => undefined);
      this.logger?.warn({ err }, 'postgres: listener could not connect, polling');
      this.scheduleListen();
    }
  }

  private scheduleListen() {
    if (this.closed || this.listenerRetry) return;
    this.listenerRetry = setTimeout(() => {
      this.listenerRetry = null;
      void this.listen();
    }, 500);
    this.listenerRetry.unref();
  }

  /**
   * Retries connection failures a few times (a terminated backend is replaced by a fresh pooled
   * connection), then reports the store unavailable. Statement errors pass through at once.
   */
  private async withRetry<T>(what: string, run: () => Promise<T>): Promise<T> {
    const delays = [0, 100, 400];
    let last: unknown;
    for (const delay of delays) {
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      if (this.closed) throw new EventStoreUnavailableError('postgres event store is closed');
      try {
        return await run();
      } catch (err) {
        if (!isConnectionError(err)) throw err;
        last = err;
        this.logger?.warn({ err, what }, 'postgres: connection failure, retrying');
      }
    }
    throw new EventStoreUnavailableError(`postgres unreachable: ${(last as Error).message}`, { cause: last });
  }
}

function toRecorded(row: EventRow): RecordedEvent {
  return {
    id: row.id,
    type: row.type,
    stream: row.stream,
    revision: Number(row.revision),
    position: Number(row.position),
    recordedAt: row.recorded_at.toISOString(),
    correlationId: row.correlation_id,
    causationId: row.causation_id,
    data: row.data,
  };
}
