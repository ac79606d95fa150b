import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import type { Logger } from 'pino';
import type { AppendResult, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { newEventId } from '../../contracts/event-id.ts';
import { EVENT_TYPES, isEventType } from '../../contracts/events.ts';
import { maskUrlCredentials } from '../../contracts/mask-url.ts';
import { beforeAbort } from '../before-abort.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { AppendSignal, catchUpSubscription } from './catch-up.ts';
import { GroupWriter, type PendingAppend } from './group-writer.ts';
import {
  type AppendOptions,
  type EventStore,
  EventStoreUnavailableError,
  type HealthReport,
  IdempotencyConflictError,
  type Lease,
  NewerLogError,
  NoEventStoreError,
  StatementCancelledError,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';
import { PostgresLease } from './postgres-lease.ts';
import {
  MIGRATIONS,
  migrationLockKey,
  POSITIONS_PER_TRANSACTION,
  type SchemaNames,
  schemaNames,
  storedIdQuery,
} from './postgres-schema.ts';
import { PostgresProjectionStore } from './postgres-snapshots.ts';
import { pgConnectionString } from './postgres-url.ts';
import { isStorageFull, StorageFullState } from './storage-full.ts';

export interface PostgresEventStoreOptions {
  /** postgres://user@host:port/database */
  url: string;
  /** Schema holding the log, the projections and the migrations table (created when missing). */
  schema: string;
  /**
   * false: a schema without the log is refused (NoEventStoreError) and nothing is created, for a
   * command that only reads. Default true.
   */
  create?: boolean;
  /** Connections in the pool (appends, reads, projection saves). */
  poolSize?: number;
  /** Fallback poll of a live subscription when a NOTIFY is missed (listener reconnecting). */
  pollMs?: number;
  /** How long a query waits for a free or new connection before the store counts as unavailable. */
  connectTimeoutMs?: number;
  /**
   * Longest a statement may run on the server before it is cancelled (default 30 s; migrations are
   * exempt). An append waiting on a stream lock held by a stopped process fails instead of holding
   * its connection, and its caller, for good.
   */
  statementTimeoutMs?: number;
  /**
   * Ends the opening's wait when it aborts (the process asked to stop while starting): the
   * signal's reason is thrown at once; the step in flight (the first connection, a migration) runs
   * out in the background, no later one is taken, and its pool is ended (a store opened all the
   * same is closed).
   */
  signal?: AbortSignal;
  /**
   * Group round trips in flight at once (default a quarter of the pool, at least 2): appends that
   * arrive while they are all busy wait and go out together in the next one.
   */
  groupsInFlight?: number;
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
  // A host cut off from the database (its route gone): the fault drill's partition.
  'ENETUNREACH',
  '57P01', // admin_shutdown: pg_terminate_backend
  '57P02', // crash_shutdown
  '57P03', // cannot_connect_now
  '08000',
  '08003',
  '08006',
  '08001',
  '08004',
]);

/** query_canceled: the statement timeout (or a cancel request) ended it. */
const QUERY_CANCELED = '57014';

function isConnectionError(error: unknown): boolean {
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
  // Awaited here, so a failure's stack names openPostgresEventStore (the start-failure log shows it).
  return await beforeAbort(openStore(options), options.signal, (store) => store.close());
}

async function openStore(options: PostgresEventStoreOptions): Promise<PostgresEventStore> {
  const nextStep = () => options.signal?.throwIfAborted();
  const names = schemaNames(options.schema);
  const pool = new pg.Pool({
    connectionString: pgConnectionString(options.url),
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: options.connectTimeoutMs ?? 2_000,
    // A pooled connection whose peer vanished (host cut off, server gone without a FIN) is found
    // dead by TCP keep-alive instead of on the next query that waits on it.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: `es:${options.schema}`.slice(0, 63),
    statement_timeout: options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS,
  });
  // A pooled idle connection that dies (terminated backend, server restart) is dropped by the
  // pool; without this listener its error would crash the process.
  // Its message and code only: a server restart ends every pooled connection at once, one line
  // each, and the driver's stack of its socket says nothing more.
  pool.on('error', (err) =>
    options.logger?.warn(
      { error: { message: err.message, code: (err as { code?: string }).code } },
      'postgres: idle connection lost',
    ),
  );
  let recorded: string[];
  try {
    await firstConnection(pool, options.url);
    nextStep();
    await migrate(pool, options.schema, names, options.logger, options.create, options.signal).catch(
      (err: unknown) => {
        throw setupRefusal(err, options.url, options.schema) ?? err;
      },
    );
    recorded = (await pool.query<{ name: string }>(`SELECT name FROM ${names.schema}.event_types`)).rows.map(
      (row) => row.name,
    );
    nextStep();
  } catch (err) {
    await pool.end().catch(() => undefined);
    throw err;
  }
  // A log a newer version wrote a type to is refused here, before anything reads it: read on, its
  // events would be passed over without a word by every fold (parseDomainEvent knows no such type).
  const newer = recorded.find((name) => !isEventType(name));
  if (newer !== undefined) {
    await pool.end().catch(() => undefined);
    throw new NewerLogError(
      `event type ${newer}`,
      `the ${EVENT_TYPES.length} types of its catalog`,
      `the event log in PostgreSQL schema ${options.schema}`,
    );
  }
  const store = new PostgresEventStore(pool, options, names, new Set(recorded));
  await store.listen();
  return store;
}

/** The server's refusals of setting up the log's schema that an operator corrects, each with how. */
const SETUP_REFUSALS: Record<string, string> = {
  // insufficient_privilege: a role without CREATE on the database (or on a schema someone else owns).
  '42501':
    "grant POSTGRES_URL's user CREATE on the database (or make it the schema's owner), or use a user that has it",
  // read_only_sql_transaction: a standby, or a role or database set read-only.
  '25006': 'point POSTGRES_URL at the primary, not a read-only standby or a read-only user or database',
};

/** The one-line refusal for an error the server gave setting up `schema`, or null (a bug: its stack). */
function setupRefusal(err: unknown, url: string, schema: string): DependencyRefusedError | null {
  const code = (err as { code?: unknown }).code;
  const fix = typeof code === 'string' ? SETUP_REFUSALS[code] : undefined;
  if (fix === undefined) return null;
  const message = err instanceof Error ? err.message : String(err);
  return new DependencyRefusedError(
    `PostgreSQL at ${maskUrlCredentials(url)} (POSTGRES_URL) refused setting up schema ${schema}: ${message}. To fix it, ${fix}`,
    { cause: err },
  );
}

/** The server's refusals of a login, each with what to correct. */
const LOGIN_REFUSALS: Record<string, string> = {
  '3D000': "create the database (createdb) or correct POSTGRES_URL's database", // invalid_catalog_name
  '28P01': "correct POSTGRES_URL's user and password", // invalid_password
  '28000': "correct POSTGRES_URL's user, or the server's pg_hba.conf", // invalid_authorization_specification
};

/**
 * What the server refused of the SSL the URL asks for, and what to correct, or null: SSL asked of
 * a server that serves none (pg's bare 'The server does not support SSL connections', which has
 * no code), or a connection without SSL that the server's pg_hba.conf takes only with it
 * (invalid_authorization_specification, its message ending 'no encryption').
 */
function sslRefusal(err: unknown, url: string): string | null {
  const message = err instanceof Error ? err.message : String(err);
  if (message === 'The server does not support SSL connections') {
    const mode = sslModeOf(url);
    return (
      `does not accept SSL: ${message}, which POSTGRES_URL's ${mode === null ? 'ssl setting' : `sslmode=${mode}`} asks for. ` +
      'To fix it, set sslmode=disable in POSTGRES_URL, or enable SSL on the server'
    );
  }
  if ((err as { code?: unknown }).code === '28000' && /\bno encryption$/.test(message)) {
    return (
      `accepts SSL connections only: ${message}. To fix it, set sslmode=verify-full in POSTGRES_URL ` +
      "(with sslrootcert=<the server's CA file> for a certificate of a private CA), or allow connections " +
      "without SSL in the server's pg_hba.conf"
    );
  }
  return null;
}

/** The sslmode a connection URL names, or null. */
function sslModeOf(url: string): string | null {
  try {
    return new URL(url).searchParams.get('sslmode');
  } catch {
    return null;
  }
}

/**
 * Takes one connection before anything else, so that a server out of reach or a login it refuses
 * stops the start with a line naming PostgreSQL, the address (password masked) and the setting to
 * correct, rather than the driver's bare `connect ECONNREFUSED 10.0.0.5:5432`.
 */
async function firstConnection(pool: pg.Pool, url: string): Promise<void> {
  try {
    (await pool.connect()).release();
  } catch (err) {
    const code = (err as { code?: string }).code;
    const message = err instanceof Error ? err.message : String(err);
    const where = `PostgreSQL at ${maskUrlCredentials(url)} (POSTGRES_URL)`;
    const ssl = sslRefusal(err, url);
    if (ssl !== null) throw new DependencyRefusedError(`${where} ${ssl}`, { cause: err });
    const fix = code === undefined ? undefined : LOGIN_REFUSALS[code];
    if (fix !== undefined)
      throw new DependencyRefusedError(`${where} refused the login: ${message}. To fix it, ${fix}`, {
        cause: err,
      });
    if (isConnectionError(err))
      throw new DependencyRefusedError(
        `${where} is unreachable: ${message}. Start the server, or correct POSTGRES_URL's host and port; ` +
          'start this process again once it answers, or let its supervisor restart it (deploy/README.md, PostgreSQL as the shared log)',
        { cause: err },
      );
    throw err;
  }
}

/**
 * Applies every migration newer than the schema's recorded version; safe to run concurrently.
 * With `create` false, a schema that holds no log yet is refused (NoEventStoreError), not made.
 */
export async function migrate(
  pool: pg.Pool,
  schema: string,
  names: SchemaNames,
  logger?: Logger,
  create = true,
  signal?: AbortSignal,
) {
  const client = await pool.connect();
  try {
    // Waiting for another process's migration, or a long one, is not a statement gone astray; nor
    // is a migration's wait for a table's lock, under a lock_timeout the role or database may set
    // (a migration that must bound its waits sets its own, as version 5 does).
    await client.query('SET statement_timeout = 0; SET lock_timeout = 0');
    await takeMigrationLock(client, schema, signal);
    try {
      if (!create) await requireLog(client, pool, schema, names);
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
    await client.query('RESET statement_timeout; RESET lock_timeout');
  } catch (err) {
    // Not handed back to the pool with the timeout lifted.
    client.release(err instanceof Error ? err : true);
    throw err;
  }
  client.release();
}

/** How often a migration waiting for another process's asks for the schema's lock again. */
const MIGRATION_LOCK_POLL_MS = 200;

/**
 * Takes the schema's migration lock, waiting while another process migrates. Asked for again and
 * again rather than waited for on the server (pg_advisory_lock): a backend waiting on a lock ends
 * neither with its client's socket nor with the pool, so an open stopped meanwhile would leave it
 * waiting, and then migrating, once the other process let go. Between asks the stop ends the wait.
 */
async function takeMigrationLock(client: pg.PoolClient, schema: string, signal?: AbortSignal): Promise<void> {
  const key = migrationLockKey(schema).toString();
  for (;;) {
    const { rows } = await client.query<{ held: boolean }>('SELECT pg_try_advisory_lock($1) AS held', [key]);
    if (rows[0]?.held) return;
    signal?.throwIfAborted();
    await sleep(MIGRATION_LOCK_POLL_MS, undefined, signal ? { signal } : undefined);
  }
}

async function requireLog(client: pg.PoolClient, pool: pg.Pool, schema: string, names: SchemaNames) {
  const { rows } = await client.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [
    `${names.schema}.events`,
  ]);
  if (rows[0]?.found === true) return;
  const url = maskUrlCredentials(pool.options.connectionString ?? '');
  throw new NoEventStoreError(
    `POSTGRES_SCHEMA=${schema} at ${url} holds no event log (no table ${schema}.events): set POSTGRES_SCHEMA ` +
      "and POSTGRES_URL to the service's; a command that only reads does not create one",
  );
}

interface EventRow {
  position: string;
  /** On readAll's marker row (see its query): the log's last position, and the readable bound. */
  committed_head?: string | null;
  bound?: string | null;
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
 * The event store on PostgreSQL, for several hosts sharing one log. A process's appends go out in
 * groups (group-writer.ts): one statement, one transaction, one commit for every append
 * waiting, each decided on its own (idempotency, expected revision). A group of single events that
 * each expect a revision or no stream (what commands append) takes no lock: the unique index on
 * (stream, revision) lets one writer of a revision commit; such a group is one plain INSERT
 * (plainUnlockedInsert) when every expectation holds, else `append_group_unlocked`. Any other
 * group takes its streams' advisory locks (`append_group`). Writers of different streams never
 * wait for each other.
 * Positions come from the writing transaction's id, and readers take only positions below the
 * oldest transaction still in flight, so a catch-up reader never passes an event that commits
 * late (postgres-schema.ts, version 2). The base under them moves past every id a crash could hand
 * out again, after each server start and each crash restart (version 9). The function NOTIFYs the
 * schema's channel; a dedicated listening connection wakes live subscriptions, and a slow poll
 * covers the time the listener is reconnecting. A transaction left open anywhere on the server holds readers back (never makes
 * them skip): readiness turns red on the lag it causes.
 *
 * Connection failures are retried with the same event ids (ids are fixed before the first try),
 * so an append whose commit was lost in transit is answered from the idempotency check, never
 * written twice. When the server stays unreachable the store throws EventStoreUnavailableError.
 */
export class PostgresEventStore implements EventStore {
  readonly kind = 'postgres' as const;
  /**
   * Positions come from the writing transaction's id (postgres-schema.ts, version 2): increasing
   * in the order readers see them, not consecutive.
   */
  readonly densePositions = false;
  private readonly writer: GroupWriter;
  private readonly signal = new AppendSignal();
  private readonly pollMs: number;
  private readonly logger: Logger | undefined;
  private listener: pg.Client | null = null;
  /** Leases handed out: their connections are closed with the store. */
  private readonly leases = new Set<PostgresLease>();
  /** Names this store's notifies, so its listener passes over its own (see listen). */
  private readonly instance = randomUUID();
  private listenerRetry: NodeJS.Timeout | null = null;
  /** When the current run of connection failures began (null while PostgreSQL answers): one warning per outage. */
  private failingSince: number | null = null;
  private listenerFailing = false;
  private closed = false;
  private readonly space: StorageFullState;
  private lastFullAt = 0;
  private readonly q: {
    append: string;
    appendNotify: string;
    appendUnlocked: string;
    appendUnlockedNotify: string;
    insertUnlocked: string;
    insertUnlockedNotify: string;
    insertOne: string;
    insertOneNotify: string;
    readAll: string;
    readStream: string;
    revision: string;
    head: string;
    notify: string;
  };

  constructor(
    readonly pool: pg.Pool,
    private readonly options: PostgresEventStoreOptions,
    readonly names: SchemaNames,
    /** The catalog types the log records it holds (version 10's event_types): see append. */
    private readonly recordedTypes: Set<string> = new Set(),
  ) {
    this.pollMs = options.pollMs ?? 1_000;
    this.logger = options.logger;
    this.space = new StorageFullState('PostgreSQL', options.logger);
    this.writer = new GroupWriter((group) => this.appendGroup(group), {
      // Fewer, fuller groups: 16 writers over 16 connections did 0.41 of bare INSERTs with 16
      // groups in flight, 0.58-0.71 with 8 and 0.76-0.85 with 4 (bench/postgres.bench.ts, case e).
      maxInFlight: options.groupsInFlight ?? Math.max(2, Math.floor((options.poolSize ?? 10) / 4)),
    });
    const s = names.schema;
    const appendGroup = `${s}.append_group($1::text[], $2::text[], $3::integer[], $4::boolean, $5::text[], $6::text[], $7::text[], $8::text[], $9::json[])`;
    const unlocked = `${s}.append_group_unlocked($1::text[], $2::bigint[], $3::boolean, $4::text[], $5::text[], $6::text[], $7::text[], $8::json)`;
    this.q = {
      append: `SELECT idx, code, detail, next_revision, head FROM ${appendGroup}`,
      // The same, with the NOTIFY in its transaction (see announce): the one-row CTE runs once.
      appendNotify: `WITH n AS MATERIALIZED (SELECT pg_notify('${names.channel}', $10))
                     SELECT idx, code, detail, next_revision, head FROM ${appendGroup}, n`,
      appendUnlocked: `SELECT idx, code, detail, next_revision, head FROM ${unlocked}`,
      appendUnlockedNotify: `WITH n AS MATERIALIZED (SELECT pg_notify('${names.channel}', $9))
                     SELECT idx, code, detail, next_revision, head FROM ${unlocked}, n`,
      insertUnlocked: plainUnlockedInsert(names, false),
      insertUnlockedNotify: plainUnlockedInsert(names, true),
      insertOne: oneRowInsert(names, false),
      insertOneNotify: oneRowInsert(names, true),
      // Only positions of transactions older than the oldest one still in flight: all of those
      // have ended, and every later commit lands above them (postgres-schema.ts, version 2).
      // \`held\`: events are committed above the bound (a transaction older than theirs is still
      // open), so subscribers look again soon instead of at the next poll (see readAll).
      // The bound is a scalar subquery (computed once, the page an index range scan); the last
      // row, with no event in it, says whether anything is committed above the bound.
      readAll: `(SELECT ${COLUMNS}, NULL::bigint AS committed_head, NULL::bigint AS bound FROM ${s}.events
                  WHERE position > $1 AND position <= (${readableBelow(s)}) ORDER BY position LIMIT $2)
                UNION ALL
                SELECT ${COLUMNS.replace(/[a-z_]+/g, 'NULL')}, (SELECT max(position) FROM ${s}.events), (${readableBelow(s)})`,
      readStream: `SELECT ${COLUMNS} FROM ${s}.events WHERE stream = $1 AND revision >= $2 ORDER BY revision LIMIT $3`,
      revision: `SELECT max(revision) AS revision FROM ${s}.events WHERE stream = $1`,
      head: `SELECT coalesce(max(position), 0) AS head FROM ${s}.events`,
      // Nothing to flush for: the notify's own commit need not wait for the disk.
      notify: `SELECT set_config('synchronous_commit', 'off', true), pg_notify('${names.channel}', $1)`,
    };
  }

  /** Group round trips sent and the appends they carried (see GroupWriter.totals). */
  get groupTotals(): { groups: number; appends: number } {
    return this.writer.totals;
  }

  /** A lease of this log's schema, held on a connection of its own (postgres-lease.ts). */
  lease(name: string): Lease {
    const lease = new PostgresLease({
      url: this.options.url,
      schema: this.options.schema,
      name,
      ...(this.options.connectTimeoutMs === undefined
        ? {}
        : { connectTimeoutMs: this.options.connectTimeoutMs }),
      ...(this.logger ? { logger: this.logger } : {}),
    });
    this.leases.add(lease);
    return lease;
  }

  /** Projection snapshots in the same schema, so the log and its folds share one database. */
  projectionStore(): PostgresProjectionStore {
    return new PostgresProjectionStore(this.pool, this.names.schema, (fn) => this.withRetry('save', fn));
  }

  async append(stream: string, events: NewEvent[], options: AppendOptions = {}): Promise<AppendResult> {
    if (this.closed) throw new EventStoreUnavailableError('postgres event store is closed');
    const ids = events.map((e) => e.id ?? newEventId());
    const repeated = ids.find((id, i) => ids.indexOf(id) !== i);
    if (repeated !== undefined) throw new IdempotencyConflictError(stream, repeated);
    if (events.length >= MAX_GROUP_EVENTS) {
      throw new RangeError(`postgres event store: one append holds at most ${MAX_GROUP_EVENTS - 1} events`);
    }
    const member = {
      stream,
      expected: options.expectedRevision ?? 'any',
      ids,
      events,
      flushed: options.durability !== 'committed',
    };
    const unrecorded = this.unrecordedTypes(events);
    if (unrecorded === null) return this.writer.submit(member);
    return this.recordTypes(unrecorded).then(() => this.writer.submit(member));
  }

  /** The catalog types of `events` not yet recorded; null when none (every append but a type's first). */
  private unrecordedTypes(events: NewEvent[]): string[] | null {
    let unrecorded: string[] | null = null;
    for (const { type } of events) {
      if (this.recordedTypes.has(type) || !isEventType(type)) continue;
      unrecorded ??= [];
      unrecorded.push(type);
    }
    return unrecorded;
  }

  /**
   * Records catalog types in event_types before the first append of each in this process, so a
   * build that does not know one refuses the log (openPostgresEventStore). Before, not with it: the
   * group statements stay as they are, and a type recorded for an append that then fails only
   * makes an older build refuse a log that may not hold it. Types outside the catalog (tests' own)
   * are never recorded.
   */
  private async recordTypes(types: string[]): Promise<void> {
    await this.withRetry('record event types', () =>
      this.pool.query(
        `INSERT INTO ${this.names.schema}.event_types (name) SELECT DISTINCT unnest($1::text[]) ON CONFLICT DO NOTHING`,
        [types],
      ),
    );
    for (const type of types) this.recordedTypes.add(type);
  }

  /**
   * One round trip for a group of appends: one transaction, one commit (one WAL flush when any
   * member asks for it). Each member gets its own answer; a failure of the whole statement (an
   * id stored under another stream, a deadlock with another group, a revision another writer
   * committed first) rolls it all back and is settled by appending the members one by one through
   * append_group, so one bad append never fails its neighbours. `locked`: through append_group
   * whatever the members expect (see sendGroup).
   */
  private async appendGroup(group: PendingAppend[], locked = false, revisionRaces = 0): Promise<void> {
    try {
      const rows = await this.sendGroup(group, locked);
      for (const row of rows) {
        const member = group[row.idx - 1]!;
        if (row.code === null) {
          member.resolve({ nextRevision: Number(row.next_revision), position: Number(row.head) });
        } else if (row.code === 'ES001') {
          member.reject(
            new WrongExpectedRevisionError(
              member.stream,
              member.expected,
              row.detail === '' ? null : Number(row.detail),
            ),
          );
        } else {
          member.reject(new IdempotencyConflictError(member.stream, row.detail ?? ''));
        }
      }
      // A member the statement did not answer must not wait forever (an Error only then: its stack
      // trace per append showed in the keyed call's profile).
      if (rows.length < group.length) {
        const answered = new Set(rows.map((r) => r.idx - 1));
        group.forEach((member, i) => {
          if (!answered.has(i)) member.reject(new Error('postgres event store: append left unanswered'));
        });
      }
    } catch (err) {
      const settle = !storeWide(err);
      if (settle && (group.length > 1 || !locked)) {
        // One by one, in order: members of one stream depend on each other's revisions.
        for (const member of group) await this.appendGroup([member], true);
        return;
      }
      if (settle && isRevisionTaken(err) && revisionRaces < REVISION_RACE_TRIES) {
        // Its stream's next revision was written by an append that took no stream lock (an
        // unlocked group's) after this one read the stream: decided again, it reads that revision.
        await this.appendGroup(group, true, revisionRaces + 1);
        return;
      }
      const failure = await this.groupFailure(group[0]!, err);
      for (const member of group) member.reject(failure);
    }
  }

  /**
   * Sends a group. When every member carries one event and expects a revision or no stream (what
   * commands append), as a plain INSERT or through append_group_unlocked (postgres-schema.ts,
   * version 8; see sendUnlocked): no stream locks, one row back, the written members' answers
   * worked out here from its position base.
   * Anything else through append_group, under its streams' locks.
   */
  private async sendGroup(group: PendingAppend[], locked: boolean): Promise<GroupRow[]> {
    if (!locked && group.every(unlockable)) return this.sendUnlocked(group);
    const events = group.flatMap((m) => m.events);
    const values: unknown[] = [
      group.map((m) => m.stream),
      group.map((m) => String(m.expected)),
      group.map((m) => m.events.length),
      group.some((m) => m.flushed),
      group.flatMap((m) => m.ids),
      events.map((e) => e.type),
      // No array at all when no event has one (the usual case): the functions read a missing
      // array as one of nulls, and neither side spells out and parses a null per event.
      noneOrAll(events.map((e) => e.correlationId ?? null)),
      noneOrAll(events.map((e) => e.causationId ?? null)),
      events.map((e) => JSON.stringify(e.data ?? null)),
    ];
    const { rows, carried } = await this.sendCarrying<GroupRow>(
      'es_append_group',
      this.q.append,
      this.q.appendNotify,
      values,
    );
    return this.committed(rows, carried);
  }

  /**
   * A group append_group_unlocked would take, first as one plain INSERT (plainUnlockedInsert): one
   * statement instead of the function's several (each with its own snapshot and executor). On one
   * connection the two cost the server the same; with 16 writers the server's CPU per append above
   * the bare batch writer's fell from 6-7 to 4-5 µs at load 2-4 (bench/postgres.bench.ts (e), runs
   * alternated with the function's; at load 7-12 the difference was within the spread).
   * It writes every member or none; when it fails on a statement error (a revision or an id
   * stored already, a member's stream not at the revision it expects), the same group goes through
   * append_group_unlocked, which decides each member as before and answers a refused one as a
   * refusal. Failures that function would not settle either (the server unreachable, the disk
   * full, the statement timeout) are not sent again.
   * A group of one (every append of a process appending one at a time) goes first as a one-row
   * INSERT with scalar parameters (oneRowInsert), the same decision without the arrays.
   */
  private async sendUnlocked(group: PendingAppend[]): Promise<GroupRow[]> {
    const values = () => [
      group.map((m) => m.stream),
      group.map((m) => (m.expected === 'no_stream' ? -1 : m.expected)),
      group.some((m) => m.flushed),
      group.map((m) => m.ids[0]),
      group.map((m) => m.events[0]!.type),
      noneOrAll(group.map((m) => m.events[0]!.correlationId ?? null)),
      noneOrAll(group.map((m) => m.events[0]!.causationId ?? null)),
      // One JSON array, not an array of JSON texts (see append_group_unlocked).
      JSON.stringify(group.map((m) => m.events[0]!.data ?? null)),
    ];
    let answered: GroupRow[];
    let carried: boolean;
    try {
      const sent =
        group.length === 1
          ? await this.sendCarrying<{ base: string }>(
              'es_insert_one',
              this.q.insertOne,
              this.q.insertOneNotify,
              oneValues(group[0]!),
            )
          : await this.sendCarrying<{ base: string }>(
              'es_insert_unlocked',
              this.q.insertUnlocked,
              this.q.insertUnlockedNotify,
              values(),
            );
      answered = [{ idx: 0, code: null, detail: null, next_revision: null, head: sent.rows[0]!.base }];
      carried = sent.carried;
    } catch (err) {
      if (storeWide(err)) throw err;
      ({ rows: answered, carried } = await this.sendCarrying<GroupRow>(
        'es_append_unlocked',
        this.q.appendUnlocked,
        this.q.appendUnlockedNotify,
        values(),
      ));
    }
    // Row 0 carries the base; every member without a row of its own was written at base + its
    // ordinal, with the revision after the one it expected.
    const base = Number(answered.find((r) => r.idx === 0)?.head);
    const rows: GroupRow[] = [];
    const own = new Map<number, GroupRow>();
    for (const row of answered) if (row.idx > 0) own.set(row.idx, row);
    group.forEach((member, i) => {
      const idx = i + 1;
      const expected = member.expected === 'no_stream' ? -1 : (member.expected as number);
      rows.push(
        own.get(idx) ?? { idx, code: null, detail: null, next_revision: expected + 1, head: base + idx },
      );
    });
    return this.committed(rows, carried);
  }

  /**
   * Runs a group's statement (prepared as `name`), in its form carrying a NOTIFY (`notifyText`,
   * the payload one more parameter) when carryNotify says the group carries one; `carried`: it did.
   */
  private async sendCarrying<R extends pg.QueryResultRow>(
    name: string,
    text: string,
    notifyText: string,
    values: unknown[],
  ): Promise<{ rows: R[]; carried: boolean }> {
    const covers = this.carryNotify();
    const query =
      covers === null
        ? { name, text, values }
        : { name: `${name}_notify`, text: notifyText, values: [...values, this.instance] };
    try {
      const { rows } = await this.withRetry('append', () => this.pool.query<R>(query));
      this.space.succeeded();
      if (covers !== null) this.notified(covers);
      return { rows, carried: covers !== null };
    } catch (err) {
      // Rolled back, its NOTIFY with it: what it was to announce is still owed.
      if (covers !== null) this.notified(0);
      throw err;
    }
  }

  /** Notes the heads a group's answers committed, and announces them (`carried`: its NOTIFY did). */
  private committed(rows: GroupRow[], carried: boolean): GroupRow[] {
    let committed = false;
    for (const row of rows) {
      if (row.code !== null) continue;
      committed = true;
      const head = Number(row.head);
      if (head > this.ownHead) this.ownHead = head;
    }
    if (committed) this.announce(carried);
    return rows;
  }

  /**
   * Tells the other processes' subscriptions that something was committed. A NOTIFY is sent in
   * the transaction it announces only by the append group that carries it (carryNotify): a
   * notifying transaction holds the server's one notify lock through its commit, so one per
   * notify, not every append, keeps writers from queueing on it. Notifies start at least
   * NOTIFY_GAP_MS apart and at most one is out at a time, so a process sends at most forty a
   * second however fast it appends, and under load they ride on appends instead of costing a round
   * trip each (a tenth of a statement per keyed call). Commits no carrier covers get a NOTIFY of
   * their own once the gap has passed. Local subscribers are woken at once, other processes' up to
   * the gap later. A lost notify costs a poll tick.
   */
  private announce(carried: boolean): void {
    this.signal.notify();
    if (!carried) this.owed++;
    this.notifySoon();
  }

  /**
   * Whether the group about to be sent carries a NOTIFY: when none is out and the gap has passed.
   * Its commit then announces itself and every commit answered before it was sent (the count
   * returned); commits answered while it is out may have committed after it and stay owed.
   */
  private carryNotify(): number | null {
    // The gap holds for carried ones too: serial appends each carrying one cost a notify per append.
    if (this.notifyOut || Date.now() - this.lastNotifyAt < NOTIFY_GAP_MS) return null;
    if (this.notifyTimer) {
      clearTimeout(this.notifyTimer);
      this.notifyTimer = null;
    }
    this.notifyOut = true;
    this.lastNotifyAt = Date.now();
    return this.owed;
  }

  /** A NOTIFY that was out has ended, covering `covered` of the owed commits. */
  private notified(covered: number): void {
    this.notifyOut = false;
    this.owed = Math.max(0, this.owed - covered);
    this.notifySoon();
  }

  /**
   * Sends a NOTIFY of its own for owed commits, NOTIFY_GAP_MS from now and at least that long after
   * the last one, unless an append group carries one first: under load the next group leaves well
   * within the gap (a NOTIFY of its own at once for what was answered while a carrier was out
   * still cost half the notifies a round trip).
   */
  private notifySoon(): void {
    if (this.owed === 0 || this.notifyOut || this.notifyTimer || this.closed) return;
    const send = () => {
      this.notifyTimer = null;
      if (this.owed === 0 || this.notifyOut || this.closed) return;
      const covers = this.owed;
      this.notifyOut = true;
      this.lastNotifyAt = Date.now();
      this.pool
        .query(this.q.notify, [this.instance])
        .catch((err: unknown) => this.logger?.debug({ err }, 'postgres: notify failed; subscribers poll'))
        // A failed notify is not sent again: subscribers poll, and the next commit notifies.
        .finally(() => this.notified(covers));
    };
    const now = Date.now();
    this.notifyTimer = setTimeout(send, Math.max(this.lastNotifyAt, now) + NOTIFY_GAP_MS - now);
    this.notifyTimer.unref();
  }
  /** Commits answered and not yet covered by a NOTIFY that committed after them. */
  private owed = 0;
  /** A NOTIFY is out: on its own, or carried by an append group. */
  private notifyOut = false;
  private notifyTimer: NodeJS.Timeout | null = null;
  private lastNotifyAt = 0;

  /** What a failed statement means for the one append it carried. */
  private async groupFailure(member: PendingAppend, err: unknown): Promise<unknown> {
    if (isStorageFull(err)) {
      this.lastFullAt = Date.now();
      return this.space.failed(err);
    }
    if (isRevisionTaken(err)) {
      // Other writers took its stream's next revision every time it was decided (appendGroup):
      // nothing of it was written, and a later try may pass.
      return new EventStoreUnavailableError(
        `postgres: ${member.stream}'s next revision was taken by other writers ${REVISION_RACE_TRIES + 1} times`,
        { cause: err },
      );
    }
    if ((err as { code?: string }).code === UNIQUE_VIOLATION) {
      // One of its ids is stored already, under another stream or elsewhere in it.
      const { rows } = await this.pool
        .query<{ id: string }>(storedIdQuery(this.names.schema), [member.ids])
        .catch(() => ({ rows: [] as { id: string }[] }));
      return new IdempotencyConflictError(member.stream, rows[0]?.id ?? member.ids[0]!);
    }
    return err;
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

  /**
   * What is committed after `after`, in position order, as far as readers may take it. A page cut
   * short by an older transaction still open (see readableBelow) is read again, after 5 ms doubling
   * to 100 ms, until everything committed when the call began is readable, for at most
   * HELD_READ_WAIT_MS: open transactions last milliseconds, and a reader (a test, an export, the
   * log feed) expects what was committed before it asked. One left open longer is not waited for.
   */
  async readAll(options: { after?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? null;
    if (maxCount !== null && maxCount <= 0) return [];
    const limit = Number.isFinite(maxCount) ? maxCount : null;
    const deadline = Date.now() + HELD_READ_WAIT_MS;
    let head: number | null = null;
    for (let delay = 5; ; delay = Math.min(100, delay * 2)) {
      const { events, committedHead, bound } = await this.readPage(options.after ?? 0, limit);
      head ??= committedHead;
      const held = bound < committedHead;
      const short = limit === null || events.length < limit;
      if (!held || !short || bound >= head || Date.now() >= deadline || this.closed) {
        this.heldBack(held);
        return events;
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  private async readPage(after: number, limit: number | null) {
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<EventRow>({ name: 'es_read_all', text: this.q.readAll, values: [after, limit] }),
    );
    // The marker is the row with no event; found by that, not by its place.
    const events: RecordedEvent[] = [];
    let committedHead = 0;
    let bound = 0;
    for (const row of rows) {
      if (row.id === null) {
        committedHead = Number(row.committed_head ?? 0);
        bound = Number(row.bound ?? 0);
      } else events.push(toRecorded(row));
    }
    if (committedHead > this.headSeenByRead) this.headSeenByRead = committedHead;
    return { events, committedHead, bound };
  }

  /**
   * Commits held behind an older open transaction announce themselves before readers may take
   * them, and the transaction they wait for may announce nothing when it ends (a projection
   * snapshot save): while something is held, subscribers read again after a short, growing delay
   * (20 ms doubling up to a second, or the poll interval if shorter) rather than only at the next poll.
   */
  private heldBack(held: boolean): void {
    if (!held) {
      this.heldDelayMs = 0;
      return;
    }
    if (this.heldTimer || this.closed) return;
    this.heldDelayMs = Math.min(this.pollMs, 1_000, this.heldDelayMs === 0 ? 20 : this.heldDelayMs * 2);
    this.heldTimer = setTimeout(() => {
      this.heldTimer = null;
      this.signal.notify();
    }, this.heldDelayMs);
    this.heldTimer.unref();
  }
  private heldTimer: NodeJS.Timeout | null = null;
  private heldDelayMs = 0;

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

  /** Other processes' appends (a bus message about an event not read yet): readers look now. */
  wake(): void {
    this.signal.notify();
  }

  /**
   * The log feed's doorbell (port.ts): rung by this process's commits, other processes' NOTIFYs,
   * the held-back timer and `wake`, without reading the log. Without it the feed kept a live
   * subscription open only to ring it, which read (and decoded) every event once more than the
   * feed itself did. At once when this process committed past `after` since the last read began:
   * that read may have missed it. A commit the last read already knew of and could not take (held
   * behind an older open transaction) is not a reason to read at once: the held-back timer rings.
   */
  appended(after: number, timeoutMs: number): { promise: Promise<void>; cancel: () => void } {
    // Registered before the head is looked at, so a commit in between is not missed.
    const wait = this.signal.wait(timeoutMs);
    if (this.closed || (this.ownHead > after && this.ownHead > this.headSeenByRead)) wait.cancel();
    return wait;
  }
  /** The last position this process committed. */
  private ownHead = 0;
  /** The log's last committed position as the latest page read saw it, readable or not. */
  private headSeenByRead = 0;

  /** Committed events after `after` up to `head`, held back from readers or not (see port.ts). */
  async countCommitted(after: number, head: number, cap: number): Promise<number> {
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<{ n: number }>({
        name: 'es_count_committed',
        text: `SELECT count(*)::int AS n FROM (SELECT 1 FROM ${this.names.schema}.events
                 WHERE position > $1 AND position <= $2 LIMIT $3) t`,
        values: [after, head, cap + 1],
      }),
    );
    return rows[0]!.n;
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

  /**
   * WAL written but not yet flushed, and the bound PostgreSQL puts on it for asynchronous commits:
   * the WAL writer flushes at least every wal_writer_delay, and a commit waits at most three of them.
   */
  async flushLag(): Promise<{ unflushedBytes: number; boundMs: number }> {
    const { rows } = await this.withRetry('read', () =>
      this.pool.query<{ bytes: string; delay_ms: string }>({
        name: 'es_flush_lag',
        text: `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn()) AS bytes,
                      (SELECT setting FROM pg_settings WHERE name = 'wal_writer_delay') AS delay_ms`,
      }),
    );
    return { unflushedBytes: Math.max(0, Number(rows[0]!.bytes)), boundMs: 3 * Number(rows[0]!.delay_ms) };
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
      return { ok: false, detail: `postgres: ${(error as Error).message}`, cause: error };
    }
  }

  async close() {
    if (this.closed) return;
    this.closed = true;
    if (this.listenerRetry) clearTimeout(this.listenerRetry);
    if (this.heldTimer) clearTimeout(this.heldTimer);
    if (this.notifyTimer) clearTimeout(this.notifyTimer);
    this.signal.notify();
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => undefined);
    await Promise.all([...this.leases].map((lease) => lease.release()));
    // Commits still waiting for their NOTIFY are announced now, not at the others' next poll.
    if (this.owed > 0) await this.pool.query(this.q.notify, [this.instance]).catch(() => undefined);
    await this.pool.end();
  }

  /** Opens the LISTEN connection; on loss, subscriptions fall back to polling until it is back. */
  async listen(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: pgConnectionString(this.options.url),
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
    // Its own notifies name this store: its subscribers were woken when the commit returned, and a
    // second wake would only read the log again for nothing.
    client.on('notification', (message) => {
      if (message.payload !== this.instance) this.signal.notify();
    });
    client.on('error', lost);
    client.on('end', () => lost());
    try {
      await client.connect();
      await client.query(`LISTEN ${this.names.channel}`);
      // Closed while it connected (a reconnect in flight): kept, it would outlive the store.
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.listener = client;
      if (this.listenerFailing) this.logger?.info('postgres: listener connected again');
      this.listenerFailing = false;
      this.signal.notify();
    } catch (err) {
      client.end().catch(() => undefined);
      // Retried every 500 ms: one warning until it connects, the rest at debug.
      const error = { message: (err as Error).message, code: (err as { code?: string }).code };
      if (this.listenerFailing)
        this.logger?.debug({ error }, 'postgres: listener could not connect, polling');
      else
        this.logger?.warn(
          { error },
          'postgres: listener could not connect, polling (more at debug until it connects)',
        );
      this.listenerFailing = true;
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
        const result = await run();
        if (this.failingSince !== null) {
          this.logger?.info({ outageMs: Date.now() - this.failingSince }, 'postgres: answering again');
          this.failingSince = null;
        }
        return result;
      } catch (err) {
        if ((err as { code?: string }).code === QUERY_CANCELED) {
          // The statement timeout: the server rolled the statement back, so nothing of it was
          // written and the caller may try again; said as unavailable, not as a failure of its own.
          throw new StatementCancelledError(`postgres statement cancelled: ${(err as Error).message}`, {
            cause: err,
          });
        }
        if (!isConnectionError(err)) throw err;
        last = err;
        // One warning per outage: every caller retries each operation, which logged ~30 lines a
        // second, each with the pg client object, while PostgreSQL was down. The rest at debug.
        const error = { message: (err as Error).message, code: (err as { code?: string }).code };
        if (this.failingSince === null) {
          this.failingSince = Date.now();
          this.logger?.warn(
            { error, what },
            'postgres: connection failure, retrying (more at debug until it answers)',
          );
        } else this.logger?.debug({ error, what }, 'postgres: connection failure, retrying');
      }
    }
    throw new EventStoreUnavailableError(`postgres unreachable: ${(last as Error).message}`, { cause: last });
  }
}

/** The highest position a reader may take now: below the oldest transaction still in flight. */
function readableBelow(schema: string): string {
  return `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint * ${POSITIONS_PER_TRANSACTION} + base AS bound FROM ${schema}.position_base`;
}

/**
 * The plain INSERT of an unlocked group (sendUnlocked): what append_group_unlocked (postgres-schema.ts,
 * version 9) writes when every member's expectation holds, in one statement of the client's, with
 * its parameters ($1-$8, and $9 the notify's payload when `notify`). Answers one row, the group's
 * position base: member i sits at base + i with the revision after the one it expects.
 *
 * Every member or none: a member whose stream is not at the revision it expects gets a NULL
 * revision, and the NOT NULL column fails the statement (SQLSTATE 23502), as the unique indexes fail
 * it for an id stored already or a revision another writer committed (23505); the adapter then sends
 * the group through the function. The expectation holds when the expected revision is stored and
 * the next one is not (the unique (stream, revision) index refuses that one, waiting for a writer of
 * it still in flight): revisions are written one after another from 0, by this insert as by the
 * functions, so then the expected one is the stream's last. For no stream (-1) the index alone
 * decides: revision 0 is stored in every stream that exists. A revision committed after the
 * statement's snapshot reads as not stored: the member is refused here, and decided again by the
 * function, which reads it. The expected revision is looked up by a scalar subquery, one probe of
 * the (stream, revision) index per member: written as EXISTS, the planner hashed it into a scan of
 * the whole table per group.
 *
 * The position base is checked as the functions check it (version 9's baseGuard), once per session:
 * a session without the setting position_guard leaves calls it, which moves the base if the server
 * started or crash-restarted since it last moved, and sets the setting. Both a restart and a crash
 * restart end every backend (a crash restart's postmaster stops them all before replaying the WAL),
 * so a session that has the setting checked after the last of them; a statement that fails undoes
 * the setting with the move. Asynchronous commits (`$3` false) are asked for before the guard runs
 * (the CASE evaluates its branches in order), so a move of the base still makes its transaction
 * flush (position_guard turns synchronous_commit back on). `g` is materialised: computed once.
 */
function plainUnlockedInsert({ schema: s, channel, guard }: SchemaNames, notify: boolean): string {
  const notifies = notify ? `,\n         pg_notify('${channel}', $9) AS n` : '';
  return `WITH g AS MATERIALIZED (
  SELECT ${positionBase({ schema: s, guard })} AS base${notifies}
), w AS (
  INSERT INTO ${s}.events (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
  SELECT g.base + m.i, m.id, m.s,
         CASE WHEN m.x = -1 THEN 0
              ELSE (SELECT e.revision + 1 FROM ${s}.events e WHERE e.stream = m.s AND e.revision = m.x) END,
         m.t, now(), coalesce(m.correlation, m.id), m.causation, m.d
    FROM g, ROWS FROM (unnest($1::text[]), unnest($2::bigint[]), unnest($4::text[]), unnest($5::text[]),
                       unnest($6::text[]), unnest($7::text[]), json_array_elements($8::json))
      WITH ORDINALITY AS m(s, x, id, t, correlation, causation, d, i)
)
SELECT g.base FROM g`;
}

/**
 * The writing transaction's position base (see plainUnlockedInsert): asynchronous commits (`$3`
 * false) asked for before the guard, the guard once per session.
 */
function positionBase({ schema: s, guard }: Pick<SchemaNames, 'schema' | 'guard'>): string {
  return `pg_current_xact_id()::text::bigint * ${POSITIONS_PER_TRANSACTION} + CASE
           WHEN NOT $3::boolean AND set_config('synchronous_commit', 'off', true) IS NULL THEN NULL
           WHEN current_setting('${guard}', true) = 'on' THEN (SELECT b.base FROM ${s}.position_base b)
           ELSE ${s}.position_guard() END`;
}

/**
 * plainUnlockedInsert for a group of one, with scalar parameters in the same places ($1 stream,
 * $2 expected revision or -1, $3 flushed, $4 id, $5 type, $6 correlation, $7 causation, $8 data,
 * $9 the NOTIFY's payload) and the same answer (the base; the event is at base + 1). The same
 * decision: a stream not at the revision expected leaves the revision null, a revision or an id
 * stored already trips its unique index, and the statement fails. No CTE, no unnest and no arrays
 * to build and parse: the server's CPU per append fell from 127 to 82 µs, bare INSERTs' 52
 * (one connection, asynchronous commits, alternated rounds).
 */
function oneRowInsert(names: SchemaNames, notify: boolean): string {
  const s = names.schema;
  return `INSERT INTO ${s}.events (${COLUMNS}) VALUES (
  (SELECT ${positionBase(names)}) + 1, $4, $1,
  CASE WHEN $2::bigint = -1 THEN 0
       ELSE (SELECT e.revision + 1 FROM ${s}.events e WHERE e.stream = $1 AND e.revision = $2::bigint) END,
  $5, now(), coalesce($6, $4), $7, $8::json)
RETURNING position - 1 AS base${notify ? `, pg_notify('${names.channel}', $9) AS n` : ''}`;
}

/** oneRowInsert's parameters for `member` (one event, expecting a revision or no stream). */
function oneValues(member: PendingAppend): unknown[] {
  const event = member.events[0]!;
  return [
    member.stream,
    member.expected === 'no_stream' ? -1 : member.expected,
    member.flushed,
    member.ids[0],
    event.type,
    event.correlationId ?? null,
    event.causationId ?? null,
    JSON.stringify(event.data ?? null),
  ];
}

/**
 * A failure no other statement for the same group would settle (the server unreachable, the
 * statement timeout, the disk full): neither appendGroup's one-by-one retry nor sendUnlocked's
 * fallback to append_group_unlocked sends it again.
 */
function storeWide(err: unknown): boolean {
  return err instanceof EventStoreUnavailableError || isStorageFull(err);
}

const UNIQUE_VIOLATION = '23505';
const DEFAULT_STATEMENT_TIMEOUT_MS = 30_000;
/**
 * Least time between two notifies of one process (see announce). Each costs the carrying commit the
 * notify lock and the listeners (this process's own among them) a wake-up: at 5 ms, 16 writers cost 0.05-0.11x
 * of the bare writer's CPU per append more than at 25 ms, 0.12-0.24x answered once committed
 * (bench/postgres.bench.ts (e) and (f), interleaved).
 */
const NOTIFY_GAP_MS = 25;
/** How long readAll waits for older open transactions to end (see readAll). */
const HELD_READ_WAIT_MS = 2_000;
/** Events one statement may carry (a transaction's share of positions, less one). */
const MAX_GROUP_EVENTS = POSITIONS_PER_TRANSACTION - 1;

interface GroupRow {
  idx: number;
  code: string | null;
  detail: string | null;
  /** int8 columns come back as strings; answers worked out here are numbers. */
  next_revision: string | number | null;
  head: string | number | null;
}

/** A member append_group_unlocked takes: one event, expecting a revision or no stream. */
function unlockable(member: PendingAppend): boolean {
  const expected = member.expected;
  return (
    member.events.length === 1 &&
    (expected === 'no_stream' ||
      (typeof expected === 'number' && Number.isSafeInteger(expected) && expected >= 0))
  );
}

/** The (stream, revision) key refused an insert: another writer committed that revision first. */
function isRevisionTaken(error: unknown): boolean {
  const { code, constraint } = error as { code?: string; constraint?: string };
  return code === UNIQUE_VIOLATION && constraint === 'events_stream_revision_key';
}

/** Times one append is decided again after losing its revision to an unlocked writer. */
const REVISION_RACE_TRIES = 3;

/** The values, or null when every one is null. */
function noneOrAll<T>(values: (T | null)[]): (T | null)[] | null {
  return values.every((v) => v === null) ? null : values;
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
