import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { beforeAbort, endedBy } from './before-abort.ts';

describe('beforeAbort', () => {
  it("is the work's outcome while not aborted", async () => {
    const stop = new AbortController();
    await expect(beforeAbort(Promise.resolve(7), stop.signal)).resolves.toBe(7);
    await expect(beforeAbort(Promise.reject(new Error('venue down')), stop.signal)).rejects.toThrow(
      'venue down',
    );
  });

  it("leaves no listener on the signal once the work settles: one signal serves a process's every read", async () => {
    const stop = new AbortController();
    for (let i = 0; i < 50; i++) {
      await beforeAbort(Promise.resolve(i), stop.signal);
      await beforeAbort(Promise.reject(new Error('venue down')), stop.signal).catch(() => undefined);
    }
    expect(getEventListeners(stop.signal, 'abort')).toHaveLength(0);
  });

  it('is the abort once aborted first, and the work failing after it is no unhandled rejection', async () => {
    const stop = new AbortController();
    let fail!: (err: Error) => void;
    const work = new Promise<number>((_, reject) => {
      fail = reject;
    });
    const given = beforeAbort(work, stop.signal);
    stop.abort();
    await expect(given).rejects.toMatchObject({ name: 'AbortError' });
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      fail(new Error('late'));
      await expect(beforeAbort(work, stop.signal)).rejects.toMatchObject({ name: 'AbortError' });
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect(unhandled).toEqual([]);
  });
});

describe('beforeAbort with a discard', () => {
  it('hands what the work yields after the abort to the discard, aborted before or during the work', async () => {
    const discarded: number[] = [];
    const discard = async (late: number) => {
      discarded.push(late);
    };
    for (const abortFirst of [true, false]) {
      const stop = new AbortController();
      if (abortFirst) stop.abort();
      let yieldLate!: (value: number) => void;
      const work = new Promise<number>((resolve) => {
        yieldLate = resolve;
      });
      const given = beforeAbort(work, stop.signal, discard);
      stop.abort();
      await expect(given).rejects.toMatchObject({ name: 'AbortError' });
      yieldLate(abortFirst ? 1 : 2);
      await work;
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(discarded).toEqual([1, 2]);
  });

  it('leaves a result the work yields before any abort to the caller, not the discard', async () => {
    const discarded: number[] = [];
    const stop = new AbortController();
    await expect(beforeAbort(Promise.resolve(3), stop.signal, (late) => discarded.push(late))).resolves.toBe(
      3,
    );
    stop.abort();
    await new Promise((resolve) => setImmediate(resolve));
    expect(discarded).toEqual([]);
  });

  it('a discard that fails, or work that fails after the abort, is no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const stop = new AbortController();
      stop.abort();
      await expect(
        beforeAbort(Promise.resolve(4), stop.signal, async () => {
          throw new Error('close failed');
        }),
      ).rejects.toMatchObject({ name: 'AbortError' });
      await expect(
        beforeAbort(Promise.reject(new Error('late')), stop.signal, () => undefined),
      ).rejects.toMatchObject({ name: 'AbortError' });
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect(unhandled).toEqual([]);
  });
});

describe('endedBy (a stop bounded by a deadline)', () => {
  it('is true for work that ends first, its failure thrown; false once the deadline passes first', async () => {
    const later = performance.now() + 600_000;
    await expect(endedBy(Promise.resolve(1), later)).resolves.toBe(true);
    await expect(endedBy(Promise.reject(new Error('close failed')), later)).rejects.toThrow('close failed');
    // A deadline already past: work that never ends is left, work already done still counts.
    const past = performance.now() - 1;
    await expect(endedBy(new Promise(() => {}), past)).resolves.toBe(false);
    await expect(endedBy(Promise.resolve(2), past)).resolves.toBe(true);
  });

  it('drops what work left at the deadline yields later: no unhandled rejection', async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      let fail!: (err: Error) => void;
      const work = new Promise((_, reject) => {
        fail = reject;
      });
      await expect(endedBy(work, performance.now() - 1)).resolves.toBe(false);
      fail(new Error('the store closed under it'));
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
    expect(unhandled).toEqual([]);
  });
});
