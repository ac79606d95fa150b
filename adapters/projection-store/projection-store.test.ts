import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { event, uniqueStream } from '../event-store/contract.ts';
import { openLmdbEventStore } from '../event-store/lmdb.ts';
import { LmdbProjectionStore } from './lmdb.ts';
import { MemoryProjectionStore } from './memory.ts';
import type { ProjectionStore } from './port.ts';

const root = mkdtempSync(join(tmpdir(), 'projection-store-'));
let dirs = 0;
const freshPath = () => join(root, `env-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Balances {
  balances: Record<string, number>;
  seen: string[];
}

const adapters: Array<[string, () => Promise<{ store: ProjectionStore; close: () => Promise<void> }>]> = [
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
