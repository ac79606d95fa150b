import type { Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDomainEvent } from '../contracts/events.ts';
import { TradeCall } from '../contracts/tools.ts';
import { revokeKey } from '../services/keys/key-commands.ts';
import { PaidServiceMeta, ServiceMeta } from '../services/metering/service-meta.ts';
import { BASE_USDC } from './chain/local-chain.ts';
import {
  fromBase64Json,
  nowSeconds,
  randomNonce,
  signAuthorization,
  startX402Stack,
  v2Header,
  type X402Stack,
} from './chain/x402-app.ts';

/**
 * API keys on the pay-per-call routes: a key in `Authorization: Bearer` is served from its
 * plan quota (real keys issued through the operator command, real quota meter on the in-process
 * cache, real chain for the payment a caller falls back to when the quota runs out).
 */
let stack: X402Stack;
beforeAll(async () => {
  stack = await startX402Stack({ PLAN_STARTER_MONTHLY_CALLS: '2' });
});
afterAll(async () => {
  await stack?.stop();
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

async function eventTypes() {
  return (await stack.store.readAll()).map((e) => parseDomainEvent(e)?.type);
}

const count = (types: (string | undefined)[], type: string) => types.filter((t) => t === type).length;

describe('a valid key is served from its plan quota, not by payment', () => {
  it('answers 200 with the keyed _service and the live quota, debits once, asks for no payment', async () => {
    const { key } = await stack.issue('pro');
    const before = await eventTypes();
    const res = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '1h' },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(200);
    expect(res.headers.get('payment-required')).toBeNull();
    expect(res.headers.get('payment-response')).toBeNull();
    const { _service, ...call } = (await res.json()) as Record<string, unknown>;
    expect(TradeCall.parse(call)).toMatchObject({ coin: 'BTC', timeframe: '1h' });
    const service = ServiceMeta.strict().parse(_service);
    expect(service).toMatchObject({
      auth: { outcome: 'OK', presented: true, tier: 'pro' },
      quota: { used: 1, total: 100_000, remaining: 99_999 },
    });

    const second = await post('/x402/scan_funding_arb', { limit: 2 }, { authorization: `bearer ${key}` });
    expect(second.status).toBe(200);
    expect(ServiceMeta.parse(((await second.json()) as { _service: unknown })._service).quota).toMatchObject({
      used: 2,
      remaining: 99_998,
    });
    const after = await eventTypes();
    // Two calls one after the other: nothing to batch, one debit event each.
    expect(count(after, 'QuotaDebitsRecorded') - count(before, 'QuotaDebitsRecorded')).toBe(2);
    expect(count(after, 'PaymentAuthorized')).toBe(count(before, 'PaymentAuthorized'));
  });

  it('a call that fails is not counted, and its error carries _service', async () => {
    const { key } = await stack.issue('pro');
    const res = await post(
      '/x402/get_market_regime',
      { coin: 'NOPECOIN' },
      { authorization: `Bearer ${key}` },
    );
    expect(res.status).toBe(404);
    const body = (await res.json()) as { code: string; _service: unknown };
    expect(body.code).toBe('unknown_coin');
    expect(ServiceMeta.parse(body._service)).toMatchObject({ auth: { outcome: 'OK' }, quota: { used: 0 } });

    const bad = await post('/x402/get_market_regime', { coin: 5 }, { authorization: `Bearer ${key}` });
    expect(bad.status).toBe(400);
    const badBody = (await bad.json()) as { code: string; _service: unknown };
    expect(badBody.code).toBe('invalid_input');
    expect(ServiceMeta.parse(badBody._service)).toMatchObject({ auth: { tier: 'pro' }, quota: { used: 0 } });
  });
});

describe('keys that must not be served', () => {
  it('an unknown well-formed key → 401 unknown_key; a revoked one too', async () => {
    const { key: unknown } = await stack.issue('pro');
    // A key of the same shape that was never issued: one character changed.
    const forged = `${unknown.slice(0, -1)}${unknown.endsWith('A') ? 'B' : 'A'}`;
    const res = await post('/x402/get_trade_call', { coin: 'BTC' }, { authorization: `Bearer ${forged}` });
    expect(res.status).toBe(401);
    const body = (await res.json()) as { code: string; message: string; _service: unknown };
    expect(body.code).toBe('unknown_key');
    expect(body.message).toMatch(/^unknown API key: no such key was issued/);
    expect(ServiceMeta.parse(body._service)).toEqual({
      // Tier free: the key is not applied, the refusal counts against the anonymous (free) quota.
      auth: { outcome: 'UNKNOWN', presented: true, tier: 'free', detail: 'no such key was issued' },
      // Counted as its address's anonymous caller: the live free quota, not null.
      // A fresh day binds before the month: the block is the day's (100), the month's 200 beside it.
      quota: expect.objectContaining({
        used: 0,
        total: 100,
        remaining: 100,
        monthly: expect.objectContaining({ total: 200 }),
      }),
    });
    expect(res.headers.get('payment-required')).toBeNull();

    const issued = await stack.issue('starter');
    const revoked = await revokeKey(stack.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await stack.keyed.registry.waitFor(revoked);
    const gone = await post(
      '/x402/get_trade_call',
      { coin: 'BTC' },
      { authorization: `Bearer ${issued.key}` },
    );
    expect(gone.status).toBe(401);
    expect(((await gone.json()) as { _service: { auth: { detail: string } } })._service.auth.detail).toBe(
      'this key was revoked',
    );
  });

  it('a refused key on a body refused before the key is checked: _service.auth is the refusal’s, tier free', async () => {
    const issued = await stack.issue('starter');
    const revoked = await revokeKey(stack.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await stack.keyed.registry.waitFor(revoked);
    // Over X402_BODY_LIMIT_BYTES (8 KiB): refused as the body is read, before the route's key check.
    const res = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', pad: 'x'.repeat(16 * 1024) },
      { authorization: `Bearer ${issued.key}` },
    );
    expect(res.status).toBe(413);
    const body = (await res.json()) as { _service: unknown };
    expect(ServiceMeta.parse(body._service).auth).toEqual({
      outcome: 'UNKNOWN',
      presented: true,
      tier: 'free',
      detail: 'this key was revoked',
    });
  });
});

describe('anonymous callers fall through to payment, and _service.auth says why', () => {
  it.each([
    ['no Authorization header', {}, { outcome: 'ABSENT', presented: false, tier: 'free' }],
    [
      'a key under another header name',
      { 'x-api-key': 'sk_live_whatever' },
      { outcome: 'ABSENT', presented: true, tier: 'free', detail: expect.stringContaining('x-api-key') },
    ],
    [
      'Authorization without the Bearer prefix',
      { authorization: 'sk_live_abc' },
      { outcome: 'MALFORMED', presented: true, tier: 'free', detail: expect.stringContaining('Bearer') },
    ],
    [
      'a Bearer token not shaped like a key',
      { authorization: 'Bearer not-a-key' },
      { outcome: 'MALFORMED', presented: true, tier: 'free', detail: expect.stringContaining('sk_live_') },
    ],
  ])('%s → 402 quote', async (_name, headers, auth) => {
    const res = await post('/x402/get_trade_call', { coin: 'BTC', timeframe: '3m' }, headers);
    expect(res.status).toBe(402);
    const body = (await res.json()) as { accepts: { maxAmountRequired: string }[]; _service: unknown };
    expect(body.accepts[0]!.maxAmountRequired).toBe('40000');
    expect(ServiceMeta.parse(body._service)).toEqual({
      auth,
      quota: expect.objectContaining({ total: 100, monthly: expect.objectContaining({ total: 200 }) }),
    });
  });

  // A key in the URL was served as no key at all (ABSENT, nothing presented), the one way of
  // sending a key that _service.auth did not name.
  it('a key in the query string → 402 quote, and _service.auth names the parameter ignored', async () => {
    const res = await post('/x402/get_trade_call?api_key=sk_live_whatever', { coin: 'BTC' }, {});
    expect(res.status).toBe(402);
    const body = (await res.json()) as { _service: unknown };
    expect(ServiceMeta.parse(body._service).auth).toEqual({
      outcome: 'ABSENT',
      presented: true,
      tier: 'free',
      detail: expect.stringContaining('query parameter api_key was ignored'),
    });
  });

  // The quote's resource echoed the whole query, key included, in the body and in PAYMENT-REQUIRED:
  // a quote goes to wallets, facilitators and their logs. The buyer pays for the URL without it.
  it('a key in the query string is not in the quote, and the paid retry with the same query is served', async () => {
    const path = '/x402/get_trade_call?v=1&api_key=sk_live_leaked&access_token=tok';
    const res = await post(path, { coin: 'BTC' });
    expect(res.status).toBe(402);
    const text = await res.text();
    const header = res.headers.get('payment-required')!;
    const required = fromBase64Json<{ accepts: Record<string, unknown>[]; resource: { url: string } }>(
      header,
    );
    for (const leak of ['sk_live_leaked', 'access_token', 'tok']) {
      expect(text).not.toContain(leak);
      expect(JSON.stringify(required)).not.toContain(leak);
    }
    const resource = `${stack.url}/x402/get_trade_call?v=1`;
    expect((JSON.parse(text) as { accepts: { resource: string }[] }).accepts[0]!.resource).toBe(resource);
    expect(required.resource.url).toBe(resource);

    // A wallet echoes the quote's resource with its payment, as the x402 clients do.
    const payer = await stack.chain.fundedPayer(100_000n);
    const now = nowSeconds();
    const authorization = {
      from: payer.address,
      to: stack.payTo,
      value: BigInt(required.accepts[0]!.amount as string),
      validAfter: now - 600n,
      validBefore: now + 120n,
      nonce: randomNonce(),
    };
    const signature = await signAuthorization(payer.key, authorization);
    const signed = fromBase64Json<Record<string, unknown>>(
      v2Header(required.accepts[0]!, authorization, signature),
    );
    const payment = Buffer.from(JSON.stringify({ ...signed, resource: required.resource })).toString(
      'base64',
    );
    const paid = await post(path, { coin: 'BTC' }, { 'payment-signature': payment });
    expect(paid.status).toBe(200);
    await stack.x402.settled();
    const authorized = (await stack.store.readAll())
      .map((e) => parseDomainEvent(e))
      .find((e) => e?.type === 'PaymentAuthorized' && e.data.payer === payer.address);
    expect(authorized?.data).toMatchObject({ resource });
  });
});

describe('an exhausted key can keep going by paying for the call', () => {
  it('429 carries this request’s x402 requirements (v1 body and v2 header); paying with them is served', async () => {
    const { key } = await stack.issue('starter');
    const auth = { authorization: `Bearer ${key}` };
    for (let i = 0; i < 2; i++) {
      expect((await post('/x402/get_market_regime', { coin: 'ETH' }, auth)).status).toBe(200);
    }
    const sent = Date.now();
    const refused = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m', exchange: 'BINANCE_SPOT' },
      auth,
    );
    const answered = Date.now();
    expect(refused.status).toBe(429);
    const body = (await refused.json()) as Record<string, unknown> & {
      accepts: Record<string, unknown>[];
      _service: unknown;
    };
    // Retry-After: whole seconds until the refusing (monthly) window resets, as of when it was answered.
    const resets = Date.parse(ServiceMeta.parse(body._service).quota!.resets_at);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((resets - answered) / 1000));
    expect(retryAfter).toBeLessThanOrEqual(Math.ceil((resets - sent) / 1000));
    expect(body).toMatchObject({
      code: 'quota_exhausted',
      window: 'monthly',
      x402Version: 1,
      message: expect.stringMatching(/^the monthly quota of this key is used up \(resets \d{4}-/),
    });
    expect(body.accepts).toEqual([
      expect.objectContaining({
        network: 'base',
        maxAmountRequired: '30000',
        payTo: stack.payTo,
        resource: `${stack.url}/x402/get_trade_call`,
      }),
    ]);
    expect(ServiceMeta.parse(body._service)).toMatchObject({
      auth: { outcome: 'OK', tier: 'starter' },
      quota: { used: 2, total: 2, remaining: 0 },
    });
    const required = fromBase64Json<{ x402Version: number; accepts: Record<string, unknown>[] }>(
      refused.headers.get('payment-required'),
    );
    expect(required.x402Version).toBe(2);
    expect(required.accepts[0]).toMatchObject({ network: 'eip155:8453', amount: '30000', asset: BASE_USDC });

    // The agent retries the same request, key still attached, paying with the quoted terms.
    const payer = await stack.chain.fundedPayer(200_000n);
    const now = nowSeconds();
    const authorization = {
      from: payer.address,
      to: stack.payTo,
      value: 30_000n,
      validAfter: now - 600n,
      validBefore: now + 120n,
      nonce: randomNonce(),
    };
    const signature = await signAuthorization(payer.key, authorization);
    const paid = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m', exchange: 'BINANCE_SPOT' },
      { ...auth, 'payment-signature': v2Header(required.accepts[0]!, authorization, signature) },
    );
    expect(paid.status).toBe(200);
    const served = (await paid.json()) as { timeframe: string; _service: unknown };
    expect(served.timeframe).toBe('5m');
    const service = PaidServiceMeta.strict().parse(served._service);
    expect(service).toMatchObject({
      auth: { outcome: 'OK', tier: 'starter' },
      // Paid, so not debited: the quota is as the 429 left it.
      quota: { used: 2, remaining: 0 },
      payment: { status: 'pending', amount: '30000', payer: payer.address, network: 'eip155:8453' },
    });
    const receipt = fromBase64Json<{ success: boolean; transaction: Hex }>(
      paid.headers.get('payment-response'),
    );
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    await stack.x402.settled();
    expect(receipt.transaction).toBe(service.payment.transaction);
    expect(await stack.chain.balanceOf(payer.address)).toBe(170_000n);
  });
});

describe('a key that cannot be verified right now', () => {
  it('→ 503 key_unverifiable, retryable, with _service; nothing served or quoted', async () => {
    const { key } = await stack.issue('pro');
    await stack.keyed.registry.stop();
    const res = await post('/x402/get_trade_call', { coin: 'BTC' }, { authorization: `Bearer ${key}` });
    expect(res.status).toBe(503);
    expect(res.headers.get('payment-required')).toBeNull();
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      code: 'key_unverifiable',
      retryable: true,
      message: expect.stringContaining('retry shortly'),
    });
    expect(ServiceMeta.parse(body._service)).toMatchObject({
      // The key is not applied: tier free, as the anonymous quota below; detail says why.
      auth: { outcome: 'INDETERMINATE', presented: true, tier: 'free', detail: 'retry shortly' },
      // The key cannot be checked, the counters can: its address's free quota.
      quota: expect.objectContaining({ monthly: expect.objectContaining({ total: 200 }) }),
    });
    expect((body._service as { auth: object }).auth).toEqual({
      outcome: 'INDETERMINATE',
      presented: true,
      tier: 'free',
      detail: 'retry shortly',
    });
  });
});
