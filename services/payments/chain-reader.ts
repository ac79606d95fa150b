import { createPublicClient, type Hex, http, type PublicClient, parseAbi, parseAbiItem } from 'viem';
import type { Rail } from './rails.ts';

const EIP3009_ABI = parseAbi([
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function balanceOf(address account) view returns (uint256)',
]);
const AUTHORIZATION_USED = parseAbiItem(
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
);

/** How far back reconciliation looks for the transaction that used an authorisation. */
const LOG_LOOKBACK_BLOCKS = 20_000n;

/** Reads the settlement facts reconciliation needs from one network's chain. */
export interface ChainReader {
  authorizationUsed(asset: Hex, authorizer: Hex, nonce: Hex): Promise<boolean>;
  /** The account's balance of the token at the latest block. */
  balanceOf(asset: Hex, account: Hex): Promise<bigint>;
  /** 'success' | 'reverted', or null while the transaction is unknown or unmined. */
  receiptStatus(txHash: Hex): Promise<'success' | 'reverted' | null>;
  /** Whether the node knows the transaction, mined or still in its mempool (a dropped one is not). */
  transactionKnown(txHash: Hex): Promise<boolean>;
  /** The transaction that consumed the authorisation, if it is within the lookback window. */
  findAuthorizationTx(asset: Hex, authorizer: Hex, nonce: Hex): Promise<Hex | null>;
  /** Latest block timestamp in seconds (the clock a token checks validBefore against). */
  chainTime(): Promise<bigint>;
}

function createChainReader(rpcUrl: string): ChainReader {
  const client = createPublicClient({
    chain: undefined,
    transport: http(rpcUrl, { retryCount: 1 }),
  }) as PublicClient;
  return {
    async authorizationUsed(asset, authorizer, nonce) {
      return client.readContract({
        address: asset,
        abi: EIP3009_ABI,
        functionName: 'authorizationState',
        args: [authorizer, nonce],
      });
    },
    async balanceOf(asset, account) {
      return client.readContract({
        address: asset,
        abi: EIP3009_ABI,
        functionName: 'balanceOf',
        args: [account],
      });
    },
    async receiptStatus(txHash) {
      try {
        const receipt = await client.getTransactionReceipt({ hash: txHash });
        return receipt.status;
      } catch (err) {
        if (err instanceof Error && err.name === 'TransactionReceiptNotFoundError') return null;
        throw err;
      }
    },
    async transactionKnown(txHash) {
      try {
        await client.getTransaction({ hash: txHash });
        return true;
      } catch (err) {
        if (err instanceof Error && err.name === 'TransactionNotFoundError') return false;
        throw err;
      }
    },
    async findAuthorizationTx(asset, authorizer, nonce) {
      const head = await client.getBlockNumber();
      const logs = await client.getLogs({
        address: asset,
        event: AUTHORIZATION_USED,
        args: { authorizer, nonce },
        fromBlock: head > LOG_LOOKBACK_BLOCKS ? head - LOG_LOOKBACK_BLOCKS : 0n,
        toBlock: head,
      });
      return logs[0]?.transactionHash ?? null;
    },
    async chainTime() {
      const block = await client.getBlock({ blockTag: 'latest' });
      return block.timestamp;
    },
  };
}

export function chainReadersFor(rails: Rail[]): Map<string, ChainReader> {
  const readers = new Map<string, ChainReader>();
  for (const rail of rails) {
    if (rail.rpcUrl && !readers.has(rail.network)) readers.set(rail.network, createChainReader(rail.rpcUrl));
  }
  return readers;
}
