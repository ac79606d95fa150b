import { spawn } from 'node:child_process';
import { join } from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  postgresRelay,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { event, uniqueStream } from './contract.ts';
import { openPostgresEventStore, type PostgresEventStore } from './postgres.ts';

/**
 * LISTEN/NOTIFY between processes: the subscriber's fallback poll is set to an hour, longer than
 * any test here may run, so an event that arrives at all came through the notification. Then the
 * listening connection is killed server-side and later appends must still arrive, so through a
 * re-established listener rather than the poll.
 */
const run = await shouldRunPostgresSuite('PostgreSQL LISTEN/NOTIFY suite');
const POLL_MS = 3_600_000;
const schemas: string[] = [];
const fresh = () => {
  const schema = uniqueSchema();
  schemas.push(schema);
  return schema;
};
afterAll(() => dropSchemas(schemas));

/** Subscribes from the current head and records each event it delivers. */
function follow(store: PostgresEventStore, after: number) {
  const received: Array<{ event: RecordedEvent }> = [];
  const sub = store.subscribeToAll({ after });
  const consuming = (async () => {
    for await (const e of sub) received.push({ event: e });
  })();
  return {
    received,
    /** Resolves once the event with this id has been delivered. */
    async arrival(id: string): Promise<void> {
      await expect.poll(() => received.some((r) => r.event.id === id), { interval: 20 }).toBe(true);
    },
    async close() {
      await sub.close();
      await consuming;
    },
  };
}

/** Backend pids of the listening connections of stores on `schema`. */
async function listenerPids(admin: pg.Client, schema: string): Promise<number[]> {
  const { rows } = await admin.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid',
    [`es-listen:${schema}`],
  );
  return rows.map((r) => r.pid);
}

describe.runIf(run)('PostgreSQL LISTEN/NOTIFY', () => {
  it('wakes a subscriber on an append by another process, long before its poll would', async () => {
    const schema = fresh();
    const reader = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const live = follow(reader, await reader.headPosition());
    try {
      // Let the subscription read the (empty) log and settle into its hour-long wait.
      await new Promise((r) => setTimeout(r, 300));
      const child = spawn(
        process.execPath,
        [
          '--import',
          'tsx',
          join(import.meta.dirname, 'postgres-writer.ts'),
          POSTGRES_URL,
          schema,
          '0',
          '1',
          '1',
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      );
      let stdout = '';
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      expect(code).toBe(0);
      const [acked] = JSON.parse(stdout) as Array<{ id: string; position: number }>;
      await live.arrival(acked!.id);
      expect(live.received.map((r) => r.event.position)).toEqual([acked!.position]);
    } finally {
      await live.close();
      await reader.close();
    }
  });

  it('wakes a subscriber on an append through another connection', async () => {
    const schema = fresh();
    const reader = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const writer = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const live = follow(reader, await reader.headPosition());
    try {
      await new Promise((r) => setTimeout(r, 300));
      for (let i = 0; i < 3; i++) {
        const e = event('Notified', { i });
        await writer.append(uniqueStream('notify'), [e]);
        await live.arrival(e.id!);
      }
      expect(live.received).toHaveLength(3);
    } finally {
      await live.close();
      await writer.close();
      await reader.close();
    }
  });

  it('wakes a subscriber on the last of many concurrent appends by another store, carried or not', async () => {
    const schema = fresh();
    const reader = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const writer = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const live = follow(reader, await reader.headPosition());
    try {
      await new Promise((r) => setTimeout(r, 300));
      // Appends in flight at once: some groups carry the NOTIFY, commits answered meanwhile are
      // owed one, which the next group carries or a NOTIFY of their own sends.
      for (let round = 0; round < 5; round++) {
        const batch = Array.from({ length: 40 }, (_, i) => event('Burst', { round, i }));
        await Promise.all(batch.map((e) => writer.append(uniqueStream('burst'), [e])));
        // The writer stays open: no close announces what is owed.
        await Promise.all(batch.map((e) => live.arrival(e.id!)));
      }
      expect(live.received).toHaveLength(200);
    } finally {
      await live.close();
      await writer.close();
      await reader.close();
    }
  });

  it('keeps delivering after its listening connection is terminated: it listens again', async () => {
    const schema = fresh();
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    const reader = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const [readerListener] = await listenerPids(admin, schema);
    expect(readerListener).toBeDefined();
    const writer = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
    const writerListener = (await listenerPids(admin, schema)).find((pid) => pid !== readerListener);
    const live = follow(reader, await reader.headPosition());
    try {
      await new Promise((r) => setTimeout(r, 300));
      const before = event('BeforeKill');
      await writer.append(uniqueStream('kill'), [before]);
      await live.arrival(before.id!);

      const { rows } = await admin.query<{ ok: boolean }>('SELECT pg_terminate_backend($1) AS ok', [
        readerListener,
      ]);
      expect(rows[0]!.ok).toBe(true);
      // Appended while the listener is down: its NOTIFY reaches no one in the reader.
      const during = event('DuringOutage');
      await writer.append(uniqueStream('kill'), [during]);
      await live.arrival(during.id!);

      // A new listening connection replaces the killed one...
      await expect
        .poll(
          async () =>
            (await listenerPids(admin, schema)).filter(
              (pid) => pid !== readerListener && pid !== writerListener,
            ).length,
        )
        .toBe(1);
      expect(await listenerPids(admin, schema)).not.toContain(readerListener);
      // ...and the events after it arrive through it.
      for (let i = 0; i < 3; i++) {
        const after = event('AfterKill', { i });
        await writer.append(uniqueStream('kill'), [after]);
        await live.arrival(after.id!);
      }
      expect(live.received.map((r) => r.event.type)).toEqual([
        'BeforeKill',
        'DuringOutage',
        'AfterKill',
        'AfterKill',
        'AfterKill',
      ]);
      expect((await reader.health()).detail).not.toMatch(/reconnecting/);
    } finally {
      await live.close();
      await writer.close();
      await reader.close();
      await admin.end();
    }
  });

  it('ends a listening connection that connects after the store closed', async () => {
    // A reconnect in flight when the store closes (the listener lost a moment before): the
    // connection it makes is ended, not kept open past close.
    const schema = fresh();
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    try {
      const store = await openPostgresEventStore({ url: POSTGRES_URL, schema, pollMs: POLL_MS });
      const reconnecting = store.listen();
      await store.close();
      await reconnecting;
      await expect.poll(() => listenerPids(admin, schema), { interval: 20 }).toEqual([]);
    } finally {
      await admin.end();
    }
  });
});

describe.runIf(run)('PostgreSQL outage logging', () => {
  it('warns once per outage, not once per retry, and says when PostgreSQL answers again', async () => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const relay = postgresRelay();
    await relay.start();
    const store = await openPostgresEventStore({ url: relay.url, schema: fresh(), pollMs: POLL_MS, logger });
    try {
      await store.headPosition();
      await relay.cut();
      // Each read retries its connection three times before it reports the store unavailable.
      for (let i = 0; i < 5; i++)
        await expect(store.readAll({ maxCount: 1 })).rejects.toThrow(/unreachable|terminated|ECONNREFUSED/);
      await relay.start();
      await expect
        .poll(
          async () =>
            await store.readAll({ maxCount: 1 }).then(
              () => true,
              () => false,
            ),
        )
        .toBe(true);
      const failures = lines.filter((l) => l.msg.startsWith('postgres: connection failure'));
      expect(failures.length).toBeGreaterThanOrEqual(10);
      expect(failures.filter((l) => l.level === 40)).toHaveLength(1);
      expect(lines.filter((l) => l.msg === 'postgres: answering again')).toHaveLength(1);
    } finally {
      await store.close();
      await relay.cut();
    }
  });
});
