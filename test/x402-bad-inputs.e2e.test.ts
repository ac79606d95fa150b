import { gzipSync } from 'node:zlib';
import type { Hex } from 'viem';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BASE_USDC } from './chain/local-chain.ts';
import {
  type AuthorizationFields,
  authorizationJson,
  freshAuthorization,
  fromBase64Json,
  nowSeconds,
  signAuthorization,
  startX402Stack,
  toBase64Json,
  v1Header,
  v2Header,
  type X402Stack,
} from './chain/x402-app.ts';
import { rawRequest } from './raw-http.ts';

let stack: X402Stack;
let accepted: Record<string, unknown>;
const PATH = '/x402/get_market_regime';
const BODY = { coin: 'ETH', timeframe: '1h' };
const PRICE = 20_000n;
const OTHER: Hex = '0x000000000000000000000000000000000000dEaD';
/** Errors carry `_service` too: here an anonymous caller, not metered on the paid routes. */
// Every answer carries the anonymous caller's live free quota, a 402 quote and a refusal too.
const ANONYMOUS = {
  auth: { outcome: 'ABSENT', presented: false, tier: 'free' },
  quota: expect.objectContaining({ monthly: expect.objectContaining({ total: 200 }) }),
};

beforeAll(async () => {
  stack = await startX402Stack();
  const res = await post(PATH, BODY);
  accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(res.headers.get('payment-required'))
    .accepts[0]!;
});
afterAll(async () => {
  await stack?.stop();
});

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

const JSON_TYPE = { 'content-type': 'application/json' };

/**
 * POSTs `body` to this file's route with the fields as given (an array sends a field once per
 * value, which fetch cannot); the status and body.
 */
async function rawPost(
  headers: Record<string, string | string[]>,
  body: string,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const { status, body: answer } = await rawRequest(`${stack.url}${PATH}`, { headers, body });
  return { status, body: answer };
}

async function payer(amount = 1_000_000n) {
  return stack.chain.fundedPayer(amount);
}

function authFor(from: Hex, overrides: Partial<AuthorizationFields> = {}): AuthorizationFields {
  return freshAuthorization(stack.payTo, from, PRICE, overrides);
}

async function balances(address: Hex) {
  return { payer: await stack.chain.balanceOf(address), payTo: await stack.chain.balanceOf(stack.payTo) };
}

async function streamTypes(nonce: Hex) {
  return (await stack.paymentEvents(nonce)).map((e) => e.type);
}

async function expect402(res: Response, code: string, message: string | RegExp) {
  expect(res.status).toBe(402);
  const body = (await res.json()) as Record<string, unknown>;
  expect(body).toMatchObject({
    x402Version: 1,
    code,
    accepts: [expect.objectContaining({ maxAmountRequired: '20000' })],
  });
  if (typeof message === 'string') expect(body.message).toBe(message);
  else expect(body.message).toMatch(message);
  expect(body._service).toEqual(ANONYMOUS);
  expect(body.error).toBe(body.message);
  expect(fromBase64Json<{ error: string }>(res.headers.get('payment-required')).error).toBe(body.message);
}

describe('a refused payment moves no money and reserves nothing', () => {
  it.each([
    [
      'tampered signature',
      async (a: AuthorizationFields, sig: Hex) =>
        v2Header(accepted, a, `${sig.slice(0, 10)}${sig[10] === 'a' ? 'b' : 'a'}${sig.slice(11)}` as Hex),
      'invalid_exact_evm_signature',
      'the signature does not match the authorisation (wrong key, asset domain or tampered field)',
    ],
    [
      'authorisation to another recipient',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const other = { ...a, to: OTHER };
        return v2Header(accepted, other, await signAuthorization(key, other));
      },
      'invalid_exact_evm_recipient_mismatch',
      'the authorisation pays a different recipient than the quote',
    ],
    [
      'quote echoed with another recipient',
      async (a: AuthorizationFields, sig: Hex) => v2Header({ ...accepted, payTo: OTHER }, a, sig),
      'recipient_mismatch',
      /^payTo 0x000000000000000000000000000000000000dEaD is not the quoted recipient/,
    ],
    [
      'quote echoed with its payTo in lower case (a client that lowercases addresses)',
      async (a: AuthorizationFields, sig: Hex) =>
        v2Header({ ...accepted, payTo: String(accepted.payTo).toLowerCase() }, a, sig),
      'terms_mismatch',
      /^the accepted payment terms differ from the quote of this request: accepted\.payTo "0x[0-9a-f]{40}" is the quote's "0x[0-9a-fA-F]{40}" in another letter case; send this request's quote back unchanged$/,
    ],
    // A signed amount other than the quote's is amount_mismatch on both versions, as an echoed
    // quote of another amount is (below), told before the facilitator is asked.
    [
      'amount too low',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const low = { ...a, value: PRICE - 1n };
        return v2Header(accepted, low, await signAuthorization(key, low));
      },
      'amount_mismatch',
      "the authorisation's value 19999 (0.019999 USDC) does not match the price 20000 (0.020000 USDC) of this request; sign an authorisation for exactly the quoted amount",
    ],
    [
      'amount too low (v1)',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const low = { ...a, value: PRICE - 1n };
        return v1Header(low, await signAuthorization(key, low));
      },
      'amount_mismatch',
      "the authorisation's value 19999 (0.019999 USDC) does not match the price 20000 (0.020000 USDC) of this request; sign an authorisation for exactly the quoted amount",
    ],
    [
      'amount too high (v1)',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const high = { ...a, value: PRICE + 1n };
        return v1Header(high, await signAuthorization(key, high));
      },
      'amount_mismatch',
      "the authorisation's value 20001 (0.020001 USDC) does not match the price 20000 (0.020000 USDC) of this request; sign an authorisation for exactly the quoted amount",
    ],
    [
      'amount too high',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const high = { ...a, value: PRICE + 1n };
        return v2Header(
          { ...accepted, amount: String(PRICE + 1n) },
          high,
          await signAuthorization(key, high),
        );
      },
      'amount_mismatch',
      "the authorisation's value 20001 (0.020001 USDC) does not match the price 20000 (0.020000 USDC) of this request; sign an authorisation for exactly the quoted amount",
    ],
    [
      'expired authorisation',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const expired = { ...a, validBefore: nowSeconds() - 5n };
        return v2Header(accepted, expired, await signAuthorization(key, expired));
      },
      'invalid_exact_evm_payload_authorization_valid_before',
      'the authorisation has expired (validBefore is past or too close)',
    ],
    [
      'authorisation valid for years',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const years = { ...a, validBefore: nowSeconds() + 10n * 365n * 86_400n };
        return v2Header(accepted, years, await signAuthorization(key, years));
      },
      'invalid_exact_evm_payload_authorization_valid_before',
      /^validBefore is more than \d+ s ahead \(the quote's maxTimeoutSeconds/,
    ],
    [
      'not yet valid authorisation',
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const early = { ...a, validAfter: nowSeconds() + 600n };
        return v2Header(accepted, early, await signAuthorization(key, early));
      },
      'invalid_exact_evm_payload_authorization_valid_after',
      "the authorisation is not valid yet (validAfter must be before the chain's latest block); sign it with validAfter in the past",
    ],
    [
      // The host's clock passes it; the transfer simulated on the latest block reverts (block.timestamp > validAfter).
      "valid from the latest block's time (validAfter = now as the chain reads it)",
      async (a: AuthorizationFields, _s: Hex, key: Hex) => {
        const { timestamp } = await stack.chain.publicClient.getBlock({ blockTag: 'latest' });
        const fromNow = { ...a, validAfter: timestamp };
        return v1Header(fromNow, await signAuthorization(key, fromNow));
      },
      'invalid_exact_evm_payload_authorization_valid_after',
      "the authorisation is not valid yet (validAfter must be before the chain's latest block); sign it with validAfter in the past",
    ],
    [
      'wrong network (v2)',
      async (a: AuthorizationFields, _s: Hex, key: Hex) =>
        v2Header(
          { ...accepted, network: 'eip155:84532' },
          a,
          await signAuthorization(key, a, { chainId: 84532 }),
        ),
      'network_mismatch',
      'network eip155:84532 is not accepted here (accepted: eip155:8453)',
    ],
    [
      'paid for another route of the same price (v2 resource)',
      async (a: AuthorizationFields, sig: Hex) =>
        toBase64Json({
          x402Version: 2,
          accepted,
          resource: { url: `${stack.url}/x402/get_trade_call`, mimeType: 'application/json' },
          payload: { signature: sig, authorization: authorizationJson(a) },
        }),
      'terms_mismatch',
      /^the accepted payment terms differ from the quote of this request: it pays for http:\/\/127\.0\.0\.1:\d+\/x402\/get_trade_call, not get_market_regime; pay with this request's quote$/,
    ],
    [
      'wrong network (v1)',
      async (a: AuthorizationFields, sig: Hex) => v1Header(a, sig, 'base-sepolia'),
      'network_mismatch',
      'network "base-sepolia" is not accepted here (accepted: base)',
    ],
    [
      'wrong asset (v2)',
      async (a: AuthorizationFields, _s: Hex, key: Hex) =>
        v2Header(
          { ...accepted, asset: OTHER },
          a,
          await signAuthorization(key, a, { verifyingContract: OTHER }),
        ),
      'asset_mismatch',
      // The asset accepted on that network is named, as a wrong network names the networks accepted.
      `asset 0x000000000000000000000000000000000000dEaD is not accepted on eip155:8453 (accepted: ${BASE_USDC})`,
    ],
    [
      'wrong asset (v1: signed for another token)',
      async (a: AuthorizationFields, _s: Hex, key: Hex) =>
        v1Header(a, await signAuthorization(key, a, { verifyingContract: OTHER })),
      'invalid_exact_evm_signature',
      'the signature does not match the authorisation (wrong key, asset domain or tampered field)',
    ],
    [
      'wrong EIP-712 domain name',
      async (a: AuthorizationFields, _s: Hex, key: Hex) =>
        v1Header(a, await signAuthorization(key, a, { name: 'USDC' })),
      'invalid_exact_evm_signature',
      'the signature does not match the authorisation (wrong key, asset domain or tampered field)',
    ],
  ])('%s → 402 with its reason', async (_name, build, code, message) => {
    const p = await payer();
    const auth = authFor(p.address);
    const sig = await signAuthorization(p.key, auth);
    const header = await build(auth, sig, p.key);
    const isV1 = fromBase64Json<{ x402Version: number }>(header).x402Version === 1;
    const before = await balances(p.address);
    const res = await post(PATH, BODY, { [isV1 ? 'x-payment' : 'payment-signature']: header });
    await expect402(res, code, message);
    expect(await balances(p.address)).toEqual(before);
    expect(await streamTypes(auth.nonce)).toEqual([]);
    expect(await stack.chain.authorizationState(p.address, auth.nonce)).toBe(false);
  });

  it('a payer without the funds → 402 invalid_exact_evm_insufficient_balance (diagnosed through Multicall3)', async () => {
    const p = await payer(PRICE - 1n);
    const auth = authFor(p.address);
    const res = await post(PATH, BODY, { 'x-payment': v1Header(auth, await signAuthorization(p.key, auth)) });
    await expect402(
      res,
      'invalid_exact_evm_insufficient_balance',
      // Before the change: no amounts named.
      'the payer does not hold enough of the asset: the payer holds 19999 (0.019999 USDC), the quote asks 20000 (0.020000 USDC)',
    );
    expect(await stack.chain.balanceOf(p.address)).toBe(PRICE - 1n);
  });

  it.each([
    ['not base64', '%%%not-base64%%%', 'X-PAYMENT: the payment header is not base64'],
    [
      'empty',
      '',
      'X-PAYMENT: the payment header is empty; send the base64-encoded payment, or leave the header out to be quoted',
    ],
    [
      'base64 but not JSON',
      Buffer.from('{nope').toString('base64'),
      'X-PAYMENT: the payment header is base64 but not JSON',
    ],
    [
      'JSON of the wrong shape',
      toBase64Json({ x402Version: 1, scheme: 'exact', network: 'base', payload: { signature: 'x' } }),
      'X-PAYMENT: payload.signature must be hex; got "x"; payload.authorization is required: it must be an object',
    ],
    ['oversized', 'A'.repeat(13_000), 'X-PAYMENT is 13000 characters; at most 12288 are accepted'],
    [
      'a v2 payment in the v1 header',
      toBase64Json({ x402Version: 2, accepted: {}, payload: {} }),
      'X-PAYMENT carries an x402 v2 payment; send it in PAYMENT-SIGNATURE (X-PAYMENT takes v1)',
    ],
    [
      'sent twice, joined by a comma as Node joins a repeated header',
      `${toBase64Json({ x402Version: 1 })}, ${toBase64Json({ x402Version: 1 })}`,
      'X-PAYMENT was sent more than once; send one payment in one X-PAYMENT header',
    ],
  ])('malformed header (%s) → 402 invalid_payment_header', async (_name, value, message) => {
    const res = await post(PATH, BODY, { 'x-payment': value });
    await expect402(res, 'invalid_payment_header', message);
  });
});

describe("a v2 payment's resource", () => {
  it('names the route whatever its origin and base path (PUBLIC_BASE_URL may carry one): served', async () => {
    const p = await payer();
    const auth = authFor(p.address);
    const header = toBase64Json({
      x402Version: 2,
      accepted,
      resource: {
        url: 'https://api.example/base/x402/get_market_regime?from=quote',
        mimeType: 'application/json',
      },
      payload: { signature: await signAuthorization(p.key, auth), authorization: authorizationJson(auth) },
    });
    const res = await post(PATH, BODY, { 'payment-signature': header });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ coin: 'ETH', timeframe: '1h' });
    await stack.x402.settled();
    expect(await stack.chain.authorizationState(p.address, auth.nonce)).toBe(true);
  });
});

describe('an absolute-form request (POST http://host/x402/..., RFC 9112 §3.2.2), which the router serves', () => {
  it("is quoted and reserved with the route's URL as its resource, not <origin>http://host/x402/...", async () => {
    // fetch sends the origin form only.
    const target = `${stack.url}${PATH}`;
    const quoted = await rawRequest(target, { target, headers: JSON_TYPE, body: JSON.stringify(BODY) });
    expect(quoted.status).toBe(402);
    const quote = fromBase64Json<{ resource: { url: string } }>(
      quoted.headers.get('payment-required') ?? null,
    );
    expect(quote.resource.url).toBe(`${stack.url}${PATH}`);

    const p = await payer();
    const auth = authFor(p.address);
    const paid = await rawRequest(target, {
      target,
      headers: { ...JSON_TYPE, 'x-payment': v1Header(auth, await signAuthorization(p.key, auth)) },
      body: JSON.stringify(BODY),
    });
    expect(paid.status).toBe(200);
    await stack.x402.settled();
    const authorized = (await stack.paymentEvents(auth.nonce)).find((e) => e.type === 'PaymentAuthorized');
    expect((authorized?.data as { resource?: string } | undefined)?.resource).toBe(`${stack.url}${PATH}`);
  });
});

describe('replays', () => {
  it('the same payment presented again gets the stored answer and its receipt; money moves once', async () => {
    const p = await payer();
    const auth = authFor(p.address);
    const header = v2Header(accepted, auth, await signAuthorization(p.key, auth));
    const first = await post(PATH, BODY, { 'payment-signature': header });
    expect(first.status).toBe(200);
    const firstBody = (await first.json()) as Record<string, unknown>;
    const tx = fromBase64Json<{ transaction: string }>(first.headers.get('payment-response')).transaction;
    await stack.x402.settled();
    const again = await post(PATH, BODY, { 'payment-signature': header });
    expect(again.status).toBe(200);
    expect(again.headers.get('x-payment-replayed')).toBe('true');
    const againBody = (await again.json()) as Record<string, unknown> & { _service: { payment: unknown } };
    const { _service: _a, ...served } = firstBody;
    const { _service: againService, ...replayed } = againBody;
    expect(replayed).toEqual(served);
    expect(againService.payment).toMatchObject({ status: 'settled', transaction: tx });
    expect(fromBase64Json(again.headers.get('payment-response'))).toMatchObject({
      success: true,
      transaction: tx,
    });
    // Another request under the same payment is a conflict, never served.
    const other = await post(PATH, { ...BODY, timeframe: '4h' }, { 'payment-signature': header });
    expect(other.status).toBe(409);
    // Before the change: no retryable, where the tools' 404 and 422 refusals say false.
    expect(await other.json()).toMatchObject({
      code: 'payment_already_used',
      message:
        'this payment already paid for another request, or its answer is no longer kept: sent again it is refused again; sign a new authorisation (a new nonce) for this request',
      retryable: false,
    });
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n - PRICE);
    expect(await streamTypes(auth.nonce)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
  });

  it('eight concurrent requests with one authorisation: one is served and charged, the others get the same answer, never a quote', async () => {
    const p = await payer();
    const auth = authFor(p.address);
    const header = v1Header(auth, await signAuthorization(p.key, auth));
    const before = await stack.chain.balanceOf(stack.payTo);
    const responses = await Promise.all(
      Array.from({ length: 8 }, () => post(PATH, BODY, { 'x-payment': header })),
    );
    await stack.x402.settled();
    // One is served fresh; the duplicates wait for its outcome and get the same answer (no quote).
    expect(responses.map((r) => r.status)).toEqual(Array(8).fill(200));
    expect(responses.filter((r) => r.headers.get('x-payment-replayed') === null)).toHaveLength(1);
    for (const res of responses) expect(res.headers.get('payment-required')).toBeNull();
    const answers = await Promise.all(
      responses.map(async (r) => {
        const { _service: _drop, ...answer } = (await r.json()) as Record<string, unknown>;
        return JSON.stringify(answer);
      }),
    );
    expect(new Set(answers).size).toBe(1);
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n - PRICE);
    expect(await stack.chain.balanceOf(stack.payTo)).toBe(before + PRICE);
    expect(await streamTypes(auth.nonce)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
  });
});

describe('a POST without payment is quoted whatever its body; the body is judged once a payment comes', () => {
  it('every paid route answers an empty POST (as discovery indexers probe) with its 402 quote', async () => {
    for (const tool of stack.x402.tools) {
      const res = await fetch(`${stack.url}/x402/${tool.name}`, { method: 'POST' });
      expect(res.status, tool.name).toBe(402);
      const quote = fromBase64Json<{ accepts: { amount: string }[]; resource: { url: string } }>(
        res.headers.get('payment-required'),
      );
      expect(quote.resource.url).toBe(`${stack.url}/x402/${tool.name}`);
      // An unreadable body is quoted at the tool's base price.
      expect(quote.accepts[0]!.amount).toBe(String(tool.price(null)));
      expect(((await res.json()) as { code: string }).code).toBe('payment_required');
    }
  });

  it.each([
    [{ coin: 5 }],
    [{ coin: 'ETH', timeframe: '7m' }],
    [{ coin: 'ETH', surprise: true }],
    ['{"coin":'],
    [{}],
  ])('%j without payment → 402 with the quote', async (body) => {
    const res = await post(PATH, body);
    expect(res.status).toBe(402);
    const quote = fromBase64Json<{ accepts: { amount: string }[] }>(res.headers.get('payment-required'));
    expect(quote.accepts[0]!.amount).toBe(String(PRICE));
  });

  it.each([
    [{ coin: 5 }, 'coin must be a string of 1 to 20 characters; got 5'],
    [{ coin: 'ETH', timeframe: '7m' }, /^timeframe must be one of 1m, .*; got "7m"$/],
    [{ coin: 'ETH', surprise: true }, '(body): unknown key "surprise"; accepted: coin, timeframe, exchange'],
    ['{"coin":', 'the body is not valid JSON'],
  ])('%j with a payment → 400 invalid_input, nothing reserved or charged', async (body, message) => {
    const p = await payer();
    const auth = authFor(p.address);
    const res = await post(PATH, body, { 'x-payment': v1Header(auth, await signAuthorization(p.key, auth)) });
    expect(res.status).toBe(400);
    expect(res.headers.get('payment-required')).toBeNull();
    expect(res.headers.get('x-payment-response')).toBeNull();
    const json = (await res.json()) as { code: string; message: string };
    expect(json.code).toBe('invalid_input');
    if (typeof message === 'string') expect(json.message).toBe(message);
    else expect(json.message).toMatch(message);
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n);
    expect(await stack.chain.authorizationState(p.address, auth.nonce)).toBe(false);
    expect(await streamTypes(auth.nonce)).toEqual([]);
  });

  it('a body over the limit → 413', async () => {
    const res = await post(PATH, { coin: 'ETH', pad: 'x'.repeat(9000) });
    expect(res.status).toBe(413);
    // The message names the route's limit (X402_BODY_LIMIT_BYTES), so the caller knows how far to cut.
    expect(await res.json()).toMatchObject({
      code: 'BODY_TOO_LARGE',
      message: 'the body is larger than this route accepts (at most 8192 bytes)',
      retryable: false,
    });
  });
});

describe('a request refused before its caller is known', () => {
  it('two Authorization or Host fields → 400 BAD_REQUEST without `_service`, as on /api: neither key is read', async () => {
    const body = JSON.stringify(BODY);
    const key = `Bearer sk_live_${'a'.repeat(43)}`;
    for (const [header, values] of [
      ['Authorization', [key, 'Bearer other']],
      ['Authorization', ['Basic x', key]],
      ['Host', [new URL(stack.url).host, '127.0.0.2']],
    ] as [string, string[]][]) {
      const fields = { ...JSON_TYPE, [header]: values };
      expect(await rawPost(fields, body), JSON.stringify(fields)).toEqual({
        status: 400,
        body: {
          code: 'BAD_REQUEST',
          message: `${header} was sent more than once; send it exactly once`,
          retryable: false,
        },
      });
    }
  });
});

describe('invalid_content_type', () => {
  const body = JSON.stringify(BODY);
  it('Content-Type sent twice → 400', async () => {
    const res = await rawPost({ 'content-type': ['application/json', 'application/json'] }, body);
    expect(res).toEqual({
      status: 400,
      body: {
        code: 'invalid_content_type',
        message: 'Content-Type was sent more than once; send it exactly once',
        retryable: false,
        _service: ANONYMOUS,
      },
    });
  });

  it('two JSON media types merged into one header → 400', async () => {
    const res = await fetch(`${stack.url}${PATH}`, {
      method: 'POST',
      headers: [
        ['content-type', 'application/json'],
        ['content-type', 'application/json'],
      ],
      body,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      code: 'invalid_content_type',
      message:
        'Content-Type "application/json, application/json" joins several media types; send exactly application/json',
      retryable: false,
      _service: ANONYMOUS,
    });
  });

  it('two JSON media types joined by ";" in one header → 400, not quoted', async () => {
    for (const contentType of [
      'application/json;application/json',
      'application/json; charset=utf-8; application/json',
    ]) {
      const res = await post(PATH, BODY, { 'content-type': contentType });
      expect(res.status).toBe(400);
      expect(await res.json()).toEqual({
        code: 'invalid_content_type',
        message: `Content-Type "${contentType}" joins several media types; send exactly application/json`,
        retryable: false,
        _service: ANONYMOUS,
      });
    }
  });

  it('a string body as text/plain → 400', async () => {
    const res = await rawPost({ 'content-type': 'text/plain' }, '"ETH"');
    expect(res).toEqual({
      status: 400,
      body: {
        code: 'invalid_content_type',
        message:
          'Content-Type "text/plain" is not accepted; send the body as JSON with Content-Type: application/json',
        retryable: false,
        _service: ANONYMOUS,
      },
    });
  });

  it('a body with a Content-Encoding (gzip…) → 400, not quoted and not read as plain JSON', async () => {
    // A plain body labelled gzip was quoted (and, keyed, served) as if uncompressed; a real gzip
    // body was quoted at the base price and then called "not valid JSON" without saying why.
    for (const sent of [Buffer.from(body), gzipSync(body)]) {
      const res = await rawRequest(`${stack.url}${PATH}`, {
        headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
        body: sent,
      });
      expect({ status: res.status, body: res.body }).toEqual({
        status: 400,
        body: {
          code: 'invalid_content_type',
          message: 'the body is sent with Content-Encoding gzip; send it uncompressed, as application/json',
          retryable: false,
          _service: ANONYMOUS,
        },
      });
    }
    // identity names no coding: quoted as any JSON body.
    const plain = await rawPost({ 'content-type': 'application/json', 'content-encoding': 'identity' }, body);
    expect(plain.status).toBe(402);
  });

  it('after a verified payment: 400, nothing charged, the nonce released and usable on retry', async () => {
    const p = await payer();
    const auth = authFor(p.address);
    const header = v1Header(auth, await signAuthorization(p.key, auth));
    const res = await fetch(`${stack.url}${PATH}`, {
      method: 'POST',
      headers: [
        ['content-type', 'application/json'],
        ['content-type', 'application/json'],
        ['x-payment', header],
      ],
      body,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string }).code).toBe('invalid_content_type');
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n);
    expect(await stack.chain.authorizationState(p.address, auth.nonce)).toBe(false);
    expect(await streamTypes(auth.nonce)).toEqual(['PaymentAuthorized', 'PaymentReleased']);

    const retry = await post(PATH, BODY, { 'x-payment': header });
    expect(retry.status).toBe(200);
    // The answer leaves once the transfer is broadcast; its receipt is recorded in the background.
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n - PRICE);
    expect(await streamTypes(auth.nonce)).toEqual([
      'PaymentAuthorized',
      'PaymentReleased',
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
  });
});

describe('handler failure', () => {
  it('an unknown coin → 404 unknown_coin, nothing charged, payment released', async () => {
    const p = await payer();
    const auth = authFor(p.address);
    const res = await post(
      PATH,
      { coin: 'NOPECOIN', timeframe: '1h' },
      { 'x-payment': v1Header(auth, await signAuthorization(p.key, auth)) },
    );
    expect(res.status).toBe(404);
    expect(res.headers.get('x-payment-response')).toBeNull();
    const body = (await res.json()) as { code: string; message: string };
    expect(body.code).toBe('unknown_coin');
    expect(body.message).toContain('NOPECOIN');
    expect(await stack.chain.balanceOf(p.address)).toBe(1_000_000n);
    expect(await streamTypes(auth.nonce)).toEqual(['PaymentAuthorized', 'PaymentReleased']);
    const released = (await stack.paymentEvents(auth.nonce))[1]!;
    expect(released.data).toMatchObject({ reason: 'handler failed with 404 unknown_coin', asset: BASE_USDC });
  });
});
