import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)('api and dispatcher roles in one process', () => {
  let stack: WebhookStack;
  let receiver: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({ settings: { tls: { ca: tls.cert } }, shareProjection: true });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await receiver?.close();
    await stack?.close();
  });

  it('fold the webhook projection once and deliver through it', async () => {
    expect(stack.dispatcher.runner).toBe(stack.api.runner);
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['SHARA'],
    });
    expect(created.status).toBe(201);
    await appendVerdict(stack.store, { coin: 'SHARA', call: 'BUY', confidence: 50 });
    await receiver.waitFor(1);
    // Generous: only a condition that never comes ends this wait (the machine may be under load 10-30).
    const deadline = Date.now() + 120_000;
    let status: string | undefined;
    while (Date.now() < deadline) {
      const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries`, key);
      status = log.body.deliveries[0]?.status;
      if (status === 'succeeded') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(status).toBe('succeeded');
  });
});
