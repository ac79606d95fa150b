import type { ServerResponse } from 'node:http';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import { selfSignedCert } from '../../test/webhooks-receiver.ts';

/**
 * `failing_since` (GET /api/webhooks) as README.md defines it, on real parts (the API on a port,
 * the relay, the dispatcher) and a receiver that answers 500 and then 200: the first failed
 * attempt since the last success, set at a delivery's first failed attempt while its retry is to
 * come (not once the delivery has failed for good), cleared by a success, and set again from the
 * first failed attempt of the next failing run. An attempt claimed before the last success whose
 * failure comes after it dates failing_since by its claim: before last_success_at.
 */
const tls = selfSignedCert();

/** An HTTPS receiver whose every answer is given by the test: `answer(i, status)` ends request i. */
async function heldReceiver() {
  const held: ServerResponse[] = [];
  const waiters: (() => void)[] = [];
  const server = createServer({ key: tls.key, cert: tls.cert }, (req, res) => {
    req.resume();
    req.on('end', () => {
      held.push(res);
      for (const wake of waiters.splice(0)) wake();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    /** Resolves once request `count` (1-based) has come. */
    async requests(count: number): Promise<void> {
      while (held.length < count) await new Promise<void>((wake) => waiters.push(wake));
    },
    answer(index: number, status: number): void {
      held[index]!.writeHead(status, { 'content-type': 'text/plain' }).end(`status ${status}`);
    },
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * One stack for both cases, each with its own key, coin and receiver (so its own endpoint): a
 * retry 100 ms after a failure (the harness's schedule), two requests out at once to an endpoint,
 * and no timeout running out while the test holds an answer.
 */
let stack: WebhookStack;
beforeAll(async () => {
  stack = await startWebhookStack({
    bus: 'memory',
    env: {
      WEBHOOK_TIMEOUT_MS: '100000',
      WEBHOOK_STUCK_AFTER_MS: '600000',
      WEBHOOK_ENDPOINT_CONCURRENCY: '2',
    },
    settings: { tls: { ca: tls.cert } },
  });
});
afterAll(async () => {
  await stack?.close();
});

describe('failing_since against a receiver answering 500, then 200', () => {
  let receiver: Awaited<ReturnType<typeof heldReceiver>>;

  beforeAll(async () => {
    receiver = await heldReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
  });

  it('is the first failed attempt since the last success, set while its delivery is still retried', async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['FSINCEA'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    type Row = { failing_since: string | null; last_success_at: string | null };
    const row = async (): Promise<Row> =>
      ((await stack.request('GET', '/api/webhooks', key)).body.webhooks as ({ id: string } & Row)[]).find(
        (w) => w.id === id,
      )!;
    type Attempt = { attempt: number | null; attempted_at: string; outcome: string };
    type Delivery = { delivery_id: string; status: string; attempts: Attempt[] };
    const deliveries = async (): Promise<Delivery[]> =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries`, key)).body.deliveries as Delivery[];

    // A failing run: the first attempt answered 500, its retry held unanswered.
    await appendVerdict(stack.store, { coin: 'FSINCEA', call: 'BUY', confidence: 61 });
    await receiver.requests(1);
    receiver.answer(0, 500);
    await receiver.requests(2);
    const failing = await until(row, (r) => r.failing_since !== null);
    const [first] = await deliveries();
    // The delivery has not failed: its retry is out. failing_since is its first failed attempt.
    expect(first!.status).toBe('pending');
    expect(first!.attempts[0]).toMatchObject({ attempt: 1, outcome: 'failed' });
    expect(failing).toMatchObject({ failing_since: first!.attempts[0]!.attempted_at, last_success_at: null });

    // The retry answered 200: a success ends the run.
    receiver.answer(1, 200);
    const healed = await until(row, (r) => r.last_success_at !== null);
    expect(healed.failing_since).toBeNull();

    // The next failing run starts at its own first failed attempt, after the success.
    await appendVerdict(stack.store, { coin: 'FSINCEA', call: 'SELL', confidence: 62 });
    await receiver.requests(3);
    receiver.answer(2, 500);
    await receiver.requests(4);
    const again = await until(row, (r) => r.failing_since !== null);
    const second = (await deliveries()).find((d) => d.delivery_id !== first!.delivery_id)!;
    expect(second.status).toBe('pending');
    expect(again).toMatchObject({
      failing_since: second.attempts[0]!.attempted_at,
      last_success_at: healed.last_success_at,
    });
    expect(Date.parse(again.failing_since!)).toBeGreaterThanOrEqual(Date.parse(healed.last_success_at!));
    receiver.answer(3, 200);
    expect((await until(row, (r) => r.failing_since === null)).last_success_at).not.toBe(
      healed.last_success_at,
    );
  });
});

describe('failing_since when an attempt claimed before a success fails after it', () => {
  let receiver: Awaited<ReturnType<typeof heldReceiver>>;

  beforeAll(async () => {
    receiver = await heldReceiver();
  });
  afterAll(async () => {
    await receiver?.close();
  });

  it("is that attempt's attempted_at, which the last success came after", async () => {
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: receiver.url,
      events: ['trade_call'],
      assets: ['FSINCEB'],
    });
    const id = created.body.id as string;
    type Row = { failing_since: string | null; last_success_at: string | null };
    const row = async (): Promise<Row> =>
      ((await stack.request('GET', '/api/webhooks', key)).body.webhooks as ({ id: string } & Row)[]).find(
        (w) => w.id === id,
      )!;
    await appendVerdict(stack.store, { coin: 'FSINCEB', call: 'BUY', confidence: 61 });
    await appendVerdict(stack.store, { coin: 'FSINCEB', call: 'SELL', confidence: 62 });
    // Both out at once: the second answered 200, then the first 500.
    await receiver.requests(2);
    receiver.answer(1, 200);
    await until(row, (r) => r.last_success_at !== null);
    receiver.answer(0, 500);
    const failing = await until(row, (r) => r.failing_since !== null);
    // Its retry (100 ms on) is held unanswered: the delivery stays pending, its first attempt failed.
    await receiver.requests(3);
    type Delivery = { status: string; attempts: { attempted_at: string; outcome: string }[] };
    const log = (await stack.request('GET', `/api/webhooks/${id}/deliveries`, key)).body
      .deliveries as Delivery[];
    const failed = log.find((d) => d.attempts[0]?.outcome === 'failed')!;
    expect(failed.status).toBe('pending');
    expect(failing.failing_since).toBe(failed.attempts[0]!.attempted_at);
    expect(Date.parse(failing.failing_since!)).toBeLessThanOrEqual(Date.parse(failing.last_success_at!));
  });
});
