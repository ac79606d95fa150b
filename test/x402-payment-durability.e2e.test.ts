import { generatePaymentId } from '@x402/extensions/payment-identifier';
import { type Hex, nonceManager } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { chainReadersFor } from '../services/payments/chain-reader.ts';
import { foldPayment, paymentStream } from '../services/payments/payment-state.ts';
import { PaymentReconciler } from '../services/payments/reconcile.ts';
import {
  BASE_USDC,
  FACILITATOR_KEY,
  type LocalChain,
  payerWallet,
  startLocalChain,
} from './chain/local-chain.ts';
import { countingRpcRelay } from './chain/rpc-relay.ts';
import {
  type AuthorizationFields,
  freshAuthorization,
  fromBase64Json,
  signAuthorization,
  signCancellation,
  startX402Stack,
  v2Header,
  type X402Stack,
} from './chain/x402-app.ts';
import { HoldingStore } from './holding-store.ts';

/**
 * A paid answer and a payment id outlive the process that served them (restart, kill -9), on
 * anvil through real HTTP: what the payer paid for is answered again from the log, never with a
 * fresh quote, and charged once; a payment whose answer reached no one is not booked as a loss.
 * A restart is a new stack on the same log (its cache, its in-flight state gone); a kill -9 is a
 * new stack on a copy of the log as it stood at that moment (the old process never writes again).
 */

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const PRICE = 20_000n;
const NETWORK = 'eip155:8453';

let chain: LocalChain;
let accepted: Record<string, unknown>;

beforeAll(async () => {
  chain = await startLocalChain();
  const stack = await startX402Stack({}, chain);
  try {
    const res = await post(stack, BODY, {});
    accepted = fromBase64Json<{ accepts: Record<string, unknown>[] }>(res.headers.get('payment-required'))
      .accepts[0]!;
  } finally {
    await stack.stop();
  }
});
afterAll(async () => {
  await chain?.stop();
});

function post(on: X402Stack, body: unknown, headers: Record<string, string>) {
  return fetch(`${on.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

/** A v2 PAYMENT-SIGNATURE paying `payTo`, optionally under an x402 payment-identifier id. */
async function paymentHeader(key: Hex, auth: AuthorizationFields, paymentId?: string): Promise<string> {
  return v2Header({ ...accepted, payTo: auth.to }, auth, await signAuthorization(key, auth), paymentId);
}

function answerOf(body: Record<string, unknown>): Record<string, unknown> {
  const { _service: _drop, ...rest } = body;
  return rest;
}

/** The same deployment started again on the same log: nothing of the old process survives but the log. */
function restart(old: X402Stack, store: EventStore = old.store, env: Record<string, string> = {}) {
  return startX402Stack({ X402_PAY_TO: old.payTo, ...env }, chain, createMemoryCache(), { store });
}

/** The log as a kill -9 leaves it: every event appended so far, and nothing the old process writes after. */
async function crashCopy<S extends MemoryEventStore>(
  store: EventStore,
  copy: S = new MemoryEventStore() as S,
): Promise<S> {
  for (const e of await store.readAll({ after: 0, maxCount: 1_000_000 })) {
    await copy.append(e.stream, [
      {
        id: e.id,
        type: e.type,
        data: e.data,
        ...(e.correlationId ? { correlationId: e.correlationId } : {}),
        ...(e.causationId ? { causationId: e.causationId } : {}),
      },
    ]);
  }
  return copy;
}

function reconcilerOn(stack: X402Stack) {
  return new PaymentReconciler({
    store: stack.store,
    chains: chainReadersFor([{ network: NETWORK, rpcUrl: chain.rpcUrl } as never]),
    olderThanMs: 0,
    resettle: stack.x402.resettle,
  });
}

async function paymentTypes(store: EventStore, payer: Hex, nonce: Hex): Promise<string[]> {
  const stream = paymentStream({ network: NETWORK, asset: BASE_USDC, payer, nonce });
  return (await store.readStream(stream)).map((e) => e.type);
}

/**
 * A paid call whose settlement is held at the RPC (the process handed it off: answer kept, send
 * under way), then the process killed: the log as it stood then, on a new stack reading the chain
 * directly. The old stack is then stopped, its held send dropped, its request never answered.
 */
async function killedWhileSending(validFor = 120n, next: { env?: Record<string, string> } = {}) {
  // A settlement held on its way: the relay to anvil never answers (nor passes on) its send.
  const relay = await countingRpcRelay(chain.rpcUrl, ['eth_sendRawTransaction']);
  const old = await startX402Stack(
    { X402_RPC_URL: relay.url, X402_SETTLE_CONFIRM_TIMEOUT_MS: '3000' },
    chain,
  );
  const payer = await chain.fundedPayer(100_000n);
  const auth = freshAuthorization(old.payTo, payer.address, PRICE, {
    validBefore: BigInt(Math.floor(Date.now() / 1000)) + validFor,
  });
  const header = await paymentHeader(payer.key, auth);
  const lost = post(old, BODY, { 'payment-signature': header }).catch(() => null);
  await relay.firstHeld;
  const store = await crashCopy(old.store, new HoldingStore());
  // The old process dies before the new one starts, as a kill -9 ends it. Left running in this
  // process, its settlement goes on once its held send times out and can take a nonce from viem's
  // nonce manager, which every stack here shares (one key, one process): after the reset below,
  // that leaves the new process's broadcast queued behind a nonce that never reaches the chain
  // (seen at load 26: rebroadcast 1, the payer's balance unchanged, never mined).
  await relay.close();
  await lost;
  await old.stop();
  // A new process numbers its transactions from the chain again (the held one never reached it).
  nonceManager.reset({ address: privateKeyToAccount(FACILITATOR_KEY).address, chainId: 8453 });
  const restarted = await restart(old, store, next.env);
  return {
    payer,
    auth,
    header,
    next: restarted,
    /** The new process's log, whose next append of a type can be held. */
    store,
    async cleanup() {
      await restarted.stop();
    },
  };
}

describe('a restart changes nothing for a payment already made', () => {
  it('a new authorisation under a payment id already paid gets the first answer after a restart, charged once', async () => {
    const first = await startX402Stack({}, chain);
    const payer = await chain.fundedPayer(100_000n);
    const id = generatePaymentId('pay_');
    let served: Record<string, unknown>;
    try {
      const res = await post(first, BODY, {
        'payment-signature': await paymentHeader(
          payer.key,
          freshAuthorization(first.payTo, payer.address, PRICE),
          id,
        ),
      });
      expect(res.status).toBe(200);
      served = answerOf((await res.json()) as Record<string, unknown>);
      await first.x402.settled();
    } finally {
      await first.stop();
    }

    const second = await restart(first);
    try {
      const retryAuth = freshAuthorization(first.payTo, payer.address, PRICE);
      const retry = await post(second, BODY, {
        'payment-signature': await paymentHeader(payer.key, retryAuth, id),
      });
      expect(retry.status).toBe(200);
      expect(retry.headers.get('x-payment-replayed')).toBe('true');
      expect(answerOf((await retry.json()) as Record<string, unknown>)).toEqual(served);
      await second.x402.settled();
      expect(await chain.authorizationState(payer.address, retryAuth.nonce)).toBe(false);
      expect(await paymentTypes(second.store, payer.address, retryAuth.nonce)).toEqual([]);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);

      // Another request under the same id: a conflict, nothing served or charged.
      const otherAuth = freshAuthorization(first.payTo, payer.address, PRICE);
      const other = await post(
        second,
        { coin: 'ETH', timeframe: '1h' },
        { 'payment-signature': await paymentHeader(payer.key, otherAuth, id) },
      );
      expect(other.status).toBe(409);
      expect(await other.json()).toMatchObject({ code: 'payment_identifier_conflict' });
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await second.stop();
    }
  });

  it('the same payment presented after a kill -9 that followed its answer gets that answer back, not a quote', async () => {
    const first = await startX402Stack({}, chain);
    const payer = await chain.fundedPayer(100_000n);
    const header = await paymentHeader(payer.key, freshAuthorization(first.payTo, payer.address, PRICE));
    let served: Record<string, unknown>;
    let store: EventStore;
    try {
      const res = await post(first, BODY, { 'payment-signature': header });
      expect(res.status).toBe(200);
      served = answerOf((await res.json()) as Record<string, unknown>);
      store = await crashCopy(first.store);
    } finally {
      await first.stop();
    }
    const second = await restart(first, store);
    try {
      await reconcilerOn(second).runOnce();
      const again = await post(second, BODY, { 'payment-signature': header });
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      expect(answerOf((await again.json()) as Record<string, unknown>)).toEqual(served);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await second.stop();
    }
  });
});

describe('a payment whose request died mid-call', () => {
  /** What a process killed while the call ran leaves: the reservation, nothing after it. */
  async function reserveAsKilled(
    stack: X402Stack,
    payer: { address: Hex },
    auth: AuthorizationFields,
    signature: Hex,
  ) {
    const { PaymentLedger } = await import('../services/payments/ledger.ts');
    return new PaymentLedger(stack.store).reserve({
      nonce: auth.nonce,
      network: NETWORK,
      asset: BASE_USDC,
      payer: payer.address,
      payTo: stack.payTo,
      amount: String(PRICE),
      resource: `${stack.url}${PATH}`,
      x402Version: 2,
      validAfter: String(auth.validAfter),
      validBefore: String(auth.validBefore),
      requestId: 'killed',
      tool: 'get_market_regime',
      signature,
    });
  }

  it('presented again while its reservation is open: 409 payment_in_use (retryable, no quote); not released while its authorisation is valid, and settled when someone else lands it', async () => {
    const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '1500' }, chain);
    try {
      const payer = await chain.fundedPayer(100_000n);
      const auth = freshAuthorization(stack.payTo, payer.address, PRICE);
      const signature = await signAuthorization(payer.key, auth);
      const header = await paymentHeader(payer.key, auth);
      expect((await reserveAsKilled(stack, payer, auth, signature)).ok).toBe(true);
      const busy = await post(stack, BODY, { 'payment-signature': header });
      expect(busy.status).toBe(409);
      expect(busy.headers.get('payment-required')).toBeNull();
      expect(await busy.json()).toMatchObject({
        code: 'payment_in_use',
        retryable: true,
        // A holder that died keeps it until it expires: the payer learns when to sign anew.
        message: expect.stringMatching(/released once the authorisation expires.*sign a new one/),
      });
      // Unused but still valid: anyone holding it could settle it, so it is not given back.
      expect(await reconcilerOn(stack).runOnce()).toMatchObject({ released: 0, stillPending: 1 });
      // The payer lands it themselves: the money moved, and the record says so.
      const wallet = await payerWallet(chain, payer);
      await chain.publicClient.waitForTransactionReceipt({
        hash: await wallet.writeContract({
          address: BASE_USDC,
          abi: chain.usdcAbi,
          functionName: 'transferWithAuthorization',
          args: [auth.from, auth.to, auth.value, auth.validAfter, auth.validBefore, auth.nonce, signature],
        }),
      });
      expect(await reconcilerOn(stack).runOnce()).toMatchObject({ settled: 1, released: 0 });
      expect(await paymentTypes(stack.store, payer.address, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettled',
      ]);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await stack.stop();
    }
  });

  it('released once its authorisation has expired unused on chain, nothing charged', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(100_000n);
      await chain.testClient.mine({ blocks: 1 });
      const auth = freshAuthorization(stack.payTo, payer.address, PRICE, { validBefore: 1_000n });
      expect((await reserveAsKilled(stack, payer, auth, await signAuthorization(payer.key, auth))).ok).toBe(
        true,
      );
      expect(await reconcilerOn(stack).runOnce()).toMatchObject({ released: 1, stillPending: 0 });
      expect(await paymentTypes(stack.store, payer.address, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentReleased',
      ]);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n);
    } finally {
      await stack.stop();
    }
  });
});

describe('a payment whose record keeps no answer', () => {
  it('recorded before answers were kept: presented again with any arguments is 409, naming nothing bought, and nothing is run or recorded', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(100_000n);
      const auth = freshAuthorization(stack.payTo, payer.address, PRICE);
      const signature = await signAuthorization(payer.key, auth);
      const header = await paymentHeader(payer.key, auth);
      // What an earlier version recorded for a settled payment: no fingerprint, no answer.
      const { PaymentLedger } = await import('../services/payments/ledger.ts');
      const ledger = new PaymentLedger(stack.store);
      const ref = { nonce: auth.nonce, network: NETWORK, asset: BASE_USDC };
      const reserved = await ledger.reserve({
        ...ref,
        payer: payer.address,
        payTo: stack.payTo,
        amount: String(PRICE),
        resource: `${stack.url}${PATH}`,
        x402Version: 2,
        validAfter: String(auth.validAfter),
        validBefore: String(auth.validBefore),
        requestId: 'earlier',
        tool: 'get_market_regime',
        signature,
      });
      if (!reserved.ok) throw new Error(reserved.message);
      const { handle } = reserved;
      const txHash = `0x${'ab'.repeat(32)}` as Hex;
      await ledger.transition(handle, { kind: 'markPending', submittedAt: new Date().toISOString(), txHash });
      await ledger.transition(handle, {
        kind: 'settle',
        payer: payer.address,
        amount: String(PRICE),
        txHash,
      });
      const before = await paymentTypes(stack.store, payer.address, auth.nonce);
      for (const body of [BODY, { coin: 'ETH', timeframe: '4h' }]) {
        const again = await post(stack, body, { 'payment-signature': header });
        expect(again.status).toBe(409);
        expect(again.headers.get('payment-required')).toBeNull();
        const refused = (await again.json()) as { code: string; message: string };
        expect(refused.code).toBe('payment_already_used');
        expect(refused.message).not.toContain('get_market_regime');
      }
      expect(await paymentTypes(stack.store, payer.address, auth.nonce)).toEqual(before);
    } finally {
      await stack.stop();
    }
  });
});

describe('a kill -9 between the answer and the settlement', () => {
  it('killed while sending: nothing is charged until the payment is presented again, which gets its answer; then it is settled once', async () => {
    const killed = await killedWhileSending();
    try {
      const { payer, auth, header, next } = killed;
      // Its answer reached no one: not broadcast again (the payer may have paid anew), not charged.
      expect(await reconcilerOn(next).runOnce()).toMatchObject({ rebroadcast: 0, stillPending: 1 });
      expect(await chain.balanceOf(payer.address)).toBe(100_000n);
      const again = await post(next, BODY, { 'payment-signature': header });
      expect(again.status).toBe(200);
      expect(again.headers.get('x-payment-replayed')).toBe('true');
      const body = (await again.json()) as { regime?: unknown };
      expect(body.regime).toBeDefined();
      // Now the payer has it: the reconciler broadcasts the payment, charged once.
      expect(await reconcilerOn(next).runOnce()).toMatchObject({ rebroadcast: 1 });
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
      expect(await paymentTypes(next.store, payer.address, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentAnswerServed',
        'PaymentSettled',
      ]);
      const settled = await post(next, BODY, { 'payment-signature': header });
      expect(settled.status).toBe(200);
      expect(
        ((await settled.json()) as { _service: { payment: { status: string } } })._service.payment.status,
      ).toBe('settled');
      expect(await chain.balanceOf(payer.address)).toBe(100_000n - PRICE);
    } finally {
      await killed.cleanup();
    }
  });

  it('the transaction the payer was told is on the record when the process dies before its receipt', async () => {
    const first = await startX402Stack({}, chain);
    const payer = await chain.fundedPayer(100_000n);
    const auth = freshAuthorization(first.payTo, payer.address, PRICE);
    await chain.testClient.setAutomine(false);
    let told: string;
    let store: EventStore;
    try {
      const res = await post(first, BODY, { 'payment-signature': await paymentHeader(payer.key, auth) });
      expect(res.status).toBe(200);
      told = fromBase64Json<{ transaction: string }>(res.headers.get('payment-response')).transaction;
      expect(told).toMatch(/^0x[0-9a-f]{64}$/);
      store = await crashCopy(first.store);
    } finally {
      await chain.testClient.setAutomine(true);
      await chain.testClient.mine({ blocks: 1 });
      await first.stop();
    }
    const stream = paymentStream({
      network: NETWORK,
      asset: BASE_USDC,
      payer: payer.address,
      nonce: auth.nonce,
    });
    const state = foldPayment(await store.readStream(stream));
    expect(state).toMatchObject({ status: 'pending', txHash: told, served: true });
  });

  it('released by the reconciler between the replay reading it and recording its hand-over: not served, the release stands, nothing charged', async () => {
    // The replay polls the log for the transaction for the answer's budget (none: the send was
    // held): 1 s, not 10.
    const killed = await killedWhileSending(120n, { env: { X402_SETTLE_CONFIRM_TIMEOUT_MS: '1000' } });
    try {
      const { payer, auth, header, next, store } = killed;
      // The payer cancels the authorisation on chain (our send never reached it): its answer had
      // reached no one, so the reconciler releases the payment.
      const wallet = await payerWallet(chain, payer);
      await chain.publicClient.waitForTransactionReceipt({
        hash: await wallet.writeContract({
          address: BASE_USDC,
          abi: chain.usdcAbi,
          functionName: 'cancelAuthorization',
          args: [payer.address, auth.nonce, await signCancellation(payer.key, auth.nonce)],
        }),
      });
      // The replay has read the payment handed off (pending, its answer kept) and decided that its
      // answer is served; its record is held while the reconciler releases the payment.
      const held = store.holdNext('PaymentAnswerServed');
      const replay = post(next, BODY, { 'payment-signature': header });
      await held.arrived;
      expect(await reconcilerOn(next).runOnce()).toMatchObject({ released: 1, lost: 0 });
      held.release();
      const res = await replay;
      const body = (await res.json()) as Record<string, unknown>;
      expect(res.status, JSON.stringify(body)).toBe(402);
      expect(body).toMatchObject({ code: 'invalid_exact_evm_nonce_already_used' });
      expect(res.headers.get('x-payment-replayed')).toBeNull();
      expect(await paymentTypes(next.store, payer.address, auth.nonce)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentReleased',
      ]);
      expect(await chain.balanceOf(payer.address)).toBe(100_000n);
    } finally {
      await killed.cleanup();
    }
  });

  // Last: it moves the chain's clock past the authorisation's expiry.
  it('killed while sending and down past validBefore: released (nothing charged, nothing lost), not the seller’s loss', async () => {
    const killed = await killedWhileSending(30n);
    try {
      const { payer, auth, next } = killed;
      await chain.testClient.increaseTime({ seconds: 300 });
      await chain.testClient.mine({ blocks: 1 });
      expect(await reconcilerOn(next).runOnce()).toMatchObject({ released: 1, lost: 0, rebroadcast: 0 });
      const stream = paymentStream({
        network: NETWORK,
        asset: BASE_USDC,
        payer: payer.address,
        nonce: auth.nonce,
      });
      const events = await next.store.readStream(stream);
      expect(events.at(-1)).toMatchObject({
        type: 'PaymentReleased',
        data: { reason: expect.stringContaining('its answer reached no one') },
      });
      expect(await chain.balanceOf(payer.address)).toBe(100_000n);
    } finally {
      await killed.cleanup();
    }
  });
});
