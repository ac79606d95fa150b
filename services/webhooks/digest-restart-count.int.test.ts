import { describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { digestPassed, HOURLY_DIGEST, pooledDispatcherStack } from '../../test/webhooks-harness.ts';

const HOUR = 3_600_000;

/**
 * A dispatcher back after a stop, as `npm start` runs one: the LMDB log, the webhook projection
 * resumed from the snapshot the stopped one saved (so its delivery log holds the digests sent
 * before), the replay clock moved on across boundaries meanwhile. The periods passed unsent are
 * counted (and logged) against the last digest sent before the stop, never against the digest this
 * dispatcher has just claimed, which its projection may already hold when the count is made.
 */
describe('digest periods skipped across a restart, on the LMDB log with a resumed projection', () => {
  const setup = pooledDispatcherStack('skipcount', { bus: 'memory', lmdb: true, startDispatcher: false });

  it('counts the boundaries passed while it was stopped', async () => {
    const { stack, receiver, pool } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    // One projection store for both, as one DATA_DIR holds the snapshot across a restart.
    const snapshots = new MemoryProjectionStore();
    const first = await pool.start(snapshots);
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await first.runner.waitFor(await stack.store.headPosition());
    await digestPassed(first);
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    await receiver.waitFor(1, 40_000);
    await first.runner.waitFor(await stack.store.headPosition());

    // Stopped across three boundaries (next + 1 h, + 2 h, + 3 h); back within the third one's period.
    await pool.stop(first);
    clock.setTime(next + 3 * HOUR + 10 * 60_000);
    const back = await pool.start(snapshots);
    await receiver.waitFor(2, 40_000);
    await digestPassed(back);
    expect(setup.digests().map((d) => d.period_start)).toEqual([
      new Date(next).toISOString(),
      new Date(next + 3 * HOUR).toISOString(),
    ]);
    expect(back.digestPeriodsSkipped()).toBe(2);
  });
});
