/**
 * A local chain to run pay-per-call against end to end (README, "Pay on a local chain"): anvil
 * with Base's chain id mining a block every BLOCK_TIME seconds (2, as Base), the repository's
 * ERC-3009 test token (test/chain/contracts/TestUsdc.sol, "USD Coin" version 2) at the Base USDC
 * address, the facilitator's wallet given ETH for gas, and a payer holding 10 test USDC. Prints
 * the settings to start the service with and the payer's key, one KEY=value a line, then runs
 * until it is stopped (Ctrl-C). Every key it prints is a throwaway for this chain only.
 *
 *   npx tsx scripts/x402-local-chain.ts
 */
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { BASE_USDC, FACILITATOR_KEY, startLocalChain } from '../test/chain/local-chain.ts';

const blockTime = Number(process.env.BLOCK_TIME ?? '2');
if (!Number.isInteger(blockTime) || blockTime < 1) throw new Error('BLOCK_TIME: whole seconds, at least 1');

const chain = await startLocalChain({ blockTime });
const payer = await chain.fundedPayer(10_000_000n);
const payTo = privateKeyToAccount(generatePrivateKey()).address;
const lines = [
  '# the service (X402_* as in .env.example):',
  `X402_PAY_TO=${payTo}`,
  `X402_FACILITATOR_PRIVATE_KEY=${FACILITATOR_KEY}`,
  `X402_RPC_URL=${chain.rpcUrl}`,
  `X402_ASSET=${BASE_USDC}`,
  '# a payer with 10 test USDC (6 decimals) and no ETH, for an x402 client:',
  `PAYER_PRIVATE_KEY=${payer.key}`,
  `PAYER_ADDRESS=${payer.address}`,
];
process.stdout.write(`${lines.join('\n')}\n# ready; Ctrl-C stops the chain\n`);

const stop = () => {
  void chain.stop().finally(() => process.exit(0));
};
process.once('SIGINT', stop);
process.once('SIGTERM', stop);
