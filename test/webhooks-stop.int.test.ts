import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeliveryView } from '../contracts/webhooks.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, dispatcherPool, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { deliveryIds, type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const EVENTS = 20;
// One request at a time, answered in 800 ms: 20 deliveries take 16 s or more, well past the 6 s
// (WEBHOOK_TIMEOUT_MS + 1 s) a stopping dispatcher drains for, so the stop always leaves some
// unsent (a slower machine leaves more; at 300 ms a whole queue could go out within the drain).
// The timeout leaves a loaded machine room for the answer (at 1 s a 300 ms answer timed out at
// load 20 and was recorded failed). A stuck time of four timeouts claims waiting deliveries up to
// two rounds ahead of their turn and lets the next dispatcher take the queued ones over.
const env = {
  WEBHOOK_ENDPOINT_CONCURRENCY: '1',
  WEBHOOK_TIMEOUT_MS: '5000',
  WEBHOOK_STUCK_AFTER_MS: '20000',
};

describe.runIf(reachable)('a dispatcher stopped while deliveries wait in an endpoint queue', () => {
  let stack: WebhookStack;
  let receiver: Receiver | undefined;
  const dispatchers = dispatcherPool(() => stack, {
    tag: 'halt',
    env,
    settings: { tls: { ca: tls.cert } },
  });

  beforeAll(async () => {
    stack = await startWebhookStack({ env, dispatcher: false, settings: { tls: { ca: tls.cert } } });
  });
  afterAll(async () => {
    await dispatchers.stopAll();
    await receiver?.close();
    await stack?.close();
  });

  it('records no failed attempt for what it did not send, and the next dispatcher delivers every event', async () => {
    const first = await dispatchers.start();
    receiver = await startReceiver(tls);
    receiver.behave = () => ({ status: 200, afterMs: 800 });
    const r = receiver;
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['HALT'],
    });
    expect(created.status).toBe(201);
    const deliveries = async () => {
      const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries?limit=100`, key);
      return log.body.deliveries as DeliveryView[];
    };
    for (let i = 0; i < EVENTS; i++)
      await appendVerdict(stack.store, { coin: 'HALT', call: 'BUY', confidence: 50 + i });
    await expect.poll(async () => (await deliveries()).length).toBe(EVENTS);

    await dispatchers.stop(first);
    const sent = new Set(deliveryIds(r)).size;
    expect(sent).toBeLessThan(EVENTS);
    // What it did not send is queued, or held when it was claimed ahead of its turn: never failed.
    const attempts = (await deliveries()).flatMap((d) => d.attempts);
    expect(attempts.filter((a) => a.outcome === 'failed')).toEqual([]);

    await dispatchers.start();
    // Hang bounds: the held ones wait out the stuck time (20 s), the rest go one by one (800 ms each).
    await expect.poll(() => new Set(deliveryIds(r)).size, { timeout: 120_000 }).toBe(EVENTS);
    await expect.poll(async () => (await deliveries()).every((d) => d.status === 'succeeded')).toBe(true);
    const after = (await deliveries()).flatMap((d) => d.attempts);
    expect(after.filter((a) => a.outcome === 'failed')).toEqual([]);
    // Held attempts are unnumbered; each delivery's requests are numbered from 1.
    expect(after.filter((a) => a.outcome === 'held').every((a) => a.attempt === null)).toBe(true);
    expect(after.filter((a) => a.outcome === 'succeeded').every((a) => a.attempt === 1)).toBe(true);
  }, 240_000);
});
