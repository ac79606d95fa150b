import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import type { Receiver } from '../../test/webhooks-receiver.ts';
import {
  closeBoth,
  HUNG_HOLDS,
  latest,
  settled,
  stackBesideReceiver,
  tenants,
} from '../../test/webhooks-shared-origin.ts';

/**
 * Two API keys with subscriptions on one origin (one HTTPS receiver, a path each): tenant B's path
 * never answers, tenant A's answers at once. The receiver tells them apart by the coin each
 * subscription takes.
 */
async function twoTenants(stack: WebhookStack, receiver: Receiver, coins: { a: string; b: string }) {
  receiver.behave = (request) => (request.body.includes(`"${coins.b}"`) ? 'hang' : { status: 200 });
  const [a, b] = await tenants(stack, receiver, [coins.a, coins.b]);
  return { a: a!, b: b! };
}

describe('another key on the same origin', () => {
  describe('with a request hung in its only slot', () => {
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      ({ stack, receiver } = await stackBesideReceiver({
        env: {
          WEBHOOK_ENDPOINT_CONCURRENCY: '1',
          ...HUNG_HOLDS,
        },
      }));
    });
    afterAll(() => closeBoth(stack, receiver));

    it("does not hold this key's deliveries behind it", async () => {
      const log = await twoTenants(stack, receiver, { a: 'SLOTA', b: 'SLOTB' });
      await appendVerdict(stack.store, { coin: 'SLOTB', call: 'BUY', confidence: 70 });
      // B's request is at the receiver, unanswered: it holds B's one slot (and a connection).
      await receiver.waitFor(1);
      for (let i = 0; i < 3; i++)
        await appendVerdict(stack.store, { coin: 'SLOTA', call: 'BUY', confidence: 60 + i });
      const a = await until(log.a, settled(3));
      expect(a.map((d) => d.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      // Delivered while B's request was still hung: its one delivery has no outcome yet. Sharing the
      // origin's slot (or its connection pool), A's would have waited for B's timeout.
      const b = await log.b();
      expect(b).toHaveLength(1);
      expect(b[0]!.attempts.map((x) => [x.attempt, x.outcome])).toEqual([[1, 'pending']]);
      expect(receiver.received.filter((r) => r.body.includes('"SLOTA"'))).toHaveLength(3);
    });
  });

  describe('whose breaker is open', () => {
    const registry = new Registry();
    const metric = async (name: string, labels: string) => {
      const line = (await registry.metrics()).split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
      return line === undefined ? null : Number(line.split(' ').at(-1));
    };
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      ({ stack, receiver } = await stackBesideReceiver({
        env: {
          WEBHOOK_ENDPOINT_CONCURRENCY: '1',
          WEBHOOK_TIMEOUT_MS: '300',
          WEBHOOK_BREAKER_TIMEOUTS: '1',
          // The probe only after a minute: B's breaker stays open for the whole test.
          WEBHOOK_RETRY_SCHEDULE: '0,60000',
          WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '100',
        },
        registry,
      }));
    });
    afterAll(() => closeBoth(stack, receiver));

    it("holds only that key's deliveries: this key's are sent", async () => {
      const log = await twoTenants(stack, receiver, { a: 'BRKA', b: 'BRKB' });
      await appendVerdict(stack.store, { coin: 'BRKB', call: 'BUY', confidence: 70 });
      // One timeout opens B's breaker; B's next delivery is held by it.
      await until(log.b, (d) => settled(1)(d) && /^timeout/.test(latest(d[0]!).error ?? ''));
      await appendVerdict(stack.store, { coin: 'BRKB', call: 'BUY', confidence: 71 });
      await until(log.b, (d) => d.length === 2 && d.some((x) => latest(x).outcome === 'held'));

      for (let i = 0; i < 3; i++)
        await appendVerdict(stack.store, { coin: 'BRKA', call: 'BUY', confidence: 60 + i });
      const a = await until(log.a, settled(3));
      // Sent and answered, none held by B's breaker (one origin's shared breaker held them all).
      expect(a.map((d) => latest(d).outcome)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      expect(a.every((d) => latest(d).attempt === 1)).toBe(true);
      expect(receiver.received.filter((r) => r.body.includes('"BRKA"'))).toHaveLength(3);

      // A's answers closed nothing of B's: its breaker is still open, and holds B's next one.
      await appendVerdict(stack.store, { coin: 'BRKB', call: 'BUY', confidence: 72 });
      const b = await until(log.b, settled(3));
      const held = b.map(latest).filter((x) => x.outcome === 'held');
      expect(held).toHaveLength(2);
      expect(held.every((x) => /circuit open/.test(x.error ?? '') && x.attempt === null)).toBe(true);
      // One receiver request of B's: its first, timed out; nothing since.
      expect(receiver.received.filter((r) => r.body.includes('"BRKB"'))).toHaveLength(1);
      // One endpoint open: B's on the origin; A's there is closed.
      expect(await metric('webhook_endpoints', 'breaker_state="open"')).toBe(1);
    });
  });
});

describe("another key's subscription id", () => {
  let stack: WebhookStack;
  let receiver: Receiver;

  beforeAll(async () => {
    ({ stack, receiver } = await stackBesideReceiver({ env: {} }));
  });
  afterAll(() => closeBoth(stack, receiver));

  it('is answered as an unknown id by PATCH and disable, and nothing of it changes', async () => {
    const owner = await stack.issue('tenant-owner');
    const stranger = await stack.issue('tenant-stranger');
    const created = await stack.request('POST', '/api/webhooks', owner, {
      url: `${new URL(receiver.url).origin}/owner/hook`,
      events: ['trade_call'],
      assets: ['OWNA'],
    });
    expect(created.status).toBe(201);
    const id: string = created.body.id;
    const unknown = 'wh_AAAAAAAAAAAAAAAA';
    const asked: [string, string, unknown][] = [
      ['PATCH', '', { min_confidence: 90 }],
      ['PATCH', '', { url: `${new URL(receiver.url).origin}/stranger/hook` }],
      ['POST', '/disable', undefined],
      ['POST', '/disable', {}],
    ];
    for (const [method, tail, body] of asked) {
      const theirs = await stack.request(method, `/api/webhooks/${id}${tail}`, stranger, body);
      const none = await stack.request(method, `/api/webhooks/${unknown}${tail}`, stranger, body);
      expect(none.status).toBe(404);
      // The same answer, the id it names aside: another key's subscription is not said to exist.
      const { _service: _a, ...theirsBody } = theirs.body;
      const { _service: _b, ...noneBody } = none.body;
      expect([theirs.status, JSON.stringify(theirsBody).replaceAll(id, '<id>')]).toEqual([
        none.status,
        JSON.stringify(noneBody).replaceAll(unknown, '<id>'),
      ]);
    }
    const [mine] = (await stack.request('GET', '/api/webhooks', owner)).body.webhooks;
    expect(mine).toMatchObject({ id, status: 'active', url: created.body.url, assets: ['OWNA'] });
    expect(mine.min_confidence).toBeUndefined();
    const written = (await stack.store.readAll({ after: 0, maxCount: 10_000 })).map((e) => e.type);
    expect(written.filter((t) => t === 'SubscriptionUpdated' || t === 'SubscriptionDisabled')).toEqual([]);
  });
});
