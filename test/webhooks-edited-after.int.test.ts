import { describe, expect, it } from 'vitest';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { appendVerdict } from './webhooks-harness.ts';
import { laggingDispatcherStack } from './webhooks-lagging.ts';

const reachable = await requireNats();

describe.runIf(reachable)('an edit (PATCH) applies to the events recorded after it', () => {
  const setup = laggingDispatcherStack('edited');

  it('a lagging dispatcher matches each event with the filters the subscription had when it was recorded', async () => {
    const key = await setup.stack.issue();
    const created = await setup.stack.request('POST', '/api/webhooks', key, {
      url: setup.receiver.url,
      events: ['trade_call'],
      assets: ['EDTA'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id: string = created.body.id;
    const beforeKept = await appendVerdict(setup.stack.store, { coin: 'EDTA', call: 'BUY', confidence: 61 });
    const beforeOther = await appendVerdict(setup.stack.store, { coin: 'EDTB', call: 'BUY', confidence: 62 });
    const patched = await setup.stack.request('PATCH', `/api/webhooks/${id}`, key, { assets: ['EDTB'] });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    const afterOld = await appendVerdict(setup.stack.store, { coin: 'EDTA', call: 'SELL', confidence: 63 });
    const afterNew = await appendVerdict(setup.stack.store, { coin: 'EDTB', call: 'SELL', confidence: 64 });
    // Every verdict is on the bus before the dispatcher starts: it handles the ones recorded before
    // the edit already knowing the edit.
    await expect
      .poll(async () => {
        const ids = await streamMessageIds(setup.stack.stream);
        return [beforeKept, beforeOther, afterOld, afterNew].every((v) => ids.includes(v));
      })
      .toBe(true);
    await setup.pool.start();
    await setup.receiver.waitFor(2);
    await expect
      .poll(() => consumerDrained(setup.stack.stream, `edited${setup.stack.prefix}-calls`), {
        timeout: 30_000,
      })
      .toBe(true);
    const logged = await setup.stack.request('GET', `/api/webhooks/${id}/deliveries`, key);
    expect(logged.body.deliveries.map((d: { event_id: string }) => d.event_id).sort()).toEqual(
      [beforeKept, afterNew].sort(),
    );
    const got = setup.receiver.received.map((r) => WebhookEnvelope.parse(JSON.parse(r.body)));
    expect(got.map((e) => (e.data as { coin: string }).coin).sort()).toEqual(['EDTA', 'EDTB']);
  });
});
