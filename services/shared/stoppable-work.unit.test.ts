import { describe, expect, it } from 'vitest';
import { WorkSlices } from './stoppable-work.ts';

describe('WorkSlices', () => {
  it('does not begin once aborted, and throws at the first step after an abort', () => {
    const stop = new AbortController();
    const slices = new WorkSlices(stop.signal);
    expect(slices.due()).toBe(false);
    stop.abort();
    expect(() => slices.due()).toThrow(expect.objectContaining({ name: 'AbortError' }));
    expect(() => new WorkSlices(stop.signal)).toThrow(expect.objectContaining({ name: 'AbortError' }));
  });

  it('is due once its slice is used up, and a turn starts the next slice', async () => {
    const slices = new WorkSlices(undefined, 0);
    expect(slices.due()).toBe(true);
    await slices.turn();
    const long = new WorkSlices(undefined, 60_000);
    expect(long.due()).toBe(false);
  });

  it('throws after the turn an abort came in', async () => {
    const stop = new AbortController();
    const slices = new WorkSlices(stop.signal, 0);
    setImmediate(() => stop.abort());
    const turns = (async () => {
      for (;;) if (slices.due()) await slices.turn();
    })();
    await expect(turns).rejects.toMatchObject({ name: 'AbortError' });
  });
});

describe('WorkSlices sharing the event loop', () => {
  it('several at once hold the loop one slice a pass: a timer fires between any two slices', async () => {
    const seen: string[] = [];
    let working = true;
    const tick = () => {
      seen.push('timer');
      if (working) setTimeout(tick, 0);
    };
    setTimeout(tick, 0);
    const spin = (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until);
    };
    // Four workers of 6 steps of 2 ms, a slice 4 ms (2 steps; 1 on a host that descheduled the
    // step): a slice outlasts the timer's 1 ms, so the timer is due at the next pass's start.
    const worker = async (name: string) => {
      const slices = new WorkSlices(undefined, 4);
      for (let step = 0; step < 6; step++) {
        if (slices.due()) {
          await slices.turn();
          seen.push(name);
        }
        spin(2);
      }
    };
    await Promise.all(['a', 'b', 'c', 'd'].map(worker));
    working = false;
    const slicesBetweenTimers: number[] = [];
    let run = 0;
    for (const mark of seen.slice(seen.indexOf('timer'))) {
      if (mark === 'timer') {
        if (run > 0) slicesBetweenTimers.push(run);
        run = 0;
      } else run++;
    }
    if (run > 0) slicesBetweenTimers.push(run);
    expect(seen.filter((mark) => mark !== 'timer').length).toBeGreaterThanOrEqual(8);
    expect(Math.max(...slicesBetweenTimers)).toBe(1);
  });
});
