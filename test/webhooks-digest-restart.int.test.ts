import { describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../adapters/market/replay.ts';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { requireNats } from './nats-server.ts';
import { digestPassed, HOURLY_DIGEST, pooledDispatcherStack } from './webhooks-harness.ts';
import type { Receiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const HOUR = 3_600_000;

/** The period (ISO) each digest the receiver got covers, in the order they came. */
const periods = (receiver: Receiver): string[] =>
  receiver.received.map((r) => {
    const envelope = WebhookEnvelope.parse(JSON.parse(r.body));
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    return envelope.data.period_start;
  });

describe.runIf(reachable)('scan digests on the replay clock across a dispatcher restart', () => {
  // No digestNow: the dispatchers read the replay feed's own clock, as `npm start` does; the
  // test steps it by hand (the harness opens it stopped). Each dispatcher is started by the test.
  const setup = pooledDispatcherStack('restart', { startDispatcher: false });
  // The subscription the first case creates, and its key: the cases after it go on with it.
  let key = '';
  let subscriptionId = '';

  it('a subscription from before the restart gets the digest of the period the restart falls in', async () => {
    const { stack, receiver, pool } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const first = await pool.start();
    key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    subscriptionId = (created.body as { id: string }).id;
    // Seen by the running dispatcher in the period it was created in: its first digest is the next
    // one. Folded first (however slow the host), then a digest pass to note it.
    await first.runner.waitFor(await stack.store.headPosition());
    await digestPassed(first);
    const next = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(next + 10 * 60_000);
    await receiver.waitFor(1, 40_000);
    expect(periods(receiver)).toEqual([new Date(next).toISOString()]);

    // Down while the feed moves into the next period, as on a restart of `npm start` (whose replay
    // clock keeps running, anchored in the log): the process that comes back must still send it.
    await pool.stop(first);
    clock.setTime(next + HOUR + 10 * 60_000);
    const second = await pool.start();
    await receiver.waitFor(2, 40_000);
    expect(periods(receiver)).toEqual([new Date(next).toISOString(), new Date(next + HOUR).toISOString()]);

    // Restarted again within that period, whose digest went out: it is not sent twice.
    await pool.stop(second);
    const third = await pool.start();
    await digestPassed(third); // a digest pass in it, which finds that period's digest sent
    clock.setTime(next + 2 * HOUR + 10 * 60_000);
    await receiver.waitFor(3, 40_000);
    expect(periods(receiver)).toEqual([0, 1, 2].map((i) => new Date(next + i * HOUR).toISOString()));
  });

  it('back after several boundaries passed while it was stopped: the current period once, the ones passed meanwhile counted, not sent', async () => {
    const { stack, receiver, pool } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const before = periods(receiver);
    const last = Date.parse(before.at(-1)!);
    await pool.stopAll();
    // Stopped across three boundaries (last + 1 h, + 2 h, + 3 h); back within the third one's period.
    clock.setTime(last + 3 * HOUR + 10 * 60_000);
    const back = await pool.start();
    await receiver.waitFor(before.length + 1, 40_000);
    // Further passes in the same period add nothing: one digest, the current period's.
    await digestPassed(back);
    await back.runner.waitFor(await stack.store.headPosition());
    const digests = Object.values(back.runner.state.log.deliveries).filter((d) => d.event === 'scan_digest');
    expect(digests).toHaveLength(before.length + 1);
    expect(periods(receiver)).toEqual([...before, new Date(last + 3 * HOUR).toISOString()]);
    expect(back.digestPeriodsSkipped()).toBe(2);
  });

  it('paused across boundaries and enabled again: the current period at once, the paused ones not counted as skipped', async () => {
    const { stack, receiver, pool } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    await pool.stopAll();
    const running = await pool.start();
    const before = periods(receiver);
    const last = Date.parse(before.at(-1)!);
    const paused = await stack.request('POST', `/api/webhooks/${subscriptionId}/disable`, key);
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    await running.runner.waitFor(await stack.store.headPosition());
    // Paused across three boundaries, with the dispatcher running: none of them was due.
    clock.setTime(last + 3 * HOUR + 10 * 60_000);
    await digestPassed(running);
    const resumed = await stack.request('POST', `/api/webhooks/${subscriptionId}/enable`, key);
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(200);
    await receiver.waitFor(before.length + 1, 40_000);
    expect(periods(receiver)).toEqual([...before, new Date(last + 3 * HOUR).toISOString()]);
    expect(running.digestPeriodsSkipped()).toBe(0);
  });
});
