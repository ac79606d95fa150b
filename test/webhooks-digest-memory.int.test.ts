import { describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../adapters/market/replay.ts';
import { requireNats } from './nats-server.ts';
import { HOURLY_DIGEST, pooledDispatcherStack, until } from './webhooks-harness.ts';

const reachable = await requireNats();
const HOUR = 3_600_000;

/**
 * The dispatcher's digest bookkeeping over a long run: one entry per digest subscription, however
 * many periods it has been sent, and none once the subscription is deleted.
 */
describe.runIf(reachable)('the digest bookkeeping of a long-running dispatcher', () => {
  // The dispatcher reads the replay feed's own clock, which the test steps by hand.
  const setup = pooledDispatcherStack('digest-memory');

  it('holds one entry per digest subscription over many periods, and none after its delete', async () => {
    const { stack, receiver, dispatcher } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await until(
      () => dispatcher.digestsTracked(),
      (t) => t.seen === 1,
    );
    const start = Math.floor(clock.now() / HOUR) * HOUR;
    for (let period = 1; period <= 3; period++) {
      clock.setTime(start + period * HOUR + 10 * 60_000);
      await receiver.waitFor(period, 40_000);
    }
    expect(receiver.received).toHaveLength(3);
    expect(dispatcher.digestsTracked()).toEqual({ seen: 1, fired: 1 });

    const deleted = await stack.request('DELETE', `/api/webhooks/${created.body.id}`, key);
    expect(deleted.status, JSON.stringify(deleted.body)).toBeLessThan(300);
    await until(
      () => dispatcher.digestsTracked(),
      (t) => t.seen === 0 && t.fired === 0,
      30_000,
    );
  });
});
