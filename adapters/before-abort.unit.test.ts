import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { beforeAbort } from './before-abort.ts';

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
