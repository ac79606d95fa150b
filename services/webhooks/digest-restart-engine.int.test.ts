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
import { VerdictScheduler } from '../engine/scheduler.ts';
import { DIGEST_CATCH_UP_MS } from './digest-scan.ts';

const HOUR = 3_600_000;

/**
 * `npm start` back after a stop: engine and dispatcher in one process on the LMDB log, the webhook
 * projection resumed from its snapshot, the replay clock moved on across boundaries meanwhile. The
 * engine's catch-up on the closes missed while down lands seconds after the dispatcher's first
 * digest pass began (here: held until the digest's own wait for the projection, DIGEST_CATCH_UP_MS,
 * has passed twice over). The first digest after the restart still lists the markets, with the
 * verdicts of its period's close, instead of naming every one in skipped as behind it.
 */
describe('the first digest after a restart, on the LMDB log with the engine in the process', () => {
  const tls = selfSignedCert();
  const settings = { tls: { ca: tls.cert } };
  let dir: string;
  let stack: WebhookStack;
  let receiver: Receiver;
  const schedulers: VerdictScheduler[] = [];
  const pool = dispatcherPool(() => stack, { tag: 'restartengine', env: {}, settings });

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'digest-restart-engine-'));
    const store = await openLmdbEventStore({ path: dir });
    stack = await startWebhookStack({ store, settings, dispatcher: false, bus: 'memory' });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await pool.stopAll();
    for (const scheduler of schedulers) await scheduler.stop();
    await stack?.close();
    await receiver?.close();
    await stack?.store.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  const digests = () =>
    receiver.received.map((r) => {
      const envelope = WebhookEnvelope.parse(JSON.parse(r.body));
      if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
      return envelope.data;
    });
  const newScheduler = () => {
    const scheduler = new VerdictScheduler({
      engine: stack.engine,
      feed: stack.engine.feed,
      timeframes: ['1h'],
      exchange: 'BINANCE',
      topN: HOURLY_DIGEST.top_n,
    });
    schedulers.push(scheduler);
    return scheduler;
  };

  it('lists the markets with the verdicts of its close once the engine has caught up', async () => {
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const snapshots = new MemoryProjectionStore();
    const before = newScheduler();
    before.start();
    await before.firstRound;
    const first = await pool.start(snapshots, before);
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await first.runner.waitFor(await stack.store.headPosition());
    // Seen before the boundary: its series takes the next period's digest.
    await digestPassed(first);
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    await receiver.waitFor(1, 60_000);
    expect(digests()[0]!.calls).toHaveLength(HOURLY_DIGEST.top_n);

    // Both stopped across three boundaries; back within the third one's period, the dispatcher
    // first and the engine's catch-up held past the digest's catch-up wait.
    await pool.stop(first);
    await before.stop();
    const back = next + 3 * HOUR;
    clock.setTime(back + 10 * 60_000);
    const after = newScheduler();
    const again = await pool.start(snapshots, after);
    await Promise.race([
      receiver.waitFor(2, 60_000),
      new Promise((resolve) => setTimeout(resolve, 2 * DIGEST_CATCH_UP_MS)),
    ]);
    after.start();
    await receiver.waitFor(2, 60_000);

    const digest = digests()[1]!;
    expect(digest.period_start).toBe(new Date(back).toISOString());
    expect(digest.skipped).toEqual([]);
    expect(digest.calls).toHaveLength(HOURLY_DIGEST.top_n);
    for (const call of digest.calls) expect(call.candle_close_time! * 1000).toBeGreaterThanOrEqual(back);
    await pool.stop(again);
    await after.stop();
    const deleted = await stack.request('DELETE', `/api/webhooks/${created.body.id}`, key);
    expect(deleted.status).toBe(200);
  });

  it("sends one subscription's digest while another's waits for the engine", async () => {
    const clock = (stack.engine.feed as ReplayFeed).clock;
    // The engine records 1h only: a 4h digest has no close of the engine's to wait for.
    const engine = newScheduler();
    const dispatcher = await pool.start(new MemoryProjectionStore(), engine);
    const key = await stack.issue('overlap');
    const waiting = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    const free = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
      timeframe: '4h',
    });
    expect([waiting.status, free.status]).toEqual([201, 201]);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher);
    const from = receiver.received.length;
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    // The engine is held until the 4h digest arrives (or twice the catch-up wait has passed).
    await Promise.race([
      receiver.waitFor(from + 1, 60_000),
      new Promise((resolve) => setTimeout(resolve, 2 * DIGEST_CATCH_UP_MS)),
    ]);
    engine.start();
    await receiver.waitFor(from + 2, 60_000);

    const sent = digests().slice(from);
    expect(sent.map((d) => d.timeframe)).toEqual(['4h', '1h']);
    expect(sent[1]!.calls).toHaveLength(HOURLY_DIGEST.top_n);
    await pool.stop(dispatcher);
    await engine.stop();
    for (const sub of [waiting, free]) {
      expect((await stack.request('DELETE', `/api/webhooks/${sub.body.id}`, key)).status).toBe(200);
    }
  });

  it('leaves the period unsent when the engine caught up only past it, and sends the current one', async () => {
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const engine = newScheduler();
    const dispatcher = await pool.start(new MemoryProjectionStore(), engine);
    const key = await stack.issue('passed');
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher);
    const from = receiver.received.length;
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    // Its digest pass for the period at `next` under way (waiting for the held engine), the period
    // passes; the engine then evaluates up to the close after it.
    await Promise.race([
      receiver.waitFor(from + 1, 60_000),
      new Promise((resolve) => setTimeout(resolve, 2 * DIGEST_CATCH_UP_MS)),
    ]);
    clock.setTime(next + HOUR + 10 * 60_000);
    engine.start();
    await receiver.waitFor(from + 1, 60_000);

    const digest = digests()[from]!;
    expect(digest.period_start).toBe(new Date(next + HOUR).toISOString());
    expect(digest.calls.map((call) => call.candle_close_time! * 1000)).toEqual(
      Array(HOURLY_DIGEST.top_n).fill(next + HOUR),
    );
    await digestPassed(dispatcher);
    expect(dispatcher.digestPeriodsSkipped()).toBe(1);
  });
});
