import { describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import {
  digestPassed,
  HOURLY_DIGEST,
  pooledDispatcherStack,
  until,
  watchedEngine,
} from '../../test/webhooks-harness.ts';

const HOUR = 3_600_000;
/** Distinct digest scans, one per subscription (each its own min_confidence), claimed at once. */
const SCANS = 12;

/**
 * Many digests of one period waiting at once for the engine in the dispatcher's process (its
 * catch-up after a restart), each scan with its own filters: a stop during the waits lets every
 * digest go unclaimed (no number taken, nothing sent), and the dispatcher back with the engine
 * running sends each subscription that period's digest once, numbered 1.
 */
describe('digests waiting together for the engine in their process', () => {
  const setup = pooledDispatcherStack('enginewaits', { bus: 'memory', startDispatcher: false });

  it('go unclaimed on a stop during the wait, and are sent once each after it', async () => {
    const { stack, receiver, pool, newScheduler } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const scheduler = newScheduler();
    // The scheduler itself, its waits counted as they begin.
    const engine = watchedEngine(scheduler);
    const first = await pool.start(new MemoryProjectionStore(), engine);
    // A free key holds 5 subscriptions.
    const keys = await Promise.all([0, 1, 2].map((k) => stack.issue(`waits-${k}`)));
    const paths: string[] = [];
    for (let i = 0; i < SCANS; i++) {
      paths.push(`/waits-${i}`);
      const created = await stack.request('POST', '/api/webhooks', keys[Math.floor(i / 5)]!, {
        url: `${new URL(receiver.url).origin}/waits-${i}`,
        ...HOURLY_DIGEST,
        min_confidence: i,
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
    }
    await first.runner.waitFor(await stack.store.headPosition());
    await digestPassed(first);
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    // The engine is not started: every scan waits for it.
    await until(
      () => engine.asked,
      (n) => n >= SCANS,
    );

    await pool.stop(first);
    const sequenced = (await stack.store.readAll({ after: 0, maxCount: 100_000 })).filter(
      (e) => e.type === 'DeliverySequenced',
    );
    expect(sequenced).toEqual([]);
    expect(receiver.received).toEqual([]);

    // Back with the engine running: the period's digest, once each, numbered 1.
    scheduler.start();
    const again = await pool.start(new MemoryProjectionStore(), engine);
    await receiver.waitFor(SCANS, 60_000);
    await digestPassed(again);
    const digests = receiver.received.map((r) => WebhookEnvelope.parse(JSON.parse(r.body)));
    expect(digests.map((d) => d.seq)).toEqual(Array(SCANS).fill(1));
    expect(new Set(digests.map((d) => d.data.type === 'scan_digest' && d.data.period_start))).toEqual(
      new Set([new Date(next).toISOString()]),
    );
    expect(receiver.received.map((r) => r.path).sort()).toEqual([...paths].sort());
    await pool.stop(again);
  });
});
