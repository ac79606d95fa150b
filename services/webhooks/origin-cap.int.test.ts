import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import type { Receiver } from '../../test/webhooks-receiver.ts';
import {
  anotherReceiver,
  closeBoth,
  HUNG_HOLDS,
  latest,
  settled,
  stackBesideReceiver,
  tenants,
} from '../../test/webhooks-shared-origin.ts';

/**
 * One slot per key, and a timeout no case outlasts: a hung send holds its key's slot until the
 * receiver closes, so no case turns on that timeout running out under load.
 */
const ONE_SLOT_HUNG = { WEBHOOK_ENDPOINT_CONCURRENCY: '1', WEBHOOK_TIMEOUT_MS: '100000' };

/** Subscribes `key` to BTC trade calls at `url`; the function returned asks for a test send of it. */
async function testSender(stack: WebhookStack, key: string, url: string): Promise<() => Promise<Response>> {
  const sub = await stack.request('POST', '/api/webhooks', key, {
    url,
    events: ['trade_call'],
    assets: ['BTC'],
  });
  expect(sub.status).toBe(201);
  return () =>
    fetch(`${stack.url}/api/webhooks/${sub.body.id}/test`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
    });
}

describe('WEBHOOK_ORIGIN_CONCURRENCY', () => {
  describe('four keys on one origin, each with slots for four', () => {
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      ({ stack, receiver } = await stackBesideReceiver({
        env: { WEBHOOK_ENDPOINT_CONCURRENCY: '4', WEBHOOK_ORIGIN_CONCURRENCY: '4' },
      }));
      // Slow but healthy: each request holds its connection a while, so a key's four overlap.
      receiver.behave = () => ({ status: 200, afterMs: 150 });
    });
    afterAll(() => closeBoth(stack, receiver));

    it('opens no more connections to the origin than the cap, and delivers every key its own', async () => {
      const coins = ['CAPA', 'CAPB', 'CAPC', 'CAPD'];
      const logs = await tenants(stack, receiver, coins);
      for (let i = 0; i < 6; i++)
        for (const coin of coins) await appendVerdict(stack.store, { coin, call: 'BUY', confidence: 60 + i });
      for (const log of logs) {
        const d = await until(log, settled(6));
        expect(d.map((x) => latest(x).outcome)).toEqual(Array(6).fill('succeeded'));
      }
      expect(receiver.received).toHaveLength(24);
      // Unbounded, up to 16 at once (four keys' four slots); the pool alone would bound it too,
      // but then one key's hung requests would hold the others' (below).
      expect(receiver.connections.peak).toBeGreaterThan(0);
      expect(receiver.connections.peak).toBeLessThanOrEqual(4);
    });
  });

  describe("another key's requests hung at the same origin", () => {
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      ({ stack, receiver } = await stackBesideReceiver({
        env: {
          WEBHOOK_ENDPOINT_CONCURRENCY: '2',
          WEBHOOK_ORIGIN_CONCURRENCY: '2',
          ...HUNG_HOLDS,
        },
      }));
    });
    afterAll(() => closeBoth(stack, receiver));

    it("hold that key's share of the cap, not this key's deliveries", async () => {
      receiver.behave = (request) => (request.body.includes('"SHAREB"') ? 'hang' : { status: 200 });
      const [a, b] = await tenants(stack, receiver, ['SHAREA', 'SHAREB']);
      // B first, more than its share: had it taken both of the origin's connections, A would wait
      // for their timeout.
      for (let i = 0; i < 3; i++)
        await appendVerdict(stack.store, { coin: 'SHAREB', call: 'BUY', confidence: 70 + i });
      await receiver.waitFor(1);
      for (let i = 0; i < 3; i++)
        await appendVerdict(stack.store, { coin: 'SHAREA', call: 'BUY', confidence: 60 + i });
      const delivered = await until(a!, settled(3));
      expect(delivered.map((d) => latest(d).outcome)).toEqual(['succeeded', 'succeeded', 'succeeded']);
      // While B's one request is still hung (its outcome not in), and B had no second one out.
      const held = await b!();
      expect(held.length).toBeGreaterThan(0);
      expect(held.flatMap((d) => d.attempts).every((x) => x.outcome === 'pending')).toBe(true);
      expect(receiver.received.filter((r) => r.body.includes('"SHAREB"'))).toHaveLength(1);
      expect(receiver.received.filter((r) => r.body.includes('"SHAREA"'))).toHaveLength(3);
      expect(receiver.connections.peak).toBeLessThanOrEqual(2);
    });
  });

  describe("the api role's test sends, another key's receiver hung on the same origin", () => {
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      // One slot per key: the api role's pool held one connection per origin, every key's.
      ({ stack, receiver } = await stackBesideReceiver({ env: ONE_SLOT_HUNG }));
    });
    afterAll(() => closeBoth(stack, receiver));

    it("answer this key's test send while the other key's is still hung", async () => {
      receiver.behave = (request) => (request.path.startsWith('/tenant-b/') ? 'hang' : { status: 200 });
      const origin = new URL(receiver.url).origin;
      const testA = await testSender(stack, await stack.issue('tenant-a'), `${origin}/tenant-a/hook`);
      const testB = await testSender(stack, await stack.issue('tenant-b'), `${origin}/tenant-b/dead`);
      let bAnswered = false;
      const b = testB().then((answer) => {
        bAnswered = true;
        return answer;
      });
      await receiver.waitFor(1);
      const a = await testA();
      expect(a.status).toBe(200);
      expect(await a.json()).toMatchObject({ delivered: true });
      // Answered while B's test send was still hung (sharing the origin's pool, after its timeout).
      expect(bAnswered).toBe(false);
      expect(receiver.received.map((r) => r.path)).toEqual(['/tenant-b/dead', '/tenant-a/hook']);
      await receiver.close();
      expect(await (await b).json()).toMatchObject({ delivered: false });
    });
  });

  describe("a key's test sends while its own receiver hangs", () => {
    let stack: WebhookStack;
    let receiver: Receiver;

    beforeAll(async () => {
      ({ stack, receiver } = await stackBesideReceiver({ env: ONE_SLOT_HUNG }));
    });
    afterAll(() => closeBoth(stack, receiver));

    it('refuses a second test send of the key at once (429, retry_after_ms) instead of queueing it behind the first; another key is not limited', async () => {
      receiver.behave = (request) => (request.path.startsWith('/hung/') ? 'hang' : { status: 200 });
      const origin = new URL(receiver.url).origin;
      const testHung = await testSender(stack, await stack.issue('tenant-hung'), `${origin}/hung/hook`);
      const testOther = await testSender(stack, await stack.issue('tenant-other'), `${origin}/other/hook`);
      const first = testHung();
      await receiver.waitFor(1);
      // Before, this one waited behind the first for the key's slot, holding its request for as
      // long as the receiver hung (here until it closes), and any number more could join it.
      const second = await testHung();
      const refused = (await second.json()) as { code: string; message: string; retry_after_ms: number };
      expect(second.status, JSON.stringify(refused)).toBe(429);
      expect(refused.code).toBe('RATE_LIMITED');
      expect(refused.message).toMatch(/still waiting for its receiver/);
      expect(refused.retry_after_ms).toBeGreaterThan(0);
      expect(refused.retry_after_ms).toBeLessThanOrEqual(100_000);
      expect(Number(second.headers.get('retry-after'))).toBe(Math.ceil(refused.retry_after_ms / 1_000));
      expect(receiver.received.map((r) => r.path)).toEqual(['/hung/hook']);
      // Another key's test send on the same origin goes.
      const other = await testOther();
      expect(other.status).toBe(200);
      expect(await other.json()).toMatchObject({ delivered: true, status: 200 });
      // Once the first is answered (the receiver closed: not delivered) the key's next one goes.
      await receiver.close();
      expect(await (await first).json()).toMatchObject({ delivered: false });
      const after = await testHung();
      expect(after.status).toBe(200);
      await after.body?.cancel();
    });
  });

  describe("a key's test send to one of its origins while another of its origins hangs", () => {
    let stack: WebhookStack;
    let hung: Receiver;
    let elsewhere: Receiver;

    beforeAll(async () => {
      ({ stack, receiver: hung } = await stackBesideReceiver({ env: ONE_SLOT_HUNG }));
      elsewhere = await anotherReceiver();
    });
    afterAll(async () => {
      await elsewhere?.close();
      await closeBoth(stack, hung);
    });

    it('goes at once: the one-at-a-time rule is per receiver origin, as the slots are', async () => {
      hung.behave = () => 'hang';
      const key = await stack.issue('tenant-two-origins');
      const toHung = await testSender(stack, key, `${new URL(hung.url).origin}/hook`);
      const toElsewhere = await testSender(stack, key, `${new URL(elsewhere.url).origin}/hook`);
      const first = toHung();
      await hung.waitFor(1);
      // Before, refused 429 while the send to the hung origin waited, though it takes another slot.
      const other = await toElsewhere();
      expect(other.status).toBe(200);
      expect(await other.json()).toMatchObject({ delivered: true, status: 200 });
      expect(elsewhere.received).toHaveLength(1);
      // The hung origin's own rule still holds.
      const again = await toHung();
      expect(again.status).toBe(429);
      await again.body?.cancel();
      await hung.close();
      expect(await (await first).json()).toMatchObject({ delivered: false });
    });
  });
});
