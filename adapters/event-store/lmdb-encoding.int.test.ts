import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { pack } from 'msgpackr';
import { afterAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { openLmdbEventStore } from './lmdb.ts';

const root = mkdtempSync(join(tmpdir(), 'lmdb-encoding-'));
let dirs = 0;
const fresh = () => join(root, `env-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const inputs = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`indicator_${i}`, i / 7]));

describe('LMDB event encoding (msgpack records, shared structures at key 0)', () => {
  it('reads a log written as plain msgpack maps (before records) and appends after it', async () => {
    const path = fresh();
    // The layout an older store wrote: plain msgpack values, the same three databases.
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    const events = env.openDB<RecordedEvent, number>({ name: 'events' });
    const streams = env.openDB<number, [string, number]>({ name: 'streams' });
    const ids = env.openDB<number, string>({ name: 'ids' });
    const old = [1, 2, 3].map(
      (position): RecordedEvent => ({
        id: `00000000-0000-4000-8000-00000000000${position}`,
        type: 'Old',
        stream: 'legacy',
        revision: position - 1,
        position,
        recordedAt: '2026-01-01T00:00:00.000Z',
        correlationId: `00000000-0000-4000-8000-00000000000${position}`,
        causationId: null,
        data: { position, inputs },
      }),
    );
    await env.transaction(() => {
      for (const e of old) {
        events.putSync(e.position, e);
        streams.putSync([e.stream, e.revision], e.position);
        ids.putSync(e.id, e.position);
      }
    });
    await env.close();

    const store = await openLmdbEventStore({ path });
    try {
      expect(await store.headPosition()).toBe(3);
      expect(await store.readAll()).toEqual(old);
      const appended = await store.append('legacy', [{ type: 'New', data: { inputs } }], {
        expectedRevision: 2,
      });
      expect(appended).toEqual({ nextRevision: 3, position: 4 });
      const all = await store.readAll();
      expect(all.map((e) => e.position)).toEqual([1, 2, 3, 4]);
      expect(all[3]).toMatchObject({ type: 'New', stream: 'legacy', revision: 3, data: { inputs } });
      expect(await store.readStream('legacy', { fromRevision: 2 })).toHaveLength(2);
    } finally {
      await store.close();
    }
    const reopened = await openLmdbEventStore({ path });
    try {
      expect(await reopened.headPosition()).toBe(4);
      expect((await reopened.readAll({ after: 3 }))[0]?.data).toEqual({ inputs });
    } finally {
      await reopened.close();
    }
  });

  it('stores an event in fewer bytes than a plain msgpack map, and the structures never show as an event', async () => {
    const store = await openLmdbEventStore({ path: fresh() });
    try {
      expect(await store.headPosition()).toBe(0);
      for (let i = 0; i < 20; i++)
        await store.append(`s-${i % 3}`, [
          { type: 'VerdictLike', data: { i, inputs, hash: 'ab'.repeat(32) } },
        ]);
      const all = await store.readAll();
      expect(all.map((e) => e.position)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1));
      expect(await store.headPosition()).toBe(20);
      const db = (store as unknown as { events: { getBinary(k: number): Buffer } }).events;
      const last = all[19]!;
      expect(db.getBinary(last.position).length).toBeLessThan(pack(last).length * 0.6);
    } finally {
      await store.close();
    }
  });
});
