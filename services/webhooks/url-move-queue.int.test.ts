import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import type { Receiver } from '../../test/webhooks-receiver.ts';
import {
  anotherReceiver,
  closeBoth,
  type Delivery,
  latest,
  stackBesideReceiver,
} from '../../test/webhooks-shared-origin.ts';

/**
 * One slot, and a timeout no case outlasts: the old origin's hung request holds that slot for the
 * whole case. The stuck time is past that timeout, so no attempt is taken for stale meanwhile, and
 * leaves room for no round of claims ahead of a turn (each waiting attempt is claimed at its turn).
 */
const ONE_SLOT_HUNG = {
  WEBHOOK_ENDPOINT_CONCURRENCY: '1',
  WEBHOOK_TIMEOUT_MS: '100000',
  WEBHOOK_STUCK_AFTER_MS: '150000',
};

describe('deliveries queued behind a hung origin when a PATCH moves the url', () => {
  let stack: WebhookStack;
  let old: Receiver;
  let moved: Receiver | undefined;

  beforeAll(async () => {
    ({ stack, receiver: old } = await stackBesideReceiver({ env: ONE_SLOT_HUNG }));
    old.behave = () => 'hang';
    moved = await anotherReceiver();
  });
  afterAll(async () => {
    await moved?.close();
    await closeBoth(stack, old);
  });

  it('go to the new origin in its slots while the old origin still holds its request', async () => {
    const key = await stack.issue('url-move');
    const sub = await stack.request('POST', '/api/webhooks', key, {
      url: `${new URL(old.url).origin}/old`,
      events: ['trade_call'],
      assets: ['MOVQ'],
    });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    const log = async (): Promise<Delivery[]> =>
      (await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key)).body.deliveries;

    for (let i = 0; i < 3; i++)
      await appendVerdict(stack.store, { coin: 'MOVQ', call: 'BUY', confidence: 60 + i });
    // The first holds the old origin's one slot; the other two wait behind it.
    await old.waitFor(1);
    await until(log, (d) => d.length === 3);

    const patched = await stack.request('PATCH', `/api/webhooks/${sub.body.id}`, key, {
      url: `${new URL(moved!.url).origin}/new`,
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);

    // Sent at the new origin while the old one's request is still hung: they neither wait for nor
    // run in the old origin's slot.
    await moved!.waitFor(2, 60_000);
    expect(moved!.received.map((r) => r.path)).toEqual(['/new', '/new']);
    expect(old.received).toHaveLength(1);
    expect(old.connections.open).toBe(1);
    const deliveries = await until(
      log,
      (d) => d.filter((x) => latest(x).outcome === 'succeeded').length === 2,
    );
    expect(deliveries.map((x) => latest(x).outcome).sort()).toEqual(['pending', 'succeeded', 'succeeded']);
  });
});

/**
 * A short timeout under a long stuck time: the attempts waiting behind the old origin's hung
 * request are taken ahead of their turn (prepared: claimed, or held by their queue lease; see
 * preclaimRounds), so they stay in the old origin's queue when the PATCH moves the url, and are
 * sent in its slot. Their request still goes to the url the subscription has when it starts (the
 * worker's send reads it then): no payload reaches the url the subscriber moved away from.
 */
const CLAIMED_AHEAD = {
  WEBHOOK_ENDPOINT_CONCURRENCY: '1',
  WEBHOOK_TIMEOUT_MS: '3000',
  WEBHOOK_STUCK_AFTER_MS: '60000',
  WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '100',
};

describe('deliveries taken ahead in the old queue when a PATCH moves the url', () => {
  let stack: WebhookStack;
  let old: Receiver;
  let moved: Receiver | undefined;

  beforeAll(async () => {
    ({ stack, receiver: old } = await stackBesideReceiver({ env: CLAIMED_AHEAD }));
    // The first request hangs until the dispatcher's timeout; any later one is answered.
    old.behave = (_request, index) => (index === 0 ? 'hang' : { status: 200 });
    moved = await anotherReceiver();
  });
  afterAll(async () => {
    await moved?.close();
    await closeBoth(stack, old);
  });

  it('are sent to the new url, not the old one', async () => {
    const key = await stack.issue('url-move-ahead');
    const sub = await stack.request('POST', '/api/webhooks', key, {
      url: `${new URL(old.url).origin}/old`,
      events: ['trade_call'],
      assets: ['MOVA'],
    });
    expect(sub.status, JSON.stringify(sub.body)).toBe(201);
    const log = async (): Promise<(Delivery & { seq: number; delivery_id: string })[]> =>
      (await stack.request('GET', `/api/webhooks/${sub.body.id}/deliveries`, key)).body.deliveries;

    for (let i = 0; i < 3; i++)
      await appendVerdict(stack.store, { coin: 'MOVA', call: 'BUY', confidence: 60 + i });
    await old.waitFor(1);
    const waiting = (await until(log, (d) => d.length === 3))
      .filter((d) => d.seq !== 1)
      .map((d) => d.delivery_id);

    const patched = await stack.request('PATCH', `/api/webhooks/${sub.body.id}`, key, {
      url: `${new URL(moved!.url).origin}/new`,
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);

    // The two taken ahead, then the hung one's retry: every request after the PATCH goes to /new.
    const done = await until(log, (d) => d.filter((x) => latest(x).outcome === 'succeeded').length === 3);
    // Taken ahead of their turn, they stayed in the old origin's queue: sent once its hung request ended.
    type Sent = { sent_at: string; latency_ms: number };
    const first = done.find((d) => d.seq === 1)!.attempts[0] as unknown as Sent;
    const hungEnded = Date.parse(first.sent_at) + first.latency_ms;
    for (const d of done.filter((x) => x.seq !== 1))
      expect(Date.parse((latest(d) as unknown as Sent).sent_at)).toBeGreaterThanOrEqual(hungEnded - 5);
    expect(old.received.map((r) => r.path)).toEqual(['/old']);
    expect(moved!.received.map((r) => r.path)).toEqual(['/new', '/new', '/new']);
    expect(new Set(moved!.received.map((r) => r.headers['x-service-delivery']))).toEqual(
      new Set([...waiting, (await log()).find((d) => d.seq === 1)!.delivery_id]),
    );
  }, 120_000);
});
