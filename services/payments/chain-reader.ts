import {
  createPublicClient,
  decodeEventLog,
  type Hex,
  http,
  type PublicClient,
  parseAbi,
  parseAbiItem,
} from 'viem';
import type { Rail } from './rails.ts';

const EIP3009_ABI = parseAbi([
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function balanceOf(address account) view returns (uint256)',
]);
const AUTHORIZATION_USED = parseAbiItem(
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
);
const AUTHORIZATION_CANCELED = parseAbiItem(
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
);
const TRANSFER = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)');

/**
 * What the chain shows of an authorisation's use. `paid`: the transaction that used it moved
 * `amount` from the authorizer to `payTo` in the transfer the use authorised. `unpaid`: it was
 * cancelled (ERC-3009 cancelAuthorization) or used by a transaction without that transfer (the
 * payer signed the same nonce to someone else); `txHash` names that transaction. `unseen`: no log
 * of its use or cancellation within the lookback window (yet).
 */
export type AuthorizationOutcome =
  | { kind: 'paid'; txHash: Hex }
  | { kind: 'unpaid'; txHash: Hex; cancelled: boolean }
  | { kind: 'unseen' };

/** The agreed transfer of an authorisation: who it pays and how much. */
export interface AgreedTransfer {
  asset: Hex;
  authorizer: Hex;
  nonce: Hex;
  payTo: Hex;
  amount: bigint;
}

/** How far back reconciliation looks for the transaction that used an authorisation. */
const LOG_LOOKBACK_BLOCKS = 20_000n;

/**
 * How far back a paid request looks for the transaction that used its authorisation. The use can
 * only fall between the request's verification and its settlement (seconds), and hosted RPCs
 * refuse eth_getLogs over wide ranges (a few hundred to a few thousand blocks): read over the
 * reconciler's window, such a refusal reads as "no use seen" and the call is refused though the
 * payer's own transfer paid. 100 blocks is minutes on any chain served here.
 */
export const REQUEST_LOOKBACK_BLOCKS = 100n;

/** Reads the settlement facts reconciliation needs from one network's chain. */
export interface ChainReader {
  authorizationUsed(asset: Hex, authorizer: Hex, nonce: Hex): Promise<boolean>;
  /** The account's balance of the token at the latest block. */
  balanceOf(asset: Hex, account: Hex): Promise<bigint>;
  /** 'success' | 'reverted', or null while the transaction is unknown or unmined. */
  receiptStatus(txHash: Hex): Promise<'success' | 'reverted' | null>;
  /** Whether the node knows the transaction, mined or still in its mempool (a dropped one is not). */
  transactionKnown(txHash: Hex): Promise<boolean>;
  /**
   * Whether the authorisation paid what was agreed, read from the logs: the authorizer controls
   * how it is spent (cancelled, or the same nonce signed to themselves), so that it is used
   * (authorizationState) says nothing of whether the money reached payTo.
   */
  authorizationOutcome(agreed: AgreedTransfer, lookbackBlocks?: bigint): Promise<AuthorizationOutcome>;
  /** Latest block timestamp in seconds (the clock a token checks validBefore against). */
  chainTime(): Promise<bigint>;
  /** The latest block's number and timestamp (seconds): whether the chain is still moving. */
  head(): Promise<{ number: bigint; timestamp: bigint }>;
  /**
   * The timestamp of the oldest block authorizationOutcome's default lookback reads, or 0n when
   * it reads from genesis. An authorisation whose validBefore is older was used (if at all)
   * before that block: its use can never be seen there.
   */
  lookbackStartTime(): Promise<bigint>;
}

export function createChainReader(rpcUrl: string, lookback: bigint = LOG_LOOKBACK_BLOCKS): ChainReader {
  const client = createPublicClient({
    chain: undefined,
    transport: http(rpcUrl, { retryCount: 1 }),
    // No cached head: viem keeps getBlockNumber's answer for cacheTime (by default its 4 s polling
    // interval), and a paid request looks for its authorisation's use for 3 s only
    // (USED_ELSEWHERE_WAIT_MS). With the head of its first look kept, a use mined just after it
    // (the payer's own submission of that authorisation, or its cancel) lay above every log
    // search of the wait: unseen, the payment refused and recorded failed though the seller was paid.
    cacheTime: 0,
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
    async authorizationOutcome({ asset, authorizer, nonce, payTo, amount }, lookbackBlocks = lookback) {
      const head = await client.getBlockNumber();
      const range = {
        fromBlock: head > lookbackBlocks ? head - lookbackBlocks : 0n,
        toBlock: head,
      };
      const [used] = await client.getLogs({
        address: asset,
        event: AUTHORIZATION_USED,
        args: { authorizer, nonce },
        ...range,
      });
      if (!used) {
        const [cancelled] = await client.getLogs({
          address: asset,
          event: AUTHORIZATION_CANCELED,
          args: { authorizer, nonce },
          ...range,
        });
        return cancelled
          ? { kind: 'unpaid', txHash: cancelled.transactionHash, cancelled: true }
          : { kind: 'unseen' };
      }
      const receipt = await client.getTransactionReceipt({ hash: used.transactionHash });
      // The token emits the use, then the transfer it authorised (FiatToken v2's order): the log
      // right after it. Any other transfer in the transaction (another authorisation batched in
      // it) paid for something else.
      const next = receipt.logs.find((log) => log.logIndex === used.logIndex + 1);
      let paid = false;
      if (next && next.address.toLowerCase() === asset.toLowerCase()) {
        try {
          const transfer = decodeEventLog({ abi: [TRANSFER], data: next.data, topics: next.topics });
          paid =
            transfer.args.from.toLowerCase() === authorizer.toLowerCase() &&
            transfer.args.to.toLowerCase() === payTo.toLowerCase() &&
            transfer.args.value === amount;
        } catch {
          paid = false;
        }
      }
      return paid
        ? { kind: 'paid', txHash: used.transactionHash }
        : { kind: 'unpaid', txHash: used.transactionHash, cancelled: false };
    },
    async chainTime() {
      const block = await client.getBlock({ blockTag: 'latest' });
      return block.timestamp;
    },
    async head() {
      const block = await client.getBlock({ blockTag: 'latest' });
      return { number: block.number, timestamp: block.timestamp };
    },
    async lookbackStartTime() {
      const head = await client.getBlockNumber();
      if (head <= lookback) return 0n;
      return (await client.getBlock({ blockNumber: head - lookback })).timestamp;
    },
  };
}

/** `lookbackBlocks`: how far back reconciliation reads logs (a test narrows it). */
export function chainReadersFor(
  rails: Rail[],
  lookbackBlocks: bigint = LOG_LOOKBACK_BLOCKS,
): Map<string, ChainReader> {
  const readers = new Map<string, ChainReader>();
  for (const rail of rails) {
    if (rail.rpcUrl && !readers.has(rail.network)) {
      readers.set(rail.network, createChainReader(rail.rpcUrl, lookbackBlocks));
    }
  }
  return readers;
}
