import Fastify from 'fastify';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chainReadersFor } from '../services/payments/chain-reader.ts';
import { createLocalFacilitator, type LocalFacilitator } from '../services/payments/local-facilitator.ts';
import { PaymentReconciler } from '../services/payments/reconcile.ts';
import { FACILITATOR_KEY, type LocalChain, startLocalChain } from './chain/local-chain.ts';
import {
  fromBase64Json,
  nowSeconds,
  randomNonce,
  signAuthorization,
  startX402Stack,
  v1Header,
  type X402Stack,
} from './chain/x402-app.ts';

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

async function paidRequest(stack: X402Stack, payerKey: Hex, payerAddress: Hex) {
  const now = nowSeconds();
  const auth = {
    from: payerAddress,
    to: stack.payTo,
    value: PRICE,
    validAfter: now - 600n,
    validBefore: now + 120n,
    nonce: randomNonce(),
  };
  const res = await fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-payment': v1Header(auth, await signAuthorization(payerKey, auth)),
    },
    body: JSON.stringify(BODY),
  });
  return { res, auth };
}

describe('settlement failure', () => {
  it('a transfer that fails at settlement → 402, the result is discarded, nothing charged', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(PRICE);
      const local = stack.x402.facilitator as LocalFacilitator;
      // The payer empties the wallet between verification and settlement: a real transfer on chain.
      const drain = chain.usdcAbi;
      local.facilitator.onBeforeSettle(async () => {
        const { createWalletClient, http } = await import('viem');
        const { base } = await import('viem/chains');
        await chain.testClient.setBalance({ address: payer.address, value: 10n ** 18n });
        const wallet = createWalletClient({
          account: privateKeyToAccount(payer.key),
          chain: base,
          transport: http(chain.rpcUrl),
        });
        const hash = await wallet.writeContract({
          address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
          abi: drain,
          functionName: 'transfer',
          args: ['0x000000000000000000000000000000000000dEaD', PRICE],
        });
        await chain.publicClient.waitForTransactionReceipt({ hash });
      });
      const before = await chain.balanceOf(stack.payTo);
      const { res, auth } = await paidRequest(stack, payer.key, payer.address);
      expect(res.status).toBe(402);
      const body = (await res.json()) as Record<string, unknown>;
      expect(body).toMatchObject({ code: 'settlement_failed', x402Version: 1 });
      expect(body.message).toMatch(/^settlement failed: /);
      expect(body).not.toHaveProperty('regime');
      expect(fromBase64Json<{ success: boolean }>(res.headers.get('x-payment-response')).success).toBe(false);
      expect(await chain.balanceOf(stack.payTo)).toBe(before);
      expect(await chain.authorizationState(payer.address, auth.nonce)).toBe(false);
      expect((await stack.paymentEvents(auth.nonce)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementFailed',
      ]);
    } finally {
      await stack.stop();
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
        _service: { payment: { status: string; transaction: Hex } };
      };
      expect(body.regime).toEqual(expect.any(String));
      expect(body._service.payment.status).toBe('pending');
      const receipt = fromBase64Json<{ success: boolean; errorReason: string; transaction: Hex }>(
        res.headers.get('x-payment-response'),
      );
      expect(receipt).toMatchObject({ success: false, errorReason: 'settlement_pending' });
      expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
      expect(receipt.transaction).toBe(body._service.payment.transaction);
      expect((await stack.paymentEvents(auth.nonce)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentSettlementPending',
        'PaymentSettlementPending',
      ]);

      await chain.testClient.mine({ blocks: 1 });
      await chain.publicClient.waitForTransactionReceipt({ hash: receipt.transaction });
      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
        olderThanMs: 0,
      });
      const summary = await reconciler.runOnce();
      expect(summary).toMatchObject({ settled: 1, failed: 0, released: 0 });
      const events = await stack.paymentEvents(auth.nonce);
      expect(events.at(-1)).toMatchObject({
        type: 'PaymentSettled',
        data: { txHash: receipt.transaction, reconciled: true, amount: '20000' },
      });
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n - PRICE);
      // A second round finds nothing open: never settled or recorded twice.
      expect(await reconciler.runOnce()).toMatchObject({ examined: 0 });
    } finally {
      await stack.stop();
    }
  });
});

describe('reconciliation after a restart', () => {
  it('releases a reservation that never reached settlement and fails an expired pending one', async () => {
    const stack = await startX402Stack({}, chain);
    try {
      const { PaymentLedger } = await import('../services/payments/ledger.ts');
      const ledger = new PaymentLedger(stack.store);
      const payer = await chain.fundedPayer(1_000_000n);
      const now = nowSeconds();
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
      const stopped = await ledger.reserve({
        ...base,
        nonce: randomNonce(),
        validBefore: String(now + 600n),
      });
      const expired = await ledger.reserve({ ...base, nonce: randomNonce(), validBefore: String(now - 1n) });
      if (!stopped.ok || !expired.ok) throw new Error('reserve failed');
      await ledger.transition(expired.handle, {
        kind: 'markPending',
        submittedAt: new Date().toISOString(),
      });

      const reconciler = new PaymentReconciler({
        store: stack.store,
        chains: chainReadersFor([{ network: 'eip155:8453', rpcUrl: chain.rpcUrl } as never]),
        olderThanMs: 0,
      });
      expect(await reconciler.runOnce()).toMatchObject({ examined: 2, released: 1, failed: 1, settled: 0 });
      expect((await stack.paymentEvents(stopped.handle.ref.nonce)).map((e) => e.type)).toEqual([
        'PaymentAuthorized',
        'PaymentReleased',
      ]);
      expect((await stack.paymentEvents(expired.handle.ref.nonce)).at(-1)).toMatchObject({
        type: 'PaymentSettlementFailed',
        data: { reason: 'the authorisation expired unused; nothing was charged', reconciled: true },
      });
      expect(await chain.balanceOf(payer.address)).toBe(1_000_000n);
    } finally {
      await stack.stop();
    }
  });
});

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
