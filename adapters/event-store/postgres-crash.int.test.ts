import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type PrivatePostgres, startPrivatePostgres } from '../../test/postgres-private.ts';
import { shouldRunPostgresSuite, uniqueSchema } from '../../test/postgres-probe.ts';
import { event } from './contract.ts';
import { openPostgresEventStore, type PostgresEventStore } from './postgres.ts';

const run = await shouldRunPostgresSuite('PostgreSQL event store crash suite');

/**
 * Kills one backend of the server with SIGKILL: the postmaster ends the others and recovers from
 * its WAL. Returns once recovery is over, told by an unlogged table written before the kill, which
 * recovery empties (a server that merely answers may not have noticed the kill yet).
 */
async function killOneBackend(url: string): Promise<void> {
  const victim = new pg.Client({ connectionString: url });
  victim.on('error', () => undefined);
  await victim.connect();
  await victim.query('CREATE UNLOGGED TABLE IF NOT EXISTS crash_probe (x integer)');
  await victim.query('INSERT INTO crash_probe VALUES (1)');
  const { rows } = await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  process.kill(rows[0]!.pid, 'SIGKILL');
  await victim.end().catch(() => undefined);
  for (;;) {
    const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    probe.on('error', () => undefined);
    const left = await probe
      .connect()
      .then(() => probe.query<{ n: number }>('SELECT count(*)::int AS n FROM crash_probe'))
      .then((r) => r.rows[0]!.n)
      .catch(() => null);
    await probe.end().catch(() => undefined);
    if (left === 0) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function postmasterStart(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ t: string }>('SELECT pg_postmaster_start_time()::text AS t');
    return rows[0]!.t;
  } finally {
    await client.end();
  }
}

describe.runIf(run)('PostgreSQL event store across a crash restart', () => {
  // A server of its own: the crash ends every session on it. Its WAL writer writes every 10 s, and
  // nothing else flushes (no autovacuum, no standby snapshots), so asynchronous commits made just
  // before the kill are lost with the server's shared memory, as the last ones before a crash are.
  let own: PrivatePostgres;
  beforeAll(async () => {
    own = await startPrivatePostgres({
      wal_writer_delay: '10s',
      autovacuum: 'off',
      wal_level: 'minimal',
      max_wal_senders: '0',
    });
  });
  afterAll(async () => {
    await own?.stop();
  });

  /**
   * Appends ten quota-debit-like events (answered once committed), lets a reader pass them, and
   * kills a backend until the crash loses some of them. The WAL writer may write them before the
   * kill (its 10 s tick can fall in between): then nothing is lost and the crash is tried again.
   * Answers the reader's checkpoint, the last position it passed.
   */
  async function crashLosingCommits(store: PostgresEventStore, after: number): Promise<number> {
    let passed = after;
    for (let attempt = 0; attempt < 5; attempt++) {
      for (let i = 0; i < 10; i++) {
        await store.append('debits', [event('Debit')], { durability: 'committed' });
      }
      const seen = await store.readAll({ after: passed });
      passed = seen.at(-1)!.position;
      await killOneBackend(own.url);
      const kept = new Set((await store.readAll()).map((e) => e.position));
      if (seen.some((e) => !kept.has(e.position))) return passed;
    }
    throw new Error('five crashes in a row lost no asynchronous commit');
  }

  it('hands out every position after a backend crash above every position a reader saw before it', async () => {
    const store = await openPostgresEventStore({ url: own.url, schema: uniqueSchema(), poolSize: 2 });
    try {
      await store.append('flushed', [event('Flushed')]);
      const started = await postmasterStart(own.url);
      const passed = await crashLosingCommits(store, 0);
      // A crash restart is not a server start: the postmaster stays, with its start time.
      expect(await postmasterStart(own.url)).toBe(started);

      // New appends through both functions: locked (any revision) and unlocked (an expected one).
      const written = [
        await store.append('after', [event('Any')]),
        await store.append('after', [event('Any')], { durability: 'committed' }),
        await store.append('expects', [event('Expects')], { expectedRevision: 'no_stream' }),
        await store.append('expects', [event('Expects')], { expectedRevision: 0 }),
      ];
      for (const result of written) expect(result.position).toBeGreaterThan(passed);
      // The reader goes on from its checkpoint and gets every one of them.
      const next = await store.readAll({ after: passed });
      expect(next.map((e) => e.type)).toEqual(['Any', 'Any', 'Expects', 'Expects']);
    } finally {
      await store.close();
    }
  });

  it('keeps the base it moved through a second crash straight after, though the append that moved it asked only for a commit', async () => {
    const store = await openPostgresEventStore({ url: own.url, schema: uniqueSchema(), poolSize: 2 });
    try {
      await store.append('flushed', [event('Flushed')]);
      const first = await crashLosingCommits(store, 0);
      // The first appends after the crash (one of them moves the base) are lost in the next.
      const second = await crashLosingCommits(store, first);
      expect(second).toBeGreaterThan(first);
      const written = await store.append('after', [event('Any')], { durability: 'committed' });
      expect(written.position).toBeGreaterThan(second);
      expect((await store.readAll({ after: second })).map((e) => e.type)).toEqual(['Any']);
    } finally {
      await store.close();
    }
  });
});
