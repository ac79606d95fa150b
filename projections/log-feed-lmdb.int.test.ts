import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { HANG_MS } from '../test/waits.ts';
import type { Projection } from './projection.ts';
import { ProjectionRunner } from './runner.ts';

const root = mkdtempSync(join(tmpdir(), 'log-feed-lmdb-'));
let dirs = 0;
const freshPath = () => join(root, `store-${++dirs}`);
afterAll(() => rmSync(root, { recursive: true, force: true }));
/** A poll period no test here outlasts, so that what arrives is brought by a wake-up. */
const NO_TICK_MS = 10 * HANG_MS;

const order: Projection<number[]> = {
  name: 'order',
  version: 1,
  initial: () => [],
  evolve(state, event) {
    state.push(event.position);
    return state;
  },
};

/** Counts the reads of the log and the events they decode: the doorbell must decode none. */
function countReads(store: LmdbEventStore): { readonly count: number; readonly events: number } {
  const counter = { count: 0, events: 0 };
  const readAll = store.readAll.bind(store);
  store.readAll = async (options) => {
    counter.count++;
    const page = await readAll(options);
    counter.events += page.length;
    return page;
  };
  return counter;
}

const settled = (promise: Promise<void>) =>
  Promise.race([promise.then(() => true), new Promise((r) => setTimeout(() => r(false), 20))]);

describe("the LMDB store's doorbell", () => {
  it('rings at once when the head is already past, on an append, on wake(), and at the poll tick', async () => {
    const store = await openLmdbEventStore({ path: freshPath(), pollMs: 10_000 });
    try {
      await store.append('s', [{ type: 'N', data: {} }]);
      expect(await settled(store.appended(0, 10_000).promise)).toBe(true);
      // The append's own wake-up of waiters comes at the end of its turn: let it pass.
      await new Promise((r) => setTimeout(r, 10));

      const onAppend = store.appended(1, 10_000);
      expect(await settled(onAppend.promise)).toBe(false);
      await store.append('s', [{ type: 'N', data: {} }]);
      expect(await settled(onAppend.promise)).toBe(true);

      const onWake = store.appended(2, 10_000);
      store.wake();
      expect(await settled(onWake.promise)).toBe(true);

      const started = Date.now();
      await store.appended(2, 100).promise;
      expect(Date.now() - started).toBeGreaterThanOrEqual(90);
    } finally {
      await store.close();
    }
  });

  it("does not ring a waiter already past this process's commit it was handed; wake() still rings", async () => {
    const store = await openLmdbEventStore({ path: freshPath(), pollMs: 10_000 });
    try {
      let waiter: ReturnType<LmdbEventStore['appended']> | null = null;
      // As the log feed does: handed a commit, it waits for what comes after it.
      const stop = store.onAppended((events) => {
        waiter ??= store.appended(events.at(-1)!.position, 10_000);
      });
      await store.append('s', [{ type: 'N', data: {} }]);
      stop();
      // The commit's notify of waiters comes at the end of its turn: it must not ring this one.
      await new Promise((r) => setTimeout(r, 20));
      expect(await settled(waiter!.promise)).toBe(false);
      store.wake();
      expect(await settled(waiter!.promise)).toBe(true);
    } finally {
      await store.close();
    }
  });

  it('feeds a runner every event once, with one read per commit and none for the doorbell', async () => {
    const path = freshPath();
    // No poll tick: a tick that fell between the commit and its hand-over (a loaded machine) read
    // the 500 events itself, which is allowed; only the hand-over and wake() bring events in here.
    const store = await openLmdbEventStore({ path, pollMs: NO_TICK_MS });
    const other = await openLmdbEventStore({ path, pollMs: NO_TICK_MS });
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), order);
    try {
      await runner.start();
      await runner.waitFor(0);
      await new Promise((r) => setTimeout(r, 100));
      const reads = countReads(store);
      await store.append(
        's-1',
        Array.from({ length: 500 }, (_, n) => ({ type: 'N', data: { n } })),
      );
      await runner.waitFor(500, HANG_MS);
      await new Promise((r) => setTimeout(r, 150));
      expect(runner.state).toEqual(Array.from({ length: 500 }, (_, i) => i + 1));
      // None per event rung for (500), and none of the commit's events decoded (this process's
      // commit is handed over as appended).
      expect(reads.count).toBeLessThanOrEqual(2);
      expect(reads.events).toBe(0);

      // Another process's append is seen at once when woken (at the poll tick otherwise).
      await other.append('s-2', [{ type: 'N', data: {} }]);
      store.wake();
      await runner.waitFor(501, HANG_MS);
      expect(runner.state.at(-1)).toBe(501);
    } finally {
      await runner.stop();
      await other.close();
      await store.close();
    }
  });

  it("hands this process's commits to the runners at the head as appended, and reads another process's", async () => {
    const path = freshPath();
    // No poll tick within the test: only the hand-over and wake() can bring events in.
    const store = await openLmdbEventStore({ path, pollMs: NO_TICK_MS });
    const other = await openLmdbEventStore({ path, pollMs: NO_TICK_MS });
    const kept: Projection<RecordedEvent[]> = {
      name: 'kept',
      version: 1,
      initial: () => [],
      evolve(state, event) {
        state.push(event);
        return state;
      },
    };
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), kept);
    try {
      await store.append('s-0', [{ type: 'N', data: { n: 0 } }]);
      await runner.start();
      await runner.waitFor(1);
      const reads = countReads(store);
      // Appends of one turn share a commit; each commit is handed over once written.
      await Promise.all([
        store.append('s-1', [{ type: 'N', data: { n: 1, nested: { a: [1, 'b'] } } }]),
        store.append('s-2', [
          { type: 'M', data: { n: 2 }, correlationId: 'c-2' },
          { type: 'N', data: { n: 3 }, causationId: 'x' },
        ]),
      ]);
      await store.append('s-1', [{ type: 'N', data: { n: 4 } }]);
      // Answered means folded: the listener runs before the appends are answered.
      expect(runner.checkpoint).toBe(5);
      expect(reads.events).toBe(0);
      // What was handed over is what a read of the log gives.
      expect(runner.state.slice(1)).toEqual(await store.readAll({ after: 1 }));

      // Another process appends, then this one: this commit does not follow on from what the
      // feed has seen, so both are read, in order, once woken.
      await other.append('s-3', [{ type: 'N', data: { n: 5 } }]);
      await store.append('s-3', [{ type: 'N', data: { n: 6 } }]);
      store.wake();
      await runner.waitFor(7, HANG_MS);
      expect(runner.state.map((e) => (e.data as { n: number }).n)).toEqual([0, 1, 2, 3, 4, 5, 6]);
      expect(reads.events).toBeGreaterThanOrEqual(2);
    } finally {
      await runner.stop();
      await other.close();
      await store.close();
    }
  });
});
