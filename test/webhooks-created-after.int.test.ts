import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { appendVerdict, dispatcherPool, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const env = { WEBHOOK_RETRY_SCHEDULE: '0' };

describe.runIf(reachable)('a subscription takes only events recorded after it was created', () => {
  let stack: WebhookStack;
  let receiver: Receiver;
  const pool = dispatcherPool(() => stack, { tag: 'late', env, settings: { tls: { ca: tls.cert } } });

  beforeAll(async () => {
    // No dispatcher yet: the one started below lags behind the log, as a busy one does.
    stack = await startWebhookStack({ env, settings: { tls: { ca: tls.cert } }, dispatcher: false });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await pool.stopAll();
    await stack?.close();
    await receiver?.close();
  });

  it('a lagging dispatcher matches each event against the subscriptions that existed when it was recorded', async () => {
    const key = await stack.issue();
    const before = await appendVerdict(stack.store, {
      coin: 'LAGA',
      call: 'BUY',
      confidence: 61,
      from: 'ranging',
    });
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call', 'regime_shift'],
      assets: ['LAGA'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const after = await appendVerdict(stack.store, {
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
        const ids = await streamMessageIds(stack.stream);
        return ids.includes(before) && ids.includes(after);
      })
      .toBe(true);
    await pool.start();
    await receiver.waitFor(2);
    for (const suffix of ['calls', 'shifts'])
      await expect
        .poll(() => consumerDrained(stack.stream, `late${stack.prefix}-${suffix}`), { timeout: 30_000 })
        .toBe(true);
    const logged = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries`, key);
    expect(logged.body.deliveries).toHaveLength(2);
    const got = receiver.received.map((r) => WebhookEnvelope.parse(JSON.parse(r.body)));
    expect(got.map((e) => [e.event, (e.data as { confidence: number }).confidence]).sort()).toEqual([
      ['regime_shift', 72],
      ['trade_call', 72],
    ]);
  });
});
