import { x402Facilitator } from '@x402/core/facilitator';
import type { PaymentPayload, PaymentRequirements, VerifyResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import Fastify, { type FastifyInstance } from 'fastify';
import { createWalletClient, type Hex, http, publicActions } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { base } from 'viem/chains';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { LocalFacilitator } from '../services/payments/local-facilitator.ts';
import {
  BASE_USDC,
  FACILITATOR_KEY,
  type LocalChain,
  MULTICALL3,
  payerWallet,
  startLocalChain,
} from './chain/local-chain.ts';
import { countingRpcRelay, type RpcRelay } from './chain/rpc-relay.ts';
import {
  type AuthorizationFields,
  freshAuthorization,
  signAuthorization,
  signCancellation,
  startX402Stack,
  v1Header,
  type X402Stack,
} from './chain/x402-app.ts';

/**
 * Why a payment is refused, read once: the service's chain reads per refused payment, counted
 * by a relay in front of anvil; the same reason and amounts whichever facilitator verifies (the
 * in-process one, or a remote one that names less); and a balance that moved between verify
 * and settle named with its figures too.
 */
const PATH = '/x402/get_market_regime';
const BODY = { coin: 'ETH', timeframe: '1h' };
const PRICE = 20_000n;

let chain: LocalChain;
let relay: RpcRelay;
beforeAll(async () => {
  chain = await startLocalChain();
  relay = await countingRpcRelay(chain.rpcUrl);
});
afterAll(async () => {
  await relay?.close();
  await chain?.stop();
});

async function pay(stack: X402Stack, key: Hex, auth: AuthorizationFields) {
  const res = await fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'x-payment': v1Header(auth, await signAuthorization(key, auth)),
    },
    body: JSON.stringify(BODY),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The refusals every facilitator must word alike: each case's payer, authorisation, and what it sets up. */
const CASES = {
  'balance too low': async (stack: X402Stack) => {
    const payer = await chain.fundedPayer(PRICE - 1n);
    return { payer, auth: freshAuthorization(stack.payTo, payer.address, PRICE) };
  },
  "valid from the latest block's time": async (stack: X402Stack) => {
    const payer = await chain.fundedPayer(PRICE);
    const { timestamp } = await chain.publicClient.getBlock({ blockTag: 'latest' });
    return { payer, auth: freshAuthorization(stack.payTo, payer.address, PRICE, { validAfter: timestamp }) };
  },
  'cancelled by the payer': async (stack: X402Stack) => {
    const payer = await chain.fundedPayer(PRICE);
    const auth = freshAuthorization(stack.payTo, payer.address, PRICE);
    const signature = await signCancellation(payer.key, auth.nonce);
    const wallet = await payerWallet(chain, payer);
    const hash = await wallet.writeContract({
      address: BASE_USDC,
      abi: chain.usdcAbi,
      functionName: 'cancelAuthorization',
      args: [payer.address, auth.nonce, signature],
    });
    await chain.publicClient.waitForTransactionReceipt({ hash });
    return { payer, auth };
  },
} as const;

const EXPECTED: Record<keyof typeof CASES, { code: string; message: string }> = {
  'balance too low': {
    code: 'invalid_exact_evm_insufficient_balance',
    message:
      'the payer does not hold enough of the asset: the payer holds 19999 (0.019999 USDC), the quote asks 20000 (0.020000 USDC)',
  },
  "valid from the latest block's time": {
    code: 'invalid_exact_evm_payload_authorization_valid_after',
    message:
      "the authorisation is not valid yet (validAfter must be before the chain's latest block); sign it with validAfter in the past",
  },
  'cancelled by the payer': {
    code: 'invalid_exact_evm_nonce_already_used',
    message: 'this authorisation was already used on chain; sign a new one',
  },
};

/**
 * One refused payment of a case, and the service's chain reads during it by method (eth_getCode
 * left out: the payer's code is read once per payer whatever the refusal, the asset's is cached).
 */
async function readsOf(stack: X402Stack, name: keyof typeof CASES) {
  const { payer, auth } = await CASES[name](stack);
  relay.calls.clear();
  const { status, body } = await pay(stack, payer.key, auth);
  const reads = Object.fromEntries([...relay.calls].filter(([method]) => !method.startsWith('eth_getCode')));
  return { status, body, reads };
}

/** Looking for the transaction that used a used authorisation (did the payer's own pay us?). */
const USE_LOOKUP = { eth_blockNumber: 1, eth_getLogs: 2 };

describe('the in-process facilitator', () => {
  let stack: X402Stack;
  beforeAll(async () => {
    stack = await startX402Stack({ X402_RPC_URL: relay.url }, chain);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  // The simulation and the facilitator's diagnosis (one Multicall3 read) are all: the balance it
  // read is handed over, the revert it quoted names a validAfter the chain has not reached.
  // Before: a balance too low read the balance again (3 eth_call), and a revert the diagnosis did
  // not name read the latest block (eth_getBlockByNumber).
  it.each([
    ['balance too low', { eth_call: 2 }],
    ["valid from the latest block's time", { eth_call: 2 }],
    ['cancelled by the payer', { eth_call: 2, ...USE_LOOKUP }],
  ] as const)(
    '%s: refused with its reason and figures, from what verification read',
    async (name, expected) => {
      const { status, body, reads } = await readsOf(stack, name);
      expect(status).toBe(402);
      expect(body).toMatchObject(EXPECTED[name]);
      expect(reads).toEqual(expected);
    },
  );

  it('a balance spent between verification and settlement: the settlement refusal names the figures too', async () => {
    const raced = await startX402Stack({}, chain);
    try {
      const payer = await chain.fundedPayer(PRICE);
      (raced.x402.facilitator as LocalFacilitator).facilitator.onBeforeSettle(async () => {
        const wallet = await payerWallet(chain, payer);
        const hash = await wallet.writeContract({
          address: BASE_USDC,
          abi: chain.usdcAbi,
          functionName: 'transfer',
          args: ['0x000000000000000000000000000000000000dEaD', PRICE - 5n],
        });
        await chain.publicClient.waitForTransactionReceipt({ hash });
      });
      const { status, body } = await pay(
        raced,
        payer.key,
        freshAuthorization(raced.payTo, payer.address, PRICE),
      );
      expect(status).toBe(402);
      // Before: 'settlement failed: the payer does not hold enough of the asset', no figures.
      expect(body).toMatchObject({
        code: 'settlement_failed',
        message:
          'settlement failed: the payer does not hold enough of the asset: the payer holds 5 (0.000005 USDC), the quote asks 20000 (0.020000 USDC)',
      });
      expect(await chain.balanceOf(payer.address)).toBe(5n);
    } finally {
      await raced.stop();
    }
  });
});

/**
 * The official facilitator (@x402/core, @x402/evm, viem) as a third party runs it, reached over
 * HTTP. `terse`: one that names only its reason, no message, on a chain where its diagnosis
 * cannot run (no Multicall3 there): every reverted simulation is `transaction_simulation_failed`.
 */
async function remoteFacilitator(terse: boolean): Promise<{ url: string; server: FastifyInstance }> {
  const account = privateKeyToAccount(FACILITATOR_KEY);
  const wallet = createWalletClient({ account, chain: base, transport: http(chain.rpcUrl) }).extend(
    publicActions,
  );
  const readContract: typeof wallet.readContract = (args) => {
    if (terse && args.address?.toLowerCase() === MULTICALL3.toLowerCase())
      return Promise.reject(new Error('no Multicall3 on this chain'));
    return wallet.readContract(args);
  };
  const official = new x402Facilitator().register(
    'eip155:8453',
    new ExactEvmScheme(
      toFacilitatorEvmSigner({ ...wallet, readContract, address: account.address } as never),
    ),
  );
  const server = Fastify();
  server.get('/supported', async () => official.getSupported());
  server.post('/verify', async (request) => {
    const { paymentPayload, paymentRequirements } = request.body as {
      paymentPayload: PaymentPayload;
      paymentRequirements: PaymentRequirements;
    };
    const verified: VerifyResponse = await official.verify(paymentPayload, paymentRequirements);
    if (!terse || verified.isValid) return verified;
    return { isValid: false, invalidReason: verified.invalidReason, payer: verified.payer };
  });
  server.post('/settle', async (request) => {
    const { paymentPayload, paymentRequirements } = request.body as never;
    return official.settle(paymentPayload, paymentRequirements);
  });
  return { url: await server.listen({ host: '127.0.0.1', port: 0 }), server };
}

describe.each([
  ['official', false],
  ['terse', true],
])('a remote facilitator (%s)', (_kind, terse) => {
  let stack: X402Stack;
  let remote: FastifyInstance;
  beforeAll(async () => {
    const facilitator = await remoteFacilitator(terse);
    remote = facilitator.server;
    // The service's own chain reads (its chain reader) go through the counting relay.
    stack = await startX402Stack(
      { X402_FACILITATOR: 'remote', X402_FACILITATOR_URL: facilitator.url, X402_RPC_URL: relay.url },
      chain,
    );
  });
  afterAll(async () => {
    await stack?.stop();
    await remote?.close();
  });

  // What the service reads itself: what the facilitator's answer leaves out. The official one
  // names a balance too low without the figure (read here) and quotes the revert of a validAfter
  // ahead of the chain (nothing read); the terse one names nothing, so the chain's facts are read.
  const FACTS = { eth_call: 2, eth_getBlockByNumber: 1 };
  const reads = terse
    ? {
        'balance too low': FACTS,
        "valid from the latest block's time": FACTS,
        'cancelled by the payer': { ...FACTS, ...USE_LOOKUP },
      }
    : {
        'balance too low': { eth_call: 1 },
        "valid from the latest block's time": {},
        'cancelled by the payer': USE_LOOKUP,
      };

  it.each(Object.keys(CASES) as (keyof typeof CASES)[])(
    '%s: the same reason and figures as the in-process facilitator gives',
    async (name) => {
      const { status, body, reads: read } = await readsOf(stack, name);
      expect(status).toBe(402);
      expect(body).toMatchObject(EXPECTED[name]);
      expect(read).toEqual(reads[name]);
    },
  );
});
