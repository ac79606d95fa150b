import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { x402Client } from '@x402/core/client';
import type { PaymentRequired } from '@x402/core/types';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { pino } from 'pino';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { ConfigError, DEVELOPMENT_RAIL, loadConfig } from '../contracts/config.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import { DEVELOPMENT_SECOND_RAIL } from '../services/payments/rails.ts';
import { setupX402 } from '../services/payments/setup.ts';
import { type RunningService, startService } from '../services/service.ts';
import { BASE_USDC } from './chain/local-chain.ts';
import { fromBase64Json, randomNonce, signAuthorization, v1Header, v2Header } from './chain/x402-app.ts';

/**
 * `npm start` on the embedded defaults: no X402_PAY_TO, no facilitator key. Quotes are served
 * on the development rail (Base Sepolia test USDC to a public test address); a paid retry is
 * refused before anything is verified, reserved or charged: 402 with the mismatch when its terms
 * (or its signed amount) differ from the quote, else 503 facilitator_not_configured.
 */
const lines: Record<string, unknown>[] = [];
const logger = pino(
  { level: 'info' },
  new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)) as Record<string, unknown>);
      done();
    },
  }),
);

let dir: string;
let service: RunningService;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'x402-dev-'));
  // Defaults, except what isolates this run: its own data directory and port, the replay feed.
  service = await startService(
    loadConfig({ FEED: 'replay', DATA_DIR: dir, PORT: '0', HOST: '127.0.0.1' }),
    ['api'],
    logger,
  );
});
afterAll(async () => {
  await service?.stop();
  await rm(dir, { recursive: true, force: true });
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${service.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });

async function paymentStreams() {
  return (await service.adapters.eventStore.readAll()).filter((e) => e.stream.startsWith('payment-'));
}

function signer() {
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: privateKeyToAccount(generatePrivateKey()) });
  return client;
}

describe('a service started on the defaults (development)', () => {
  it('logs that it quotes the development rail', () => {
    const line = lines.find((l) => l.rail === 'development');
    expect(line).toMatchObject({
      level: 40,
      settles: false,
      rails: [
        { network: 'eip155:84532', asset: DEVELOPMENT_RAIL.asset, payTo: DEVELOPMENT_RAIL.payTo },
        {
          network: DEVELOPMENT_SECOND_RAIL.network,
          asset: DEVELOPMENT_SECOND_RAIL.asset,
          payTo: DEVELOPMENT_RAIL.payTo,
        },
      ],
    });
    expect(String(line!.msg)).toContain('DEVELOPMENT rails');
    expect(lines.find((l) => l.msg === 'service started')).toMatchObject({
      payPerCall: { rail: 'development', settles: false },
    });
  });

  it('answers POST /x402/get_trade_call with a 402 quote on Base Sepolia test USDC', async () => {
    const res = await post('/x402/get_trade_call', { coin: 'BTC', timeframe: '5m' });
    expect(res.status).toBe(402);
    const body = (await res.json()) as { x402Version: number; accepts: unknown[]; _service: unknown };
    expect(body.x402Version).toBe(1);
    expect(body.accepts).toEqual([
      {
        scheme: 'exact',
        network: 'base-sepolia',
        maxAmountRequired: '30000',
        resource: `${service.url}/x402/get_trade_call`,
        description: expect.any(String),
        mimeType: 'application/json',
        payTo: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
        maxTimeoutSeconds: 120,
        asset: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
        extra: { name: 'USDC', version: '2' },
      },
      // The second development rail (the contract's extra rail), in v1 names: Ethereum Sepolia.
      expect.objectContaining({
        network: 'sepolia',
        asset: DEVELOPMENT_SECOND_RAIL.asset,
        payTo: DEVELOPMENT_RAIL.payTo,
      }),
    ]);
    expect(ServiceMeta.parse(body._service).auth).toEqual({
      outcome: 'ABSENT',
      presented: false,
      tier: 'free',
    });
    const v2 = fromBase64Json<{ accepts: { network: string; amount: string }[] }>(
      res.headers.get('payment-required'),
    );
    expect(v2.accepts).toEqual([
      expect.objectContaining({ network: 'eip155:84532', amount: '30000' }),
      expect.objectContaining({ network: 'eip155:11155111', amount: '30000' }),
    ]);
  });

  // Many proxies and balancers buffer a response header in 8 KiB (nginx's large_client_header_buffers,
  // proxy_buffer_size): a PAYMENT-REQUIRED past it fails there, not here. Two rails, as quoted here,
  // are the larger quote; the payer's PAYMENT-SIGNATURE echoes most of it back.
  it("every paid route's PAYMENT-REQUIRED header stays under 8 KiB on two rails", async () => {
    const manifest = (await (await fetch(`${service.url}/.well-known/x402`)).json()) as {
      resources: { resource: string; tool: string }[];
    };
    expect(manifest.resources.length).toBeGreaterThan(0);
    for (const { resource, tool } of manifest.resources) {
      const res = await fetch(resource, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(res.status, tool).toBe(402);
      const value = res.headers.get('payment-required')!;
      expect(fromBase64Json<{ accepts: unknown[] }>(value).accepts, tool).toHaveLength(2);
      expect(`PAYMENT-REQUIRED: ${value}\r\n`.length, tool).toBeLessThan(8_192);
    }
  });

  it('a paid retry → 503 facilitator_not_configured naming the key; nothing reserved or charged', async () => {
    const quote = await post('/x402/get_market_regime', { coin: 'ETH' });
    const required = fromBase64Json<PaymentRequired>(quote.headers.get('payment-required'));
    const payment = await signer().createPaymentPayload(required);
    const res = await post(
      '/x402/get_market_regime',
      { coin: 'ETH' },
      { 'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64') },
    );
    expect(res.status).toBe(503);
    expect(res.headers.get('payment-response')).toBeNull();
    const body = (await res.json()) as Record<string, unknown>;
    expect(body).toMatchObject({ code: 'facilitator_not_configured', retryable: false });
    expect(body.message).toContain('X402_FACILITATOR_PRIVATE_KEY');
    expect(ServiceMeta.parse(body._service).auth.outcome).toBe('ABSENT');
    expect(await paymentStreams()).toEqual([]);
  });

  // The terms are compared with the quote before the missing facilitator is named: a payment
  // that is wrong is told how, as on a rail that settles; only a right one gets the 503 above.
  const OTHER = '0x000000000000000000000000000000000000dEaD';
  it.each([
    // Signed by the official client for what it was given; what it refuses to sign (a token it
    // does not know, a scheme it has not) is changed in the echoed terms after.
    ['another asset', {}, { asset: OTHER }, 'asset_mismatch'],
    [
      'another network (Base mainnet USDC)',
      { network: 'eip155:8453', asset: BASE_USDC },
      {},
      'network_mismatch',
    ],
    ['another recipient', { payTo: OTHER }, {}, 'recipient_mismatch'],
    ['less than the price', { amount: '29999' }, {}, 'amount_mismatch'],
    ['another scheme', {}, { scheme: 'upto' }, 'unsupported_scheme'],
  ] as const)('a payment on %s → 402, not 503; nothing reserved', async (_name, signed, echoed, code) => {
    const quote = await post('/x402/get_trade_call', { coin: 'BTC', timeframe: '5m' });
    const required = fromBase64Json<PaymentRequired>(quote.headers.get('payment-required'));
    const payment = await signer().createPaymentPayload({
      ...required,
      accepts: [{ ...required.accepts[0]!, ...signed }],
    });
    payment.accepted = { ...payment.accepted, ...echoed };
    const res = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m' },
      { 'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64') },
    );
    expect(res.status).toBe(402);
    expect(await res.json()).toMatchObject({ code });
    expect(res.headers.get('payment-required')).not.toBeNull();
    expect(await paymentStreams()).toEqual([]);
  });

  it.each([1, 2] as const)(
    'an authorisation signed for another amount (v%i, the quote otherwise as given) → 402 amount_mismatch, not 503',
    async (version) => {
      const quote = await post('/x402/get_trade_call', { coin: 'BTC', timeframe: '5m' });
      const required = fromBase64Json<PaymentRequired>(quote.headers.get('payment-required'));
      const terms = required.accepts[0]!;
      const key = generatePrivateKey();
      const from = privateKeyToAccount(key).address;
      const now = BigInt(Math.floor(Date.now() / 1000));
      const authorization = {
        from,
        to: terms.payTo as `0x${string}`,
        value: BigInt(terms.amount) - 1n,
        validAfter: now - 600n,
        validBefore: now + 60n,
        nonce: randomNonce(),
      };
      const { name, version: domainVersion } = terms.extra as { name: string; version: string };
      const signature = await signAuthorization(key, authorization, {
        name,
        version: domainVersion,
        chainId: Number(terms.network.split(':')[1]),
        verifyingContract: terms.asset as `0x${string}`,
      });
      const header =
        version === 1
          ? v1Header(authorization, signature, 'base-sepolia')
          : v2Header(terms as unknown as Record<string, unknown>, authorization, signature);
      const res = await post(
        '/x402/get_trade_call',
        { coin: 'BTC', timeframe: '5m' },
        { [version === 1 ? 'x-payment' : 'payment-signature']: header },
      );
      expect(res.status).toBe(402);
      expect(await res.json()).toMatchObject({
        code: 'amount_mismatch',
        message: `the authorisation's value ${BigInt(terms.amount) - 1n} (${((Number(terms.amount) - 1) / 1e6).toFixed(6)} USDC) does not match the price ${terms.amount} (${(Number(terms.amount) / 1e6).toFixed(6)} USDC) of this request; sign an authorisation for exactly the quoted amount`,
      });
      expect(await paymentStreams()).toEqual([]);
    },
  );

  /** A quote's first terms, and an authorisation of `value` signed for them (a fresh key). */
  async function signedFor(value: (amount: bigint) => bigint) {
    const quote = await post('/x402/get_trade_call', { coin: 'BTC', timeframe: '5m' });
    const required = fromBase64Json<PaymentRequired>(quote.headers.get('payment-required'));
    const terms = required.accepts[0]!;
    const key = generatePrivateKey();
    const now = BigInt(Math.floor(Date.now() / 1000));
    const authorization = {
      from: privateKeyToAccount(key).address,
      to: terms.payTo as `0x${string}`,
      value: value(BigInt(terms.amount)),
      validAfter: now - 600n,
      validBefore: now + 60n,
      nonce: randomNonce(),
    };
    const { name, version } = terms.extra as { name: string; version: string };
    const signature = await signAuthorization(key, authorization, {
      name,
      version,
      chainId: Number(terms.network.split(':')[1]),
      verifyingContract: terms.asset as `0x${string}`,
    });
    return { required, terms, authorization, signature };
  }

  const UNDERPAID =
    "the authorisation's value 29999 (0.029999 USDC) does not match the price 30000 (0.030000 USDC) of this request; sign an authorisation for exactly the quoted amount";

  // One wording, the catalog's, whichever version carries the payment: a v1 authorisation of another
  // value, and a v2 payment the official client signed for a quote of another amount (its echoed
  // `accepted` and its value alike).
  it('amount_mismatch reads the same on v1 and on a v2 payment for a quote of another amount', async () => {
    const { required, terms, authorization, signature } = await signedFor((amount) => amount - 1n);
    const v1 = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m' },
      { 'x-payment': v1Header(authorization, signature, 'base-sepolia') },
    );
    const payment = await signer().createPaymentPayload({
      ...required,
      accepts: [{ ...terms, amount: String(authorization.value) }],
    });
    const v2 = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m' },
      { 'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64') },
    );
    for (const [version, res] of [
      ['v1', v1],
      ['v2', v2],
    ] as const) {
      expect([version, res.status]).toEqual([version, 402]);
      expect([version, await res.json()]).toEqual([
        version,
        expect.objectContaining({ code: 'amount_mismatch', message: UNDERPAID }),
      ]);
    }
    expect(await paymentStreams()).toEqual([]);
  });

  // PAYMENT-SIGNATURE (v2) is read when both come; X-PAYMENT beside it is not looked at.
  it('PAYMENT-SIGNATURE and X-PAYMENT together: PAYMENT-SIGNATURE is read, X-PAYMENT ignored', async () => {
    const { terms, authorization, signature } = await signedFor((amount) => amount - 1n);
    const v2Read = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m' },
      {
        'payment-signature': v2Header(terms as unknown as Record<string, unknown>, authorization, signature),
        'x-payment': '%%%not-base64%%%',
      },
    );
    expect(v2Read.status).toBe(402);
    expect(await v2Read.json()).toMatchObject({ code: 'amount_mismatch', message: UNDERPAID });
    const v1Ignored = await post(
      '/x402/get_trade_call',
      { coin: 'BTC', timeframe: '5m' },
      {
        'payment-signature': '%%%not-base64%%%',
        'x-payment': v1Header(authorization, signature, 'base-sepolia'),
      },
    );
    expect(v1Ignored.status).toBe(402);
    expect(await v1Ignored.json()).toMatchObject({
      code: 'invalid_payment_header',
      message: 'PAYMENT-SIGNATURE: the payment header is not base64',
    });
    expect(await paymentStreams()).toEqual([]);
  });

  it('over MCP a paid call is refused the same way', async () => {
    const client = new Client({ name: 'dev-rail', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`)));
    try {
      const quote = await post('/x402/scan_funding_arb', {});
      const payment = await signer().createPaymentPayload(
        fromBase64Json<PaymentRequired>(quote.headers.get('payment-required')),
      );
      const result = await client.callTool({
        name: 'scan_funding_arb',
        arguments: {},
        _meta: { 'x402/payment': payment },
      });
      expect(result.isError).toBe(true);
      expect(result.structuredContent).toMatchObject({
        code: 'facilitator_not_configured',
        retryable: false,
      });
      expect(await paymentStreams()).toEqual([]);
    } finally {
      await client.close();
    }
  });
});

/** The same defaults (no facilitator), with an anonymous day of one call. */
describe('quota exhausted on the embedded defaults', () => {
  let smallDir: string;
  let small: RunningService;
  beforeAll(async () => {
    smallDir = await mkdtemp(join(tmpdir(), 'x402-dev-small-'));
    small = await startService(
      loadConfig({
        FEED: 'replay',
        DATA_DIR: smallDir,
        PORT: '0',
        HOST: '127.0.0.1',
        PLAN_FREE_DAILY_CALLS: '1',
      }),
      ['api'],
      pino({ level: 'silent' }),
    );
  });
  afterAll(async () => {
    await small?.stop();
    await rm(smallDir, { recursive: true, force: true });
  });

  it('over MCP an exhausted anonymous caller is told to sign in, not offered the rail that cannot settle', async () => {
    const client = new Client({ name: 'dev-rail-anonymous', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${small.url}/mcp`)));
    try {
      // The anonymous day is the free plan's (here 1 call): used, then refused.
      const served = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'ETH' } });
      expect(served.isError).toBeFalsy();
      const refused = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'ETH' } });
      expect(refused.structuredContent).toMatchObject({ code: 'quota_exhausted', window: 'daily' });
      // No requirements: a payment signed for them would only be refused facilitator_not_configured.
      expect(refused.structuredContent).not.toHaveProperty('accepts');
      const text = (refused.content as { text: string }[])[0]!.text;
      expect(text).toMatch(/^quota_exhausted: the daily quota of this anonymous caller is used up/);
      expect(text).toContain('/mcp/signin');
      expect(text).toContain('POST /api/keys');
      expect(text).not.toContain('x402/payment');
      // The knowledge tools (not sold per call) say the same way on.
      const search = await client.callTool({ name: 'search_knowledge', arguments: { query: 'webhooks' } });
      expect(search.isError).toBe(true);
      expect((search.content as { text: string }[])[0]!.text).toContain('/mcp/signin');
    } finally {
      await client.close();
    }
  });
});

describe('production', () => {
  it('without X402_PAY_TO the routes are off, with a warning', async () => {
    const config = loadConfig({ NODE_ENV: 'production', WEBHOOK_MASTER_KEY: 'ab'.repeat(32) });
    const warnings: Record<string, unknown>[] = [];
    const capture = pino(
      { level: 'warn' },
      new Writable({
        write(chunk, _encoding, done) {
          warnings.push(JSON.parse(String(chunk)) as Record<string, unknown>);
          done();
        },
      }),
    );
    const setup = await setupX402(config, {
      ops: service.ops!,
      store: new MemoryEventStore(),
      logger: capture,
    });
    expect(setup).toBeNull();
    expect(String(warnings[0]?.msg)).toMatch(/pay-per-call routes are off: X402_PAY_TO is not set/);
  });

  it('with a facilitator key, the local facilitator settles on both development rails', async () => {
    const config = loadConfig({ X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}` });
    const setup = (await setupX402(config, {
      ops: service.ops!,
      store: new MemoryEventStore(),
      logger: pino({ level: 'silent' }),
    }))!;
    expect(setup).toMatchObject({ rail: 'development', settles: true });
    const supported = await setup.facilitator.getSupported();
    expect(supported.kinds.filter((k) => k.x402Version === 2).map((k) => k.network)).toEqual(
      expect.arrayContaining(['eip155:84532', 'eip155:11155111']),
    );
  });

  it('warns at start when X402_EXTRA_* is set but ignored', async () => {
    const warnings: Record<string, unknown>[] = [];
    const capture = pino(
      { level: 'warn' },
      new Writable({
        write(chunk, _encoding, done) {
          warnings.push(JSON.parse(String(chunk)) as Record<string, unknown>);
          done();
        },
      }),
    );
    // On the development rails: no X402_PAY_TO, so the extra rail is not read.
    const development = loadConfig({
      X402_EXTRA_NETWORK: 'eip155:10',
      X402_EXTRA_ASSET: '0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85',
    });
    await setupX402(development, { ops: service.ops!, store: new MemoryEventStore(), logger: capture });
    expect(warnings.find((w) => Array.isArray(w.ignored))).toMatchObject({
      ignored: ['X402_EXTRA_NETWORK', 'X402_EXTRA_ASSET'],
      msg: expect.stringMatching(
        /set but ignored: the development rails are quoted until X402_PAY_TO is set/,
      ),
    });
    // Configured, but an extra recipient without the extra rail itself.
    warnings.length = 0;
    const partial = loadConfig({
      X402_PAY_TO: '0x000000000000000000000000000000000000bEEF',
      X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
      X402_EXTRA_PAY_TO: '0x000000000000000000000000000000000000dEaD',
    });
    await setupX402(partial, { ops: service.ops!, store: new MemoryEventStore(), logger: capture });
    expect(warnings.find((w) => Array.isArray(w.ignored))).toMatchObject({ ignored: ['X402_EXTRA_PAY_TO'] });
    // Nothing to warn about when the extra rail is configured whole.
    warnings.length = 0;
    const whole = loadConfig({
      X402_PAY_TO: '0x000000000000000000000000000000000000bEEF',
      X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
      X402_EXTRA_NETWORK: 'eip155:84532',
      X402_EXTRA_ASSET: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
      X402_EXTRA_RPC_URL: 'https://sepolia.base.org',
    });
    await setupX402(whole, { ops: service.ops!, store: new MemoryEventStore(), logger: capture });
    expect(warnings.find((w) => Array.isArray(w.ignored))).toBeUndefined();
  });

  it('refuses the public development address as a recipient', () => {
    for (const name of ['X402_PAY_TO', 'X402_EXTRA_PAY_TO']) {
      expect(() =>
        loadConfig({
          NODE_ENV: 'production',
          WEBHOOK_MASTER_KEY: 'ab'.repeat(32),
          X402_PAY_TO: '0x000000000000000000000000000000000000bEEF',
          X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
          [name]: DEVELOPMENT_RAIL.payTo.toLowerCase(),
        }),
      ).toThrow(ConfigError);
    }
  });
});
