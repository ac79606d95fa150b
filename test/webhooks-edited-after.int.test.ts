import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { appendVerdict, dispatcherPool, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const env = { WEBHOOK_RETRY_SCHEDULE: '0' };

describe.runIf(reachable)('an edit (PATCH) applies to the events recorded after it', () => {
  let stack: WebhookStack;
  let receiver: Receiver;
  const pool = dispatcherPool(() => stack, { tag: 'edited', env, settings: { tls: { ca: tls.cert } } });

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

  it('a lagging dispatcher matches each event with the filters the subscription had when it was recorded', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['EDTA'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id: string = created.body.id;
    const beforeKept = await appendVerdict(stack.store, { coin: 'EDTA', call: 'BUY', confidence: 61 });
    const beforeOther = await appendVerdict(stack.store, { coin: 'EDTB', call: 'BUY', confidence: 62 });
    const patched = await stack.request('PATCH', `/api/webhooks/${id}`, key, { assets: ['EDTB'] });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    const afterOld = await appendVerdict(stack.store, { coin: 'EDTA', call: 'SELL', confidence: 63 });
    const afterNew = await appendVerdict(stack.store, { coin: 'EDTB', call: 'SELL', confidence: 64 });
    // Every verdict is on the bus before the dispatcher starts: it handles the ones recorded before
    // the edit already knowing the edit.
    await expect
      .poll(async () => {
        const ids = await streamMessageIds(stack.stream);
        return [beforeKept, beforeOther, afterOld, afterNew].every((v) => ids.includes(v));
      })
      .toBe(true);
    await pool.start();
    await receiver.waitFor(2);
    await expect
      .poll(() => consumerDrained(stack.stream, `edited${stack.prefix}-calls`), { timeout: 30_000 })
      .toBe(true);
    const logged = await stack.request('GET', `/api/webhooks/${id}/deliveries`, key);
    expect(logged.body.deliveries.map((d: { event_id: string }) => d.event_id).sort()).toEqual(
      [beforeKept, afterNew].sort(),
    );
    const got = receiver.received.map((r) => WebhookEnvelope.parse(JSON.parse(r.body)));
    expect(got.map((e) => (e.data as { coin: string }).coin).sort()).toEqual(['EDTA', 'EDTB']);
  });
});
