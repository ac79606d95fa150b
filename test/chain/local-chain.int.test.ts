import { parseSignature } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTHORIZATION_TYPES, BASE_USDC, type LocalChain, startLocalChain } from './local-chain.ts';

let chain: LocalChain;
beforeAll(async () => {
  chain = await startLocalChain();
});
afterAll(async () => {
  await chain?.stop();
});

describe('local chain harness', () => {
  it('serves the test token at the Base USDC address with the USDC domain', async () => {
    const read = (functionName: string) =>
      chain.publicClient.readContract({ address: BASE_USDC, abi: chain.usdcAbi, functionName });
    expect(await read('name')).toBe('USD Coin');
    expect(await read('version')).toBe('2');
    expect(await read('decimals')).toBe(6);
    expect(await chain.publicClient.getChainId()).toBe(8453);
  });

  it('moves funds exactly once per ERC-3009 authorisation', async () => {
    const payer = await chain.fundedPayer(1_000_000n);
    const account = privateKeyToAccount(payer.key);
    const to = privateKeyToAccount(
      '0x1111111111111111111111111111111111111111111111111111111111111111',
    ).address;
    const nonce = `0x${'ab'.repeat(32)}` as const;
    const now = BigInt(Math.floor(Date.now() / 1000));
    const message = {
      from: payer.address,
      to,
      value: 250_000n,
      validAfter: now - 600n,
      validBefore: now + 600n,
      nonce,
    };
    const signature = await account.signTypedData({
      domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: BASE_USDC },
      types: AUTHORIZATION_TYPES,
      primaryType: 'TransferWithAuthorization',
      message,
    });
    const { v, r, s } = parseSignature(signature);
    const args = [
      message.from,
      message.to,
      message.value,
      message.validAfter,
      message.validBefore,
      nonce,
      Number(v),
      r,
      s,
    ];
    const { request } = await chain.publicClient.simulateContract({
      address: BASE_USDC,
      abi: chain.usdcAbi,
      functionName: 'transferWithAuthorization',
      args,
      account: privateKeyToAccount('0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8d8f1ee2b4d2c3d1b1'),
    });
    expect(request).toBeTruthy();
    expect(await chain.authorizationState(payer.address, nonce)).toBe(false);
  });
});
