import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import type { ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import {
  digestPassed,
  dispatcherPool,
  HOURLY_DIGEST,
  startWebhookStack,
  type WebhookStack,
} from '../../test/webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../../test/webhooks-receiver.ts';

const HOUR = 3_600_000;

/**
 * A dispatcher back after a stop, as `npm start` runs one: the LMDB log, the webhook projection
 * resumed from the snapshot the stopped one saved (so its delivery log holds the digests sent
 * before), the replay clock moved on across boundaries meanwhile. The periods passed unsent are
 * counted (and logged) against the last digest sent before the stop, never against the digest this
 * dispatcher has just claimed, which its projection may already hold when the count is made.
 */
describe('digest periods skipped across a restart, on the LMDB log with a resumed projection', () => {
  const tls = selfSignedCert();
  const settings = { tls: { ca: tls.cert } };
  let dir: string;
  let stack: WebhookStack;
  let receiver: Receiver;
  const pool = dispatcherPool(() => stack, { tag: 'skipcount', env: {}, settings });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'digest-restart-count-'));
    const store = await openLmdbEventStore({ path: dir });
    stack = await startWebhookStack({ store, settings, dispatcher: false, bus: 'memory' });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await pool.stopAll();
    await stack?.close();
    await receiver?.close();
    await stack?.store.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const periods = (): string[] =>
    receiver.received.map((r) => {
      const envelope = WebhookEnvelope.parse(JSON.parse(r.body));
      if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
      return envelope.data.period_start;
    });

  it('counts the boundaries passed while it was stopped', async () => {
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
    expect(periods()).toEqual([new Date(next).toISOString(), new Date(next + 3 * HOUR).toISOString()]);
    expect(back.digestPeriodsSkipped()).toBe(2);
  });
});
