import { describe, expect, it } from 'vitest';
import { stalledAfter } from './append-watch.ts';

/** The appends check of /readyz: stopped writes trip it, slow ones under load do not, and it does not flap. */
describe('stalledAfter (APPEND_STALL_MS = 5000)', () => {
  const STALL = 5_000;
  /** Runs readings [oldestMs, idleMs] in turn from ready, giving the state after each. */
  const run = (readings: [number, number][]) => {
    let stalled = false;
    return readings.map(([oldest, idle]) => {
      stalled = stalledAfter(stalled, oldest, idle, STALL);
      return stalled;
    });
  };

  it('stays ready through a slow append under load while others keep finishing', () => {
    // The flap seen on a loaded fresh box: one append waited 5721 ms while appends finished around it.
    expect(
      run([
        [1_200, 50],
        [5_721, 300],
        [6_400, 20],
        [800, 10],
      ]),
    ).toEqual([false, false, false, false]);
  });

  it('turns not ready when writes stop: the oldest waited past the threshold and none finished', () => {
    expect(
      run([
        [3_000, 3_000],
        [5_100, 5_100],
        [9_000, 9_000],
      ]),
    ).toEqual([false, true, true]);
  });

  it('turns ready again only once appends finish and the oldest pending is under half the threshold', () => {
    expect(
      run([
        [6_000, 6_000], // stalled
        [4_000, 100], // finishing again, but the oldest is still near the threshold: no flap back
        [2_600, 50],
        [2_400, 50], // under half: ready
        [5_200, 200], // slow again while others finish: stays ready
      ]),
    ).toEqual([true, true, true, false, false]);
  });

  it('an old pending append alone does not clear the stall while nothing finishes', () => {
    expect(
      run([
        [6_000, 6_000],
        [1_000, 7_000],
      ]),
    ).toEqual([true, true]);
  });
});
