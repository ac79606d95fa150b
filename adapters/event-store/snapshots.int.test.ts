import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import {
  dropSchemas,
  POSTGRES_URL,
  shouldRunPostgresSuite,
  uniqueSchema,
} from '../../test/postgres-probe.ts';
import { MemoryProjectionStore } from '../projection-store/memory.ts';
import type { ProjectionStore, StoredProjection } from '../projection-store/port.ts';
import { event, uniqueStream } from './contract.ts';
import { openLmdbEventStore } from './lmdb.ts';
import { LmdbProjectionStore } from './lmdb-snapshots.ts';
import { openPostgresEventStore } from './postgres.ts';
import { PostgresProjectionStore } from './postgres-snapshots.ts';

const root = mkdtempSync(join(tmpdir(), 'projection-store-'));
let dirs = 0;
const freshPath = () => join(root, `env-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

// PostgreSQL: an isolated schema per store opened here, all dropped at the end. Outside CI an
// unreachable server skips these (loudly); under CI=true they run and fail.
const postgres = await shouldRunPostgresSuite('PostgreSQL projection store suite');
const schemas: string[] = [];
const freshSchema = () => {
  const schema = uniqueSchema('ps_test');
  schemas.push(schema);
  return schema;
};
afterAll(() => dropSchemas(schemas));

interface Balances {
  balances: Record<string, number>;
  seen: string[];
}

type Opener = () => Promise<{ store: ProjectionStore; close: () => Promise<void> }>;

const adapters: Array<[string, Opener]> = [
  ['memory', async () => ({ store: new MemoryProjectionStore(), close: async () => {} })],
  [
    'lmdb (own environment)',
    async () => {
      const store = LmdbProjectionStore.open(freshPath());
      return { store, close: () => store.close() };
    },
  ],
  [
    'lmdb (the event store environment)',
    async () => {
      const events = await openLmdbEventStore({ path: freshPath() });
      return { store: events.projectionStore(), close: () => events.close() };
    },
  ],
];
if (postgres) {
  adapters.push([
    'postgres (the event store schema)',
    async () => {
      const events = await openPostgresEventStore({ url: POSTGRES_URL, schema: freshSchema(), poolSize: 4 });
      return { store: events.projectionStore(), close: () => events.close() };
    },
  ]);
}

describe.each(adapters)('ProjectionStore: %s', (_name, open) => {
  it('returns null for a projection never saved', async () => {
    const { store, close } = await open();
    try {
      expect(await store.load('nothing')).toBeNull();
    } finally {
      await close();
    }
  });

  it('saves and loads version, checkpoint and state together', async () => {
    const { store, close } = await open();
    try {
      const snapshot = { version: 2, checkpoint: 41, state: { balances: { a: 10, b: 0 }, seen: ['x'] } };
      await store.save<Balances>('quota', snapshot);
      expect(await store.load<Balances>('quota')).toEqual(snapshot);
      await store.save<Balances>('quota', {
        version: 2,
        checkpoint: 42,
        state: { balances: { a: 9 }, seen: [] },
      });
      expect(await store.load<Balances>('quota')).toEqual({
        version: 2,
        checkpoint: 42,
        state: { balances: { a: 9 }, seen: [] },
      });
    } finally {
      await close();
    }
  });

  it('keeps projections apart by name and deletes one without touching the others', async () => {
    const { store, close } = await open();
    try {
      await store.save('a', { version: 1, checkpoint: 1, state: 'A' });
      await store.save('b', { version: 1, checkpoint: 2, state: ['B'] });
      await store.delete('a');
      await store.delete('never-saved');
      expect(await store.load('a')).toBeNull();
      expect(await store.load('b')).toEqual({ version: 1, checkpoint: 2, state: ['B'] });
    } finally {
      await close();
    }
  });

  it('is not changed by mutating what was saved or loaded', async () => {
    const { store, close } = await open();
    try {
      const state = { balances: { a: 1 }, seen: [] as string[] };
      await store.save<Balances>('p', { version: 1, checkpoint: 1, state });
      state.balances.a = 99;
      const loaded = await store.load<Balances>('p');
      loaded!.state.seen.push('mutated');
      expect(await store.load<Balances>('p')).toEqual({
        version: 1,
        checkpoint: 1,
        state: { balances: { a: 1 }, seen: [] },
      });
    } finally {
      await close();
    }
  });
  it('never hands out a checkpoint without the state saved with it, under concurrent saves and loads', async () => {
    const { store, close } = await open();
    try {
      // Each snapshot's state names its own checkpoint, so a torn save (the checkpoint of one,
      // the state of another) is visible in any load.
      const snapshot = (n: number) => ({
        version: 1,
        checkpoint: n,
        state: { upTo: n, items: Array.from({ length: 50 }, (_, i) => `${n}:${i}`) },
      });
      await store.save('race', snapshot(0));
      const loads: Array<StoredProjection<{ upTo: number; items: string[] }> | null> = [];
      await Promise.all([
        ...Array.from({ length: 40 }, (_, i) => store.save('race', snapshot(i + 1))),
        ...Array.from({ length: 40 }, async () => {
          loads.push(await store.load('race'));
        }),
      ]);
      loads.push(await store.load('race'));
      for (const loaded of loads) {
        expect(loaded).not.toBeNull();
        expect(loaded).toEqual(snapshot(loaded!.checkpoint));
      }
    } finally {
      await close();
    }
  });
});

describe('LMDB projection store persistence', () => {
  it('shares one data directory with the event store and survives a reopen', async () => {
    const path = freshPath();
    const first = await openLmdbEventStore({ path });
    const stream = uniqueStream('folded');
    const appended = await first.append(stream, [event('A'), event('B')]);
    await first
      .projectionStore()
      .save('counter', { version: 1, checkpoint: appended.position, state: { count: 2 } });
    await first.close();

    const second = await openLmdbEventStore({ path });
    try {
      expect(await second.projectionStore().load('counter')).toEqual({
        version: 1,
        checkpoint: appended.position,
        state: { count: 2 },
      });
      expect(await second.readStream(stream)).toHaveLength(2);
    } finally {
      await second.close();
    }
  });

  it('survives a reopen in its own environment', async () => {
    const path = freshPath();
    const first = LmdbProjectionStore.open(path);
    await first.save('p', { version: 3, checkpoint: 7, state: { nested: { list: [1, 2] } } });
    await first.close();
    const second = LmdbProjectionStore.open(path);
    try {
      expect(await second.load('p')).toEqual({
        version: 3,
        checkpoint: 7,
        state: { nested: { list: [1, 2] } },
      });
    } finally {
      await second.close();
    }
  });
});

describe.runIf(postgres)('PostgreSQL projection store', () => {
  it('rolls back a save that fails after writing its row: the previous snapshot stays whole', async () => {
    const schema = freshSchema();
    const events = await openPostgresEventStore({ url: POSTGRES_URL, schema, poolSize: 2 });
    try {
      const store = events.projectionStore();
      const before = { version: 1, checkpoint: 10, state: { count: 10, note: 'whole' } };
      await store.save('p', before);
      // A trigger that fails once the row is written (version, checkpoint and state all set):
      // the failure comes midway through the save, after the row changed, before its commit.
      await events.pool.query(`
        CREATE FUNCTION "${schema}".fail_midway() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.state::text LIKE '%poison%' THEN RAISE EXCEPTION 'failing midway'; END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER fail_midway AFTER INSERT OR UPDATE ON "${schema}".projections
          FOR EACH ROW EXECUTE FUNCTION "${schema}".fail_midway();`);
      await expect(
        store.save('p', { version: 2, checkpoint: 11, state: { count: 11, note: 'poison' } }),
      ).rejects.toThrow(/failing midway/);
      await expect(
        store.save('fresh', { version: 1, checkpoint: 1, state: { note: 'poison' } }),
      ).rejects.toThrow(/failing midway/);
      expect(await store.load('p')).toEqual(before);
      expect(await store.load('fresh')).toBeNull();
      // A version out of range fails inside the same statement: nothing of it lands either.
      await expect(
        store.save('p', { version: 2 ** 31, checkpoint: 12, state: { count: 12, note: 'too big' } }),
      ).rejects.toThrow(/out of range/);
      expect(await store.load('p')).toEqual(before);
      // The store still saves once the fault is gone.
      await store.save('p', { version: 2, checkpoint: 13, state: { count: 13, note: 'after' } });
      expect(await store.load('p')).toEqual({
        version: 2,
        checkpoint: 13,
        state: { count: 13, note: 'after' },
      });
    } finally {
      await events.close();
    }
  });

  it('shows readers on other connections each snapshot whole, never a checkpoint without its state', async () => {
    const schema = freshSchema();
    const writer = await openPostgresEventStore({ url: POSTGRES_URL, schema, poolSize: 4 });
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 3 });
    const reader = new PostgresProjectionStore(pool, `"${schema}"`);
    try {
      const store = writer.projectionStore();
      const snapshot = (n: number) => ({
        version: 1,
        checkpoint: n,
        state: { upTo: n, items: Array.from({ length: 200 }, (_, i) => `${n}:${i}`) },
      });
      await store.save('shared', snapshot(0));
      let stop = false;
      const seen: number[] = [];
      const readers = Array.from({ length: 3 }, async () => {
        while (!stop) {
          const loaded = await reader.load<{ upTo: number; items: string[] }>('shared');
          expect(loaded).toEqual(snapshot(loaded!.checkpoint));
          seen.push(loaded!.checkpoint);
        }
      });
      // At least 100 saves, and on until the readers have caught two of them: on a loaded machine
      // the readers' loads can be slow enough that 100 saves pass between two of them.
      let last = 0;
      while (last < 100 || (new Set(seen).size < 2 && last < 10_000))
        await store.save('shared', snapshot(++last));
      stop = true;
      await Promise.all(readers);
      expect(new Set(seen).size).toBeGreaterThan(1);
      expect(await reader.load('shared')).toEqual(snapshot(last));
    } finally {
      await pool.end();
      await writer.close();
    }
  });

  it('keeps snapshots in the schema: another process opening it loads them after a restart', async () => {
    const schema = freshSchema();
    const first = await openPostgresEventStore({ url: POSTGRES_URL, schema, poolSize: 2 });
    const stream = uniqueStream('folded');
    const appended = await first.append(stream, [event('A'), event('B')]);
    await first
      .projectionStore()
      .save('counter', { version: 1, checkpoint: appended.position, state: { count: 2 } });
    await first.close();

    const second = await openPostgresEventStore({ url: POSTGRES_URL, schema, poolSize: 2 });
    try {
      expect(await second.projectionStore().load('counter')).toEqual({
        version: 1,
        checkpoint: appended.position,
        state: { count: 2 },
      });
      expect(await second.readStream(stream)).toHaveLength(2);
    } finally {
      await second.close();
    }
  });
});
