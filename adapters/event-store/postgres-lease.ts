import { createHash } from 'node:crypto';
import pg from 'pg';
import type { Logger } from 'pino';
import type { Lease } from './port.ts';
import { pgConnectionString } from './postgres-url.ts';

/** Server-side keepalive of a lease's session, in seconds (idle, between probes) and probes. */
export const LEASE_KEEPALIVE = { idle: 15, interval: 5, count: 3 } as const;

/** The advisory lock key (one bigint) of lease `name` on the log of `schema`. */
export function leaseLockKey(schema: string, name: string): bigint {
  return createHash('sha256').update(`lease:${schema}:${name}`).digest().readBigInt64BE(0);
}

/**
 * A lease held as a session-level advisory lock on a connection of its own (not the pool's: it
 * stays open for as long as the lease is held). PostgreSQL gives the lock back when that session
 * ends, so a process that dies or loses its connection hands the lease to the next one that asks.
 * Each `hold()` is one round trip on that connection: a connection found broken is a lease lost
 * (and a lock the server gives back once it sees the session gone), never one assumed kept.
 */
export class PostgresLease implements Lease {
  private client: pg.Client | null = null;
  /** The connection being opened: asks that overlap share it, so no session holds the lock unseen. */
  private connecting: Promise<pg.Client> | null = null;
  private held = false;
  private released = false;
  private readonly key: string;

  constructor(
    private readonly options: {
      url: string;
      schema: string;
      name: string;
      connectTimeoutMs?: number;
      logger?: Logger;
    },
  ) {
    this.key = leaseLockKey(options.schema, options.name).toString();
  }

  async hold(): Promise<boolean> {
    if (this.released) return false;
    try {
      const client = this.client ?? (await this.opened());
      if (this.held) {
        await client.query('SELECT 1');
        return true;
      }
      const { rows } = await client.query<{ held: boolean }>('SELECT pg_try_advisory_lock($1) AS held', [
        this.key,
      ]);
      this.held = rows[0]?.held === true;
      if (this.held) this.options.logger?.info({ lease: this.options.name }, 'postgres: lease taken');
      return this.held;
    } catch (err) {
      this.drop(err);
      return false;
    }
  }

  async release(): Promise<void> {
    this.released = true;
    const client = this.client;
    this.client = null;
    this.held = false;
    await client?.end().catch(() => undefined);
  }

  private opened(): Promise<pg.Client> {
    this.connecting ??= this.connect().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  private async connect(): Promise<pg.Client> {
    const client = new pg.Client({
      connectionString: pgConnectionString(this.options.url),
      connectionTimeoutMillis: this.options.connectTimeoutMs ?? 2_000,
      // A round trip that hangs (a half-open connection) counts as the lease lost, not as a wait.
      query_timeout: 10_000,
      keepAlive: true,
      application_name: `es-lease:${this.options.schema}:${this.options.name}`.slice(0, 63),
    });
    client.on('error', (err) => {
      if (this.client === client) this.drop(err);
    });
    await client.connect();
    // The server gives the lock back only when it sees this session gone. A half-open connection
    // (the holder's host or link lost without a close) would otherwise keep it for the kernel's
    // default keepalive, over two hours, with the holder standing by and no resolver anywhere: the
    // server probes this session after 15 s idle and drops it about 30 s after it went silent. Set
    // once connected rather than as a startup `options`: a url's own `options` would replace those,
    // and a pooler in session mode (PgBouncer) refuses startup parameters it does not know.
    await client
      .query(
        `SET tcp_keepalives_idle = ${LEASE_KEEPALIVE.idle}; SET tcp_keepalives_interval = ${LEASE_KEEPALIVE.interval}; SET tcp_keepalives_count = ${LEASE_KEEPALIVE.count}`,
      )
      .catch(async (err) => {
        await client.end().catch(() => undefined);
        throw err;
      });
    if (this.released) {
      await client.end().catch(() => undefined);
      throw new Error('lease released');
    }
    this.client = client;
    return client;
  }

  private drop(err: unknown): void {
    if (this.held)
      this.options.logger?.warn(
        { err, lease: this.options.name },
        'postgres: lease lost with its connection',
      );
    this.held = false;
    const client = this.client;
    this.client = null;
    client?.end().catch(() => undefined);
  }
}
