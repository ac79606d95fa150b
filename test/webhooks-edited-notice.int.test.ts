import { describe, expect, it } from 'vitest';
import { subscriptionStream } from '../services/webhooks/subscription-fold.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { laggingDispatcherStack } from './webhooks-lagging.ts';

const reachable = await requireNats();

/**
 * A `subscription_disabled` notice is matched as any event is: with the events the subscription
 * took when the disable was recorded, however late the dispatcher handles it. A subscription
 * edited after a disable keeps the notice it took then, and one that takes notices only since its
 * edit is not told of an earlier disable.
 */
describe.runIf(reachable)('the notice of a disable recorded before an edit (PATCH)', () => {
  const tag = 'notice';
  const setup = laggingDispatcherStack(tag);

  it('goes to the subscriptions that took notices when the disable was recorded', async () => {
    const { key, keyId } = await setup.stack.issueWithId();
    const create = async (path: string, events: string[]) => {
      const res = await setup.stack.request('POST', '/api/webhooks', key, {
        url: `${setup.receiver.url}${path}`,
        events,
      });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      return res.body.id as string;
    };
    const paused = await create('/paused', ['trade_call']);
    const wasTold = await create('/was-told', ['trade_call', 'subscription_disabled']);
    const toldSince = await create('/told-since', ['trade_call']);

    expect((await setup.stack.request('POST', `/api/webhooks/${paused}/disable`, key)).status).toBe(200);
    const disabled = (await setup.stack.store.readStream(subscriptionStream(keyId))).find(
      (e) => e.type === 'SubscriptionDisabled',
    )!;
    for (const [id, events] of [
      [wasTold, ['trade_call']],
      [toldSince, ['trade_call', 'subscription_disabled']],
    ] as const) {
      const res = await setup.stack.request('PATCH', `/api/webhooks/${id}`, key, { events });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
    }
    await expect
      .poll(async () => (await streamMessageIds(setup.stack.stream)).includes(disabled.id))
      .toBe(true);

    await setup.pool.start();
    await expect
      .poll(() => consumerDrained(setup.stack.stream, `${tag}${setup.stack.prefix}-disabled`))
      .toBe(true);
    const deliveries = async (id: string) =>
      (await setup.stack.request('GET', `/api/webhooks/${id}/deliveries`, key)).body.deliveries as {
        event: string;
      }[];
    await expect
      .poll(async () => (await deliveries(wasTold)).map((d) => d.event))
      .toEqual(['subscription_disabled']);
    expect(await deliveries(toldSince)).toEqual([]);
  });
});
