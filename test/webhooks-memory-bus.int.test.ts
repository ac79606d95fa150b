import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { type DeliveryView, WebhookEnvelope } from '../contracts/webhooks.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

/**
 * The embedded service's own webhook path (`BUS=memory`, its default): relay, in-process bus,
 * dispatcher and a real HTTPS receiver in one process, no NATS. The NATS path is covered by the
 * other webhook suites; the single-layout webhook bench measures this one.
 */
const tls = selfSignedCert();

describe('webhook delivery through the in-process bus', () => {
  let stack: WebhookStack;
  let receiver: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({ settings: { tls: { ca: tls.cert } }, bus: 'memory' });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it('runs on the memory bus, not on NATS', () => {
    expect(stack.bus).toBeInstanceOf(MemoryBus);
  });

  it('delivers each trade call once, signed and numbered in order, and logs it succeeded', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['MEMBUS'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const sub = created.body as { id: string; secret: string };

    for (const confidence of [61, 62, 63]) {
      await appendVerdict(stack.store, { coin: 'MEMBUS', call: 'BUY', confidence });
    }
    await receiver.waitFor(3);

    const bodies = receiver.received.map((got) => {
      expect(verifyWebhook({ secret: sub.secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
      return WebhookEnvelope.parse(JSON.parse(got.body));
    });
    expect(new Set(bodies.map((b) => b.delivery_id)).size).toBe(3);
    expect(bodies.map((b) => b.seq).sort()).toEqual([1, 2, 3]);
    const bySeq = [...bodies].sort((a, b) => (a.seq ?? 0) - (b.seq ?? 0));
    expect(bySeq.map((b) => (b.data as { confidence: number }).confidence)).toEqual([61, 62, 63]);

    // The outcome is recorded after the answer: the log shows each delivery succeeded at its first attempt.
    let deliveries: DeliveryView[] = [];
    await expect
      .poll(
        async () => {
          const log = await stack.request('GET', `/api/webhooks/${sub.id}/deliveries?limit=50`, key);
          expect(log.status).toBe(200);
          deliveries = (log.body as { deliveries: DeliveryView[] }).deliveries;
          return deliveries.filter((d) => d.status === 'succeeded').length;
        },
        { timeout: 30_000, interval: 50 },
      )
      .toBe(3);
    const rows = deliveries.map((d) => [d.seq, d.status, d.attempts.map((a) => [a.attempt, a.outcome])]);
    expect(rows.sort((a, b) => (a[0] as number) - (b[0] as number))).toEqual([
      [1, 'succeeded', [[1, 'succeeded']]],
      [2, 'succeeded', [[1, 'succeeded']]],
      [3, 'succeeded', [[1, 'succeeded']]],
    ]);
  });
});
