import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FacilitatorSettleContext } from '@x402/core/facilitator';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PaidServiceMeta } from '../services/metering/service-meta.ts';
import { chainReadersFor } from '../services/payments/chain-reader.ts';
import type { LocalFacilitator } from '../services/payments/local-facilitator.ts';
import type { PaymentIdentity } from '../services/payments/payment-state.ts';
import { PaymentReconciler, type ReconcileSummary } from '../services/payments/reconcile.ts';
import { FACILITATOR_KEY, type LocalChain, startLocalChain } from './chain/local-chain.ts';
import {
  type AuthorizationFields,
  authorizationJson,
  freshAuthorization,
  nowSeconds,
  randomNonce,
  signAuthorization,
  startX402Stack,
  type X402Stack,
} from './chain/x402-app.ts';

/**
 * What a paying customer must never lose, on anvil through the official MCP SDK client on a real
 * socket, paying with `_meta["x402/payment"]` (the HTTP versions are in
 * x402-payer-safety.e2e.test.ts): the request and the reconciler agree, no surplus authorisation
 * reaches the chain, a nonce is one payer's, and a dropped answer is given back.
 */

const TOOL = 'get_market_regime';
const ARGS = { coin: 'BTC', timeframe: '1h' };
const FACILITATOR = privateKeyToAccount(FACILITATOR_KEY).address;

let chain: LocalChain;
let stack: X402Stack;
let local: LocalFacilitator;
let accepted: Record<string, unknown>;
let PRICE: bigint;
const clients: Client[] = [];

/** Per-test facilitator hooks (the facilitator's hooks cannot be removed; these slots can). */
let beforeSettle: ((ctx: FacilitatorSettleContext) => Promise<void>) | null = null;
let afterSettle: ((ctx: FacilitatorSettleContext) => Promise<void>) | null = null;

beforeAll(async () => {
  chain = await startLocalChain();
  stack = await startX402Stack({}, chain);
  local = stack.x402.facilitator as LocalFacilitator;
  local.facilitator.onBeforeSettle(async (ctx) => {
    await beforeSettle?.(ctx);
  });
  local.facilitator.onAfterSettle(async (ctx) => {
    await afterSettle?.(ctx);
  });
  const required = (await stack.x402.mcp.paymentRequirements(TOOL, ARGS)) as {
    accepts: Record<string, unknown>[];
  };
  accepted = required.accepts[0]!;
  PRICE = BigInt(accepted.amount as string);
  expect(PRICE).toBe(20_000n);
});
afterEach(async () => {
  beforeSettle = null;
  afterSettle = null;
  // Undo a test's hold on broadcast notices (an own property shadowing the class method).
  delete (local.submissions as { broadcast?: unknown }).broadcast;
  while (clients.length > 0)
    await clients
      .pop()!
      .close()
      .catch(() => undefined);
  await stack.x402.settled();
});
afterAll(async () => {
  await stack?.stop();
  await chain?.stop();
});

async function open(): Promise<Client> {
  const client = new Client({ name: 'x402-payer-safety-mcp', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`)));
  clients.push(client);
  return client;
}

function authFor(from: Hex, overrides: Partial<AuthorizationFields> = {}): AuthorizationFields {
  return freshAuthorization(stack.payTo, from, PRICE, overrides);
}

/** The `_meta["x402/payment"]` object of a v2 payment, signed as a wallet signs it. */
async function payment(key: Hex, auth: AuthorizationFields): Promise<Record<string, unknown>> {
  return {
    x402Version: 2,
    accepted,
    resource: { url: `mcp://tool/${TOOL}`, mimeType: 'application/json' },
    payload: {
      signature: await signAuthorization(key, auth),
      authorization: authorizationJson(auth),
    },
  };
}

type Result = Awaited<ReturnType<Client['callTool']>>;

function paidCall(client: Client, pay: Record<string, unknown>, args: Record<string, unknown> = ARGS) {
  return client.callTool({ name: TOOL, arguments: args, _meta: { 'x402/payment': pay } });
}

const structured = (result: Result) =>
  (result as { structuredContent: Record<string, unknown> & { _service?: unknown } }).structuredContent;
const receiptOf = (result: Result) => PaidServiceMeta.parse(structured(result)._service).payment;
const settlementOf = (result: Result) =>
  (
    result._meta as
      | Record<string, { success: boolean; transaction: string; errorReason?: string }>
      | undefined
  )?.['x402/payment-response'];
function withoutService(result: Result): Record<string, unknown> {
  const { _service: _drop, ...rest } = structured(result);
  return rest;
}

const nonceOf = (ctx: FacilitatorSettleContext) =>
  (ctx.paymentPayload.payload as { authorization: { nonce: string } }).authorization.nonce.toLowerCase();

/**
 * Holds the facilitator's "broadcast" notice for one payment: the request answers at the first of
 * that notice or the settlement's own end, so while it is held the MCP caller is still waiting.
 * `release` passes it on; never calling it leaves the request to answer from its own record.
 */
function holdBroadcast(nonce: Hex): { release(): void } {
  const submissions = local.submissions;
  const original = submissions.broadcast.bind(submissions);
  let held: [PaymentIdentity, `0x${string}`] | null = null;
  let released = false;
  submissions.broadcast = (id, hash) => {
    if (id.nonce.toLowerCase() === nonce.toLowerCase() && !released) held = [id, hash];
    else original(id, hash);
  };
  return {
    release() {
      released = true;
      if (held) original(...held);
    },
  };
}

/** Another replica's reconciler, on the same log and chain, touching anything unfinished at once. */
function otherReplicasReconciler(): PaymentReconciler {
  return new PaymentReconciler({
    store: stack.store,
    chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
    olderThanMs: 0,
  });
}

async function settledTx(nonce: Hex, payer: Hex): Promise<string> {
  const events = await stack.paymentEvents(nonce, payer);
  const settled = events.filter((e) => e.type === 'PaymentSettled');
  expect(settled).toHaveLength(1);
  return (settled[0]!.data as { txHash: string }).txHash;
}

describe('1. over MCP the request and the reconciler converge on one settlement', () => {
  /**
   * Fails if the request's own "settled" append stops converging with the reconciler's: the
   * background recording then throws, the payer's exposure is held for X402_RECONCILE_AFTER_MS
   * and the follow-up call on the exact remaining balance is refused insufficient_funds; or if
   * either writer appends a second PaymentSettled, or the caller gets an error.
   */
  it('a reconciler recording "settled with T" before the caller is answered: served with T, one PaymentSettled', async () => {
    const payer = await chain.fundedPayer(2n * PRICE);
    const payToBefore = await chain.balanceOf(stack.payTo);
    const reconciler = otherReplicasReconciler();
    const auth = authFor(payer.address);
    const hold = holdBroadcast(auth.nonce);
    let answered = false;
    let answeredBeforeReconcile: boolean | null = null;
    let reconciled: ReconcileSummary | null = null;
    afterSettle = async (ctx) => {
      if (nonceOf(ctx) !== auth.nonce.toLowerCase()) return;
      answeredBeforeReconcile = answered;
      reconciled = await reconciler.runOnce();
      hold.release();
    };
    try {
      const client = await open();
      const result = await paidCall(client, await payment(payer.key, auth)).finally(() => {
        answered = true;
      });
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      expect(answeredBeforeReconcile).toBe(false);
      expect(reconciled).toMatchObject({ settled: 1 });
      await stack.x402.settled();

      const events = await stack.paymentEvents(auth.nonce, payer.address);
      expect(events.map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettled',
      ]);
      expect(events[2]).toMatchObject({ data: { reconciled: true } });
      const tx = await settledTx(auth.nonce, payer.address);
      expect(receiptOf(result).transaction).toBe(tx);
      expect(settlementOf(result)?.transaction).toBe(tx);
      expect((await chain.publicClient.getTransactionReceipt({ hash: tx as Hex })).status).toBe('success');
      expect(await chain.balanceOf(payer.address)).toBe(PRICE);
      expect(await chain.balanceOf(stack.payTo)).toBe(payToBefore + PRICE);

      // The request converged, so nothing of this payment still counts against the payer: the
      // remaining balance pays exactly one more call.
      const next = await paidCall(client, await payment(payer.key, authFor(payer.address)));
      expect(next.isError, JSON.stringify(next.content)).toBeFalsy();
      await stack.x402.settled();
      expect(await chain.balanceOf(payer.address)).toBe(0n);
    } finally {
      await reconciler.stop();
    }
  });

  /**
   * The caller is answered only from the request's own record, made after the reconciler's:
   * fails if that append conflicts instead of converging (the caller then gets a pending receipt
   * without a transaction, or an error) or records a second settlement.
   */
  it('answered only by its own recording after the reconciler wrote it: served with the settled receipt', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const reconciler = otherReplicasReconciler();
    const auth = authFor(payer.address);
    holdBroadcast(auth.nonce); // never released: as with a facilitator that tells nothing early
    let reconciled: ReconcileSummary | null = null;
    afterSettle = async (ctx) => {
      if (nonceOf(ctx) === auth.nonce.toLowerCase()) reconciled = await reconciler.runOnce();
    };
    try {
      const client = await open();
      const result = await paidCall(client, await payment(payer.key, auth));
      expect(result.isError, JSON.stringify(result.content)).toBeFalsy();
      expect(reconciled).toMatchObject({ settled: 1 });
      const tx = await settledTx(auth.nonce, payer.address);
      expect(receiptOf(result)).toMatchObject({ status: 'settled', transaction: tx });
      expect(settlementOf(result)).toMatchObject({ success: true, transaction: tx });
      await stack.x402.settled();
      expect((await stack.paymentEvents(auth.nonce, payer.address)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettled',
      ]);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await reconciler.stop();
    }
  });
});

describe('2. over MCP no surplus authorisation reaches the chain', () => {
  /**
   * Fails if exposure is not checked per payer before serving (more than two served, or a
   * surplus refused only at settlement with settlement_failed), if a refused call is reserved or
   * sent to settle, or if settlements of one payer race and one reverts (the facilitator's
   * transaction count and the payer's balance would show it).
   */
  it('five concurrent MCP calls on a balance for two: two served and settled, three refused up front', async () => {
    const payer = await chain.fundedPayer(2n * PRICE + PRICE / 2n);
    const payToBefore = await chain.balanceOf(stack.payTo);
    const sentBefore = await chain.publicClient.getTransactionCount({ address: FACILITATOR });
    const auths = Array.from({ length: 5 }, () => authFor(payer.address));
    const payments = await Promise.all(auths.map((auth) => payment(payer.key, auth)));
    // Five agents, each on its own session.
    const sessions = await Promise.all(auths.map(() => open()));
    const attempted: string[] = [];
    beforeSettle = async (ctx) => {
      if (
        (ctx.paymentPayload.payload as { authorization: { from: string } }).authorization.from ===
        payer.address
      )
        attempted.push(nonceOf(ctx));
    };
    // Blocks every second, as on Base: a settlement is still unmined when the next call is checked.
    await chain.testClient.setAutomine(false);
    await chain.testClient.setIntervalMining({ interval: 1 });
    let results: Result[];
    try {
      results = await Promise.all(sessions.map((client, i) => paidCall(client, payments[i]!)));
      await stack.x402.settled();
    } finally {
      await chain.testClient.setIntervalMining({ interval: 0 });
      await chain.testClient.setAutomine(true);
    }

    const served = results.filter((r) => !r.isError);
    const refused = results.filter((r) => r.isError);
    expect(served).toHaveLength(2);
    expect(refused).toHaveLength(3);
    for (const result of refused) {
      expect(structured(result)).toMatchObject({
        code: 'insufficient_funds',
        accepts: [expect.objectContaining({ amount: PRICE.toString() })],
      });
      expect(settlementOf(result)).toBeUndefined();
    }
    // Refused up front: never reserved, never sent to the facilitator to settle.
    const refusedNonces = auths.filter((_, i) => results[i]!.isError).map((a) => a.nonce.toLowerCase());
    for (const nonce of refusedNonces) {
      expect(await stack.paymentEvents(nonce as Hex, payer.address)).toEqual([]);
    }
    expect(attempted).toHaveLength(2);
    expect(attempted.filter((n) => refusedNonces.includes(n))).toEqual([]);
    // Only the two served calls reached the chain, and both landed.
    expect(await chain.publicClient.getTransactionCount({ address: FACILITATOR })).toBe(sentBefore + 2);
    for (const result of served) {
      const tx = receiptOf(result).transaction as Hex;
      expect((await chain.publicClient.getTransactionReceipt({ hash: tx })).status).toBe('success');
    }
    expect(await chain.balanceOf(payer.address)).toBe(PRICE / 2n);
    expect(await chain.balanceOf(stack.payTo)).toBe(payToBefore + 2n * PRICE);
    const used = await Promise.all(auths.map((auth) => chain.authorizationState(payer.address, auth.nonce)));
    expect(used.filter(Boolean)).toHaveLength(2);
  });
});

describe('3. over MCP a payment is (network, asset, payer, nonce)', () => {
  /**
   * Fails if the ledger or the kept answers are keyed by the nonce alone: the second payer would
   * be refused payment_already_used "settled in <the first payer's tx>" (or handed the first
   * payer's answer and receipt), and an unfunded third payer's refusal would show that tx.
   */
  it("two payers using the same nonce are both served and charged; a refusal shows no other payment's tx", async () => {
    const a = await chain.fundedPayer(100_000n);
    const b = await chain.fundedPayer(100_000n);
    const nonce = randomNonce();
    const client = await open();

    const first = await paidCall(client, await payment(a.key, authFor(a.address, { nonce })));
    expect(first.isError, JSON.stringify(first.content)).toBeFalsy();
    const second = await paidCall(client, await payment(b.key, authFor(b.address, { nonce })));
    expect(second.isError, JSON.stringify(second.content)).toBeFalsy();
    await stack.x402.settled();
    const txA = await settledTx(nonce, a.address);
    const txB = await settledTx(nonce, b.address);
    expect(txB).not.toBe(txA);
    expect(receiptOf(first)).toMatchObject({ payer: a.address, transaction: txA });
    expect(receiptOf(second)).toMatchObject({ payer: b.address, transaction: txB });
    expect(await chain.balanceOf(a.address)).toBe(100_000n - PRICE);
    expect(await chain.balanceOf(b.address)).toBe(100_000n - PRICE);
    expect(await chain.authorizationState(a.address, nonce)).toBe(true);
    expect(await chain.authorizationState(b.address, nonce)).toBe(true);

    // A third payer with nothing to pay reuses the nonce: refused for its own reason, with
    // neither of the others' transactions anywhere in the answer.
    const c = await chain.fundedPayer(0n);
    const poor = await paidCall(client, await payment(c.key, authFor(c.address, { nonce })));
    expect(poor.isError).toBe(true);
    expect(structured(poor).code).not.toMatch(/already_used|in_use/);
    const poorText = JSON.stringify(poor).toLowerCase();
    expect(poorText).not.toContain(txA.toLowerCase());
    expect(poorText).not.toContain(txB.toLowerCase());
    expect(await stack.paymentEvents(nonce, c.address)).toEqual([]);

    // Payer A signs the used nonce again (a new signature, for another call): refused as used,
    // naming A's own settlement and never B's.
    const reused = await paidCall(
      client,
      await payment(a.key, authFor(a.address, { nonce, validBefore: nowSeconds() + 90n })),
      {
        coin: 'ETH',
        timeframe: '1h',
      },
    );
    expect(reused.isError).toBe(true);
    expect(structured(reused)).toMatchObject({ code: 'payment_already_used' });
    const reusedText = JSON.stringify(reused).toLowerCase();
    expect(reusedText).toContain(txA.toLowerCase());
    expect(reusedText).not.toContain(txB.toLowerCase());
    expect(await chain.balanceOf(a.address)).toBe(100_000n - PRICE);
    expect(await chain.balanceOf(b.address)).toBe(100_000n - PRICE);
  });
});

describe('4. over MCP a paid answer is never lost', () => {
  /**
   * Fails if the answer is not kept before settlement, or if re-presenting the used payment is
   * refused (payment_already_used) instead of answered from the kept result, or charges again.
   */
  it('the answer of a call the client gave up on comes back for the same payment, charged once', async () => {
    const payer = await chain.fundedPayer(100_000n);
    const payToBefore = await chain.balanceOf(stack.payTo);
    const sentBefore = await chain.publicClient.getTransactionCount({ address: FACILITATOR });
    const auth = authFor(payer.address);
    const pay = await payment(payer.key, auth);
    const hangUp = new AbortController();
    // The client gives up (its timeout, a dropped connection) as the settlement is being sent.
    beforeSettle = async (ctx) => {
      if (nonceOf(ctx) === auth.nonce.toLowerCase()) hangUp.abort(new Error('client gave up'));
    };
    const client = await open();
    await expect(
      client.callTool({ name: TOOL, arguments: ARGS, _meta: { 'x402/payment': pay } }, undefined, {
        signal: hangUp.signal,
      }),
    ).rejects.toThrow();
    // The server went on: the payment settles without anyone reading the answer.
    await expect.poll(() => chain.authorizationState(payer.address, auth.nonce)).toBe(true);
    await stack.x402.settled();
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    const tx = await settledTx(auth.nonce, payer.address);

    // Back on a new session, the same payment again: the answer it bought, with its receipt.
    const again = await paidCall(await open(), pay);
    expect(again.isError, JSON.stringify(again.content)).toBeFalsy();
    expect(structured(again).regime).toEqual(expect.any(String));
    expect(receiptOf(again)).toMatchObject({ status: 'settled', transaction: tx, payer: payer.address });
    expect(settlementOf(again)).toMatchObject({ success: true, transaction: tx });
    // Once more: the same kept answer, still charged once, nothing new reserved or sent.
    const third = await paidCall(await open(), pay);
    expect(third.isError).toBeFalsy();
    expect(withoutService(third)).toEqual(withoutService(again));
    await stack.x402.settled();
    expect((await stack.paymentEvents(auth.nonce, payer.address)).map((e) => e.type)).toEqual([
      'PaymentAuthorized',
      'PaymentSettlementPending',
      'PaymentAnswerServed',
      'PaymentSettled',
    ]);
    expect(await chain.publicClient.getTransactionCount({ address: FACILITATOR })).toBe(sentBefore + 1);
    expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    expect(await chain.balanceOf(stack.payTo)).toBe(payToBefore + PRICE);
  });
});
