import { describe, expect, it } from 'vitest';
import { forEachLimited } from './for-each-limited.ts';

/** Resolves when `release` is called: a task that runs until the test lets it finish. */
function gate() {
  let release!: () => void;
  const done = new Promise<void>((resolve) => {
    release = resolve;
  });
  return { done, release };
}

describe('forEachLimited', () => {
  it('runs every item, never more than the limit at once', async () => {
    let running = 0;
    let most = 0;
    const seen: number[] = [];
    await forEachLimited([1, 2, 3, 4, 5, 6, 7], 3, async (n) => {
      running++;
      most = Math.max(most, running);
      await Promise.resolve();
      seen.push(n);
      running--;
    });
    expect(seen.sort()).toEqual([1, 2, 3, 4, 5, 6, 7]);
    expect(most).toBe(3);
  });

  it('starts nothing after a failure, and rejects once the tasks in flight have settled', async () => {
    const slow = gate();
    const started: number[] = [];
    let slowSettled = false;
    const call = forEachLimited([1, 2, 3, 4, 5], 2, async (n) => {
      started.push(n);
      if (n === 1) {
        await slow.done;
        slowSettled = true;
      }
      if (n === 2) throw new Error('two failed');
    });
    let rejected: unknown = null;
    const settled = call.catch((err: unknown) => {
      rejected = err;
    });
    // Item 2 failed; item 1 is still running: no answer yet, and nothing new started.
    await new Promise((resolve) => setImmediate(resolve));
    expect(rejected).toBeNull();
    slow.release();
    await settled;
    expect(slowSettled).toBe(true);
    expect((rejected as Error).message).toBe('two failed');
    expect(started).toEqual([1, 2]);
  });

  it('treats a limit below 1 as 1, and an empty list as done', async () => {
    let running = 0;
    let most = 0;
    await forEachLimited([1, 2, 3], 0, async () => {
      running++;
      most = Math.max(most, running);
      await Promise.resolve();
      running--;
    });
    expect(most).toBe(1);
    await expect(forEachLimited([], 4, async () => {})).resolves.toBeUndefined();
  });
});
