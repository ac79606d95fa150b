import { describe, expect, it, onTestFinished } from 'vitest';
import type { ReplayFeed } from '../adapters/market/replay.ts';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { requireNats } from './nats-server.ts';
import { digestPassed, HOURLY_DIGEST, pooledDispatcherStack } from './webhooks-harness.ts';
import { type Receiver, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const HOUR = 3_600_000;
const DAY = 24 * HOUR;

/** The period (ISO) each digest the receiver got covers, in the order they came. */
const periods = (receiver: Receiver): string[] =>
  receiver.received.map((r) => {
    const envelope = WebhookEnvelope.parse(JSON.parse(r.body));
    if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
    return envelope.data.period_start;
  });

describe.runIf(reachable)('a digest gained by an edit', () => {
  // The dispatcher reads the replay feed's own clock, which the test steps by hand.
  const setup = pooledDispatcherStack('digest-edit');

  it('comes first at the next period boundary after the edit, as a new subscriber’s does', async () => {
    const { stack, receiver, dispatcher } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    const key = await stack.issue();
    // A subscription of a market event only (an endpoint that takes nothing else here).
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['DOGE'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher); // a digest pass has seen it
    // A period later it has existed since before the period began.
    const edited = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(edited + 10 * 60_000);
    await digestPassed(dispatcher);
    const patched = await stack.request('PATCH', `/api/webhooks/${created.body.id}`, key, {
      ...HOURLY_DIGEST,
      assets: null,
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher);
    // Its first digest covers the period after the edit's, never the one the edit fell in.
    clock.setTime(edited + HOUR + 10 * 60_000);
    await receiver.waitFor(1, 40_000);
    expect(periods(receiver)).toEqual([new Date(edited + HOUR).toISOString()]);
  });

  it('after a cadence change too: the period the change falls in gets none', async () => {
    const { stack, dispatcher, tls } = setup;
    const clock = (stack.engine.feed as ReplayFeed).clock;
    // Its own receiver: the first test's subscription takes hourly digests meanwhile.
    const receiver = await startReceiver(tls);
    onTestFinished(() => receiver.close());
    // Clear of a day boundary, so the daily cadence it starts with owes nothing meanwhile.
    if (new Date(clock.now()).getUTCHours() >= 21) {
      clock.setTime(Math.floor(clock.now() / DAY) * DAY + DAY + 10 * 60_000);
    }
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      ...HOURLY_DIGEST,
      cadence: '1d',
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher);
    const edited = Math.floor(clock.now() / HOUR) * HOUR + HOUR;
    clock.setTime(edited + 10 * 60_000);
    await digestPassed(dispatcher);
    const patched = await stack.request('PATCH', `/api/webhooks/${created.body.id}`, key, { cadence: '1h' });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    await dispatcher.runner.waitFor(await stack.store.headPosition());
    await digestPassed(dispatcher);
    clock.setTime(edited + HOUR + 10 * 60_000);
    await receiver.waitFor(1, 40_000);
    expect(periods(receiver)).toEqual([new Date(edited + HOUR).toISOString()]);
  });
});
