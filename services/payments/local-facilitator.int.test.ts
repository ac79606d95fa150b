import type { PaymentRequirements } from '@x402/core/types';
import type { Hex } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import {
  BASE_USDC,
  FACILITATOR_KEY,
  type LocalChain,
  startLocalChain,
} from '../../test/chain/local-chain.ts';
import { countingRpcRelay, type RpcRelay } from '../../test/chain/rpc-relay.ts';
import { nowSeconds, randomNonce, signAuthorization, v2Header } from '../../test/chain/x402-app.ts';
import { decodePaymentHeader } from './codecs.ts';
import { CodeCache, createLocalFacilitator } from './local-facilitator.ts';
import { Quoter } from './quote.ts';
import { railsFromConfig } from './rails.ts';
import { createResourceServer } from './resource-server.ts';

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

async function facilitatorWith(payerCodeTtlMs: number) {
  const config = loadConfig({
    NODE_ENV: 'test',
    EVENT_STORE: 'memory',
    X402_PAY_TO: privateKeyToAccount(randomNonce()).address,
    X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
    X402_RPC_URL: relay.url,
    X402_ASSET: BASE_USDC,
  });
  const rails = railsFromConfig(config);
  const facilitator = createLocalFacilitator({
    privateKey: FACILITATOR_KEY,
    networks: [{ network: rails[0]!.network, rpcUrl: relay.url }],
    confirmationTimeoutMs: 10_000,
    payerCodeTtlMs,
  });
  const server = await createResourceServer(facilitator, rails);
  const [requirement] = await new Quoter(server, rails).requirements(config.X402_PRICE_GET_TRADE_CALL);
  return { server, requirement: requirement! };
}

/** A signed payment of the quoted price (`value`: presented as another amount than signed). */
function payment(
  { requirement }: Awaited<ReturnType<typeof facilitatorWith>>,
  key: Hex,
  change: { value?: bigint } = {},
) {
  const now = nowSeconds();
  const auth = {
    from: privateKeyToAccount(key).address,
    to: requirement.payTo as Hex,
    value: BigInt(requirement.amount),
    validAfter: now - 60n,
    validBefore: now + 600n,
    nonce: randomNonce(),
  };
  return signAuthorization(key, auth).then((signature) => {
    const presented = { ...auth, value: change.value ?? auth.value };
    const header = v2Header({ ...(requirement as PaymentRequirements) }, presented, signature);
    const decoded = decodePaymentHeader({ paymentSignature: header, xPayment: undefined });
    if (!decoded?.ok || decoded.payment.version !== 2) throw new Error('payment header did not decode');
    return decoded.payment.payload;
  });
}

async function verify(
  ctx: Awaited<ReturnType<typeof facilitatorWith>>,
  key: Hex,
  change: { value?: bigint } = {},
): Promise<boolean> {
  const verified = await ctx.server.verifyPayment(await payment(ctx, key, change), ctx.requirement);
  return verified.isValid;
}

describe('the local facilitator against a chain', () => {
  it("reads a payer's code once while it is reused, and still simulates every payment", async () => {
    const payer = await chain.fundedPayer(10_000_000n);
    const reused = await facilitatorWith(30_000);
    relay.calls.clear();
    const payerCode = `eth_getCode ${payer.address.toLowerCase()}`;
    for (let i = 0; i < 3; i++) expect(await verify(reused, payer.key)).toBe(true);
    expect(relay.calls.get(payerCode)).toBe(1);
    expect(relay.calls.get('eth_call')).toBe(3);

    const everyTime = await facilitatorWith(0);
    relay.calls.clear();
    for (let i = 0; i < 3; i++) expect(await verify(everyTime, payer.key)).toBe(true);
    expect(relay.calls.get(payerCode)).toBe(6);
    expect(relay.calls.get('eth_call')).toBe(3);
  });

  it('refuses what the chain would refuse from a payer whose code it reuses: a tampered amount, a spent authorisation', async () => {
    const payer = await chain.fundedPayer(10_000_000n);
    const payerCode = `eth_getCode ${payer.address.toLowerCase()}`;
    const reused = await facilitatorWith(30_000);
    relay.calls.clear();
    const paid = await payment(reused, payer.key);
    expect((await reused.server.verifyPayment(paid, reused.requirement)).isValid).toBe(true);
    expect(await verify(reused, payer.key, { value: 1n })).toBe(false);
    const settled = await reused.server.settlePayment(paid, reused.requirement);
    expect(settled.success).toBe(true);
    // Spent on the chain: only the simulation can tell, and it still runs.
    expect((await reused.server.verifyPayment(paid, reused.requirement)).isValid).toBe(false);
    expect(relay.calls.get(payerCode)).toBe(1);
    const broke = await chain.fundedPayer(0n);
    expect(await verify(reused, broke.key)).toBe(false);
  });
});

describe('CodeCache', () => {
  it('shares one read among concurrent asks, reuses it for its TTL, forgets failures, and reads every time at TTL 0', async () => {
    let now = 0;
    let reads = 0;
    const read = (code: Hex | undefined) => () => {
      reads++;
      return Promise.resolve(code);
    };
    const cache = new CodeCache(1_000, () => now);
    await Promise.all([cache.get('0xAbC', read('0x')), cache.get('0xabc', read('0x'))]);
    expect(reads).toBe(1);
    now = 999;
    expect(await cache.get('0xabc', read('0x01'))).toBe('0x');
    now = 1_000;
    expect(await cache.get('0xabc', read('0x01'))).toBe('0x01');
    expect(reads).toBe(2);

    const failing = () => {
      reads++;
      return Promise.reject(new Error('rpc down'));
    };
    await expect(cache.get('0xdef', failing)).rejects.toThrow('rpc down');
    expect(await cache.get('0xdef', read('0x'))).toBe('0x');
    expect(reads).toBe(4);

    const off = new CodeCache(0, () => now);
    await off.get('0xabc', read('0x'));
    await off.get('0xabc', read('0x'));
    expect(reads).toBe(6);
  });
});
