import { mkdtempSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { x402Client } from '@x402/core/client';
import { x402Facilitator } from '@x402/core/facilitator';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import { decodePaymentResponseHeader, wrapFetchWithPayment } from '@x402/fetch';
import Fastify from 'fastify';
import {
  createWalletClient,
  encodeAbiParameters,
  type Hex,
  http,
  keccak256,
  nonceManager,
  pad,
  publicActions,
} from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { chainReadersFor } from '../services/payments/chain-reader.ts';
import { ledgerTotals, readLedger } from '../services/payments/ledger-report.ts';
import { createLocalFacilitator, type LocalFacilitator } from '../services/payments/local-facilitator.ts';
import { VALID_BEFORE_SKEW_S } from '../services/payments/payment-flow.ts';
import { PaymentReconciler } from '../services/payments/reconcile.ts';
import {
  BASE_USDC,
  FACILITATOR_KEY,
  type LocalChain,
  payerWallet,
  startLocalChain,
} from './chain/local-chain.ts';
import {
  fromBase64Json,
  nowSeconds,
  randomNonce,
  signAuthorization,
  signCancellation,
  startX402Stack,
  v1Header,
  type X402Stack,
} from './chain/x402-app.ts';
import { HoldingStore } from './holding-store.ts';
import { holdWriteLock } from './lmdb-lock-holder.ts';

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const PRICE = 20_000n;

let chain: LocalChain;
beforeAll(async () => {
  chain = await startLocalChain();
});
afterAll(async () => {
  await chain?.stop();
});

/**
 * Seconds the chain's clock runs ahead of this machine's: a test that needs an authorisation lapsed
 * moves the chain's clock past it (lapse) rather than waiting for it, and authorisations are signed
 * on the chain's clock, so a later test's stay as valid on chain as it asks. The three lapses of
 * this file keep it well under the minute of skew the service allows past maxTimeoutSeconds.
 */
let chainAhead = 0n;
const chainSeconds = () => nowSeconds() + chainAhead;

/** Moves the chain's clock past `validBefore`: the next block mined is at least 2 s after it. */
async function lapse(validBefore: bigint): Promise<void> {
  const by = validBefore + 2n - chainSeconds();
  if (by <= 0n) return;
  // An authorisation signed on the chain's clock lapses that much later by this machine's: once the
  // chain runs a minute ahead, the service refuses every later one as signed too far ahead, in a
  // test far from this cause.
  if (chainAhead + by > BigInt(VALID_BEFORE_SKEW_S - 15))
    throw new Error(
      `lapse would put the chain ${chainAhead + by} s ahead of this machine, past the ${VALID_BEFORE_SKEW_S - 15} s this file allows itself under the service's ${VALID_BEFORE_SKEW_S} s of skew: lapse a shorter authorisation`,
    );
  await chain.testClient.increaseTime({ seconds: Number(by) });
  chainAhead += by;
}

/** An authorisation of PRICE from the payer to the stack's payTo, valid for `validFor` s, signed. */
async function signedAuthorization(payer: { key: Hex; address: Hex }, stack: X402Stack, validFor = 120n) {
  const now = chainSeconds();
  const auth = {
    from: payer.address,
    to: stack.payTo,
    value: PRICE,
    validAfter: now - 600n,
    validBefore: now + validFor,
    nonce: randomNonce(),
  };
  return { auth, signature: await signAuthorization(payer.key, auth) };
}

async function paidRequest(stack: X402Stack, payerKey: Hex, payerAddress: Hex, validFor = 120n) {
  const { auth, signature } = await signedAuthorization(
    { key: payerKey, address: payerAddress },
    stack,
    validFor,
  );
  const header = v1Header(auth, signature);
  const res = await fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-payment': header },
    body: JSON.stringify(BODY),
  });
  return { res, auth, header };
}

/**
 * The payer's own wallet (given ETH for gas) calls the token, and waits for the transaction to
 * be mined. Returns its hash.
 */
async function callAsPayer(
  payer: { key: Hex; address: Hex },
  functionName: 'transfer' | 'transferWithAuthorization' | 'cancelAuthorization',
  args: readonly unknown[],
): Promise<Hex> {
  const hash = await sendAsPayer(payer, functionName, args);
  await chain.publicClient.waitForTransactionReceipt({ hash });
  return hash;
}

/** As callAsPayer, without waiting for the transaction to be mined. Returns its hash. */
async function sendAsPayer(
  payer: { key: Hex; address: Hex },
  functionName: 'transfer' | 'transferWithAuthorization' | 'cancelAuthorization',
  args: readonly unknown[],
): Promise<Hex> {
  const wallet = await payerWallet(chain, payer);
  return wallet.writeContract({ address: BASE_USDC, abi: chain.usdcAbi, functionName, args });
}

/** The payer sends their whole balance away: a real transfer on chain. */
async function drain(payer: { key: Hex; address: Hex }): Promise<void> {
  await callAsPayer(payer, 'transfer', [
    '0x000000000000000000000000000000000000dEaD',
    await chain.balanceOf(payer.address),
  ]);
}

/** An LMDB store in a fresh directory, to close under the service: the store refuses every write. */
async function lmdbStore(): Promise<{ store: LmdbEventStore; path: string }> {
  const path = join(mkdtempSync(join(tmpdir(), 'x402-lmdb-')), 'events');
  return { store: await openLmdbEventStore({ path }), path };
}

/**
 * Closes an LMDB store under the service, as a store that went away. The environment is closed
 * before the store wakes its subscribers: a read started while lmdb-js is still closing leaves a
 * timer that throws once it has closed.
 */
async function closeNow(store: LmdbEventStore): Promise<void> {
  await store.root.close();
  await store.close();
}

describe('settlement failure', () => {
  it('a transfer that fails at settlement → 402, the result is discarded, nothing charged', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(PRICE);
      // The payer empties the wallet between verification and settlement: a real transfer on chain.
      beforeSettle(stack, () => drain(payer));
      const before = await chain.balanceOf(stack.payTo);
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      const body = await expectSettlementRefused(res, /^settlement failed: /);
      expect(body).toMatchObject({ x402Version: 1 });
      expect(fromBase64Json<{ success: boolean }>(res.headers.get('x-payment-response')).success).toBe(false);
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(false);
      expect(await eventTypes(stack, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementFailed',
      ]);
    } finally {
      await stack.stop();
    }
  });
});

/** The authorisation a settle hook sees, its amounts and times as bigints. */
function hookAuthorization(context: { paymentPayload: { payload: unknown } }) {
  const { authorization, signature } = context.paymentPayload.payload as {
    authorization: Record<string, string>;
    signature: Hex;
  };
  return {
    signature,
    auth: {
      from: authorization.from as Hex,
      to: authorization.to as Hex,
      value: BigInt(authorization.value!),
      validAfter: BigInt(authorization.validAfter!),
      validBefore: BigInt(authorization.validBefore!),
      nonce: authorization.nonce as Hex,
    },
  };
}

type Authorization = ReturnType<typeof hookAuthorization>['auth'];

/** The token's transferWithAuthorization arguments for a signed authorisation. */
function transferArgs(auth: Authorization, signature: Hex): readonly unknown[] {
  return [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, signature];
}

/** The payer's own wallet submits a transferWithAuthorization and waits for it to be mined. */
async function submitAsPayer(
  payer: { key: Hex; address: Hex },
  auth: Authorization,
  signature: Hex,
): Promise<Hex> {
  return callAsPayer(payer, 'transferWithAuthorization', transferArgs(auth, signature));
}

/**
 * The payer spends the nonce of the authorisation they paid with on a transfer to themselves:
 * a second authorisation, same nonce, signed by them. The token marks the nonce used; nothing
 * moves to the seller.
 */
async function frontRunToSelf(
  payer: { key: Hex; address: Hex },
  context: { paymentPayload: { payload: unknown } },
): Promise<Hex> {
  const { auth } = hookAuthorization(context);
  const toSelf = { ...auth, to: payer.address };
  return submitAsPayer(payer, toSelf, await signAuthorization(payer.key, toSelf));
}

/**
 * The payer cancels the authorisation they paid with (ERC-3009 cancelAuthorization, signed by
 * them, sent from their wallet): the token marks the nonce used and logs AuthorizationCanceled;
 * nothing moves. Returns the cancelling transaction.
 */
async function cancelAsPayer(
  payer: { key: Hex; address: Hex },
  context: { paymentPayload: { payload: unknown } },
): Promise<Hex> {
  const { nonce } = hookAuthorization(context).auth;
  return callAsPayer(payer, 'cancelAuthorization', [
    payer.address,
    nonce,
    await signCancellation(payer.key, nonce),
  ]);
}

/**
 * Marks the authorisation used in the token's storage, with no log: a use whose log the reader
 * cannot see (it lags, or lies outside its window). Slot 1 is TestUsdc's
 * mapping(authorizer => mapping(nonce => used)).
 */
async function markUsedWithoutLog(authorizer: Hex, nonce: Hex): Promise<void> {
  const inner = keccak256(encodeAbiParameters([{ type: 'address' }, { type: 'uint256' }], [authorizer, 1n]));
  const slot = keccak256(encodeAbiParameters([{ type: 'bytes32' }, { type: 'bytes32' }], [nonce, inner]));
  await chain.testClient.setStorageAt({ address: BASE_USDC, index: slot, value: pad('0x01') });
  await chain.testClient.mine({ blocks: 1 });
}

/** A settle hook: the authorisation marked used with no log of its use, then the settle cut off. */
async function usedWithoutLogThenCut(_payer: unknown, context: SettleContext): Promise<void> {
  const { auth } = hookAuthorization(context);
  await markUsedWithoutLog(auth.from, auth.nonce);
  throw new Error('settle cut off');
}

function reconcilerOf(stack: X402Stack): PaymentReconciler {
  return new PaymentReconciler({
    store: stack.store,
    chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
    olderThanMs: 0,
  });
}

/** Runs `hook` in the stack's local facilitator between verification and settlement. */
function beforeSettle(stack: X402Stack, hook: Parameters<x402Facilitator['onBeforeSettle']>[0]): void {
  (stack.x402.facilitator as LocalFacilitator).facilitator.onBeforeSettle(hook);
}

type SettleContext = Parameters<Parameters<x402Facilitator['onBeforeSettle']>[0]>[0];

/**
 * A service whose facilitator lets `race` run between verification and settlement (what another
 * party does on chain meanwhile), a payer funded with 1 USDC, and the seller's balance before.
 */
async function startRaced(
  race: (payer: { key: Hex; address: Hex }, context: SettleContext) => Promise<void>,
  env: Record<string, string> = {},
  shared: Parameters<typeof startX402Stack>[3] = {},
) {
  const stack = await startX402Stack(env, chain, undefined, shared);
  try {
    const payer = await chain.fundedPayer(1_000_000n);
    beforeSettle(stack, (context) => race(payer, context));
    return { stack, payer, before: await chain.balanceOf(stack.payTo) };
  } catch (error) {
    await stack.stop();
    throw error;
  }
}

/** The same X-PAYMENT header presented again. */
function presentAgain(stack: X402Stack, header: string): Promise<Response> {
  return fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-payment': header },
    body: JSON.stringify(BODY),
  });
}

/** The types of a payment's events, in order. */
async function eventTypes(stack: X402Stack, nonce: Hex): Promise<string[]> {
  return (await stack.paymentEvents(nonce)).map((e) => e.type);
}

/**
 * Pays once, the answer left unread, where the race cut the settle call off: checks the payment
 * is left pending, for reconciliation. Returns the authorisation paid with.
 */
async function payLeftPending(stack: X402Stack, payer: { key: Hex; address: Hex }, validFor?: bigint) {
  const { res, auth } = await paidRequest(stack, payer.key, payer.address, validFor);
  await res.body?.cancel();
  await stack.x402.settled();
  const steps = (await stack.paymentEvents(auth.nonce)).filter((e) => e.type !== 'PaymentAnswerServed');
  expect(steps.at(-1)?.type).toBe('PaymentSettlementPending');
  return auth;
}

/**
 * After a 402 for an authorisation someone else used on chain: used there, the seller not paid,
 * the payment recorded failed, reconciliation settles nothing, and the same payment presented
 * again is not served from a kept answer.
 */
async function expectRefusedUnpaid(
  stack: X402Stack,
  { auth, header }: Pick<Awaited<ReturnType<typeof paidRequest>>, 'auth' | 'header'>,
  payToBefore: bigint,
): Promise<void> {
  await stack.x402.settled();
  expect(await chain.authorizationState(auth.from, auth.nonce)).toBe(true);
  expect(await chain.balanceOf(stack.payTo)).toBe(payToBefore);
  expect((await stack.paymentEvents(auth.nonce)).at(-1)?.type).toBe('PaymentSettlementFailed');
  expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0 });
  expect(await eventTypes(stack, auth.nonce)).not.toContain('PaymentSettled');
  expect((await presentAgain(stack, header)).status).toBe(402);
}

type ServedBody = { regime?: string; _service: { payment: { status: string } } };

/** A 200 with the paid answer. */
async function expectServed(res: Response): Promise<ServedBody> {
  const body = (await res.json()) as ServedBody;
  expect(res.status, JSON.stringify(body)).toBe(200);
  expect(body.regime).toEqual(expect.any(String));
  return body;
}

/** A 200 with the paid answer, its payment still pending. */
async function expectServedPending(res: Response): Promise<ServedBody> {
  const body = await expectServed(res);
  expect(body._service.payment.status).toBe('pending');
  return body;
}

/** The payer's authorisation used on chain and one price gone from the balance they were funded with. */
async function expectChargedOnce(payer: Hex, nonce: Hex, funded = 1_000_000n): Promise<void> {
  expect(await chain.authorizationState(payer, nonce)).toBe(true);
  expect(await chain.balanceOf(payer)).toBe(funded - PRICE);
}

/** The payer's authorisation unused on chain and their balance as funded. */
async function expectNotCharged(payer: Hex, nonce: Hex, funded = 1_000_000n): Promise<void> {
  expect(await chain.authorizationState(payer, nonce)).toBe(false);
  expect(await chain.balanceOf(payer)).toBe(funded);
}

/**
 * The payment's last event is a PaymentSettled (with `data`), and the transaction it names was
 * mined without reverting. Returns that transaction's hash.
 */
async function expectSettledOnChain(
  stack: X402Stack,
  nonce: Hex,
  data: Record<string, unknown> = {},
): Promise<Hex> {
  const settled = (await stack.paymentEvents(nonce)).at(-1)!;
  expect(settled).toMatchObject({ type: 'PaymentSettled', data });
  const txHash = (settled.data as { txHash: Hex }).txHash;
  expect((await chain.publicClient.getTransactionReceipt({ hash: txHash })).status).toBe('success');
  return txHash;
}

/** A 402 settlement_failed whose message says `says`, with no paid answer in it. */
async function expectSettlementRefused(res: Response, says: RegExp): Promise<Record<string, unknown>> {
  const body = (await res.json()) as Record<string, unknown>;
  expect(res.status, JSON.stringify(body)).toBe(402);
  expect(body).toMatchObject({ code: 'settlement_failed' });
  expect(body.message).toMatch(says);
  expect(body).not.toHaveProperty('regime');
  return body;
}

describe('an authorisation used on chain by someone else before the settlement', () => {
  it('the payer paid: the answer is served pending, and reconciliation records the settlement', async () => {
    // Between verification and settlement the authorisation is submitted by another wallet (the
    // payer's own, say): the money moves to us, and our transfer is refused for a used nonce.
    let submitted: Hex | null = null;
    const { stack, payer, before } = await startRaced(async (payer, context) => {
      const { auth, signature } = hookAuthorization(context);
      submitted = await submitAsPayer(payer, auth, signature);
    });
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      await expectServedPending(res);
      await stack.x402.settled();
      await expectChargedOnce(payer.address, auth.nonce);
      expect(await chain.balanceOf(stack.payTo)).toBe(before + PRICE);
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 1 });
      const events = await stack.paymentEvents(auth.nonce);
      expect(events.filter((e) => e.type === 'PaymentSettled')).toHaveLength(1);
      expect(events.at(-1)).toMatchObject({ type: 'PaymentSettled', data: { txHash: submitted } });
    } finally {
      await stack.stop();
    }
  });

  // The payer uses the nonce they paid with before our settlement lands, in the two ways ERC-3009
  // allows: a transfer of the same nonce to themselves, or cancelAuthorization. Either way nothing
  // reaches the seller, and the same three outcomes follow.
  for (const { use, act, refused, lost } of [
    {
      use: 'spent the nonce on a transfer to themselves',
      act: frontRunToSelf,
      refused: /used on chain by another transaction that did not pay the seller/,
      lost: /used by a transaction that did not pay the agreed transfer/,
    },
    {
      use: 'cancelled the authorisation',
      act: cancelAsPayer,
      refused: /cancelled on chain/,
      lost: /cancelled/,
    },
  ]) {
    describe(`the payer ${use}`, () => {
      it('before our settlement: 402, recorded failed in their transaction, nothing settled', async () => {
        let used: Hex | null = null;
        const { stack, payer, before } = await startRaced(async (payer, context) => {
          used = await act(payer, context);
        });
        try {
          const { res, auth, header } = await paidRequest(stack, payer.key, payer.address);
          await expectSettlementRefused(res, refused);
          await stack.x402.settled();
          expect(await chain.balanceOf(payer.address)).toBe(1_000_000n);
          expect(await eventTypes(stack, auth.nonce)).toEqual([
            'PaymentAuthorized',
            'PaymentSettlementPending',
            'PaymentSettlementFailed',
          ]);
          expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({ data: { txHash: used } });
          await expectRefusedUnpaid(stack, { auth, header }, before);
        } finally {
          await stack.stop();
        }
      });

      it("and the settlement outlasted the answer: served pending, recorded as the seller's loss", async () => {
        // The settle call ends after submitWaitMs (X402_SETTLE_CONFIRM_TIMEOUT_MS): the caller has
        // the paid answer by then, so the refusal found afterwards cannot be a refusal.
        const { stack, payer, before } = await startRaced(
          async (payer, context) => {
            await act(payer, context);
            await new Promise((resolve) => setTimeout(resolve, 1_500));
          },
          { X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' },
        );
        try {
          const { res, auth } = await paidRequest(stack, payer.key, payer.address);
          await expectServedPending(res);
          await stack.x402.settled();
          expect(await chain.balanceOf(stack.payTo)).toBe(before);
          expect(await eventTypes(stack, auth.nonce)).toEqual([
            'PaymentAuthorized',
            'PaymentSettlementPending',
            'PaymentAnswerServed',
            'PaymentSettlementFailed',
          ]);
          expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({
            data: { sellerLoss: true },
          });
        } finally {
          await stack.stop();
        }
      });

      it('and the payment was left pending: reconciliation records the loss in their transaction, not a settlement', async () => {
        // The settle call is cut off after the payer's use landed: the payment is left pending
        // (the answer served) for reconciliation to read from the chain.
        let used: Hex | null = null;
        const { stack, payer, before } = await startRaced(async (payer, context) => {
          used = await act(payer, context);
          throw new Error('settle cut off');
        });
        try {
          const auth = await payLeftPending(stack, payer);
          expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(true);
          expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0, lost: 1, stillPending: 0 });
          const events = await stack.paymentEvents(auth.nonce);
          expect(events.map((e) => e.type)).not.toContain('PaymentSettled');
          expect(events.at(-1)).toMatchObject({
            type: 'PaymentSettlementFailed',
            data: { sellerLoss: true, txHash: used, reason: expect.stringMatching(lost) },
          });
          expect(await chain.balanceOf(stack.payTo)).toBe(before);
        } finally {
          await stack.stop();
        }
      });
    });
  }

  it('the authorisation marked used with no log of its use (its log unseen): 402 after a bounded wait, not settled', async () => {
    // A settlement budget of a minute, so that a wait for the log that ran to it shows whatever
    // the machine's speed.
    const { stack, payer, before } = await startRaced(
      async (_payer, context) => {
        const { auth } = hookAuthorization(context);
        await markUsedWithoutLog(auth.from, auth.nonce);
      },
      { X402_SETTLE_CONFIRM_TIMEOUT_MS: '60000' },
    );
    try {
      const started = Date.now();
      const { res, auth, header } = await paidRequest(stack, payer.key, payer.address);
      await expectSettlementRefused(res, /already used on chain, by no transaction of ours/);
      // The wait for the log is bounded (3 s), not the whole settlement budget. Not a figure: a
      // bound well inside the budget's minute, which a wait that ignored its own bound runs out.
      expect(Date.now() - started).toBeLessThan(40_000);
      await expectRefusedUnpaid(stack, { auth, header }, before);
      // The operator's ledger names it for a check on chain: had the payer's own transaction paid
      // the seller, no later round would see it (finance walk: it showed as a plain failure).
      expect(ledgerTotals(await readLedger(stack.store))).toContain(
        'refused, their authorisation used on chain by no transaction seen (check each nonce on chain: a refund due if it paid the seller): 1, 0.020000 USDC',
      );
    } finally {
      await stack.stop();
    }
  });

  it('the authorisation marked used with no log, and the settlement outlasted the answer: served pending and left pending, no loss booked on an unseen read', async () => {
    // The caller has the paid answer before the use is read: a read that sees nothing yet is left
    // to the reconciler (its wider window and the expiry), not booked as the seller's loss.
    const { stack, payer } = await startRaced(
      async (_payer, context) => {
        const { auth } = hookAuthorization(context);
        await markUsedWithoutLog(auth.from, auth.nonce);
        await new Promise((resolve) => setTimeout(resolve, 1_500));
      },
      { X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' },
    );
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      await expectServedPending(res);
      await stack.x402.settled();
      const types = await eventTypes(stack, auth.nonce);
      expect(types).not.toContain('PaymentSettlementFailed');
      expect(types).not.toContain('PaymentSettled');
      expect(types.at(-1)).toBe('PaymentSettlementPending');
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0, stillPending: 1 });
    } finally {
      await stack.stop();
    }
  });

  it('a pending payment whose authorisation is used with no transaction of its use found: reconciliation does not settle it', async () => {
    const { stack, payer } = await startRaced(usedWithoutLogThenCut);
    try {
      const auth = await payLeftPending(stack, payer);
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0, stillPending: 1 });
      expect(await eventTypes(stack, auth.nonce)).not.toContain('PaymentSettled');
    } finally {
      await stack.stop();
    }
  });

  it('a pending payment whose authorisation was used, with no transaction of its use seen, and expired before the log lookback: recorded as the loss, not pending forever', async () => {
    const { stack, payer } = await startRaced(usedWithoutLogThenCut);
    try {
      const auth = await payLeftPending(stack, payer, 12n);
      // Past validBefore, then blocks beyond a reader whose lookback is 2 blocks: the oldest block
      // it reads is newer than the authorisation's expiry (interval 0 keeps the chain's clock).
      await lapse(auth.validBefore);
      await chain.testClient.mine({ blocks: 3, interval: 0 });
      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never], 2n),
        olderThanMs: 0,
      });
      expect(await reconciler.runOnce()).toMatchObject({ settled: 0, lost: 1, stillPending: 0 });
      const events = await stack.paymentEvents(auth.nonce);
      expect(events.map((e) => e.type)).not.toContain('PaymentSettled');
      expect(events.at(-1)).toMatchObject({ type: 'PaymentSettlementFailed', data: { sellerLoss: true } });
    } finally {
      await stack.stop();
    }
  });

  it('the same, its answer given to no one (its request stopped before answering): released, not booked as the loss', async () => {
    // The request's record that its answer was served is held, as an api killed between the
    // hand-off and its answer leaves the payment for the reconciler.
    const store = new HoldingStore();
    const served = store.holdNext('PaymentAnswerServed');
    const { stack, payer } = await startRaced(usedWithoutLogThenCut, {}, { store });
    try {
      const request = paidRequest(stack, payer.key, payer.address, 12n);
      await served.arrived;
      const authorized = (await store.readAll()).find((e) => e.type === 'PaymentAuthorized');
      const nonce = (authorized!.data as { nonce: Hex }).nonce;
      const validBefore = BigInt((authorized!.data as { validBefore: string }).validBefore);
      const handedOff = (await stack.paymentEvents(nonce)).map((e) => e.type);
      expect(handedOff.at(-1)).toBe('PaymentSettlementPending');
      expect(handedOff).not.toContain('PaymentAnswerServed');
      expect(await chain.authorizationState(payer.address, nonce)).toBe(true);
      await lapse(validBefore);
      await chain.testClient.mine({ blocks: 3, interval: 0 });
      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never], 2n),
        olderThanMs: 0,
      });
      expect(await reconciler.runOnce()).toMatchObject({ settled: 0, lost: 0, released: 1, stillPending: 0 });

      expect((await stack.paymentEvents(nonce)).at(-1)).toMatchObject({
        type: 'PaymentReleased',
        data: { reason: expect.stringContaining('its answer reached no one') },
      });
      // The held record then meets a released payment: the answer is not given, nothing is booked.
      served.release();
      const { res } = await request;
      // Refused as the documented 402 payment_state_changed (nothing was charged, sign a new
      // one), not as 409 payment_in_use promising that the same payment would bring the answer
      // back: it no longer charges, so presented again it is refused too.
      const refused = (await res.json()) as { code: string; message: string };
      expect(res.status, JSON.stringify(refused)).toBe(402);
      expect(refused).toMatchObject({ code: 'payment_state_changed' });
      expect(refused.message).toMatch(/nothing was charged/);
      expect(refused).not.toHaveProperty('regime');
      const types = (await stack.paymentEvents(nonce)).map((e) => e.type);
      expect(types).not.toContain('PaymentSettlementFailed');
      expect(types).not.toContain('PaymentAnswerServed');
    } finally {
      // A failed assertion above must not leave the request held: the stack's stop waits for it.
      served.release();
      await stack.stop();
    }
  });
});

/**
 * The payer's own wallet sends a token call with a tip far above the facilitator's, not waiting
 * for it: with automine off, the next block mines it before a settlement already in the pool.
 */
async function sendAheadAsPayer(
  payer: { key: Hex; address: Hex },
  functionName: 'transferWithAuthorization',
  args: readonly unknown[],
): Promise<Hex> {
  const wallet = await payerWallet(chain, payer);
  return wallet.writeContract({
    address: BASE_USDC,
    abi: chain.usdcAbi,
    functionName,
    args,
    gas: 200_000n,
    maxPriorityFeePerGas: 500n * 10n ** 9n,
    maxFeePerGas: 1_000n * 10n ** 9n,
  });
}

describe('a settlement that fails after its answer was served', () => {
  /**
   * Pays with mining paused: the answer comes back once our settlement is in the pool; then the
   * payer's own transaction (`ahead`, built from the paid authorisation) is mined before ours in
   * the same block, and ours reverts.
   */
  async function servedThenReverted(
    stack: X402Stack,
    payer: { key: Hex; address: Hex },
    ahead: (auth: Awaited<ReturnType<typeof paidRequest>>['auth']) => Promise<Hex>,
  ) {
    await chain.testClient.setAutomine(false);
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      const body = await expectServedPending(res);
      const ours = decodePaymentResponseHeader(res.headers.get('x-payment-response')!).transaction as Hex;
      expect(ours).toMatch(/^0x[0-9a-f]{64}$/);
      const theirs = await ahead(auth);
      await chain.testClient.mine({ blocks: 1 });
      expect((await chain.publicClient.getTransactionReceipt({ hash: theirs })).status).toBe('success');
      expect((await chain.publicClient.getTransactionReceipt({ hash: ours })).status).toBe('reverted');
      await stack.x402.settled();
      return { auth, body, ours, theirs };
    } finally {
      await chain.testClient.setAutomine(true);
    }
  }

  it("our transaction reverted because the payer spent the nonce on themselves: left pending, then recorded as the seller's loss", async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const before = await chain.balanceOf(stack.payTo);
      const { auth, ours, theirs } = await servedThenReverted(stack, payer, async (auth) => {
        const toSelf = { ...auth, to: payer.address };
        const signature = await signAuthorization(payer.key, toSelf);
        return sendAheadAsPayer(payer, 'transferWithAuthorization', transferArgs(toSelf, signature));
      });
      // Served already: not a refusal, and not booked failed as if nothing was served.
      expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementPending',
        data: { txHash: ours },
      });
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0, lost: 1 });
      expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementFailed',
        data: { sellerLoss: true, txHash: theirs },
      });
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
    } finally {
      await stack.stop();
    }
  });

  it('our transaction reverted because the payer submitted the same authorisation first: left pending, then reconciled settled in theirs', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const before = await chain.balanceOf(stack.payTo);
      const { auth, theirs } = await servedThenReverted(stack, payer, async (auth) => {
        const signature = await signAuthorization(payer.key, auth);
        return sendAheadAsPayer(payer, 'transferWithAuthorization', transferArgs(auth, signature));
      });
      expect(await chain.balanceOf(stack.payTo)).toBe(before + PRICE);
      expect((await stack.paymentEvents(auth.nonce)).at(-1)?.type).toBe('PaymentSettlementPending');
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 1, lost: 0 });
      await expectSettledOnChain(stack, auth.nonce, { txHash: theirs });
    } finally {
      await stack.stop();
    }
  });

  it("refused before sending once the answer was out: left pending, then recorded as the seller's loss when the authorisation expires", async () => {
    // The settle call outlasts the answer's budget, and the payer empties the wallet meanwhile:
    // the facilitator refuses to send (the balance no longer covers it) after the 200 was served.
    const { stack, payer, before } = await startRaced(
      async (payer) => {
        await drain(payer);
        await new Promise((resolve) => setTimeout(resolve, 1_500));
      },
      { X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' },
    );
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address, 12n);
      await expectServedPending(res);
      await stack.x402.settled();
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(false);
      expect(await eventTypes(stack, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentAnswerServed',
        'PaymentSettlementPending',
      ]);
      // While the authorisation is valid it could still pay: the reconciler keeps it open.
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ lost: 0, stillPending: 1 });
      await lapse(auth.validBefore);
      await chain.testClient.mine({ blocks: 1 });
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ lost: 1 });
      expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementFailed',
        data: { sellerLoss: true },
      });
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
    } finally {
      await stack.stop();
    }
  });
});

describe('the log refuses a write while a paid call runs', () => {
  it('a settlement that failed for certain is refused (402) even though the failure could not be recorded', async () => {
    const { store, path } = await lmdbStore();
    const stack = await startX402Stack({}, chain, undefined, { store });
    try {
      const payer = await chain.fundedPayer(PRICE);
      // Between verification and settlement the payer's funds leave, and the store goes away:
      // settlement fails for certain, and recording that fails too.
      beforeSettle(stack, async () => {
        await drain(payer);
        await closeNow(store);
      });
      const before = await chain.balanceOf(stack.payTo);
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      const body = (await res.json()) as Record<string, unknown>;
      expect(res.status).toBe(402);
      expect(body).toMatchObject({ code: 'settlement_failed' });
      expect(body).not.toHaveProperty('regime');
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(false);
      await stack.x402.settled();
      // The failure never reached the log: it stays pending there, for reconciliation.
      const reopened = await openLmdbEventStore({ path });
      try {
        const events = await reopened.readAll();
        const payment = events.filter((e) => e.stream.startsWith('payment-')).map((e) => e.type);
        expect(payment).toEqual(['PaymentAuthorized', 'PaymentSettlementPending']);
      } finally {
        await reopened.close();
      }
    } finally {
      await stack.stop();
    }
  });

  it("a reservation the store refuses frees the payer's hold: another replica serves their next call", async () => {
    const payTo = privateKeyToAccount(generatePrivateKey()).address;
    const cache = createMemoryCache();
    const { store } = await lmdbStore();
    const broken = await startX402Stack({ X402_PAY_TO: payTo }, chain, cache, { store });
    const healthy = await startX402Stack({ X402_PAY_TO: payTo }, chain, cache);
    try {
      // A balance for one call: a hold left behind by the refused call would refuse the next.
      const payer = await chain.fundedPayer(PRICE);
      const local = broken.x402.facilitator as LocalFacilitator;
      // Verified, then the store goes away before the reservation is written.
      local.facilitator.onAfterVerify(async () => {
        await closeNow(store);
      });
      const refused = await paidRequest(broken, payer.key, payer.address);
      expect(refused.res.status).toBeGreaterThanOrEqual(500);
      expect(await refused.res.json()).not.toHaveProperty('regime');

      const { res } = await paidRequest(healthy, payer.key, payer.address);
      expect(res.status).toBe(200);
      await healthy.x402.settled();
      expect(await chain.balanceOf(payer.address)).toBe(0n);
    } finally {
      await healthy.stop();
      await broken.stop();
    }
  });
});

describe("a settlement refused while the log is slow to take the refusal's record", () => {
  // The answer's budget (X402_SETTLE_CONFIRM_TIMEOUT_MS): long enough for the settle hook to
  // finish its race and take the lock within it, so the facilitator's refusal comes before it.
  const BUDGET_MS = 8_000;

  /**
   * A service on an LMDB log whose settle hook runs `race` on chain (the settlement then fails for
   * certain) and meanwhile has another process take the log's write lock; the lock is released
   * only once the answer's budget has run out (counted from the hook's start, after the flow's
   * own timer was set, so that timer fires first in this process). The record of the failure
   * thus waits past the moment the paid answer is due.
   */
  async function refusedUnderHeldLock(
    race: (payer: { key: Hex; address: Hex }, context: SettleContext) => Promise<unknown>,
    funded: bigint,
  ) {
    const { store, path } = await lmdbStore();
    const stack = await startX402Stack(
      { X402_SETTLE_CONFIRM_TIMEOUT_MS: String(BUDGET_MS) },
      chain,
      undefined,
      {
        store,
      },
    );
    const released: { done: Promise<void> | null } = { done: null };
    try {
      const payer = await chain.fundedPayer(funded);
      beforeSettle(stack, async (context) => {
        const started = Date.now();
        const [, holder] = await Promise.all([race(payer, context), holdWriteLock(path)]);
        const due = started + BUDGET_MS + 200 - Date.now();
        released.done = new Promise((resolve) => setTimeout(resolve, Math.max(due, 0))).then(holder.release);
      });
      return { stack, payer, released, before: await chain.balanceOf(stack.payTo) };
    } catch (error) {
      await stack.stop();
      throw error;
    }
  }

  async function stop(stack: X402Stack, released: { done: Promise<void> | null }): Promise<void> {
    await released.done;
    await stack.stop();
  }

  it('refused before sending (the payer emptied the wallet): 402, recorded failed, not served pending while the record waits', async () => {
    const { stack, payer, released, before } = await refusedUnderHeldLock((payer) => drain(payer), PRICE);
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      // Before the fix: 200 served pending at the budget while the log then recorded it failed
      // (no sellerLoss) and the payer's hold was freed.
      await expectSettlementRefused(res, /^settlement failed: /);
      await released.done;
      await stack.x402.settled();
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(false);
      expect(await eventTypes(stack, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementFailed',
      ]);
      expect((await stack.paymentEvents(auth.nonce)).at(-1)?.data).not.toHaveProperty('sellerLoss');
    } finally {
      await stop(stack, released);
    }
  });

  it('the payer spent the nonce on themselves: 402, recorded failed, not served pending while the record waits', async () => {
    const { stack, payer, released, before } = await refusedUnderHeldLock(frontRunToSelf, 1_000_000n);
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      await expectSettlementRefused(res, /used on chain by another transaction that did not pay the seller/);
      await released.done;
      await stack.x402.settled();
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n);
      expect(await eventTypes(stack, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementFailed',
      ]);
      expect((await stack.paymentEvents(auth.nonce)).at(-1)?.data).not.toHaveProperty('sellerLoss');
    } finally {
      await stop(stack, released);
    }
  });
});

describe('settlement that outlasts the receipt wait', () => {
  it('serves the paid result as pending, then reconciliation records the one settlement', async () => {
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' }, chain);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      await chain.testClient.setAutomine(false);
      let served: Awaited<ReturnType<typeof paidRequest>>;
      try {
        served = await paidRequest(stack, payer.key, payer.address);
        // Answered while the settlement is still unmined: the answer does not wait for the receipt.
        expect(await chain.authorizationState(payer.address, served.auth.nonce)).toBe(false);
        // The background receipt wait gives up after X402_SETTLE_CONFIRM_TIMEOUT_MS and records it pending.
        await stack.x402.settled();
      } finally {
        await chain.testClient.setAutomine(true);
      }
      const { res, auth } = served;
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        regime: string;
        _service: { payment: { status: string; transaction: Hex | null } };
      };
      expect(body.regime).toEqual(expect.any(String));
      expect(body._service.payment.status).toBe('pending');
      const pending = await stack.paymentEvents(auth.nonce);
      expect(pending.map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentAnswerServed',
        'PaymentSettlementPending',
      ]);
      // The transaction the receipt wait gave up on.
      const sent = (pending[3]!.data as { txHash?: Hex }).txHash!;
      expect(sent).toMatch(/^0x[0-9a-f]{64}$/);
      const receipt = decodePaymentResponseHeader(res.headers.get('x-payment-response')!);
      if (receipt.success) {
        // Broadcast within X402_SETTLE_CONFIRM_TIMEOUT_MS but unconfirmed: the receipt names the
        // transaction as a success (what x402 clients read), and _service.payment says pending.
        expect(receipt).not.toHaveProperty('errorReason');
        expect(receipt.transaction).toBe(sent);
        expect(body._service.payment.transaction).toBe(sent);
      } else {
        // A host too slow to broadcast within the answer's budget (700 ms: the settlement reads
        // the chain again, estimates gas and signs first): answered before any transaction is
        // known, as the README documents: settlement_pending, no transaction named.
        expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending', transaction: '' });
        expect(body._service.payment.transaction).toBeNull();
      }

      await chain.testClient.mine({ blocks: 1 });
      await chain.publicClient.waitForTransactionReceipt({ hash: sent });
      const reconciler = reconcilerOf(stack);
      const summary = await reconciler.runOnce();
      expect(summary).toMatchObject({ settled: 1, lost: 0, released: 0, rebroadcast: 0 });
      const events = await stack.paymentEvents(auth.nonce);
      expect(events.at(-1)).toMatchObject({
        type: 'PaymentSettled',
        data: { txHash: sent, reconciled: true, amount: '20000' },
      });
      await expectChargedOnce(payer.address, auth.nonce);
      // A second round finds nothing open: never settled or recorded twice.
      expect(await reconciler.runOnce()).toMatchObject({ examined: 0 });
    } finally {
      await stack.stop();
    }
  });

  it('a settlement not yet broadcast when the answer is due: served with settlement_pending naming no transaction, then settled once, the replay naming it', async () => {
    // The settle starts only after the answer's budget (700 ms) ran out: what a host too slow to
    // re-verify, estimate and sign within it gives (README: settlement_pending before any
    // transaction is known).
    const { stack, payer } = await startRaced(
      async () => {
        await new Promise((resolve) => setTimeout(resolve, 1_500));
      },
      { X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' },
    );
    try {
      const { res, auth, header } = await paidRequest(stack, payer.key, payer.address);
      const body = (await expectServedPending(res)) as ServedBody & {
        _service: { payment: { transaction: string | null } };
      };
      expect(body._service.payment.transaction).toBeNull();
      expect(decodePaymentResponseHeader(res.headers.get('x-payment-response')!)).toMatchObject({
        success: false,
        errorReason: 'settlement_pending',
        transaction: '',
        payer: payer.address,
      });
      await stack.x402.settled();
      // Its receipt may outlast the 700 ms wait too: the reconciler then records it from the chain.
      await reconcilerOf(stack).runOnce();
      const txHash = await expectSettledOnChain(stack, auth.nonce);
      await expectChargedOnce(payer.address, auth.nonce);
      const again = await presentAgain(stack, header);
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      expect(decodePaymentResponseHeader(again.headers.get('x-payment-response')!)).toMatchObject({
        success: true,
        transaction: txHash,
      });
    } finally {
      await stack.stop();
    }
  });
});

describe('reconciliation after a restart', () => {
  it('releases an expired reservation never handed off, broadcasts a handed-off one again, and records an expired one as the loss', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const { PaymentLedger } = await import('../services/payments/ledger.ts');
      const ledger = new PaymentLedger(stack.store);
      const payer = await chain.fundedPayer(1_000_000n);
      const now = chainSeconds();
      const base = {
        network: 'eip155:8453',
        asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
        payer: payer.address,
        payTo: stack.payTo,
        amount: '20000',
        resource: `${stack.url}${PATH}`,
        x402Version: 1 as const,
        validAfter: String(now - 600n),
        requestId: 'crashed',
      };
      const signed = async (nonce: Hex, validBefore: bigint) => ({
        ...base,
        nonce,
        validBefore: String(validBefore),
        signature: await signAuthorization(payer.key, {
          from: payer.address,
          to: stack.payTo,
          value: PRICE,
          validAfter: now - 600n,
          validBefore,
          nonce,
        }),
      });
      // Never handed off, its authorisation expired unused: released (a valid one waits, see
      // x402-payment-durability.e2e).
      const stopped = await ledger.reserve(await signed(randomNonce(), now - 1n));
      // Handed off to settlement (its answer kept), then the process died before the broadcast.
      const handedOff = await ledger.reserve(await signed(randomNonce(), now + 600n));
      const expired = await ledger.reserve(await signed(randomNonce(), now - 1n));
      if (!stopped.ok || !handedOff.ok || !expired.ok) throw new Error('reserve failed');
      for (const { handle } of [handedOff, expired]) {
        await ledger.transition(handle, { kind: 'markPending', submittedAt: new Date().toISOString() });
      }

      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
        olderThanMs: 0,
        resettle: stack.x402.resettle,
      });
      expect(await reconciler.runOnce()).toMatchObject({
        examined: 3,
        released: 1,
        rebroadcast: 1,
        lost: 1,
        settled: 0,
      });
      expect((await stack.paymentEvents(stopped.handle.ref.nonce)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentReleased',
      ]);
      await expectSettledOnChain(stack, handedOff.handle.ref.nonce as Hex, {
        reconciled: true,
        amount: '20000',
      });
      expect((await stack.paymentEvents(expired.handle.ref.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementFailed',
        data: {
          reason:
            "the answer was served but the authorisation expired before a settlement landed: the seller's loss",
          reconciled: true,
          sellerLoss: true,
        },
      });
      // Charged once, for the one that could still land.
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
      expect(await reconciler.runOnce()).toMatchObject({ examined: 0 });
    } finally {
      await stack.stop();
    }
  });

  it('a settlement the node dropped after its answer was served is broadcast again, once (official client)', async () => {
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' }, chain);
    try {
      // The node loses the transaction (a restart of its mempool), and so does our process: a
      // new process numbers its transactions from the chain again.
      const { payer, res, receipt } = await servedThenDropped(stack);
      expect(receipt.success).toBe(true);
      const local = stack.x402.facilitator as LocalFacilitator;
      nonceManager.reset({ address: local.signerAddress, chainId: 8453 });
      const body = (await res.json()) as { _service: { payment: { status: string } } };
      expect(body._service.payment.status).toBe('pending');
      expect(await chain.authorizationState(payer.address, (await pendingNonce(stack))!)).toBe(false);

      // The process that served it is gone (kill -9): another one, on the same log, reconciles.
      const restarted = await startX402Stack({ X402_PAY_TO: stack.payTo }, chain, undefined, {
        store: stack.store,
      });
      try {
        const reconciler = new PaymentReconciler({
          store: stack.store,
          chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
          olderThanMs: 0,
          resettle: restarted.x402.resettle,
        });
        expect(await reconciler.runOnce()).toMatchObject({ examined: 1, rebroadcast: 1 });
        expect(await reconciler.runOnce()).toMatchObject({ examined: 0 });
      } finally {
        await restarted.stop();
      }
      const nonce = (await settledNonce(stack))!;
      await expectSettledOnChain(stack, nonce, { reconciled: true });
      await expectChargedOnce(payer.address, nonce);
    } finally {
      await stack.stop();
    }
  });

  it("the same, reconciled by the service's own reconciler on its defaults: broadcast again while the authorisation is valid, not booked as the seller's loss", async () => {
    // Finance walk: with X402_RECONCILE_AFTER_MS (5 min) the reconciler first looked at a served
    // pending payment long after its authorisation lapsed (the quote's maxTimeoutSeconds, 120 s),
    // so a settlement the node lost was never broadcast again, always the seller's loss.
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' }, chain);
    try {
      const { payer, res } = await servedThenDropped(stack);
      const local = stack.x402.facilitator as LocalFacilitator;
      nonceManager.reset({ address: local.signerAddress, chainId: 8453 });
      expect(((await res.json()) as ServedBody)._service.payment.status).toBe('pending');
      // The reconciler's clock 11 s on: past the request's settle wait and the reconciler's margin
      // after it (10 s), well inside the authorisation's 120 s (the chain's own clock, not moved).
      const restarted = await startX402Stack(
        { X402_PAY_TO: stack.payTo, X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' },
        chain,
        undefined,
        { store: stack.store, now: () => Date.now() + 11_000 },
      );
      try {
        expect(await restarted.x402.reconciler.runOnce()).toMatchObject({
          examined: 1,
          rebroadcast: 1,
          lost: 0,
        });
      } finally {
        await restarted.stop();
      }
      const nonce = (await settledNonce(stack))!;
      await expectSettledOnChain(stack, nonce, { reconciled: true });
      await expectChargedOnce(payer.address, nonce);
    } finally {
      await stack.stop();
    }
  });

  it('a settlement the node dropped leaves no nonce gap in the same process: the next settlement and the first sent again both land', async () => {
    // Finance walk: one settlement dropped from the node's pool left the facilitator's nonce
    // manager a nonce ahead of the chain, so every later settlement of the process (and the
    // dropped one broadcast again) queued behind the gap, never mined, each served pending and
    // then the seller's loss.
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '700' }, chain);
    try {
      const before = await chain.balanceOf(stack.payTo);
      const { pay } = await servedThenDropped(stack);
      const second = await pay();
      expect(second.status).toBe(200);
      await stack.x402.settled();
      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
        olderThanMs: 0,
        resettle: stack.x402.resettle,
      });
      // Rounds until both land, not two: a round whose broadcast's receipt misses the 700 ms
      // budget (a loaded machine) records it pending, and a later round finds it landed. With the
      // nonce gap neither ever lands; 60 s is a hang bound only.
      await vi.waitFor(
        async () => {
          await reconciler.runOnce();
          const settled = (await stack.store.readAll()).filter((e) => e.type === 'PaymentSettled');
          expect(settled).toHaveLength(2);
        },
        { timeout: 60_000, interval: 500 },
      );
      expect(await chain.balanceOf(stack.payTo)).toBe(before + 2n * PRICE);
    } finally {
      await stack.stop();
    }
  });
});

/**
 * One call paid through the official client (a funded payer's) and served while blocks wait,
 * after which the node drops its settlement transaction: the payer, a function paying the same
 * call again, the answer and its receipt.
 */
async function servedThenDropped(stack: X402Stack) {
  const payer = await chain.fundedPayer(1_000_000n);
  const client = new x402Client();
  registerExactEvmScheme(client, { signer: privateKeyToAccount(payer.key) });
  const payFetch = wrapFetchWithPayment(fetch, client);
  const pay = () =>
    payFetch(`${stack.url}${PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(BODY),
    });
  await chain.testClient.setAutomine(false);
  try {
    const res = await pay();
    expect(res.status).toBe(200);
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
    await stack.x402.settled();
    await chain.testClient.dropTransaction({ hash: receipt.transaction as Hex });
    return { payer, pay, res, receipt };
  } finally {
    await chain.testClient.setAutomine(true);
  }
}

/** The nonce of the one payment of this stack still pending, or null. */
async function pendingNonce(stack: X402Stack): Promise<Hex | null> {
  const events = (await stack.store.readAll()).filter((e) => e.stream.startsWith('payment-'));
  const last = new Map(events.map((e) => [e.stream, e]));
  const pending = [...last.values()].filter((e) => e.type === 'PaymentSettlementPending');
  return pending.length === 1 ? ((pending[0]!.data as { nonce: Hex }).nonce ?? null) : null;
}

/** The nonce of the one payment of this stack settled, or null. */
async function settledNonce(stack: X402Stack): Promise<Hex | null> {
  const settled = (await stack.store.readAll()).filter((e) => e.type === 'PaymentSettled');
  return settled.length === 1 ? (settled[0]!.data as { nonce: Hex }).nonce : null;
}

describe('remote facilitator over HTTP', () => {
  it('settles through a facilitator service that requires an auth header', async () => {
    const local = createLocalFacilitator({
      privateKey: FACILITATOR_KEY,
      networks: [{ network: 'eip155:8453', rpcUrl: chain.rpcUrl }],
      confirmationTimeoutMs: 10_000,
    });
    const seen: string[] = [];
    const remote = Fastify();
    remote.addHook('onRequest', async (request, reply) => {
      seen.push(`${request.url} ${request.headers.authorization ?? '-'}`);
      if (request.headers.authorization !== 'Bearer facilitator-secret')
        reply.code(401).send({ error: 'unauthorised' });
    });
    remote.get('/supported', async () => local.getSupported());
    remote.post('/verify', async (request) => {
      const { paymentPayload, paymentRequirements } = request.body as never;
      return local.verify(paymentPayload, paymentRequirements);
    });
    remote.post('/settle', async (request) => {
      const { paymentPayload, paymentRequirements } = request.body as never;
      return local.settle(paymentPayload, paymentRequirements);
    });
    const facilitatorUrl = await remote.listen({ host: '127.0.0.1', port: 0 });
    const stack = await startX402Stack(
      {
        X402_FACILITATOR: 'remote',
        X402_FACILITATOR_URL: facilitatorUrl,
        X402_FACILITATOR_AUTH_HEADERS: JSON.stringify({ Authorization: 'Bearer facilitator-secret' }),
      },
      chain,
    );
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      expect(res.status).toBe(200);
      // A remote facilitator tells nothing before its settle ends; the answer waits for it, so
      // the receipt names the transaction instead of a pending settlement without one.
      const receipt = decodePaymentResponseHeader(res.headers.get('x-payment-response')!);
      expect(receipt).toMatchObject({ success: true, payer: payer.address });
      const body = (await res.json()) as { _service: { payment: { status: string; transaction: string } } };
      expect(body._service.payment).toMatchObject({ status: 'settled', transaction: receipt.transaction });
      expect(
        (await chain.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hex })).status,
      ).toBe('success');
      await stack.x402.settled();
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(true);
      expect(seen).toEqual([
        '/supported Bearer facilitator-secret',
        '/verify Bearer facilitator-secret',
        '/settle Bearer facilitator-secret',
      ]);
    } finally {
      await stack.stop();
      await remote.close();
    }
  });
});

/**
 * A JSON-RPC proxy in front of anvil. `pass` forwards every call; `lose-send-reply` forwards the
 * next eth_sendRawTransaction (the node takes and mines it) and never answers it, then passes
 * again; `refuse-send` answers the next one with the node's refusal (`answer`) without forwarding
 * it; `fail-after-send` forwards the next one (the node takes and mines it) and answers `answer`
 * instead of the node's reply, as a hosted RPC whose hop failed after passing it on;
 * `drop-send` cuts the connection of the next one without forwarding it (the node never sees
 * it); `silent` answers nothing, as a node that accepts connections and hangs (kill -STOP).
 */
async function rpcProxy(target: string) {
  let mode: 'pass' | 'lose-send-reply' | 'refuse-send' | 'fail-after-send' | 'drop-send' | 'silent' = 'pass';
  let answer = { code: -32000, message: 'nonce too low' };
  const held = new Set<ServerResponse>();
  // Whether the client gave up on the last send whose reply was lost (null: none lost yet).
  let sendGivenUp: boolean | null = null;
  // Blocks an eth_getLogs may span, as hosted RPCs cap it; null passes any range.
  let logRangeCap: bigint | null = null;
  // Run once the next eth_getLogs has been answered.
  let afterLogs: (() => Promise<unknown>) | null = null;
  const server = createServer((req, res) => {
    let raw = '';
    req.on('data', (chunk: Buffer) => {
      raw += chunk.toString();
    });
    req.on('end', async () => {
      if (mode === 'silent') {
        held.add(res);
        return;
      }
      const calls = [JSON.parse(raw)].flat() as { id: number; method: string }[];
      const send = calls.find((c) => c.method === 'eth_sendRawTransaction');
      const logs = calls.find((c) => c.method === 'eth_getLogs') as
        | { id: number; params: [{ fromBlock: Hex; toBlock: Hex }] }
        | undefined;
      if (logs && logRangeCap !== null) {
        const { fromBlock, toBlock } = logs.params[0];
        if (BigInt(toBlock) - BigInt(fromBlock) > logRangeCap) {
          const error = { code: -32005, message: `block range too large: at most ${logRangeCap} blocks` };
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ jsonrpc: '2.0', id: logs.id, error }));
          return;
        }
      }
      if (mode === 'drop-send' && send) {
        mode = 'pass';
        req.socket.destroy();
        return;
      }
      if (mode === 'refuse-send' && send) {
        mode = 'pass';
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: send.id, error: answer }));
        return;
      }
      const forwarded = await fetch(target, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: raw,
      });
      const text = await forwarded.text();
      if (mode === 'fail-after-send' && send) {
        mode = 'pass';
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: send.id, error: answer }));
        return;
      }
      if (mode === 'lose-send-reply' && send) {
        mode = 'pass';
        held.add(res);
        sendGivenUp = false;
        // The client closing the connection: it gave up waiting for this answer (its timeout).
        res.once('close', () => {
          sendGivenUp = true;
        });
        return;
      }
      res.writeHead(forwarded.status, { 'content-type': 'application/json' });
      res.end(text);
      if (logs && afterLogs) {
        const then = afterLogs;
        afterLogs = null;
        await then();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** Whether the client gave up on the send whose reply was lost (null: no send held yet). */
    sendGivenUp: () => sendGivenUp,
    capLogRange(blocks: bigint) {
      logRangeCap = blocks;
    },
    /** Runs `then` once the next eth_getLogs has been answered. */
    afterNextLogs(then: () => Promise<unknown>) {
      afterLogs = then;
    },
    set(next: typeof mode, error = { code: -32000, message: 'nonce too low' }) {
      mode = next;
      answer = error;
    },
    async close() {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The service with its chain RPC behind a fresh rpcProxy (`env` added); `stop` ends both. */
async function startBehindProxy(env: Record<string, string>) {
  const proxy = await rpcProxy(chain.rpcUrl);
  const stack = await startX402Stack({ X402_RPC_URL: proxy.url, ...env }, chain);
  return {
    proxy,
    stack,
    async stop() {
      await stack.stop();
      await proxy.close();
    },
  };
}

/** Budgets short enough that a lost or refused send is over within seconds. */
const SHORT_SETTLE = { X402_FACILITATOR_TIMEOUT_MS: '1500', X402_SETTLE_CONFIRM_TIMEOUT_MS: '1500' };

describe('a chain RPC that loses answers', () => {
  it('a settlement whose send got no answer but was mined serves the answer, charges once, and replays it', async () => {
    // The default budget: a JSON-RPC request times out after viem's 10 s. The answer may wait for
    // the broadcast longer than that (30 s), so an answer that came only from the send's timeout
    // would still name the transaction: what tells them apart is whether the send was given up.
    const { proxy, stack, stop } = await startBehindProxy({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '30000' });
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const client = new x402Client();
      registerExactEvmScheme(client, { signer: privateKeyToAccount(payer.key) });
      let header = '';
      const payFetch = wrapFetchWithPayment(async (input, init) => {
        const request = new Request(input, init);
        header = request.headers.get('payment-signature') ?? header;
        return fetch(request);
      }, client);
      proxy.set('lose-send-reply');
      const res = await payFetch(`${stack.url}/x402/get_trade_call`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ coin: 'BTC', timeframe: '1h' }),
      });
      // The node is asked whether it has the transaction while the send goes unanswered: the
      // answer does not wait for the send's timeout (viem's 10 s), so it arrives while the send
      // is still waiting for its reply, however slow the host (the send was held, not given up).
      expect(proxy.sendGivenUp()).toBe(false);
      const body = (await res.json()) as Record<string, unknown> & {
        _service: { payment: { status: string; transaction: string } };
      };
      expect(res.status, JSON.stringify(body)).toBe(200);
      const { _service: _paid, ...answer } = body;
      expect(answer).toMatchObject({ coin: 'BTC', timeframe: '1h' });
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response')!);
      expect(receipt).toMatchObject({ success: true });
      await stack.x402.settled();
      const nonce = (await settledNonce(stack))!;
      expect(await chain.authorizationState(payer.address, nonce as Hex)).toBe(true);
      // The transaction the node took is the one the answer names.
      const mined = await chain.publicClient.getTransactionReceipt({ hash: receipt.transaction as Hex });
      expect(mined.status).toBe('success');
      expect(body._service.payment.transaction).toBe(receipt.transaction);
      expect(await eventTypes(stack, nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentAnswerServed',
        'PaymentSettled',
      ]);
      // The same payment presented again gets the same answer, and charges nothing more.
      const again = await fetch(`${stack.url}/x402/get_trade_call`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'payment-signature': header },
        body: JSON.stringify({ coin: 'BTC', timeframe: '1h' }),
      });
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      const { _service: _replayed, ...kept } = (await again.json()) as Record<string, unknown>;
      expect(kept).toEqual(answer);
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n - 20_000n);
    } finally {
      await stop();
    }
  });

  it('a settlement whose send was cut before the node saw it: served, sent again once the node does not know it, charged once', async () => {
    const { proxy, stack, stop } = await startBehindProxy(SHORT_SETTLE);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      proxy.set('drop-send');
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      // Nobody can tell the node did not get it: the answer is the payer's, the payment open.
      await expectServedPending(res);
      const lost = decodePaymentResponseHeader(res.headers.get('x-payment-response')!).transaction as Hex;
      // Its receipt never comes; @x402/core asks again, and the transaction the node does not
      // know is sent again rather than waited for (until the reconciler's round, minutes later).
      await stack.x402.settled();
      // Sent again with the nonce the lost one never used: mostly the same bytes, so the same hash
      // as the answer named (a fee that moved meanwhile would change it).
      expect(lost).toMatch(/^0x[0-9a-f]{64}$/);
      await expectSettledOnChain(stack, auth.nonce);
      await expectChargedOnce(payer.address, auth.nonce);
      // The facilitator's next transaction takes the nonce the lost one never used.
      const next = await paidRequest(stack, payer.key, payer.address);
      expect(next.res.status).toBe(200);
      await stack.x402.settled();
      expect((await stack.paymentEvents(next.auth.nonce)).at(-1)?.type).toBe('PaymentSettled');
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n - 2n * PRICE);
    } finally {
      await stop();
    }
  });

  it.each([
    { code: -32000, message: 'nonce too low', says: /Nonce provided .* lower than the current nonce .*/ },
    {
      code: -32000,
      message: 'replacement transaction underpriced',
      says: /Missing or invalid parameters\./,
    },
    // geth's wording, which @x402/evm took for the payer's balance ('the payer does not hold enough').
    {
      code: -32000,
      message: 'insufficient funds for gas * price + value: balance 0, tx cost 2100000, overshot 2100000',
      says: /the facilitator's wallet 0x[0-9a-fA-F]{40} has too little ETH for the settlement's gas/,
    },
  ])(
    'a settlement transaction the node refused ($message): 402 settlement_failed, said not sent, nothing charged',
    async ({ code, message, says }) => {
      const { proxy, stack, stop } = await startBehindProxy({ X402_FACILITATOR_TIMEOUT_MS: '1500' });
      try {
        const payer = await chain.fundedPayer(1_000_000n);
        proxy.set('refuse-send', { code, message });
        const { res, auth } = await paidRequest(stack, payer.key, payer.address);
        await expectSettlementRefused(
          res,
          new RegExp(
            `^settlement failed: the settlement transaction was not sent \\(${says.source}\\); nothing was charged$`,
          ),
        );
        await stack.x402.settled();
        expect((await stack.paymentEvents(auth.nonce)).at(-1)?.type).toBe('PaymentSettlementFailed');
        await expectNotCharged(payer.address, auth.nonce);
      } finally {
        await stop();
      }
    },
  );

  // A hosted RPC may answer a send with an error after it passed the transaction on: with "the
  // node refused it" read from any error answer, this was 402 'not sent; nothing was charged',
  // the payment recorded failed, while the chain mined the transfer (signed again, paid twice).
  it.each([
    { code: -32603, message: 'internal error' },
    { code: -32000, message: 'context deadline exceeded' },
  ])(
    'a send answered $code $message after the node took it: served, charged once, recorded settled in the mined transaction',
    async (answer) => {
      const { proxy, stack, stop } = await startBehindProxy(SHORT_SETTLE);
      try {
        const payer = await chain.fundedPayer(1_000_000n);
        proxy.set('fail-after-send', answer);
        const { res, auth } = await paidRequest(stack, payer.key, payer.address);
        await expectServed(res);
        const named = decodePaymentResponseHeader(res.headers.get('x-payment-response')!).transaction as Hex;
        await stack.x402.settled();
        expect(await eventTypes(stack, auth.nonce)).not.toContain('PaymentSettlementFailed');
        expect(await expectSettledOnChain(stack, auth.nonce)).toBe(named);
        await expectChargedOnce(payer.address, auth.nonce);
      } finally {
        await stop();
      }
    },
  );

  it('a remote facilitator that lost its send reply and answered failed: the answer is served pending, reconciliation records the settlement', async () => {
    const proxy = await rpcProxy(chain.rpcUrl);
    // The official facilitator (@x402/core, @x402/evm, viem), as a third party runs it, behind the
    // lossy RPC: its wallet's send times out after the node took the transaction.
    const key = generatePrivateKey();
    const account = privateKeyToAccount(key);
    await chain.testClient.setBalance({ address: account.address, value: 10n ** 18n });
    const wallet = createWalletClient({
      account,
      chain: base,
      transport: http(proxy.url, { timeout: 1000, retryCount: 0 }),
    }).extend(publicActions);
    const official = new x402Facilitator().register(
      'eip155:8453',
      new ExactEvmScheme(toFacilitatorEvmSigner({ ...wallet, address: account.address } as never)),
    );
    const remote = Fastify();
    remote.get('/supported', async () => official.getSupported());
    remote.post('/verify', async (request) => {
      const { paymentPayload, paymentRequirements } = request.body as never;
      return official.verify(paymentPayload, paymentRequirements);
    });
    const answers: Record<string, unknown>[] = [];
    remote.post('/settle', async (request) => {
      const { paymentPayload, paymentRequirements } = request.body as never;
      const answer = await official.settle(paymentPayload, paymentRequirements);
      answers.push(answer as never);
      return answer;
    });
    const stack = await startX402Stack(
      {
        X402_FACILITATOR: 'remote',
        X402_FACILITATOR_URL: await remote.listen({ host: '127.0.0.1', port: 0 }),
      },
      chain,
    );
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      proxy.set('lose-send-reply');
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      const body = await expectServedPending(res);
      expect(answers).toEqual([
        expect.objectContaining({
          success: false,
          errorReason: 'invalid_exact_evm_transaction_failed',
          transaction: '',
        }),
      ]);
      await stack.x402.settled();
      // The node took it: the buyer paid, once.
      await expectChargedOnce(payer.address, auth.nonce);
      // A remote facilitator's answer comes once its settle ended (pending): served after that record.
      expect(await eventTypes(stack, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementPending',
        'PaymentAnswerServed',
      ]);
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 1, rebroadcast: 0, lost: 0 });
      const settled = await expectSettledOnChain(stack, auth.nonce, { reconciled: true });
      // The same payment again (signing is deterministic): the kept answer, now settled.
      const again = await presentAgain(stack, v1Header(auth, await signAuthorization(payer.key, auth)));
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      const kept = (await again.json()) as typeof body;
      expect(kept.regime).toBe(body.regime);
      expect(kept._service.payment).toMatchObject({ status: 'settled', transaction: settled });
    } finally {
      await stack.stop();
      await remote.close();
      await proxy.close();
    }
  });

  it('an RPC that caps eth_getLogs ranges: the payer paid with their own transfer before ours, the answer is served pending', async () => {
    // Hosted RPCs refuse wide log queries; the request path reads only the recent blocks, where
    // the use falls (between verification and settlement), not the reconciler's 20,000.
    const { proxy, stack, stop } = await startBehindProxy({});
    try {
      proxy.capLogRange(500n);
      const head = await chain.publicClient.getBlockNumber();
      // Deep enough that a read from block 0 spans more than the cap; interval 0 keeps chain time.
      if (head < 1_000n) await chain.testClient.mine({ blocks: Number(1_000n - head), interval: 0 });
      const payer = await chain.fundedPayer(1_000_000n);
      const before = await chain.balanceOf(stack.payTo);
      beforeSettle(stack, async (context) => {
        const { auth, signature } = hookAuthorization(context);
        await submitAsPayer(payer, auth, signature);
      });
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      await expectServedPending(res);
      await stack.x402.settled();
      await expectChargedOnce(payer.address, auth.nonce);
      expect(await chain.balanceOf(stack.payTo)).toBe(before + PRICE);
    } finally {
      await stop();
    }
  });

  it('a chain that accepts connections and never answers: 503 within X402_FACILITATOR_TIMEOUT_MS, nothing charged', async () => {
    // A budget of seconds: what the round trip around it may take on a loaded machine is small
    // beside the three more that viem's own retries would add.
    const budgetMs = 4_000;
    const { proxy, stack, stop } = await startBehindProxy({ X402_FACILITATOR_TIMEOUT_MS: String(budgetMs) });
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      proxy.set('silent');
      const started = Date.now();
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      const took = Date.now() - started;
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('1');
      expect(await res.json()).toMatchObject({ code: 'facilitator_unavailable', retryable: true });
      // The budget, not each read's own retries: unbounded, the first read alone takes viem's four
      // attempts of a budget each (the request timeout follows the budget) before the next starts,
      // so an answer sooner than that is the budget's, whatever the round trip around it takes.
      expect(took).toBeGreaterThanOrEqual(budgetMs);
      expect(took).toBeLessThan(4 * budgetMs);
      proxy.set('pass');
      expect(await stack.paymentEvents(auth.nonce)).toEqual([]);
      await expectNotCharged(payer.address, auth.nonce);
    } finally {
      proxy.set('pass');
      await stop();
    }
  });
});

describe("the payer's use of the authorisation mined while the request looks for it", () => {
  // The payer's transaction is in the mempool when our settlement is tried (the node's pending
  // state already shows the nonce used, so nothing of ours is sent) and is mined in the next
  // block, right after the request's first look at the logs, as a block arriving a moment later
  // on a chain with 2 s blocks. The look that follows must read the new block: a head number
  // kept from the first (viem caches it for 4 s, longer than the request's 3 s wait) hid the use.
  async function startMinedAfterFirstLook(
    use: (payer: { key: Hex; address: Hex }, context: SettleContext) => Promise<Hex>,
  ) {
    const { proxy, stack, stop } = await startBehindProxy({});
    const payer = await chain.fundedPayer(1_000_000n);
    const before = await chain.balanceOf(stack.payTo);
    const sent: { tx: Hex | null } = { tx: null };
    beforeSettle(stack, async (context) => {
      await chain.testClient.setAutomine(false);
      sent.tx = await use(payer, context);
      proxy.afterNextLogs(() => chain.testClient.mine({ blocks: 1 }));
    });
    return {
      stack,
      payer,
      before,
      sent,
      async stop() {
        await chain.testClient.setAutomine(true);
        await stop();
      },
    };
  }

  it('the payer submitted the same authorisation: served pending, then reconciled settled in their transaction', async () => {
    const { stack, payer, before, sent, stop } = await startMinedAfterFirstLook((payer, context) => {
      const { auth, signature } = hookAuthorization(context);
      return sendAsPayer(payer, 'transferWithAuthorization', transferArgs(auth, signature));
    });
    try {
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      await expectServedPending(res);
      await stack.x402.settled();
      expect(sent.tx).not.toBeNull();
      const steps = (await stack.paymentEvents(auth.nonce)).filter((e) => e.type !== 'PaymentAnswerServed');
      expect(steps.at(-1)).toMatchObject({
        type: 'PaymentSettlementPending',
        data: { txHash: sent.tx },
      });
      await expectChargedOnce(payer.address, auth.nonce);
      expect(await chain.balanceOf(stack.payTo)).toBe(before + PRICE);
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 1 });
      await expectSettledOnChain(stack, auth.nonce, { txHash: sent.tx });
    } finally {
      await stop();
    }
  });

  it('the payer cancelled the authorisation: 402 naming the cancel, recorded failed in the cancelling transaction', async () => {
    const { stack, payer, before, sent, stop } = await startMinedAfterFirstLook(async (payer, context) => {
      const { nonce } = hookAuthorization(context).auth;
      return sendAsPayer(payer, 'cancelAuthorization', [
        payer.address,
        nonce,
        await signCancellation(payer.key, nonce),
      ]);
    });
    try {
      const { res, auth, header } = await paidRequest(stack, payer.key, payer.address);
      await expectSettlementRefused(res, /cancelled on chain/);
      await stack.x402.settled();
      expect(sent.tx).not.toBeNull();
      expect((await stack.paymentEvents(auth.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementFailed',
        data: { txHash: sent.tx },
      });
      await expectRefusedUnpaid(stack, { auth, header }, before);
    } finally {
      await stop();
    }
  });
});

describe('a paid answer presented again while its settlement is unconfirmed', () => {
  it('is answered at once with the broadcast transaction, not after the receipt wait', async () => {
    // A receipt wait no host outlasts: the replay must be answered while it runs.
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '60000' }, chain);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const { auth, signature } = await signedAuthorization(payer, stack);
      const header = v1Header(auth, signature);
      const call = () =>
        fetch(`${stack.url}${PATH}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-payment': header },
          body: JSON.stringify(BODY),
        });
      await chain.testClient.setAutomine(false);
      try {
        const first = await call();
        expect(first.status).toBe(200);
        const sent = decodePaymentResponseHeader(first.headers.get('x-payment-response')!).transaction;
        expect(sent).toMatch(/^0x[0-9a-f]{64}$/);
        const again = await call();
        // Answered while the first settlement still waits for its receipt (automine is off): the
        // transaction came from its broadcast, not from the log, which names it only once that
        // wait ends (the replay would otherwise poll the log for the whole wait).
        expect((await stack.paymentEvents(auth.nonce)).map((e) => e.type)).toEqual([
          'PaymentAuthorized',
          'PaymentSettlementPending',
          'PaymentAnswerServed',
        ]);
        expect(again.status).toBe(200);
        expect(again.headers.get('x-payment-replayed')).toBe('true');
        expect(decodePaymentResponseHeader(again.headers.get('x-payment-response')!)).toMatchObject({
          success: true,
          transaction: sent,
        });
        const body = (await again.json()) as {
          _service: { payment: { status: string; transaction: string } };
        };
        expect(body._service.payment).toMatchObject({ status: 'pending', transaction: sent });
      } finally {
        await chain.testClient.setAutomine(true);
      }
      await chain.testClient.mine({ blocks: 1 });
      await stack.x402.settled();
      expect((await stack.paymentEvents(auth.nonce)).at(-1)?.type).toBe('PaymentSettled');
    } finally {
      await stack.stop();
    }
  });
});

describe("the payer's own use of the authorisation mined before the request", () => {
  // The payer (their wallet, say) submits the very authorisation they then pay with, and it is
  // mined before the request: verification refuses it for its used nonce. Once mined, the
  // transaction's calldata holds the whole payload, so whoever presents it may not be the payer:
  // nothing is served. When that use paid the agreed transfer the seller is paid, and the payment
  // is recorded settled in it, for the operator to refund; any other use records nothing.

  function present(stack: X402Stack, header: string): Promise<Response> {
    return fetch(`${stack.url}${PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-payment': header },
      body: JSON.stringify(BODY),
    });
  }

  it('its transfer paid the quoted amount to payTo: refused, nothing served, recorded settled in the payer’s transaction (a refund due)', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(1_000_000n);
      const before = await chain.balanceOf(stack.payTo);
      const { auth, signature } = await signedAuthorization(payer, stack);
      const theirs = await submitAsPayer(payer, auth, signature);
      const header = v1Header(auth, signature);

      const res = await present(stack, header);
      const body = (await res.json()) as Record<string, unknown>;
      expect(res.status, JSON.stringify(body)).toBe(402);
      expect(body).toMatchObject({ code: 'invalid_exact_evm_nonce_already_used' });
      expect(String(body.message)).toContain(`already used on chain (transaction ${theirs})`);
      expect(String(body.message)).toContain('recorded for the seller to refund');
      expect(body).not.toHaveProperty('regime');
      const events = await stack.paymentEvents(auth.nonce, payer.address);
      expect(events.map((e) => e.type)).toEqual(['PaymentAuthorized', 'PaymentSettled']);
      expect(events[1]).toMatchObject({
        data: { txHash: theirs, amount: PRICE.toString(), reconciled: true },
      });
      expect(await chain.balanceOf(stack.payTo)).toBe(before + PRICE);
      // Presented again: the record answers, nothing is served, nothing more recorded.
      const again = await present(stack, header);
      expect(again.status).toBe(409);
      expect(await again.json()).toMatchObject({ code: 'payment_already_used' });
      expect((await stack.paymentEvents(auth.nonce, payer.address)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettled',
      ]);
      expect(await reconcilerOf(stack).runOnce()).toMatchObject({ settled: 0 });
      // The published policy owns up to the refund the refusal promised (finance walk: it read
      // 'none issued' while the ledger listed this payment as a refund due).
      const manifest = (await (await fetch(`${stack.url}/.well-known/x402`)).json()) as {
        policy: { refunds: { policy: string; refundDue?: string[] } };
      };
      expect(manifest.policy.refunds.policy).not.toMatch(/none issued/);
      expect(manifest.policy.refunds.refundDue?.join(' ')).toMatch(/already used on chain to pay the seller/);
    } finally {
      await stack.stop();
    }
  });

  for (const { use, act } of [
    {
      use: 'spent its nonce on a transfer to themselves',
      act: async (
        payer: { key: Hex; address: Hex },
        auth: Awaited<ReturnType<typeof signedAuthorization>>['auth'],
      ) => {
        const toSelf = { ...auth, to: payer.address };
        return submitAsPayer(payer, toSelf, await signAuthorization(payer.key, toSelf));
      },
    },
    {
      use: 'cancelled it',
      act: async (
        payer: { key: Hex; address: Hex },
        auth: Awaited<ReturnType<typeof signedAuthorization>>['auth'],
      ) =>
        callAsPayer(payer, 'cancelAuthorization', [
          payer.address,
          auth.nonce,
          await signCancellation(payer.key, auth.nonce),
        ]),
    },
  ]) {
    it(`the payer ${use}: 402 nonce already used, nothing recorded or served`, async () => {
      const stack = await startX402Stack({}, chain);
      try {
        const payer = await chain.fundedPayer(1_000_000n);
        const before = await chain.balanceOf(stack.payTo);
        const { auth, signature } = await signedAuthorization(payer, stack);
        await act(payer, auth);
        const res = await present(stack, v1Header(auth, signature));
        const body = (await res.json()) as Record<string, unknown>;
        expect(res.status, JSON.stringify(body)).toBe(402);
        expect(body).toMatchObject({ code: 'invalid_exact_evm_nonce_already_used' });
        expect(String(body.message)).not.toContain('refund');
        expect(await stack.paymentEvents(auth.nonce, payer.address)).toEqual([]);
        expect(await chain.balanceOf(stack.payTo)).toBe(before);
      } finally {
        await stack.stop();
      }
    });
  }
});
