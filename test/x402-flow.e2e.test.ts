import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { decodePaymentResponseHeader, wrapFetchWithPayment } from '@x402/fetch';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseDomainEvent } from '../contracts/events.ts';
import { TradeCall } from '../contracts/tools.ts';
import { BASE_USDC } from './chain/local-chain.ts';
import {
  fromBase64Json,
  nowSeconds,
  randomNonce,
  signAuthorization,
  startX402Stack,
  v1Header,
  type X402Stack,
} from './chain/x402-app.ts';

let stack: X402Stack;
beforeAll(async () => {
  stack = await startX402Stack();
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

describe('the 402 quote', () => {
  it('quotes this request: v2 header and v1 body, the price of its timeframe', async () => {
    const cases: [string, unknown, string][] = [
      ['/x402/get_trade_call', { coin: 'BTC', timeframe: '1m' }, '50000'],
      ['/x402/get_trade_call', { coin: 'BTC', timeframe: '3m' }, '40000'],
      ['/x402/get_trade_call', { coin: 'BTC', timeframe: '5m' }, '30000'],
      ['/x402/get_trade_call', { coin: 'BTC' }, '20000'],
      ['/x402/get_market_regime', { coin: 'ETH' }, '20000'],
      ['/x402/scan_funding_arb', {}, '10000'],
      ['/x402/scan_trade_calls', { timeframe: '1h' }, '20000'],
    ];
    for (const [path, body, amount] of cases) {
      const res = await post(path, body);
      expect(res.status).toBe(402);
      expect(res.headers.get('access-control-expose-headers')).toContain('PAYMENT-RESPONSE');
      const v1 = (await res.json()) as { x402Version: number; accepts: Record<string, unknown>[] };
      expect(v1.x402Version).toBe(1);
      expect(v1.accepts).toEqual([
        {
          scheme: 'exact',
          network: 'base',
          maxAmountRequired: amount,
          resource: `${stack.url}${path}`,
          description: expect.any(String),
          mimeType: 'application/json',
          payTo: stack.payTo,
          maxTimeoutSeconds: 120,
          asset: BASE_USDC,
          extra: { name: 'USD Coin', version: '2' },
        },
      ]);
      const v2 = fromBase64Json<{
        x402Version: number;
        accepts: Record<string, unknown>[];
        resource: { url: string };
      }>(res.headers.get('payment-required'));
      expect(v2.x402Version).toBe(2);
      expect(v2.resource.url).toBe(`${stack.url}${path}`);
      expect(v2.accepts).toEqual([
        {
          scheme: 'exact',
          network: 'eip155:8453',
          amount,
          asset: BASE_USDC,
          payTo: stack.payTo,
          maxTimeoutSeconds: 120,
          extra: { name: 'USD Coin', version: '2' },
        },
      ]);
    }
  });

  it('answers the CORS preflight with the payment headers allowed and exposed', async () => {
    const res = await fetch(`${stack.url}/x402/get_trade_call`, { method: 'OPTIONS' });
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-headers')).toContain('PAYMENT-SIGNATURE');
    expect(res.headers.get('access-control-allow-headers')).toContain('X-PAYMENT');
    expect(res.headers.get('access-control-expose-headers')).toBe(
      'PAYMENT-REQUIRED, PAYMENT-RESPONSE, X-PAYMENT-RESPONSE, X-Payment-Replayed, Retry-After, RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset',
    );
  });
});

describe('paying with the official @x402/fetch client (v2)', () => {
  it('serves the verdict, settles on chain for exactly the price, and records every step', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const client = new x402Client();
    registerExactEvmScheme(client, { signer: privateKeyToAccount(payer.key) });
    const payFetch = wrapFetchWithPayment(fetch, client);
    const before = await stack.chain.balanceOf(stack.payTo);

    const res = await payFetch(`${stack.url}/x402/get_trade_call`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '5m', exchange: 'BINANCE_SPOT' }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Record<string, unknown>;
    const { _service, ...call } = body;
    expect(TradeCall.parse(call)).toMatchObject({ coin: 'BTC', timeframe: '5m', exchange: 'BINANCE_SPOT' });
    expect(_service).toEqual({
      auth: { outcome: 'ABSENT', presented: false, tier: 'free' },
      // A payer is served on payment, not quota; the block still shows its address's free quota.
      quota: expect.objectContaining({ used: 0, monthly: expect.objectContaining({ used: 0, total: 200 }) }),
      payment: {
        status: 'pending',
        network: 'eip155:8453',
        asset: BASE_USDC,
        amount: '30000',
        payer: payer.address,
        transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      },
    });

    // Answered once the settlement is broadcast: the official client reads its receipt as a
    // success naming that transaction; whether it is confirmed yet is _service.payment.status.
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    expect(receipt).toEqual({
      success: true,
      transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      network: 'eip155:8453',
      payer: payer.address,
    });
    expect(receipt.transaction).toBe((_service as { payment: { transaction: string } }).payment.transaction);
    expect(res.headers.get('x-payment-response')).toBeNull();
    await stack.x402.settled();
    const tx = await stack.chain.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hex });
    expect(tx.status).toBe('success');
    expect(tx.to?.toLowerCase()).toBe(BASE_USDC.toLowerCase());

    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n - 30_000n);
    expect(await stack.chain.balanceOf(stack.payTo)).toBe(before + 30_000n);

    const settledEvent = (await stack.store.readAll())
      .map((e) => parseDomainEvent(e))
      .find((e) => e?.type === 'PaymentSettled' && e.data.txHash === receipt.transaction);
    if (settledEvent?.type !== 'PaymentSettled') throw new Error('no PaymentSettled for the receipt');
    const nonce = settledEvent.data.nonce;
    const events = await stack.paymentEvents(nonce);
    expect(events.map((e) => e.type)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
    expect(events[0]!.data).toMatchObject({
      payer: payer.address,
      payTo: stack.payTo,
      amount: '30000',
      x402Version: 2,
      tool: 'get_trade_call',
      network: 'eip155:8453',
    });
    expect(await stack.chain.authorizationState(payer.address, nonce as Hex)).toBe(true);
    console.log(`gas per settlement (transferWithAuthorization): ${tx.gasUsed}`);
  });
});

describe('paying with a hand-built v1 X-PAYMENT client', () => {
  it('reads the v1 body, signs with viem, gets X-PAYMENT-RESPONSE, moves exactly the price', async () => {
    const payer = await stack.chain.fundedPayer(100_000n);
    const quoteRes = await post('/x402/scan_funding_arb', { limit: 3 });
    expect(quoteRes.status).toBe(402);
    const quote = (await quoteRes.json()) as {
      accepts: { maxAmountRequired: string; payTo: Hex; maxTimeoutSeconds: number; network: string }[];
    };
    const offer = quote.accepts[0]!;
    const now = nowSeconds();
    const auth = {
      from: payer.address,
      to: offer.payTo,
      value: BigInt(offer.maxAmountRequired),
      validAfter: now - 600n,
      validBefore: now + BigInt(offer.maxTimeoutSeconds),
      nonce: randomNonce(),
    };
    const signature = await signAuthorization(payer.key, auth);
    const before = await stack.chain.balanceOf(stack.payTo);

    const res = await post(
      '/x402/scan_funding_arb',
      { limit: 3 },
      { 'x-payment': v1Header(auth, signature) },
    );
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      opportunities: unknown[];
      _service: { payment: { status: string } };
    };
    expect(Array.isArray(body.opportunities)).toBe(true);
    expect(body._service.payment.status).toBe('pending');
    expect(res.headers.get('payment-response')).toBeNull();
    await stack.x402.settled();
    const receipt = decodePaymentResponseHeader(res.headers.get('x-payment-response')!);
    expect(receipt).toEqual({
      success: true,
      transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      network: 'base',
      payer: payer.address,
    });
    expect(
      (await stack.chain.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hex })).status,
    ).toBe('success');
    expect(await stack.chain.balanceOf(payer.address)).toBe(90_000n);
    expect(await stack.chain.balanceOf(stack.payTo)).toBe(before + 10_000n);
    const events = await stack.paymentEvents(auth.nonce);
    expect(events.map((e) => e.type)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
    expect(events[0]!.data).toMatchObject({ x402Version: 1, amount: '10000', tool: 'scan_funding_arb' });
    expect(events[3]!.data).toMatchObject({
      txHash: receipt.transaction,
      amount: '10000',
      payer: payer.address,
    });
  });
});
