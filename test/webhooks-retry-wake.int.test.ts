import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

/**
 * A retry goes out when it is due, not when the dispatcher's periodic scan next comes round: the
 * scan here is set ten minutes apart, so every retry below is sent only because the dispatcher
 * woke for its due time (before, a retry waited for the next scan, up to a tick late: 1 s on a
 * 3 s step is a third of it, past the schedule's ±20 %).
 */
describe.runIf(reachable)('retries on their due time', () => {
  let stack: WebhookStack;
  let r: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: { WEBHOOK_TICK_MS: '600000', WEBHOOK_RETRY_SCHEDULE: '0,300,600,900' },
      settings: { tls: { ca: tls.cert } },
    });
    r = await startReceiver(tls);
  });
  afterAll(async () => {
    await r?.close();
    await stack?.close();
  });

  it('sends each retry of a failing delivery without waiting for the periodic scan', async () => {
    let calls = 0;
    r.behave = () => (++calls <= 2 ? { status: 503 } : { status: 204 });
    const key = await stack.issue();
    const sub = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['WAKEA'],
    });
    expect(sub.status).toBe(201);
    await appendVerdict(stack.store, { coin: 'WAKEA', call: 'BUY', confidence: 50 });
    // Generous: only the ten-minute scan would send these without the wake-up.
    await r.waitFor(3, 120_000);
    await expect
      .poll(async () => {
        const log = await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key);
        return log.body.deliveries[0]?.attempts.map((a: { outcome: string }) => a.outcome);
      })
      .toEqual(['failed', 'failed', 'succeeded']);
    const bodies = new Set(r.received.map((q) => JSON.parse(q.body).delivery_id));
    expect(bodies.size).toBe(1);
  });
});
