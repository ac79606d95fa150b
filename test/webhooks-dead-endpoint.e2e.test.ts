import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)('a dead endpoint beside a healthy one', () => {
  let stack: WebhookStack;
  let dead: Receiver;
  let healthy: Receiver;

  beforeAll(async () => {
    // One connection per endpoint and a long timeout: a shared queue would serialise every
    // healthy delivery behind the dead endpoint's hanging requests.
    stack = await startWebhookStack({
      env: {
        WEBHOOK_ENDPOINT_CONCURRENCY: '1',
        WEBHOOK_TIMEOUT_MS: '30000',
        WEBHOOK_STUCK_AFTER_MS: '600000',
      },
      settings: { tls: { ca: tls.cert } },
    });
    dead = await startReceiver(tls);
    dead.behave = () => 'hang';
    healthy = await startReceiver(tls);
  });
  afterAll(async () => {
    await dead?.close();
    await healthy?.close();
    await stack?.close();
  });

  it('delivers every healthy delivery while the dead endpoint holds its only slot', async () => {
    const key = await stack.issue();
    for (const url of [dead.url, healthy.url]) {
      const res = await stack.request('POST', '/api/webhooks', key, {
        url,
        events: ['trade_call'],
        assets: ['DEADA'],
      });
      expect(res.status).toBe(201);
    }
    for (let i = 0; i < 10; i++)
      await appendVerdict(stack.store, { coin: 'DEADA', call: 'BUY', confidence: 50 + i });
    await healthy.waitFor(10);
    // Still hanging on its first request: nothing of the dead endpoint finished, and nothing
    // healthy waited for it.
    expect(dead.received).toHaveLength(1);
    const confidences = healthy.received.map((r) => JSON.parse(r.body).data.confidence).sort();
    expect(confidences).toEqual([50, 51, 52, 53, 54, 55, 56, 57, 58, 59]);
    const [deadSub] = (await stack.request('GET', '/api/webhooks', key)).body.webhooks;
    const log = await stack.request('GET', `/api/webhooks/${deadSub.id}/deliveries`, key);
    expect(log.body.deliveries).toHaveLength(10);
    expect(log.body.deliveries.every((d: { status: string }) => d.status === 'pending')).toBe(true);
  });
});
