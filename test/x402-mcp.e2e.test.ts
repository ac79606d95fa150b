import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TradeCall } from '../contracts/tools.ts';
import { PaidServiceMeta, ServiceMeta } from '../services/metering/service-meta.ts';
import { BASE_USDC } from './chain/local-chain.ts';
import { startX402Stack, type X402Stack } from './chain/x402-app.ts';

/**
 * Pay-per-call over MCP (the x402 MCP transport) with the SDK's own client on a real port and the
 * payment signed by the official x402 client, settled on the local chain: requirements in the
 * tool error's structuredContent, payment in `_meta["x402/payment"]`, receipt in
 * `_meta["x402/payment-response"]`, settled only after the tool succeeded.
 */
let stack: X402Stack;
const clients: Client[] = [];
beforeAll(async () => {
  stack = await startX402Stack({ PLAN_STARTER_MONTHLY_CALLS: '1' });
});
afterAll(async () => {
  for (const client of clients) await client.close().catch(() => undefined);
  await stack?.stop();
});

async function open(headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'x402-mcp-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`), { requestInit: { headers } }),
  );
  clients.push(client);
  return client;
}

async function payerClient(amount: bigint) {
  const payer = await stack.chain.fundedPayer(amount);
  const signer = new x402Client();
  registerExactEvmScheme(signer, { signer: privateKeyToAccount(payer.key) });
  return { ...payer, signer };
}

type Structured = Record<string, unknown> & { _service: unknown };
const structured = (result: unknown) => (result as { structuredContent: Structured }).structuredContent;
const paymentResponse = (result: unknown) =>
  (
    result as {
      _meta?: Record<string, { success: boolean; transaction: Hex; network: string; payer: string }>;
    }
  )._meta?.['x402/payment-response'];

async function streamTypes(nonce: string) {
  return (await stack.paymentEvents(nonce)).map((e) => e.type);
}

const nonceOf = (payment: PaymentPayload) =>
  (payment.payload as { authorization: { nonce: Hex } }).authorization.nonce;

const TRADE = { coin: 'BTC', timeframe: '5m', exchange: 'BINANCE_SPOT' };

describe('an exhausted key pays per call over MCP', () => {
  it('gets the requirements of this call, pays with _meta["x402/payment"], is served with the receipt', async () => {
    const { key } = await stack.issue('starter');
    const client = await open({ Authorization: `Bearer ${key}` });
    expect(
      (await client.callTool({ name: 'get_market_regime', arguments: { coin: 'ETH' } })).isError,
    ).toBeFalsy();

    const refused = await client.callTool({ name: 'get_trade_call', arguments: TRADE });
    expect(refused.isError).toBe(true);
    const required = structured(refused);
    expect(required).toMatchObject({
      x402Version: 2,
      code: 'quota_exhausted',
      resource: { url: 'mcp://tool/get_trade_call', mimeType: 'application/json' },
      accepts: [
        {
          scheme: 'exact',
          network: 'eip155:8453',
          amount: '30000',
          asset: BASE_USDC,
          payTo: stack.payTo,
          extra: { name: 'USD Coin', version: '2' },
        },
      ],
    });
    expect(ServiceMeta.parse(required._service)).toMatchObject({
      auth: { outcome: 'OK', tier: 'starter' },
      quota: { used: 1, remaining: 0 },
    });
    // The transport's text fallback is the same object as JSON, short: without the bazaar's
    // recorded example answer (its `extensions`, which structuredContent keeps).
    const text = (refused.content as { text: string }[])[0]!.text;
    const { extensions: _example, ...inText } = required;
    expect(JSON.parse(text)).toEqual(inText);
    expect(text).not.toContain('99998');
    expect(text.length).toBeLessThan(2_000);

    const payer = await payerClient(100_000n);
    const payment = await payer.signer.createPaymentPayload(required as unknown as PaymentRequired);
    const before = await stack.chain.balanceOf(stack.payTo);
    const paid = await client.callTool({
      name: 'get_trade_call',
      arguments: TRADE,
      _meta: { 'x402/payment': payment },
    });
    expect(paid.isError, JSON.stringify(paid.content)).toBeFalsy();
    const { _service, ...call } = structured(paid);
    expect(TradeCall.parse(call)).toMatchObject({ coin: 'BTC', timeframe: '5m' });
    const service = PaidServiceMeta.strict().parse(_service);
    expect(service).toMatchObject({
      auth: { outcome: 'OK', tier: 'starter' },
      quota: { used: 1, remaining: 0 },
      payment: { status: 'pending', amount: '30000', payer: payer.address, network: 'eip155:8453' },
    });
    const receipt = paymentResponse(paid)!;
    expect(paid._meta?.['x402/payment-replayed']).toBeUndefined();
    expect(receipt).toEqual({
      success: true,
      transaction: expect.stringMatching(/^0x[0-9a-f]{64}$/),
      network: 'eip155:8453',
      payer: payer.address,
    });
    await stack.x402.settled();
    expect(receipt.transaction).toBe(service.payment.transaction);
    expect((await stack.chain.publicClient.getTransactionReceipt({ hash: receipt.transaction })).status).toBe(
      'success',
    );
    expect(await stack.chain.balanceOf(payer.address)).toBe(70_000n);
    expect(await stack.chain.balanceOf(stack.payTo)).toBe(before + 30_000n);

    const nonce = nonceOf(payment);
    expect(await streamTypes(nonce)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
    const authorized = (await stack.paymentEvents(nonce))[0]!;
    expect(authorized.data).toMatchObject({
      tool: 'get_trade_call',
      resource: 'mcp://tool/get_trade_call',
      amount: '30000',
      x402Version: 2,
    });

    // The same authorisation again: the answer it bought, with its settled receipt; nothing moves.
    const replay = await client.callTool({
      name: 'get_trade_call',
      arguments: TRADE,
      _meta: { 'x402/payment': payment },
    });
    expect(replay.isError).toBeFalsy();
    expect(PaidServiceMeta.parse(structured(replay)._service).payment).toMatchObject({
      status: 'settled',
      transaction: receipt.transaction,
    });
    expect(paymentResponse(replay)).toMatchObject({ success: true, transaction: receipt.transaction });
    // Said as HTTP says it with x-payment-replayed: the answer bought before, not a second charge.
    expect(replay._meta?.['x402/payment-replayed']).toBe(true);
    // For other arguments it is not the answer it bought: refused, nothing served.
    const other = await client.callTool({
      name: 'get_trade_call',
      arguments: { ...TRADE, coin: 'ETH' },
      _meta: { 'x402/payment': payment },
    });
    expect(other.isError).toBe(true);
    expect(structured(other)).toMatchObject({ code: 'payment_already_used' });
    expect(await stack.chain.balanceOf(payer.address)).toBe(70_000n);
    expect(await streamTypes(nonce)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
  });

  it('an anonymous caller pays too; the same authorisation on HTTP gets the kept answer (one ledger)', async () => {
    const client = await open();
    const required = (await stack.x402.mcp.paymentRequirements('scan_funding_arb', {
      minSpreadBps: 5,
      limit: 2,
    })) as unknown as PaymentRequired;
    const payer = await payerClient(50_000n);
    const payment = await payer.signer.createPaymentPayload(required);
    const paid = await client.callTool({
      name: 'scan_funding_arb',
      arguments: { limit: 2 },
      _meta: { 'x402/payment': payment },
    });
    expect(paid.isError, JSON.stringify(paid.content)).toBeFalsy();
    expect(PaidServiceMeta.parse(structured(paid)._service)).toMatchObject({
      auth: { outcome: 'ABSENT', presented: false, tier: 'free' },
      payment: { status: 'pending', amount: '10000' },
    });
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(payer.address)).toBe(40_000n);

    const http = await fetch(`${stack.url}/x402/scan_funding_arb`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'payment-signature': Buffer.from(JSON.stringify(payment)).toString('base64'),
      },
      body: JSON.stringify({ limit: 2 }),
    });
    // One ledger and one store of paid answers: the same payment for the same call is the answer it bought.
    expect(http.status).toBe(200);
    expect(http.headers.get('x-payment-replayed')).toBe('true');
    expect(
      ((await http.json()) as { _service: { payment: { status: string } } })._service.payment.status,
    ).toBe('settled');
    expect(await stack.chain.balanceOf(payer.address)).toBe(40_000n);
  });
});

describe('failures over MCP mirror HTTP: nothing charged', () => {
  it('a tool error after a verified payment releases it and charges nothing', async () => {
    const client = await open();
    const args = { coin: 'NOPECOIN', timeframe: '4h' };
    const required = (await stack.x402.mcp.paymentRequirements('get_market_regime', {
      ...args,
      exchange: 'BINANCE',
    })) as unknown as PaymentRequired;
    expect(required.accepts[0]!.amount).toBe('20000');
    const payer = await payerClient(50_000n);
    const payment = await payer.signer.createPaymentPayload(required);
    const result = await client.callTool({
      name: 'get_market_regime',
      arguments: args,
      _meta: { 'x402/payment': payment },
    });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({ code: 'unknown_coin' });
    expect(ServiceMeta.parse(structured(result)._service).auth.outcome).toBe('ABSENT');
    expect(paymentResponse(result)).toBeUndefined();
    expect(await stack.chain.balanceOf(payer.address)).toBe(50_000n);
    const nonce = nonceOf(payment);
    expect(await stack.chain.authorizationState(payer.address, nonce)).toBe(false);
    expect(await streamTypes(nonce)).toEqual(['PaymentAuthorized', 'PaymentReleased']);
  });

  it('a payment for another price, or not a payment at all, is refused with fresh requirements', async () => {
    const client = await open();
    const cheap = (await stack.x402.mcp.paymentRequirements(
      'scan_funding_arb',
      {},
    )) as unknown as PaymentRequired;
    const payer = await payerClient(50_000n);
    const underpaid = await payer.signer.createPaymentPayload(cheap);
    const result = await client.callTool({
      name: 'get_trade_call',
      arguments: TRADE,
      _meta: { 'x402/payment': underpaid },
    });
    expect(result.isError).toBe(true);
    expect(structured(result)).toMatchObject({
      x402Version: 2,
      code: 'amount_mismatch',
      error:
        "the authorisation's value 10000 (0.010000 USDC) does not match the price 30000 (0.030000 USDC) of this request; sign an authorisation for exactly the quoted amount",
      accepts: [expect.objectContaining({ amount: '30000' })],
    });
    expect(await streamTypes(nonceOf(underpaid))).toEqual([]);

    const garbage = await client.callTool({
      name: 'get_trade_call',
      arguments: TRADE,
      _meta: { 'x402/payment': { x402Version: 2, hello: 'world' } },
    });
    expect(garbage.isError).toBe(true);
    expect(structured(garbage)).toMatchObject({
      code: 'invalid_payment',
      error: expect.stringMatching(/^_meta\["x402\/payment"\]: /),
      accepts: [expect.objectContaining({ amount: '30000' })],
    });
    expect(await stack.chain.balanceOf(payer.address)).toBe(50_000n);
  });
});
