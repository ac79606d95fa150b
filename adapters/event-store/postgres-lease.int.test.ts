import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { openPostgresEventStore } from './postgres.ts';
import { LEASE_KEEPALIVE } from './postgres-lease.ts';

const run = await shouldRunPostgresSuite('PostgreSQL lease');
const schemas: string[] = [];
const closing: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const close of closing.splice(0).reverse()) await close();
  await dropSchemas(schemas);
});

/** Sessions open under the lease's application name. */
async function leaseSessions(schema: string, name: string): Promise<number> {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    const { rows } = await client.query<{ n: string }>(
      'SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = $1',
      [`es-lease:${schema}:${name}`],
    );
    return Number(rows[0]!.n);
  } finally {
    await client.end();
  }
}

describe.runIf(run)('PostgreSQL lease', () => {
  // Two first asks at once each opened a session; the one left behind could hold the lock with
  // nothing to give it back (not even release), so no process on the log could take it again.
  it('asked twice at once, holds it on one session and gives it back on release', async () => {
    const schema = uniqueSchema('lease_once');
    schemas.push(schema);
    const a = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    closing.push(() => a.close());
    const b = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    closing.push(() => b.close());

    const lease = a.lease('twice');
    expect(await Promise.all([lease.hold(), lease.hold()])).toEqual([true, true]);
    expect(await leaseSessions(schema, 'twice')).toBe(1);
    const other = b.lease('twice');
    expect(await other.hold()).toBe(false);

    await lease.release();
    expect(await other.hold()).toBe(true);
    await other.release();
  });

  // A half-open lease session keeps its lock until the server's keepalive finds it dead: with the
  // kernel's default (7,200 s idle) no process on the log could take the lease for over two hours.
  it("asks the server to probe its session, so a half-open holder's lock is given back in seconds", async () => {
    const schema = uniqueSchema('lease_keepalive');
    schemas.push(schema);
    const store = await openPostgresEventStore({ url: POSTGRES_URL, schema });
    closing.push(() => store.close());
    const lease = store.lease('probed');
    expect(await lease.hold()).toBe(true);
    // The session's own settings, read on the lease's connection (no view shows another session's).
    const session = (lease as unknown as { client: pg.Client }).client;
    const setting = async (name: string) =>
      Number((await session.query<{ v: string }>(`SELECT current_setting('${name}') AS v`)).rows[0]!.v);
    expect(await setting('tcp_keepalives_idle')).toBe(LEASE_KEEPALIVE.idle);
    expect(await setting('tcp_keepalives_interval')).toBe(LEASE_KEEPALIVE.interval);
    expect(await setting('tcp_keepalives_count')).toBe(LEASE_KEEPALIVE.count);
    await lease.release();
  });

  // node-postgres takes a url's own `options` over any given beside it: the keepalive is not one.
  it('keeps the keepalive and the settings of a POSTGRES_URL that carries options of its own', async () => {
    const schema = uniqueSchema('lease_url_options');
    schemas.push(schema);
    const url = new URL(POSTGRES_URL);
    url.searchParams.set('options', '-c statement_timeout=12345');
    const store = await openPostgresEventStore({ url: url.toString(), schema });
    closing.push(() => store.close());
    const lease = store.lease('own-options');
    expect(await lease.hold()).toBe(true);
    const session = (lease as unknown as { client: pg.Client }).client;
    const setting = async (name: string) =>
      (await session.query<{ v: string }>(`SELECT current_setting('${name}') AS v`)).rows[0]!.v;
    expect(await setting('statement_timeout')).toBe('12345ms');
    expect(Number(await setting('tcp_keepalives_idle'))).toBe(LEASE_KEEPALIVE.idle);
    expect(Number(await setting('tcp_keepalives_count'))).toBe(LEASE_KEEPALIVE.count);
    await lease.release();
  });
});
