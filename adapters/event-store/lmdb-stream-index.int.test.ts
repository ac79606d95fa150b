import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { afterAll, describe, expect, it } from 'vitest';
import { newEventId } from '../../contracts/event-id.ts';
import { EVENT_ENCODING, openLmdbEventStore } from './lmdb.ts';
import { encodeStoredEvent, KNOWN_TYPE_CODES, openIdIndex } from './lmdb-codec.ts';
import { listEntry, openStreamIndex } from './lmdb-stream-index.ts';

const root = mkdtempSync(join(tmpdir(), 'lmdb-stream-index-'));
let dirs = 0;
const fresh = () => join(root, `env-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const event = (type: string, n: number) => ({ type, data: { n } });

/** Entry counts of the two forms' databases in the log at `path`. */
async function indexEntries(path: string): Promise<{ text: number; lists: number; typeCode: number }> {
  const env = open({ path, noSubdir: false, maxDbs: 16 });
  try {
    const text = env.openDB({ name: 'streams' }).getStats() as { entryCount: number };
    const lists = env.openDB({ name: 'streamLists', dupSort: true }).getStats() as { entryCount: number };
    const typeCode = env.openDB<number, string>({ name: 'ids' }).get('~typeCode') ?? 0;
    return { text: text.entryCount, lists: lists.entryCount, typeCode };
  } finally {
    await env.close();
  }
}

describe('LMDB stream index', () => {
  it('list entries sort as their revisions do, across digit counts, and read back exact', async () => {
    const path = fresh();
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    try {
      const ids = openIdIndex(env, () => true);
      const index = openStreamIndex(env, ids.streamLists());
      const revisions = [0, 1, 63, 64, 65, 4_095, 4_096, 262_143, 262_144, 9_999_999, 2 ** 40, 2 ** 53 - 1];
      // Put out of order: the list sorts them.
      await env.transaction(() => {
        for (const r of [...revisions].reverse()) index.put('s', r, r + 7);
      });
      const raw = env.openDB<string, Buffer>({
        name: 'streamLists',
        dupSort: true,
        encoding: 'ordered-binary',
        keyEncoding: 'binary',
      });
      expect([...raw.getValues(Buffer.from('s'))].map(listEntry)).toEqual(revisions.map((r) => [r, r + 7]));
      expect(index.lastRevision('s', -1)).toBe(2 ** 53 - 1);
      expect(index.lastRevision('other', -1)).toBeNull();
      expect([...index.positions('s', 64, 3)]).toEqual([71, 72, 4_102]);
      expect([...index.positions('s', 65, Number.POSITIVE_INFINITY)]).toHaveLength(8);
    } finally {
      await env.close();
    }
  });

  it('a new log keeps its streams as lists, marked so that a build before them refuses it', async () => {
    const path = fresh();
    const store = await openLmdbEventStore({ path });
    try {
      // Streams that interleave, one long, with appends inside one turn.
      for (let i = 0; i < 150; i++) {
        await Promise.all([
          store.append('long', [event('L', i)], { expectedRevision: i === 0 ? 'no_stream' : i - 1 }),
          store.append(`short-${i % 7}`, [event('S', i)]),
        ]);
      }
      await store.append('long', [event('L', 150), event('L', 151)], { expectedRevision: 149 });
      await expect(store.append('long', [event('L', 0)], { expectedRevision: 150 })).rejects.toThrow();
    } finally {
      await store.close();
    }
    const entries = await indexEntries(path);
    expect(entries.text).toBe(0);
    expect(entries.lists).toBe(152 + 150);
    // Above every code a build before the lists knows: it refuses the log (NewerLogError).
    expect(entries.typeCode).toBeGreaterThan(KNOWN_TYPE_CODES);
    const again = await openLmdbEventStore({ path });
    try {
      expect(again.typeCode()).toBe(0);
      expect(await again.streamRevision('long')).toBe(151);
      expect(await again.streamRevision('short-3')).toBe(20);
      expect(await again.streamRevision('none')).toBeNull();
      const page = await again.readStream('long', { fromRevision: 140, maxCount: 5 });
      expect(page.map((e) => [e.revision, e.data])).toEqual(
        [140, 141, 142, 143, 144].map((r) => [r, { n: r }]),
      );
      const all = await again.readAll();
      for (const e of page) expect(all[e.position - 1]).toEqual(e);
      await again.append('VerdictRecorded-stream', [event('VerdictRecorded', 1)]);
      expect(again.typeCode()).toBe(1);
    } finally {
      await again.close();
    }
  });

  it('a log of the build before (text-keyed index) keeps that index: read, appended to, reopened', async () => {
    const path = fresh();
    // What that build wrote: binary ids, a recorded type code without the mark, text stream keys.
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    const events = env.openDB<unknown, number>({ name: 'events', ...EVENT_ENCODING });
    const streams = env.openDB<number, [string, number]>({ name: 'streams' });
    const ids = openIdIndex(env, () => false);
    const ownIds = env.openDB<number, string>({ name: 'ids' });
    await env.transaction(() => {
      ownIds.putSync('~format', 2);
      for (let position = 1; position <= 6; position++) {
        const id = newEventId();
        const stream = position % 2 === 0 ? 'even' : 'odd';
        const revision = Math.floor((position - 1) / 2);
        events.putSync(
          position,
          encodeStoredEvent({
            id,
            type: 'ApiKeyIssued',
            stream,
            revision,
            position,
            recordedAt: '2026-01-01T00:00:00.000Z',
            correlationId: id,
            causationId: null,
            data: { position },
          }),
        );
        streams.putSync([stream, revision], position);
        ids.putSync(id, position);
      }
      ownIds.putSync('~typeCode', 17);
    });
    await env.close();

    const store = await openLmdbEventStore({ path });
    try {
      expect(store.typeCode()).toBe(17);
      expect(await store.streamRevision('even')).toBe(2);
      expect((await store.readStream('odd', { fromRevision: 1 })).map((e) => e.position)).toEqual([3, 5]);
      await expect(store.append('even', [event('E', 7)], { expectedRevision: 1 })).rejects.toThrow();
      await store.append('even', [event('E', 7)], { expectedRevision: 2 });
      await store.append('new', [event('VerdictRecorded', 8)], { expectedRevision: 'no_stream' });
      expect(store.typeCode()).toBe(17);
    } finally {
      await store.close();
    }
    expect(await indexEntries(path)).toEqual({ text: 8, lists: 0, typeCode: 17 });
    const again = await openLmdbEventStore({ path });
    try {
      expect((await again.readStream('even')).map((e) => [e.revision, e.position])).toEqual([
        [0, 2],
        [1, 4],
        [2, 6],
        [3, 7],
      ]);
      expect(await again.streamRevision('new')).toBe(0);
    } finally {
      await again.close();
    }
  });

  it('a log the build before created empty takes the lists', async () => {
    const path = fresh();
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    await env.openDB<number, string>({ name: 'ids' }).put('~format', 2);
    await env.close();
    const store = await openLmdbEventStore({ path });
    try {
      await store.append('s', [event('A', 1), event('B', 2)]);
      expect(await store.streamRevision('s')).toBe(1);
    } finally {
      await store.close();
    }
    expect(await indexEntries(path)).toMatchObject({ text: 0, lists: 2 });
  });
});
