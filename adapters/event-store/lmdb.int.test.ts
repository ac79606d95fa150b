import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ABORT } from 'lmdb';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { event, eventStoreContract, uniqueStream } from './contract.ts';
import { type LmdbEventStore, openLmdbEventStore } from './lmdb.ts';
import { WrongExpectedRevisionError } from './port.ts';

const root = mkdtempSync(join(tmpdir(), 'lmdb-event-store-'));
let dirs = 0;
const freshPath = () => join(root, `store-${++dirs}`);

afterAll(() => rmSync(root, { recursive: true, force: true }));

eventStoreContract('lmdb', () => openLmdbEventStore({ path: freshPath(), pollMs: 50 }), {
  tellsWritten: true,
});

describe('LMDB event store', () => {
  it('keeps every event, index and id across a close and reopen', async () => {
    const path = freshPath();
    const first = await openLmdbEventStore({ path });
    const stream = uniqueStream('durable');
    const batch = [event('A', { n: 1 }), event('B', { n: 2 })];
    const original = await first.append(stream, batch, { expectedRevision: 'no_stream' });
    await first.append(uniqueStream('other'), [event('C')]);
    await first.close();

    const second = await openLmdbEventStore({ path });
    try {
      expect(await second.headPosition()).toBe(3);
      expect((await second.readStream(stream)).map((e) => e.id)).toEqual(batch.map((e) => e.id));
      expect(await second.streamRevision(stream)).toBe(1);
      expect(await second.append(stream, batch, { expectedRevision: 'no_stream' })).toEqual({
        ...original,
        written: false,
      });
      expect((await second.append(stream, [event('D')], { expectedRevision: 1 })).position).toBe(4);
      expect((await second.readAll()).map((e) => e.position)).toEqual([1, 2, 3, 4]);
    } finally {
      await second.close();
    }
  });

  it('delivers appends made through another handle on the same directory by polling', async () => {
    const path = freshPath();
    const reader = await openLmdbEventStore({ path, pollMs: 20 });
    const writer = await openLmdbEventStore({ path });
    const sub = reader.subscribeToAll();
    try {
      const iterator = sub[Symbol.asyncIterator]();
      const pending = iterator.next();
      const stream = uniqueStream('elsewhere');
      await writer.append(stream, [event('FromElsewhere')]);
      const received = await pending;
      expect(received.done).toBe(false);
      expect(received.value).toMatchObject({ stream, position: 1, type: 'FromElsewhere' });
    } finally {
      await sub.close();
      await writer.close();
      await reader.close();
    }
  });

  it('rolls back a whole batch when one event cannot be stored', async () => {
    const path = freshPath();
    const store = await openLmdbEventStore({ path });
    try {
      const stream = uniqueStream('rollback');
      await store.append(stream, [event('Seed')]);
      // msgpack refuses BigInts beyond 64 bits, after the first event of the batch was put.
      const bad = [event('Fine'), event('Unencodable', { big: 2n ** 70n })];
      await expect(store.append(stream, bad)).rejects.toThrow();
      expect(await store.headPosition()).toBe(1);
      expect(await store.streamRevision(stream)).toBe(0);
      expect((await store.append(stream, [bad[0]!], { expectedRevision: 0 })).position).toBe(2);
    } finally {
      await store.close();
    }
  });

  it('checks the head and stream revisions it remembers against what another handle appended since', async () => {
    const path = freshPath();
    const a = await openLmdbEventStore({ path });
    const b = await openLmdbEventStore({ path });
    try {
      const stream = uniqueStream('hinted');
      const other = uniqueStream('hinted-other');
      // `a` remembers head 1 and revision 0 of `stream`; `b` then moves both on.
      await a.append(stream, [event('A1')], { expectedRevision: 'no_stream' });
      await b.append(stream, [event('B1'), event('B2')], { expectedRevision: 0 });
      await b.append(other, [event('B3')]);
      await expect(a.append(stream, [event('Stale')], { expectedRevision: 0 })).rejects.toThrow();
      expect(await a.streamRevision(stream)).toBe(2);
      expect(await a.headPosition()).toBe(4);
      // `a` remembers `other` as absent only by checking: it exists now.
      await expect(a.append(other, [event('A2')], { expectedRevision: 'no_stream' })).rejects.toThrow();
      const next = await a.append(stream, [event('A3')], { expectedRevision: 2 });
      expect(next).toEqual({ nextRevision: 3, position: 5, written: true });
      // Back the other way: `b` remembered head 4 and `stream` at revision 2.
      expect(await b.append(stream, [event('B4')])).toEqual({ nextRevision: 4, position: 6, written: true });
      expect((await a.readAll()).map((e) => e.position)).toEqual([1, 2, 3, 4, 5, 6]);
      expect((await a.readStream(stream)).map((e) => e.revision)).toEqual([0, 1, 2, 3, 4]);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it('writes the appends of one turn in one child transaction; a failed check fails only its own append', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    try {
      const stored = uniqueStream('stored');
      const batch = [event('S1'), event('S2')];
      const original = await store.append(stored, [...batch], { expectedRevision: 'no_stream' });
      const childTransactions = vi.spyOn(store.root, 'childTransaction');
      const streams = Array.from({ length: 20 }, () => uniqueStream('group'));
      const twice = uniqueStream('twice');
      const results = await Promise.allSettled([
        ...streams.map((s) => store.append(s, [event('G')], { expectedRevision: 'no_stream' })),
        // Wrong expectation: fails alone, writes nothing.
        store.append(stored, [event('X')], { expectedRevision: 0 }),
        // A retry of a stored batch: the original result, nothing written.
        store.append(stored, batch, { expectedRevision: 'no_stream' }),
        // Two appends to one stream in one turn: the second sees the first.
        store.append(twice, [event('T1')], { expectedRevision: 'no_stream' }),
        store.append(twice, [event('T2')], { expectedRevision: 0 }),
      ]);
      expect(childTransactions).toHaveBeenCalledTimes(1);
      const values = results.map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
      expect(values.slice(0, 20).map((v) => v.position)).toEqual(Array.from({ length: 20 }, (_, i) => 3 + i));
      expect(values[20]).toBeInstanceOf(WrongExpectedRevisionError);
      expect(values[21]).toEqual({ ...original, written: false });
      expect(values[22]).toEqual({ nextRevision: 0, position: 23, written: true });
      expect(values[23]).toEqual({ nextRevision: 1, position: 24, written: true });
      expect((await store.readAll()).map((e) => e.position)).toEqual(
        Array.from({ length: 24 }, (_, i) => i + 1),
      );
      expect(await store.streamRevision(stored)).toBe(1);
      // The next turn's appends form a group of their own.
      await store.append(uniqueStream('later'), [event('L')]);
      expect(childTransactions).toHaveBeenCalledTimes(2);
      childTransactions.mockRestore();
    } finally {
      await store.close();
    }
  });

  it('fails an append whose write throws alone: the rest of its group is written, nothing of it is', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    try {
      const broken = uniqueStream('broken');
      const others = [uniqueStream('ok'), uniqueStream('ok'), uniqueStream('ok')];
      const unwritable = {
        get boom(): never {
          throw new Error('cannot encode this');
        },
      };
      const results = await Promise.allSettled([
        store.append(others[0]!, [event('O1')]),
        // Its first event is written before its second one throws.
        store.append(broken, [event('B1'), { ...event('B2'), data: unwritable }]),
        store.append(others[1]!, [event('O2')]),
        store.append(others[2]!, [event('O3')]),
      ]);
      expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled', 'fulfilled']);
      expect((results[1] as PromiseRejectedResult).reason.message).toBe('cannot encode this');
      expect(await store.streamRevision(broken)).toBeNull();
      expect((await store.readAll()).map((e) => e.type)).toEqual(['O1', 'O2', 'O3']);
      expect((await store.readAll()).map((e) => e.position)).toEqual([1, 2, 3]);
    } finally {
      await store.close();
    }
  });

  it('checks the later appends of a group against what its earlier ones wrote, afresh when the group is written again', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    try {
      const one = uniqueStream('one');
      const other = uniqueStream('other');
      const unwritable = {
        get boom(): never {
          throw new Error('cannot encode this');
        },
      };
      // The first pass writes `one` and part of the broken append, then rolls back: the second
      // pass must not take `one` (or the head) as already written by it.
      const results = await Promise.allSettled([
        store.append(one, [event('E1')], { expectedRevision: 'no_stream' }),
        store.append(uniqueStream('broken'), [event('B1'), { ...event('B2'), data: unwritable }]),
        store.append(one, [event('E2')], { expectedRevision: 0 }),
        // Stale after the append before it in the same transaction.
        store.append(one, [event('E3')], { expectedRevision: 0 }),
        store.append(one, [event('E4')], { expectedRevision: 'no_stream' }),
        store.append(other, [event('F')]),
      ]);
      const values = results.map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
      expect(values[0]).toEqual({ nextRevision: 0, position: 1, written: true });
      expect((values[1] as Error).message).toBe('cannot encode this');
      expect(values[2]).toEqual({ nextRevision: 1, position: 2, written: true });
      expect(values[3]).toBeInstanceOf(WrongExpectedRevisionError);
      expect(values[4]).toBeInstanceOf(WrongExpectedRevisionError);
      expect(values[5]).toEqual({ nextRevision: 0, position: 3, written: true });
      expect((await store.readAll()).map((e) => [e.type, e.position])).toEqual([
        ['E1', 1],
        ['E2', 2],
        ['F', 3],
      ]);
      // The next group checks what the last one wrote, from the log.
      expect(await store.append(one, [event('E5')], { expectedRevision: 1 })).toEqual({
        nextRevision: 2,
        position: 4,
        written: true,
      });
    } finally {
      await store.close();
    }
  });

  it('acknowledges a grouped append only once it is on disk: a reopen finds every acknowledged event', async () => {
    const path = freshPath();
    const first = await openLmdbEventStore({ path });
    const streams = Array.from({ length: 16 }, () => uniqueStream('durable-group'));
    const acked = await Promise.all(
      streams.map((s) => first.append(s, [event('D')], { expectedRevision: 'no_stream' })),
    );
    await first.close();
    const second = await openLmdbEventStore({ path });
    try {
      for (const [i, s] of streams.entries()) {
        expect((await second.readStream(s)).map((e) => e.position)).toEqual([acked[i]!.position]);
      }
    } finally {
      await second.close();
    }
  });

  it('writes again an append whose commit did not reach the log, instead of acknowledging it', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const stream = uniqueStream('lost');
    // The first group's transaction runs its checks and writes, then does not commit: what the
    // contention test saw (acknowledged, not on the log).
    const transactions = firstCommitLost(store);
    try {
      const first = event('A');
      const result = await store.append(stream, [first], { expectedRevision: 'no_stream' });
      expect(transactions.count).toBe(2);
      expect(result).toEqual({ nextRevision: 0, position: 1, written: true });
      expect((await store.readStream(stream)).map((e) => e.id)).toEqual([first.id]);
    } finally {
      await store.close();
    }
  });

  it('writes again every append of a group whose commit did not reach the log, each once', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const streams = [uniqueStream('lost-a'), uniqueStream('lost-b'), uniqueStream('lost-c')];
    // The read-back looks up the first and the last append of the pass: here neither is on the log.
    const transactions = firstCommitLost(store);
    try {
      const events = streams.map((s) => event(s));
      const results = await Promise.all(
        streams.map((s, i) => store.append(s, [events[i]!], { expectedRevision: 'no_stream' })),
      );
      expect(transactions.count).toBe(2);
      expect(results.map((r) => r.position)).toEqual([1, 2, 3]);
      expect((await store.readAll()).map((e) => e.id)).toEqual(events.map((e) => e.id));
    } finally {
      await store.close();
    }
  });

  /** Makes the store's first write transaction run its writes and then not commit; counts them all. */
  function firstCommitLost(store: LmdbEventStore): { count: number } {
    const root = store.root as unknown as { childTransaction: (cb: () => unknown) => Promise<unknown> };
    const real = root.childTransaction.bind(root);
    const transactions = { count: 0 };
    root.childTransaction = (cb) =>
      transactions.count++ === 0
        ? real(() => {
            cb();
            return ABORT;
          })
        : real(cb);
    return transactions;
  }

  /** The store's own read-back of committed appends, replaced by `check` for a test. */
  function readBack(store: LmdbEventStore, check: (real: (p: unknown) => boolean, p: unknown) => boolean) {
    const inner = store as unknown as { notOnLog: (p: unknown) => boolean };
    const real = inner.notOnLog.bind(store);
    inner.notOnLog = (p) => check(real, p);
  }
  const streamOf = (p: unknown) => (p as { stream: string }).stream;

  it('fails an append that is still not on the log after its third write, and hands nothing over', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const root = store.root as unknown as { childTransaction: (cb: () => unknown) => Promise<unknown> };
    const real = root.childTransaction.bind(root);
    let calls = 0;
    root.childTransaction = (cb) => {
      calls++;
      return real(() => {
        cb();
        return ABORT;
      });
    };
    const handed: number[] = [];
    store.onAppended((events) => handed.push(...events.map((e) => e.position)));
    try {
      const stream = uniqueStream('never');
      await expect(store.append(stream, [event('A')], { expectedRevision: 'no_stream' })).rejects.toThrow(
        'a committed append is not on the log',
      );
      expect(calls).toBe(3);
      expect(handed).toEqual([]);
      expect(await store.headPosition()).toBe(0);
    } finally {
      await store.close();
    }
  });

  it('keeps an append of the group that is on the log when another, written again, then fails', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const kept = uniqueStream('kept');
    const lost = uniqueStream('lost');
    // The read-back misses `lost` once; its second write then fails to commit.
    let missed = false;
    readBack(store, (real, p) => {
      if (streamOf(p) === lost && !missed) {
        missed = true;
        return true;
      }
      return real(p);
    });
    const root = store.root as unknown as { childTransaction: (cb: () => unknown) => Promise<unknown> };
    const realTxn = root.childTransaction.bind(root);
    let calls = 0;
    root.childTransaction = (cb) =>
      calls++ === 0 ? realTxn(cb) : Promise.reject(new Error('commit failed'));
    const handed: string[] = [];
    store.onAppended((events) => handed.push(...events.map((e) => e.stream)));
    try {
      const [a, b] = await Promise.allSettled([
        store.append(kept, [event('K')], { expectedRevision: 'no_stream' }),
        store.append(lost, [event('L')], { expectedRevision: 'no_stream' }),
      ]);
      expect(a).toEqual({ status: 'fulfilled', value: { nextRevision: 0, position: 1, written: true } });
      expect(b).toMatchObject({ status: 'rejected', reason: { message: 'commit failed' } });
      expect(handed).toEqual([kept]);
    } finally {
      await store.close();
    }
  });

  it('looks up the first and the last append of a pass, and each append once either is missing', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const streams = [uniqueStream('end-a'), uniqueStream('end-b'), uniqueStream('end-c')];
    const looked: string[] = [];
    // The last append of the first pass reads as missing once, as a loss of a transaction's end would.
    let missed = false;
    readBack(store, (real, p) => {
      looked.push(streamOf(p));
      if (streamOf(p) === streams[2] && !missed) {
        missed = true;
        return true;
      }
      return real(p);
    });
    const handed: string[] = [];
    store.onAppended((events) => handed.push(...events.map((e) => e.stream)));
    try {
      const results = await Promise.all(
        streams.map((s) => store.append(s, [event('E')], { expectedRevision: 'no_stream' })),
      );
      expect(results.map((r) => r.position)).toEqual([1, 2, 3]);
      // First pass: both ends, then the one between; the pass writing the last again: it alone.
      const [a, b, c] = streams;
      expect(looked).toEqual([a, c, b, c]);
      expect(handed.sort()).toEqual([...streams].sort());
      // A pass found whole: its two ends only.
      looked.length = 0;
      const next = streams.map((s) => uniqueStream(`${s}-next`));
      await Promise.all(next.map((s) => store.append(s, [event('F')], { expectedRevision: 'no_stream' })));
      expect(looked).toEqual([next[0], next[2]]);
      expect((await store.readAll()).map((e) => e.stream)).toEqual([...streams, ...next]);
    } finally {
      await store.close();
    }
  });

  it('answers an append the read-back missed but that was on the log once, and hands it over once', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const stream = uniqueStream('false-alarm');
    let missed = false;
    readBack(store, (real, p) => {
      if (!missed) {
        missed = true;
        return true;
      }
      return real(p);
    });
    const handed: string[] = [];
    store.onAppended((events) => handed.push(...events.map((e) => e.id)));
    try {
      const first = event('A');
      expect(await store.append(stream, [first], { expectedRevision: 'no_stream' })).toEqual({
        nextRevision: 0,
        position: 1,
        written: true,
      });
      expect(handed).toEqual([first.id]);
      expect((await store.readAll()).map((e) => e.id)).toEqual([first.id]);
    } finally {
      await store.close();
    }
  });

  it('acknowledges a committed append as before when its read-back cannot be made', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    readBack(store, () => {
      throw new Error('Can not renew a transaction from a closed database');
    });
    try {
      const stream = uniqueStream('unchecked');
      expect(await store.append(stream, [event('A')], { expectedRevision: 'no_stream' })).toEqual({
        nextRevision: 0,
        position: 1,
        written: true,
      });
    } finally {
      await store.close();
    }
  });

  it('treats a path with a dot in its name as a directory', async () => {
    const path = join(root, 'data.v1');
    const store = await openLmdbEventStore({ path });
    try {
      await store.append(uniqueStream('dotted'), [event('A')]);
      expect(statSync(path).isDirectory()).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('hands over only what a commit wrote: an idempotent repeat, beside its original in one group or later, is not handed over', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    const handed: { id: string; data: unknown }[] = [];
    store.onAppended((events) => handed.push(...events.map((e) => ({ id: e.id, data: e.data }))));
    try {
      const stream = uniqueStream('repeat');
      const original = event('A', { claim: 'first' });
      const again = { ...original, data: { claim: 'second' } };
      // One turn: both join one group; the second finds the first's id and writes nothing.
      const [a, b] = await Promise.all([store.append(stream, [original]), store.append(stream, [again])]);
      expect(a.written).toBe(true);
      expect(b).toEqual({ ...a, written: false });
      expect(handed).toEqual([{ id: original.id, data: { claim: 'first' } }]);
      // A later turn: a group of the repeat alone commits nothing to hand over.
      expect(await store.append(stream, [again])).toEqual({ ...a, written: false });
      expect(handed).toHaveLength(1);
    } finally {
      await store.close();
    }
  });

  it('reports unhealthy once closed', async () => {
    const store = await openLmdbEventStore({ path: freshPath() });
    await store.close();
    expect(await store.health()).toMatchObject({ ok: false });
  });
});
