import { describe, expect, it } from 'vitest';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { appendVerdict } from './webhooks-harness.ts';
import { laggingDispatcherStack } from './webhooks-lagging.ts';

const reachable = await requireNats();

describe.runIf(reachable)('a subscription takes only events recorded after it was created', () => {
  const setup = laggingDispatcherStack('late');

  it('a lagging dispatcher matches each event against the subscriptions that existed when it was recorded', async () => {
    const key = await setup.stack.issue();
    const before = await appendVerdict(setup.stack.store, {
      coin: 'LAGA',
      call: 'BUY',
      confidence: 61,
      from: 'ranging',
    });
    const created = await setup.stack.request('POST', '/api/webhooks', key, {
      url: setup.receiver.url,
      events: ['trade_call', 'regime_shift'],
      assets: ['LAGA'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const after = await appendVerdict(setup.stack.store, {
      coin: 'LAGA',
      call: 'SELL',
      confidence: 72,
      regime: 'trending-down',
      from: 'trending-up',
    });
    // Both verdicts (and their shifts) are on the bus before the dispatcher starts: it handles the
    // earlier one already knowing the subscription.
    await expect
      .poll(async () => {
        const ids = await streamMessageIds(setup.stack.stream);
        return ids.includes(before) && ids.includes(after);
      })
      .toBe(true);
    await setup.pool.start();
    await setup.receiver.waitFor(2);
    for (const suffix of ['calls', 'shifts'])
      await expect
        .poll(() => consumerDrained(setup.stack.stream, `late${setup.stack.prefix}-${suffix}`), {
          timeout: 30_000,
        })
        .toBe(true);
    const logged = await setup.stack.request('GET', `/api/webhooks/${created.body.id}/deliveries`, key);
    expect(logged.body.deliveries).toHaveLength(2);
    const got = setup.receiver.received.map((r) => WebhookEnvelope.parse(JSON.parse(r.body)));
    expect(got.map((e) => [e.event, (e.data as { confidence: number }).confidence]).sort()).toEqual([
      ['regime_shift', 72],
      ['trade_call', 72],
    ]);
  });
});
