import { randomUUID } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { generatePaymentId, PAYMENT_IDENTIFIER } from '@x402/extensions/payment-identifier';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache } from '../adapters/cache/redis.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { ERRORS } from '../contracts/errors.ts';
import { chainReadersFor } from '../services/payments/chain-reader.ts';
import type { LocalFacilitator } from '../services/payments/local-facilitator.ts';
import { paymentStream } from '../services/payments/payment-state.ts';
import { PaymentReconciler } from '../services/payments/reconcile.ts';
import { BASE_USDC, FACILITATOR_KEY, type LocalChain, startLocalChain } from './chain/local-chain.ts';
import {
  type AuthorizationFields,
  authorizationJson,
  freshAuthorization,
  fromBase64Json,
  randomNonce,
  signAuthorization,
  startX402Stack,
  toBase64Json,
  v2Header,
  type X402Stack,
} from './chain/x402-app.ts';
import { readableHeaders, undeclaredHeaders } from './openapi-headers.ts';
import { REDIS_URL, redisUnreachable, wipePrefix } from './redis-probe.ts';

/**
 * What a paying customer must never lose, on anvil through real HTTP: the request and the
 * reconciler agree, a lost answer is given back, no surplus authorisation reaches the chain, and
 * a nonce is one payer's on one rail.
 */

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const PRICE = 20_000n;

let chain: LocalChain;
let stack: X402Stack;
let accepted: Record<string, unknown>;
const FACILITATOR = privateKeyToAccount(FACILITATOR_KEY).address;

beforeAll(async () => {
  chain = await startLocalChain();
  stack = await startX402Stack({}, chain);
  const res = await post(BODY, {});
  accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(res.headers.get('payment-required'))
    .accepts[0]!;
});
afterAll(async () => {
  await stack?.stop();
  await chain?.stop();
});

function post(body: unknown, headers: Record<string, string>, on: X402Stack = stack) {
  return fetch(`${on.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

function authFor(from: Hex, overrides: Partial<AuthorizationFields> = {}): AuthorizationFields {
  return freshAuthorization(stack.payTo, from, PRICE, overrides);
}

/** A v2 PAYMENT-SIGNATURE, optionally with the x402 payment-identifier extension. */
async function paymentHeader(
  key: Hex,
  auth: AuthorizationFields,
  paymentId?: string,
  requirement: Record<string, unknown> = accepted,
): Promise<string> {
  return v2Header(requirement, auth, await signAuthorization(key, auth), paymentId);
}

function stripService(body: Record<string, unknown>): Record<string, unknown> {
  const { _service: _drop, ...rest } = body;
  return rest;
}

describe('1. the request and the reconciler converge on one settlement', () => {
  it('a reconciler that records "settled with T" first leaves the request served, one PaymentSettled', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const local = stack.x402.facilitator as LocalFacilitator;
    const reconciler = new PaymentReconciler({
      store: stack.store,
      chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
      olderThanMs: 0,
    });
    // Another replica's reconciler: it runs between the chain confirming the transfer and the
    // request recording it, the window in which the request used to hit a revision conflict.
    let reconciled: Awaited<ReturnType<PaymentReconciler['runOnce']>> | null = null;
    let armed = true;
    local.facilitator.onAfterSettle(async () => {
      if (!armed) return;
      armed = false;
      reconciled = await reconciler.runOnce();
    });
    const auth = authFor(payer.address);
    const header = await paymentHeader(payer.key, auth);
    const res = await post(BODY, { 'payment-signature': header });
    expect(res.status).toBe(200);
    const served = (await res.json()) as Record<string, unknown>;
    await stack.x402.settled();
    expect(reconciled).toMatchObject({ settled: 1 });

    const events = await stack.paymentEvents(auth.nonce, payer.address);
    expect(events.map((e) => e.type)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
    expect(events[3]).toMatchObject({ data: { reconciled: true } });
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    // And the payer still gets the answer and the settled receipt for that payment.
    const again = await post(BODY, { 'payment-signature': header });
    expect(again.status).toBe(200);
    const replay = (await again.json()) as Record<string, unknown> & {
      _service: { payment: { status: string; transaction: string } };
    };
    expect(stripService(replay)).toEqual(stripService(served));
    expect(replay._service.payment.status).toBe('settled');
    expect(replay._service.payment.transaction).toBe((events[3]!.data as { txHash: string }).txHash);
  });

  it('configuration refuses a reconcile delay within the settle wait', () => {
    expect(() =>
      loadConfig({ X402_RECONCILE_AFTER_MS: '1000', X402_SETTLE_CONFIRM_TIMEOUT_MS: '20000' }),
    ).toThrow(/X402_RECONCILE_AFTER_MS.*longer than the settle wait \(20000 ms/s);
    expect(() =>
      loadConfig({
        X402_FACILITATOR: 'remote',
        X402_FACILITATOR_URL: 'https://facilitator.example',
        X402_FACILITATOR_TIMEOUT_MS: '30000',
        X402_RECONCILE_AFTER_MS: '30000',
      }),
    ).toThrow(/X402_FACILITATOR_TIMEOUT_MS/);
    expect(loadConfig({ X402_RECONCILE_AFTER_MS: '20001' }).X402_RECONCILE_AFTER_MS).toBe(20_001);
  });
});

describe('2. a paid answer is never lost', () => {
  it('the answer of a dropped connection comes back for the same payment, charged once', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const auth = authFor(payer.address);
    const header = await paymentHeader(payer.key, auth);
    // The client sends the paid request and hangs up before the answer.
    await new Promise<void>((resolve, reject) => {
      const url = new URL(`${stack.url}${PATH}`);
      const req = httpRequest(
        { host: url.hostname, port: url.port, path: url.pathname, method: 'POST' },
        () => reject(new Error('the answer should not have been read')),
      );
      req.setHeader('content-type', 'application/json');
      req.setHeader('payment-signature', header);
      req.on('error', () => resolve());
      req.end(JSON.stringify(BODY), () => setTimeout(() => req.destroy(), 5));
      req.on('close', () => resolve());
    });
    // The server went on: the payment settles without anyone reading the answer.
    await expect.poll(() => chain.authorizationState(payer.address, auth.nonce)).toBe(true);
    await stack.x402.settled();
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);

    const again = await post(BODY, { 'payment-signature': header });
    expect(again.status).toBe(200);
    expect(again.headers.get('x-payment-replayed')).toBe('true');
    // The settlement and replay headers are in the document for a generated client to read.
    const doc = (await (await fetch(`${stack.url}/openapi.json`)).json()) as {
      paths: Record<string, { post: { responses: Record<string, { headers?: Record<string, unknown> }> } }>;
    };
    expect(readableHeaders(again.headers)).toEqual(
      expect.arrayContaining(['payment-response', 'x-payment-replayed']),
    );
    expect(undeclaredHeaders(doc.paths[PATH]!.post.responses['200'], again.headers)).toEqual([]);
    const body = (await again.json()) as { regime: string; _service: { payment: { status: string } } };
    expect(body.regime).toEqual(expect.any(String));
    expect(body._service.payment.status).toBe('settled');
    expect(fromBase64Json(again.headers.get('payment-response'))).toMatchObject({ success: true });
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
  });

  it('the kept answer outlives the replica that served it (CACHE=redis): another replica gives it back', async () => {
    expect(await redisUnreachable(), 'Redis is required for the replica test').toBeNull();
    const prefix = `test:x402:kept:${randomUUID()}:`;
    const caches = await Promise.all([0, 1].map(() => connectRedisCache({ url: REDIS_URL, prefix })));
    const store = new MemoryEventStore();
    const env = { X402_PAY_TO: privateKeyToAccount(randomNonce()).address };
    let first: X402Stack | null = await startX402Stack(env, chain, caches[0], { store });
    let second: X402Stack | null = null;
    try {
      const quote = await fetch(`${first.url}${PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(BODY),
      });
      const offer = fromBase64Json<{ accepts: Record<string, unknown>[] }>(
        quote.headers.get('payment-required'),
      ).accepts[0]!;
      const payer = await chain.fundedPayer(100_000n);
      const auth = { ...authFor(payer.address), to: env.X402_PAY_TO };
      const header = toBase64Json({
        x402Version: 2,
        accepted: offer,
        payload: {
          signature: await signAuthorization(payer.key, auth),
          authorization: authorizationJson(auth),
        },
      });
      const send = (url: string) =>
        fetch(`${url}${PATH}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'payment-signature': header },
          body: JSON.stringify(BODY),
        });
      const served = await send(first.url);
      expect(served.status).toBe(200);
      const body = (await served.json()) as Record<string, unknown>;
      await first.x402.settled();
      // The replica goes away, and everything it held in memory with it.
      await first.stop();
      first = null;
      second = await startX402Stack(env, chain, caches[1], { store });
      const again = await send(second.url);
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      expect(stripService((await again.json()) as Record<string, unknown>)).toEqual(stripService(body));
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await first?.stop();
      await second?.stop();
      for (const cache of caches) await cache.close();
      await wipePrefix(prefix);
    }
  });

  it('a retry with a new authorisation under the same payment id gets the kept answer; the new one is not used', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const id = generatePaymentId('pay_');
    const first = await post(BODY, {
      'payment-signature': await paymentHeader(payer.key, authFor(payer.address), id),
    });
    expect(first.status).toBe(200);
    const served = (await first.json()) as Record<string, unknown>;
    await stack.x402.settled();

    const retryAuth = authFor(payer.address);
    const retry = await post(BODY, { 'payment-signature': await paymentHeader(payer.key, retryAuth, id) });
    expect(retry.status).toBe(200);
    expect(retry.headers.get('x-payment-replayed')).toBe('true');
    expect(stripService((await retry.json()) as Record<string, unknown>)).toEqual(stripService(served));
    await stack.x402.settled();
    expect(await chain.authorizationState(payer.address, retryAuth.nonce)).toBe(false);
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);

    // Someone who knows the payer's address and payment id but not their key gets nothing back:
    // the id is looked up only after a fresh authorisation from the payer verifies.
    const stranger = await chain.fundedPayer(100_000n);
    const forged = await post(BODY, {
      'payment-signature': await paymentHeader(stranger.key, authFor(payer.address), id),
    });
    expect(forged.status).toBe(402);
    expect(forged.headers.get('x-payment-replayed')).toBeNull();
    expect(JSON.stringify(await forged.json())).not.toContain(JSON.stringify(served.verdict ?? served));

    // Another request under the same id is a conflict: refused, nothing served or charged.
    const otherAuth = authFor(payer.address);
    const other = await post(
      { coin: 'ETH', timeframe: '1h' },
      { 'payment-signature': await paymentHeader(payer.key, otherAuth, id) },
    );
    expect(other.status).toBe(409);
    expect(await other.json()).toMatchObject({ code: 'payment_identifier_conflict' });
    expect(await chain.authorizationState(payer.address, otherAuth.nonce)).toBe(false);
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
  });

  it('the 402 declares the payment-identifier extension', async () => {
    const res = await post(BODY, {});
    const required = fromBase64Json<{ extensions: Record<string, { info: unknown }> }>(
      res.headers.get('payment-required'),
    );
    expect(required.extensions[PAYMENT_IDENTIFIER]).toMatchObject({ info: { required: false } });
  });
});

describe('3. no surplus authorisation reaches the chain', () => {
  it('five concurrent calls on a balance for two: two served and settled, three refused, no reverted transaction', async () => {
    const payer = await chain.fundedPayer(2n * PRICE + PRICE / 2n);
    const sentBefore = await chain.publicClient.getTransactionCount({ address: FACILITATOR });
    const auths = Array.from({ length: 5 }, () => authFor(payer.address));
    const headers = await Promise.all(auths.map((auth) => paymentHeader(payer.key, auth)));
    // Blocks every second, as on Base: a settlement is still unmined when the next one is checked,
    // which is when the surplus used to reach the chain and revert (5 sent, 3 reverted).
    await chain.testClient.setAutomine(false);
    await chain.testClient.setIntervalMining({ interval: 1 });
    let responses: Response[];
    try {
      responses = await Promise.all(headers.map((header) => post(BODY, { 'payment-signature': header })));
      await stack.x402.settled();
    } finally {
      await chain.testClient.setIntervalMining({ interval: 0 });
      await chain.testClient.setAutomine(true);
    }

    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 402, 402, 402]);
    for (const res of responses.filter((r) => r.status === 402)) {
      const refused = (await res.json()) as { code: string; message: string };
      expect(refused.code).toBe('insufficient_funds');
      // Not retryable (the catalog's word): the settlements in flight take the same from the
      // balance, so the text must not send the payer back to retry once they settle.
      expect(ERRORS.insufficient_funds.retryable).toBe(false);
      expect(refused.message).not.toMatch(/\bretry\b/);
      expect(refused.message).toContain('refused again until the payer holds more');
    }
    // Only the two served calls were sent to the chain, and both landed.
    expect(await chain.publicClient.getTransactionCount({ address: FACILITATOR })).toBe(sentBefore + 2);
    expect(await chain.balanceOf(payer.address)).toBe(PRICE / 2n);
    const used = await Promise.all(auths.map((auth) => chain.authorizationState(payer.address, auth.nonce)));
    expect(used.filter(Boolean)).toHaveLength(2);
  });
});

describe('3b. replicas share one in-flight sum per payer (CACHE=redis)', () => {
  it('six concurrent calls on a balance for two, spread over two replicas: two served, four refused, none reverted', async () => {
    expect(await redisUnreachable(), 'Redis is required for the replica test').toBeNull();
    const prefix = `test:x402:replicas:${randomUUID()}:`;
    const caches = await Promise.all([0, 1].map(() => connectRedisCache({ url: REDIS_URL, prefix })));
    const replicas = await Promise.all(caches.map((cache) => startX402Stack({}, chain, cache)));
    try {
      // One payTo for both, as replicas of one deployment share their configuration.
      const quotes = await Promise.all(
        replicas.map(async (replica) => {
          const res = await fetch(`${replica.url}${PATH}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(BODY),
          });
          return fromBase64Json<{ accepts: Record<string, unknown>[] }>(res.headers.get('payment-required'))
            .accepts[0]!;
        }),
      );
      const payer = await chain.fundedPayer(2n * PRICE + PRICE / 2n);
      const sentBefore = await chain.publicClient.getTransactionCount({ address: FACILITATOR });
      const calls = await Promise.all(
        Array.from({ length: 6 }, async (_, i) => {
          const r = i % 2;
          const auth = { ...authFor(payer.address), to: quotes[r]!.payTo as Hex };
          const signature = await signAuthorization(payer.key, auth);
          const header = toBase64Json({
            x402Version: 2,
            accepted: quotes[r],
            payload: {
              signature,
              authorization: authorizationJson(auth),
            },
          });
          return { r, header };
        }),
      );
      await chain.testClient.setAutomine(false);
      await chain.testClient.setIntervalMining({ interval: 1 });
      let responses: Response[];
      try {
        responses = await Promise.all(
          calls.map(({ r, header }) =>
            fetch(`${replicas[r]!.url}${PATH}`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', 'payment-signature': header },
              body: JSON.stringify(BODY),
            }),
          ),
        );
        await Promise.all(replicas.map((replica) => replica.x402.settled()));
      } finally {
        await chain.testClient.setIntervalMining({ interval: 0 });
        await chain.testClient.setAutomine(true);
      }
      expect(responses.map((res) => res.status).sort()).toEqual([200, 200, 402, 402, 402, 402]);
      // Refused up front on the shared sum, not left to fail at settlement on another replica.
      for (const res of responses.filter((r) => r.status === 402)) {
        expect(await res.json()).toMatchObject({ code: 'insufficient_funds' });
      }
      expect(await chain.publicClient.getTransactionCount({ address: FACILITATOR })).toBe(sentBefore + 2);
      expect(await chain.balanceOf(payer.address)).toBe(PRICE / 2n);
    } finally {
      for (const replica of replicas) await replica.stop();
      for (const cache of caches) await cache.close();
      await wipePrefix(prefix);
    }
  });
});

describe('4. a payment is (network, asset, payer, nonce)', () => {
  it('two payers using the same nonce are both served and both charged', async () => {
    const a = await chain.fundedPayer(100_000n);
    const b = await chain.fundedPayer(100_000n);
    const nonce = randomNonce();
    const first = await post(BODY, {
      'payment-signature': await paymentHeader(a.key, authFor(a.address, { nonce })),
    });
    expect(first.status).toBe(200);
    const firstTx = ((await first.json()) as { _service: { payment: { transaction: string } } })._service
      .payment.transaction;
    const second = await post(BODY, {
      'payment-signature': await paymentHeader(b.key, authFor(b.address, { nonce })),
    });
    const secondBody = (await second.json()) as { _service: { payment: { transaction: string } } };
    expect(second.status, JSON.stringify(secondBody)).toBe(200);
    expect(secondBody._service.payment.transaction).not.toBe(firstTx);
    await stack.x402.settled();
    expect(await chain.balanceOf(a.address)).toBe(100_000n - PRICE);
    expect(await chain.balanceOf(b.address)).toBe(100_000n - PRICE);
  });

  it('the payment stream differs by network, asset and payer', () => {
    const base = {
      network: 'eip155:8453',
      asset: BASE_USDC,
      payer: `0x${'11'.repeat(20)}`,
      nonce: randomNonce(),
    };
    const streams = new Set([
      paymentStream(base),
      paymentStream({ ...base, network: 'eip155:84532' }),
      paymentStream({ ...base, asset: `0x${'22'.repeat(20)}` }),
      paymentStream({ ...base, payer: `0x${'33'.repeat(20)}` }),
    ]);
    expect(streams.size).toBe(4);
    expect(paymentStream({ ...base, payer: base.payer.toUpperCase().replace('0X', '0x') })).toBe(
      paymentStream(base),
    );
  });
});

/**
 * A paid call replayed while its settlement is broadcast but not yet confirmed, on an anvil that
 * mines a block every 2 s (as Base does): the first answer names the broadcast transaction while
 * the log still records the payment pending without it, until the settle call ends. The replay
 * (a client retrying at once after a dropped connection) must get a receipt the x402 clients read
 * as paid, naming the same transaction, never `settlement_pending`.
 */
describe('2b. a replay during the settlement window', () => {
  let slow: LocalChain;
  let slowStack: X402Stack;
  let slowAccepted: Record<string, unknown>;
  beforeAll(async () => {
    slow = await startLocalChain({ blockTime: 2 });
    slowStack = await startX402Stack({}, slow);
    const quote = await post(BODY, {}, slowStack);
    slowAccepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(
      quote.headers.get('payment-required'),
    ).accepts[0]!;
  });
  afterAll(async () => {
    await slowStack?.stop();
    await slow?.stop();
  });

  it('names the broadcast transaction as paid, as the first answer did, and charges once', async () => {
    const payer = await slow.fundedPayer(100_000n);
    const header = await paymentHeader(
      payer.key,
      freshAuthorization(slowStack.payTo, payer.address, PRICE),
      undefined,
      slowAccepted,
    );
    const first = await post(BODY, { 'payment-signature': header }, slowStack);
    expect(first.status).toBe(200);
    const firstBody = (await first.json()) as {
      _service: { payment: { status: string; transaction: string } };
    };
    // The window this test is about: answered at the broadcast, before the block that confirms it.
    expect(firstBody._service.payment.status).toBe('pending');
    const transaction = firstBody._service.payment.transaction;
    expect(transaction).toMatch(/^0x[0-9a-f]{64}$/);
    expect(fromBase64Json(first.headers.get('payment-response'))).toMatchObject({
      success: true,
      transaction,
    });

    const again = await post(BODY, { 'payment-signature': header }, slowStack);
    expect(again.status).toBe(200);
    expect(again.headers.get('x-payment-replayed')).toBe('true');
    expect(fromBase64Json(again.headers.get('payment-response'))).toMatchObject({
      success: true,
      transaction,
    });
    const body = (await again.json()) as { _service: { payment: { transaction: string | null } } };
    expect(body._service.payment.transaction).toBe(transaction);

    await slowStack.x402.settled();
    expect(await slow.balanceOf(payer.address)).toBe(100_000n - PRICE);
  });
});
