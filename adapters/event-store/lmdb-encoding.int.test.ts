import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { pack } from 'msgpackr';
import { afterAll, describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { EVENT_ENCODING, openLmdbEventStore } from './lmdb.ts';
import { IdempotencyConflictError } from './port.ts';

const root = mkdtempSync(join(tmpdir(), 'lmdb-encoding-'));
let dirs = 0;
const fresh = () => join(root, `env-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));

const inputs = Object.fromEntries(Array.from({ length: 30 }, (_, i) => [`indicator_${i}`, i / 7]));

describe('LMDB event encoding (msgpack records, shared structures at key 0, compact identifiers)', () => {
  it('reads a log written as plain msgpack maps (before records) and appends after it', async () => {
    const path = fresh();
    // The layout an older store wrote: plain msgpack values, the same three databases.
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
    await writeOldLog(path, old, {});

    const store = await openLmdbEventStore({ path });
    try {
      expect(await store.headPosition()).toBe(3);
      expect(await store.readAll()).toEqual(old);
      const appended = await store.append('legacy', [{ type: 'New', data: { inputs } }], {
        expectedRevision: 2,
      });
      expect(appended).toEqual({ nextRevision: 3, position: 4, written: true });
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

  it('reads a log of format 1 records (identifiers as text) mixed with format 2 ones, and appends after it', async () => {
    const path = fresh();
    // What the store wrote before compact identifiers: records with shared structures, strings as text.
    const id = (n: number) => `6f5d9cb1-4e3b-43f0-8f1f-${String(n).padStart(12, '0')}`;
    const old = [1, 2].map(
      (position): RecordedEvent => ({
        id: id(position),
        type: 'QuotaDebited',
        stream: `quota-${'ab'.repeat(32)}`,
        revision: position - 1,
        position,
        recordedAt: '2026-01-01T00:00:00.000Z',
        correlationId: id(position),
        causationId: null,
        data: { subject: 'ab'.repeat(32), requestId: id(100 + position), inputs },
      }),
    );
    await writeOldLog(path, old, EVENT_ENCODING);

    const store = await openLmdbEventStore({ path });
    let ordered = '';
    try {
      expect(await store.readAll()).toEqual(old);
      await store.append(old[0]!.stream, [
        { id: id(3), type: 'QuotaDebitsRecorded', data: { subject: 'ab'.repeat(32), units: 3 } },
      ]);
      // An old event is found by id as before (an idempotent retry of it writes nothing).
      expect(await store.append(old[0]!.stream, [{ id: id(1), type: 'QuotaDebited', data: {} }])).toEqual({
        nextRevision: 0,
        position: 1,
        written: false,
      });
      const all = await store.readAll();
      expect(all.slice(0, 2)).toEqual(old);
      expect(all[2]).toEqual({
        id: id(3),
        type: 'QuotaDebitsRecorded',
        stream: old[0]!.stream,
        revision: 2,
        position: 3,
        recordedAt: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/),
        correlationId: id(3),
        causationId: null,
        data: { subject: 'ab'.repeat(32), units: 3 },
      });
      expect(await store.readStream(old[0]!.stream)).toEqual(all);
      // A time-ordered id the store picks is keyed behind its prefix in this index of text keys too,
      // and found by it.
      await store.append('ordered-here', [{ type: 'O', data: {} }]);
      const [picked] = await store.readStream('ordered-here');
      await expect(store.append('elsewhere', [{ id: picked!.id, type: 'O', data: {} }])).rejects.toThrow(
        IdempotencyConflictError,
      );
      ordered = picked!.id;
    } finally {
      await store.close();
    }
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    try {
      // Less the record of the highest event type code (an id no event takes, as ~format).
      const keys = [...env.openDB<number, Buffer>({ name: 'ids', keyEncoding: 'binary' }).getKeys()].filter(
        (k) => Buffer.isBuffer(k) && !k.equals(Buffer.from('~typeCode')),
      ) as Buffer[];
      expect(keys.map((k) => (k.length === 36 ? k.toString('utf8') : k.toString('hex')))).toEqual([
        id(1),
        id(2),
        id(3),
        `ffffffff${ordered.replaceAll('-', '')}`,
      ]);
    } finally {
      await env.close();
    }
  });

  it('reads back exactly every string, compacted or not, and the envelope ids', async () => {
    const store = await openLmdbEventStore({ path: fresh() });
    const data = {
      hash: 'ab'.repeat(32),
      upper: 'AB'.repeat(32),
      odd: `x${'f'.repeat(33)}`,
      prefixed: `verdict-outcome-${'0'.repeat(8)}-0000-4000-8000-${'1'.repeat(12)}`,
      hexPrefixed: `0x${'c'.repeat(40)}`,
      unicodePrefix: `é-${'d'.repeat(40)}`,
      longPrefix: `${'p'.repeat(200)}${'e'.repeat(40)}`,
      uuidUpper: 'B638BAF3-54B3-4D1C-BEE1-731476A3B9DB',
      uuidDashMoved: 'b638baf-354b3-4d1c-bee1-731476a3b9db',
      uuidNotHex: 'b638baf3-54b3-4d1c-bee1-731476a3b9dg',
      uuidAccent: 'b638baf3-54b3-4d1c-bee1-731476a3b9dé',
      uuidTailUpper: 'delivery-B638BAF3-54B3-4D1C-BEE1-731476A3B9DB',
      hexWithoutDashes: 'b638baf354b34d1cbee1731476a3b9dbb638',
      iso: '2026-11-23T07:44:02.117Z',
      isoNoMs: '2026-11-23T07:44:02Z',
      isoBefore1970: '1969-12-31T23:59:59.999Z',
      isoInvalid: '2026-13-45T07:44:02.117Z',
      short: 'abc123',
      list: ['ab'.repeat(16), 1, null, { nested: '12'.repeat(20) }],
      nothing: null,
      float: 0.30000000000000004,
    };
    try {
      await store.append('s', [
        { type: 'T', data, correlationId: 'corr-1', causationId: 'ab'.repeat(16) },
        { type: 'T', data: { same: true } },
      ]);
      const [first, second] = await store.readAll();
      expect(first?.data).toEqual(data);
      expect(first).toMatchObject({ correlationId: 'corr-1', causationId: 'ab'.repeat(16) });
      expect(second?.correlationId).toBe(second?.id);
      expect(second?.causationId).toBeNull();
      expect(second?.recordedAt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);
    } finally {
      await store.close();
    }
  });

  it('keys time-ordered ids after every random one in the id index, and finds both kinds', async () => {
    const path = fresh();
    const store = await openLmdbEventStore({ path });
    const random = Array.from({ length: 40 }, () => randomUUID());
    let ordered: string[] = [];
    try {
      for (let i = 0; i < random.length; i++) {
        // A random id and a time-ordered one (the store's own pick) in each of 40 commits.
        await store.append(`mixed-${i}`, [
          { id: random[i]!, type: 'R', data: { i } },
          { type: 'O', data: { i } },
        ]);
      }
      ordered = (await store.readAll()).filter((e) => e.type === 'O').map((e) => e.id);
      // Both kinds are found by id: a re-append is answered as the first append was, and an ordered
      // id appended to another stream is refused as taken.
      expect(await store.append('mixed-0', [{ id: random[0]!, type: 'R', data: { i: 0 } }])).toEqual({
        nextRevision: 0,
        position: 1,
        written: false,
      });
      const first = await store.readStream('mixed-0');
      expect(await store.append('mixed-0', [first[0]!, first[1]!])).toEqual({
        nextRevision: 1,
        position: 2,
        written: false,
      });
      await expect(store.append('mixed-1', [{ id: ordered[0]!, type: 'O', data: {} }])).rejects.toThrow(
        IdempotencyConflictError,
      );
    } finally {
      await store.close();
    }
    // The keys as LMDB holds them: 16 bytes for a random id, the prefix and 16 bytes for an ordered
    // one, and every ordered key after every random one, in the order the ids were made.
    const env = open({ path, noSubdir: false, maxDbs: 16 });
    try {
      const keys = [...env.openDB<number, Buffer>({ name: 'ids', keyEncoding: 'binary' }).getKeys()].filter(
        (k) => Buffer.isBuffer(k) && !k.equals(Buffer.from('~format')) && !k.equals(Buffer.from('~typeCode')),
      ) as Buffer[];
      expect(keys).toHaveLength(80);
      const hex = (k: Buffer) => k.toString('hex');
      expect(keys.slice(0, 40).every((k) => k.length === 16)).toBe(true);
      expect(keys.slice(40).map(hex)).toEqual(ordered.map((id) => `ffffffff${id.replaceAll('-', '')}`));
      expect(keys.slice(0, 40).map(hex).sort()).toEqual(random.map((id) => id.replaceAll('-', '')).sort());
    } finally {
      await env.close();
    }
  });

  it('keeps each event its own stream and time when appends alternate between streams', async () => {
    const store = await openLmdbEventStore({ path: fresh() });
    const a = `delivery-${'1'.repeat(8)}-0000-4000-8000-${'2'.repeat(12)}`;
    const b = `delivery-${'3'.repeat(8)}-0000-4000-8000-${'4'.repeat(12)}`;
    try {
      const windows: [number, number][] = [];
      for (const stream of [a, b, a, 'plain', b]) {
        const before = Date.now();
        await store.append(stream, [{ type: 'T', data: { stream } }]);
        windows.push([before, Date.now()]);
      }
      const all = await store.readAll();
      expect(all.map((e) => e.stream)).toEqual([a, b, a, 'plain', b]);
      expect(all.map((e) => (e.data as { stream: string }).stream)).toEqual([a, b, a, 'plain', b]);
      expect(all.map((e) => e.revision)).toEqual([0, 0, 1, 0, 1]);
      all.forEach((e, i) => {
        expect(Date.parse(e.recordedAt)).toBeGreaterThanOrEqual(windows[i]![0]);
        expect(Date.parse(e.recordedAt)).toBeLessThanOrEqual(windows[i]![1]);
      });
    } finally {
      await store.close();
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
      const stored = db.getBinary(last.position).length;
      expect(stored).toBeLessThan(pack(last).length * 0.6);
      // And than the same event as a format 1 record (identifiers and times as text).
      const env = open({ path: fresh(), noSubdir: false, maxDbs: 16 });
      const format1 = env.openDB<RecordedEvent, number>({ name: 'events', ...EVENT_ENCODING });
      for (const e of all) await format1.put(e.position, e);
      expect(stored).toBeLessThan(format1.getBinary(last.position)!.length - 80);
      await env.close();
    } finally {
      await store.close();
    }
  });
});

/** Writes `old` the way an older store did: events with the given encoding, text-keyed indexes. */
async function writeOldLog(path: string, old: RecordedEvent[], encoding: object): Promise<void> {
  const env = open({ path, noSubdir: false, maxDbs: 16 });
  const events = env.openDB<RecordedEvent, number>({ name: 'events', ...encoding });
  const streams = env.openDB<number, [string, number]>({ name: 'streams' });
  const ids = env.openDB<number, string>({ name: 'ids' });
  await env.transaction(() => {
    for (const e of old) {
      events.putSync(e.position, e);
      streams.putSync([e.stream, e.revision], e.position);
      ids.putSync(e.id, e.position);
    }
  });
  await env.close();
}
