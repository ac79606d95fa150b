import { AsyncLocalStorage } from 'node:async_hooks';
import {
  InMemoryPendingSettlementStore,
  type PendingSettlementStore,
  x402Facilitator,
} from '@x402/core/facilitator';
import type { FacilitatorClient } from '@x402/core/server';
import type { Network, SupportedResponse } from '@x402/core/types';
import { toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import type { Logger } from 'pino';
import {
  BaseError,
  ContractFunctionRevertedError,
  createWalletClient,
  decodeFunctionData,
  decodeFunctionResult,
  defineChain,
  ExecutionRevertedError,
  erc20Abi,
  FeeCapTooHighError,
  FeeCapTooLowError,
  type Hex,
  HttpRequestError,
  http,
  InsufficientFundsError,
  InternalRpcError,
  IntrinsicGasTooHighError,
  IntrinsicGasTooLowError,
  keccak256,
  NonceMaxValueError,
  NonceTooHighError,
  NonceTooLowError,
  nonceManager,
  publicActions,
  RpcError,
  RpcRequestError,
  TipAboveFeeCapError,
  TransactionNotFoundError,
  TransactionTypeNotSupportedError,
  type Transport,
  toFunctionSelector,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { ignoreStrayRejections } from '../../adapters/stray-rejections.ts';
import { timerDelay } from '../../contracts/setting-lists.ts';
import { chainIdOf } from './rails.ts';
import { INSUFFICIENT_BALANCE, type VerifyAnswer } from './reasons.ts';
import { SubmissionWatch } from './submissions.ts';

export interface LocalFacilitatorOptions {
  /** Key of the wallet that submits `transferWithAuthorization` and pays its gas. */
  privateKey: Hex;
  /** One JSON-RPC endpoint per CAIP-2 network the facilitator settles on. */
  networks: { network: Network; rpcUrl: string }[];
  /** Receipt wait before a broadcast settlement is reported as `settlement_pending`. */
  confirmationTimeoutMs: number;
  /** How long an address's code (eth_getCode) is reused (default 30 s; 0: never). */
  payerCodeTtlMs?: number;
  /**
   * Longest a verification may wait for the chain (all its reads together; default 30 s), and
   * the longest any one JSON-RPC request may take (at most viem's default, 10 s). Past it the
   * verification throws: the payer is answered 503 facilitator_unavailable, nothing charged.
   */
  chainBudgetMs?: number;
  /** Where an ignored stray asset-check rejection, and a send that got no answer, are logged. */
  logger?: Logger;
}

export interface LocalFacilitator extends FacilitatorClient {
  readonly kind: 'local';
  /** The official facilitator underneath, for its lifecycle hooks. */
  readonly facilitator: x402Facilitator;
  readonly signerAddress: Hex;
  /** Hashes of settlements as they are broadcast, before their receipts. */
  readonly submissions: SubmissionWatch;
}

/**
 * The verification in flight: the balances it read (see noteBalances), and its first chain read
 * that failed without the chain answering it (the RPC refused, rate-limited or timed out).
 * @x402/evm's verify answers such a failure as the payment's fault: an unreadable payer code is
 * `invalid_exact_evm_signature`, a failed simulation `invalid_exact_evm_transaction_simulation_failed`. A payer told that during an RPC outage
 * would think its wallet broken; the verify wrapper below turns such an answer into an error
 * (503 facilitator_unavailable, retryable, nothing charged).
 */
const verifying = new AsyncLocalStorage<{ unreachable: unknown; balances: Map<string, bigint> }>();

const BALANCE_OF = toFunctionSelector('balanceOf(address)');
const balanceKey = (asset: string, account: string) => `${asset.toLowerCase()} ${account.toLowerCase()}`;

/**
 * The balances a Multicall3 tryAggregate read returned, noted on the verification in flight:
 * @x402/evm diagnoses a failed simulation with one (the payer's balance among its calls), and
 * answers a balance too low without the figure. Handed on with the refusal (`reads`), the
 * payer is told what it holds without the balance being read again.
 */
function noteBalances(args: { functionName?: string; args?: readonly unknown[] }, result: unknown): void {
  const verification = verifying.getStore();
  const calls = args.args?.[1];
  if (!verification || args.functionName !== 'tryAggregate') return;
  if (!Array.isArray(result) || !Array.isArray(calls)) return;
  calls.forEach((call: { target?: unknown; callData?: unknown } | null | undefined, i) => {
    const answer = result[i] as { success?: boolean; returnData?: Hex } | undefined;
    const { target, callData } = call ?? {};
    if (!answer?.success || !answer.returnData || typeof target !== 'string') return;
    if (typeof callData !== 'string' || !callData.startsWith(BALANCE_OF)) return;
    try {
      const { args: called } = decodeFunctionData({ abi: erc20Abi, data: callData as Hex });
      const balance = decodeFunctionResult({
        abi: erc20Abi,
        functionName: 'balanceOf',
        data: answer.returnData,
      });
      verification.balances.set(balanceKey(target, String(called?.[0])), balance);
    } catch {
      // Not a balance after all (another contract's function of that selector): nothing noted.
    }
  });
}

/**
 * A read that failed without the chain answering it: anything but a revert (a refused or
 * rate-limited request, -32005 included, a timeout, a connection that broke). A revert is the
 * chain's answer (the simulated transfer would fail), which the payment is refused for.
 */
function chainUnread(err: unknown): boolean {
  if (!(err instanceof BaseError)) return true;
  return (
    err.walk((e) => e instanceof ContractFunctionRevertedError || e instanceof ExecutionRevertedError) ===
    null
  );
}

/** `read`, noting a transport failure on the verification in flight before it is thrown on. */
async function noted<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    const verification = verifying.getStore();
    if (verification && verification.unreachable === undefined && chainUnread(err))
      verification.unreachable = err;
    throw err;
  }
}

/**
 * The settlement transaction being sent: set by the transport when its eth_sendRawTransaction
 * got no answer from the node (a timeout, a broken connection, a proxy's 5xx), or an error answer
 * that is not a pool refusal (see `nodeRefused`), so the node may have it and the chain may mine
 * it. viem throws then, as it does when the node refused it.
 */
const sending = new AsyncLocalStorage<{ unanswered: Hex | null }>();

/**
 * The node's words for a transaction its pool turned away, in the clients we know: viem's
 * classes for them (whose patterns are what viem reads a send's error by), then geth's, reth's
 * and anvil's wording it lacks (underpriced, over the block's gas limit, a bad sender, a full
 * pool), Besu's, and Nethermind's result names (OldNonce, FeeTooLow...).
 */
const POOL_REFUSALS: readonly RegExp[] = [
  ...[
    FeeCapTooHighError,
    FeeCapTooLowError,
    NonceTooHighError,
    NonceTooLowError,
    NonceMaxValueError,
    InsufficientFundsError,
    IntrinsicGasTooHighError,
    IntrinsicGasTooLowError,
    TransactionTypeNotSupportedError,
    TipAboveFeeCapError,
  ].map((error) => error.nodeMessage),
  /underpriced|exceeds (the )?block gas limit|greater than (the )?block gas limit|invalid sender|invalid signature|invalid chain ?id|only replay-protected/,
  /txpool is full|transaction pool is full|exceeds the configured cap|oversized data|max initcode size|negative value|transaction type not supported/,
  /upfront cost exceeds|gas price (is )?(too low|below)|nonce is too distant|intrinsic gas exceeds/,
  /\b(oldnonce|noncegap|noncetoofarinfuture|insufficientfunds|feetoolow|feetoolowtocompete|gaslimitexceeded|senderiscontract|notsupportedtxtype|maxtxsizeexceeded)\b/,
];

/**
 * The node saying it already has the transaction: "already known" (geth, reth), AlreadyKnown
 * (Nethermind), "transaction already imported" (anvil), "Known transaction" (Besu).
 */
const ALREADY_KNOWN = /already ?known|already imported|known transaction/;

/** An answer that a hop on the way gave up or broke, after which the node may have the transaction. */
const GAVE_UP = /time ?out|timed out|deadline|internal error|unavailable|upstream|gateway/;

/**
 * Whether a failed eth_sendRawTransaction was refused by the node, so the transaction is not in
 * its pool: an error answer in a pool refusal's words (nonce too low, underpriced, insufficient
 * funds for gas...), or a client error status from the HTTP server in front of it. Anything
 * else leaves the broadcast unknown: no answer, a 5xx or 408, "already known", and error
 * answers that say nothing of the pool: a hosted RPC's -32603 internal error, or its -32000
 * "context deadline exceeded", often comes after it passed the transaction on.
 */
export function nodeRefused(err: unknown): boolean {
  if (err instanceof RpcError || err instanceof RpcRequestError) {
    // -32603 is a server's failure, whatever it quotes; a code viem does not know (Nethermind's
    // -32010 for a refused transaction) is judged by its words.
    if (err.code === InternalRpcError.code) return false;
    const said = `${err.details || err.shortMessage}`.toLowerCase();
    if (ALREADY_KNOWN.test(said) || GAVE_UP.test(said)) return false;
    return POOL_REFUSALS.some((refusal) => refusal.test(said));
  }
  if (err instanceof HttpRequestError && err.status !== undefined) {
    return err.status >= 400 && err.status < 500 && err.status !== 408;
  }
  return false;
}

/** How long a send goes unanswered before the node is asked whether it has the transaction, and how often. */
const SEND_PROBE_MS = 1_000;

/**
 * `transport`, for a raw transaction's send: answered with its hash as soon as the node reports
 * it has the transaction (eth_getTransactionByHash, asked each SEND_PROBE_MS while the send goes
 * unanswered), which is what the send's answer would say; a reply lost on the way otherwise held
 * the payer for the whole request timeout (10 s). A send that fails without the node refusing
 * it notes the hash on the settlement in flight (see `sending`), and the error is thrown on, so
 * viem resets its nonce manager as after any failed send: the next transaction's nonce is read
 * from the node, which counts this one if it has it.
 */
function noticingLostSends(transport: Transport): Transport {
  return (params) => {
    const inner = transport(params);
    const request: typeof inner.request = async (args, options) => {
      const raw = (args.params as readonly unknown[] | undefined)?.[0];
      if (args.method !== 'eth_sendRawTransaction' || typeof raw !== 'string') {
        return inner.request(args, options);
      }
      const hash = keccak256(raw as Hex);
      const send = inner.request(args, options);
      let answered = false;
      const known = (async () => {
        while (!answered) {
          await new Promise((resolve) => setTimeout(resolve, SEND_PROBE_MS));
          if (answered) break;
          const tx = await inner
            .request({ method: 'eth_getTransactionByHash', params: [hash] }, { retryCount: 0 })
            .catch(() => null);
          if (tx) return hash;
        }
        return new Promise<never>(() => undefined);
      })();
      try {
        return (await Promise.race([send, known])) as never;
      } catch (err) {
        const attempt = sending.getStore();
        if (attempt && !nodeRefused(err)) attempt.unanswered = hash;
        throw err;
      } finally {
        answered = true;
        // The send may still fail once its answer is no longer waited for: that is no one's error.
        send.catch(() => undefined);
      }
    };
    return { ...inner, request };
  };
}

/** Addresses whose code is remembered, at most (the map is emptied when full). */
const MAX_CODES = 10_000;

/**
 * eth_getCode answers reused for `ttlMs`, and concurrent asks for one address share one request.
 * @x402/evm's verify reads the payer's code twice per payment (to classify an ERC-6492 signature,
 * then to choose ECDSA or ERC-1271), two sequential round trips to the RPC on every paid call;
 * an agent paying again within the TTL makes none. Reuse is safe: the code only picks how the
 * signature is checked, and the transfer is simulated on the chain for every payment (a wallet
 * whose code changed meanwhile fails that, or the check, and is refused, never wrongly accepted);
 * settlement runs on the chain again. A failed read is not kept. Settle reads through the same
 * cache: were ERC-6492 factories ever allowed (they are not: ExactEvmScheme's defaults), a
 * stale empty code could make it send a wallet's deployment again, which the chain refuses.
 * The signer's getCode asks for the latest code only (no block number), so one entry per address.
 */
export class CodeCache {
  private readonly codes = new Map<string, { until: number; code: Promise<Hex | undefined> }>();

  constructor(
    private readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  get(address: string, read: () => Promise<Hex | undefined>): Promise<Hex | undefined> {
    if (this.ttlMs <= 0) return read();
    const key = address.toLowerCase();
    const now = this.now();
    const known = this.codes.get(key);
    if (known && known.until > now) return known.code;
    if (this.codes.size >= MAX_CODES) this.codes.clear();
    const code = read();
    const entry = { until: now + this.ttlMs, code };
    this.codes.set(key, entry);
    code.catch(() => {
      if (this.codes.get(key) === entry) this.codes.delete(key);
    });
    return code;
  }
}

/**
 * @x402/evm 2.27's exact verify starts the asset's eth_getCode check (`startAssetContractCheck`)
 * and returns early (bad signature, wrong recipient, expired...) without awaiting it: when the RPC
 * fails (a 429 from a public endpoint), that promise rejects with nobody holding it, and one junk
 * payment would end the process. A verify that does await it gets the same error as its own
 * answer, so ignoring the stray copy loses nothing.
 */
export function isAbandonedAssetCheck(reason: unknown): boolean {
  return (
    reason instanceof Error && reason.message.startsWith('failed to check whether asset is a contract: ')
  );
}

/**
 * @x402/evm's memory of a settlement broadcast but unconfirmed (by signature), so that settling
 * the same payment again waits for that transaction rather than sending another. Kept only while
 * the node knows the transaction: one it never got (its send was cut off, or it dropped it) would
 * otherwise be waited for again on every reconciliation round for the entry's five minutes,
 * and the payment would not be broadcast again. When the node cannot be asked, the entry stands.
 */
class KnownPendingSettlements implements PendingSettlementStore {
  private readonly entries = new InMemoryPendingSettlementStore();

  constructor(private readonly known: (hash: Hex) => Promise<boolean>) {}

  async get(key: string): Promise<string | undefined> {
    const hash = await this.entries.get(key);
    if (hash === undefined) return undefined;
    if (await this.known(hash as Hex).catch(() => true)) return hash;
    await this.entries.delete(key);
    return undefined;
  }

  set(key: string, txHash: string): Promise<void> {
    return this.entries.set(key, txHash);
  }

  delete(key: string): Promise<void> {
    return this.entries.delete(key);
  }
}

/** How often a receipt is polled: about a quarter of Base's 2 s block, so a settlement is seen one block later. */
const RECEIPT_POLL_MS = 500;

/** viem's timeout of one HTTP JSON-RPC request, which a shorter chain budget lowers. */
const RPC_TIMEOUT_MS = 10_000;
/** The default of `chainBudgetMs` (X402_FACILITATOR_TIMEOUT_MS's). */
const CHAIN_BUDGET_MS = 30_000;

/** `work`, or a rejection with `what` once `ms` have passed (the work itself runs on, unheard). */
export function withDeadline<T>(work: Promise<T>, ms: number, what = 'no receipt'): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}

/**
 * The embedded facilitator: `@x402/core`'s x402Facilitator with the exact EVM scheme from
 * `@x402/evm`, signing with a viem wallet. It verifies (signature, recipient, amount, time
 * window, asset contract, simulated transfer) and settles on the configured chains.
 */
export function createLocalFacilitator(options: LocalFacilitatorOptions): LocalFacilitator {
  ignoreStrayRejections('@x402/evm asset check', isAbandonedAssetCheck, options.logger);
  // Concurrent settlements from one wallet need locally sequenced nonces.
  const account = privateKeyToAccount(options.privateKey, { nonceManager });
  const facilitator = new x402Facilitator();
  const submissions = new SubmissionWatch();
  const receiptDeadlines = new Map<string, number>();
  const budgetMs = options.chainBudgetMs ?? CHAIN_BUDGET_MS;
  for (const { network, rpcUrl } of options.networks) {
    const id = chainIdOf(network);
    const chain = defineChain({
      id,
      name: network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [rpcUrl] } },
    });
    const client = createWalletClient({
      account,
      chain,
      transport: noticingLostSends(http(rpcUrl, { timeout: Math.min(RPC_TIMEOUT_MS, budgetMs) })),
      pollingInterval: RECEIPT_POLL_MS,
    }).extend(publicActions);
    const codes = new CodeCache(options.payerCodeTtlMs ?? 30_000);
    const signer = toFacilitatorEvmSigner(
      {
        address: account.address,
        readContract: (args) =>
          noted(async () => {
            const result = await client.readContract(args as Parameters<typeof client.readContract>[0]);
            noteBalances(args, result);
            return result;
          }),
        // A smart wallet's signature is checked with an eth_call: a refused one is the chain's
        // failure too, not the payer's.
        verifyTypedData: (args) =>
          noted(() => client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0])),
        writeContract: async (args) => {
          const attempt = { unanswered: null as Hex | null };
          let hash: Hex;
          try {
            hash = await sending.run(attempt, () =>
              client.writeContract({
                ...(args as Parameters<typeof client.writeContract>[0]),
                chain,
                account,
              }),
            );
          } catch (err) {
            if (attempt.unanswered === null) {
              // The node (or the gas estimate) says the facilitator's own wallet cannot pay the
              // gas. @x402/evm reads geth's wording of it ("insufficient funds ...: balance 0")
              // as the payer lacking the asset, and anvil's as a balance of no one named.
              if (err instanceof BaseError && err.walk((e) => e instanceof InsufficientFundsError)) {
                options.logger?.error(
                  { err, wallet: account.address, network },
                  "the facilitator's wallet has too little ETH for gas: settlements fail until it is funded",
                );
                throw new Error(
                  `the facilitator's wallet ${account.address} has too little ETH for the settlement's gas`,
                  { cause: err },
                );
              }
              throw err;
            }
            // Signed and handed to the node, which did not say it refused it: it may mine it. Reported as
            // sent, so @x402/evm waits for its receipt, and the payment stays open (pending) until
            // the chain tells; a throw here would read as a refusal and the payment as failed.
            hash = attempt.unanswered;
            options.logger?.warn(
              { err, transaction: hash, function: args.functionName },
              'a transaction sent got no answer from the node; waiting for its receipt as if sent',
            );
          }
          // A transaction sent again (its first send never reached the node) is the same bytes, so
          // the same hash: its receipt wait starts afresh, not with what the lost one left.
          receiptDeadlines.delete(hash);
          if (args.functionName === 'transferWithAuthorization') {
            // (from, to, value, validAfter, validBefore, nonce, ...signature)
            const call = args.args as readonly unknown[];
            submissions.broadcast(
              { network, asset: args.address, payer: String(call[0]), nonce: String(call[5]) },
              hash,
            );
          }
          return hash;
        },
        sendTransaction: (args) => client.sendTransaction({ ...args, chain, account }),
        // One budget per transaction: @x402/core retries a pending settlement once, which waited
        // the whole timeout again (3 s configured gave over 6 s); the retry gets what is left.
        waitForTransactionReceipt: (args) => {
          const now = Date.now();
          const until = receiptDeadlines.get(args.hash) ?? now + options.confirmationTimeoutMs;
          receiptDeadlines.set(args.hash, until);
          // Twice a timeout of over 12.4 days is past a timer's range (it would fire at once).
          setTimeout(
            () => receiptDeadlines.delete(args.hash),
            timerDelay(options.confirmationTimeoutMs * 2),
          ).unref();
          return withDeadline(client.waitForTransactionReceipt(args), Math.max(0, until - now));
        },
        getCode: (args) => noted(() => codes.get(args.address, () => client.getCode(args))),
      },
      { confirmationTimeoutMs: options.confirmationTimeoutMs },
    );
    const pendingSettlementStore = new KnownPendingSettlements((hash) =>
      client.getTransaction({ hash }).then(
        () => true,
        (err: unknown) => {
          if (!(err instanceof TransactionNotFoundError)) throw err;
          // The node lost a transaction of ours (dropped from its pool): the nonce manager still
          // counts its nonce, so every later send would wait behind the gap, queued and never
          // mined, each settlement left pending until its authorisation lapsed. Read the next
          // nonce from the node again: the send that follows (this one sent again) fills the gap.
          nonceManager.reset({ address: account.address, chainId: chain.id });
          options.logger?.warn(
            { transaction: hash, wallet: account.address, network },
            'a settlement transaction the node no longer knows; sending it again with the nonce the node expects',
          );
          return false;
        },
      ),
    );
    facilitator.register(network, new ExactEvmScheme(signer, { pendingSettlementStore }));
  }

  return {
    kind: 'local',
    facilitator,
    signerAddress: account.address,
    submissions,
    // Bounded as a whole: each read has viem's timeout and retries, and a verify makes several,
    // so a chain that accepts connections and never answers held a payer over a minute.
    verify: (payload, requirements) =>
      withDeadline(
        verifying.run({ unreachable: undefined, balances: new Map() }, async (): Promise<VerifyAnswer> => {
          const verified = await facilitator.verify(payload, requirements);
          const { unreachable, balances } = verifying.getStore()!;
          if (!verified.isValid && unreachable !== undefined) {
            throw new Error('the chain could not be read while verifying the payment', {
              cause: unreachable,
            });
          }
          if (verified.isValid || verified.invalidReason !== INSUFFICIENT_BALANCE) return verified;
          // The balance its diagnosis read, handed on: the refusal names it without reading it again.
          const payer = (payload.payload as { authorization?: { from?: string } }).authorization?.from;
          const payerBalance =
            payer === undefined ? undefined : balances.get(balanceKey(requirements.asset, payer));
          return payerBalance === undefined ? verified : { ...verified, reads: { payerBalance } };
        }),
        budgetMs,
        'the chain did not answer the verification',
      ),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    async getSupported() {
      return facilitator.getSupported() as SupportedResponse;
    },
  };
}
