/**
 * Pay-per-call (issue 4), two ratios measured in one run:
 *
 *   (a) 402 quote path: POST /x402/get_trade_call without a payment → 402 with PAYMENT-REQUIRED
 *       and the v1 body, measured from outside (http-service.bench.ts): the service as `npm start`
 *       runs it, autocannon in another process, alternating with a bare Fastify process answering
 *       the same status, headers and body bytes. Target ≥ 0.6 (median of the rounds).
 *   (b) verify-and-reserve latency: the steps the service takes before running a paid handler
 *       (decode PAYMENT-SIGNATURE, match the quote, read the payment stream, verify through
 *       x402ResourceServer + the in-process facilitator, append PaymentAuthorized with expected
 *       revision "no stream" to LMDB) against the same-job floor, timed call by call in turn with
 *       it: a bare program doing the least any paid-call verifier does for the same payment, the
 *       reads @x402/evm's verify makes (the asset's and payer's code, reused as the service
 *       reuses them, and the eth_call simulating transferWithAuthorization on the same anvil),
 *       viem `verifyTypedData`, and one flushed LMDB put of the reservation. Target ≤ 1.5×. The
 *       ratio to viem `verifyTypedData` alone, which does none of the I/O, is printed beside.
 *
 * The facilitator's verify makes three JSON-RPC round trips (getCode of the payer twice, and an
 * eth_call simulating transferWithAuthorization), which the bare signature check never makes.
 * As deployed, a payer's code is reused for X402_PAYER_CODE_TTL_MS (30 s), so a payer paying
 * again makes only the simulation's; the row with the reuse off shows all three. (b) is also
 * reported with those chain reads answered in-process, to show what the service itself adds.
 * @x402/evm has no switch to skip the simulation in verify; those variants swap in a signer whose
 * reads answer locally.
 *
 *   npx tsx bench/x402.bench.ts [--seconds=2] [--verifies=300]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { x402Facilitator } from '@x402/core/facilitator';
import type { FacilitatorClient } from '@x402/core/server';
import type { Network, PaymentRequirements, SupportedResponse } from '@x402/core/types';
import { DEFAULT_ASSET_CONTRACT_CACHE_TTL_MS, eip3009ABI, toFacilitatorEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/facilitator';
import {
  createWalletClient,
  defineChain,
  type Hex,
  http,
  parseSignature,
  publicActions,
  verifyTypedData,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { loadConfig } from '../contracts/config.ts';
import { decodePaymentHeader } from '../services/payments/codecs.ts';
import { PaymentLedger } from '../services/payments/ledger.ts';
import { CodeCache, createLocalFacilitator } from '../services/payments/local-facilitator.ts';
import { reservationOf } from '../services/payments/payment-flow.ts';
import { decideReservation } from '../services/payments/payment-state.ts';
import { Quoter } from '../services/payments/quote.ts';
import { chainIdOf, type Rail, railsFromConfig } from '../services/payments/rails.ts';
import { createResourceServer } from '../services/payments/resource-server.ts';
import {
  AUTHORIZATION_TYPES,
  BASE_USDC,
  FACILITATOR_KEY,
  type LocalChain,
  startLocalChain,
} from '../test/chain/local-chain.ts';
import {
  type AuthorizationFields,
  nowSeconds,
  randomNonce,
  signAuthorization,
  v2Header,
} from '../test/chain/x402-app.ts';
import { atMost, recordTarget, type Spread, spread, whenMain } from './harness.ts';
import { run as runHttp } from './http-service.bench.ts';
import { fmtUs, interleavedLatencies, type LatencyResult, latencies, verdict } from './load-loop.ts';
import { openFloorStore, putDurably } from './webhooks-floor.ts';

const QUOTE_TARGET = 0.6;
const VERIFY_TARGET = 1.5;
const QUOTE_PATH = '/x402/get_trade_call';

export interface X402BenchOptions {
  concurrency?: number;
  seconds?: number;
  rounds?: number;
  verifies?: number;
  print?: boolean;
}

export interface VerifyVariant {
  name: string;
  latency: LatencyResult;
  ratio: number;
}

export interface X402BenchResult {
  quote: { ratios: Spread; target: number };
  verify: {
    floor: LatencyResult;
    bare: LatencyResult;
    variants: VerifyVariant[];
    rpcRoundTripUs: number;
    target: number;
  };
}

export async function run(options: X402BenchOptions = {}): Promise<X402BenchResult> {
  const connections = options.concurrency ?? 32;
  const seconds = options.seconds ?? 3;
  const rounds = options.rounds ?? 3;
  const verifies = options.verifies ?? 300;
  const print = options.print ?? true;
  const log = (line: string) => {
    if (print) console.log(line);
  };

  const chain = await startLocalChain();
  const dir = mkdtempSync(join(tmpdir(), 'bench-x402-'));
  try {
    log(
      `x402 bench: anvil at ${chain.rpcUrl}; (a) ${connections} connections, ${rounds} × ${seconds} s rounds`,
    );
    // Out of process: an in-process loop shares the server's CPU with its client and flatters it.
    log('\n(a) 402 quote path, POST /x402/get_trade_call without payment');
    const [outside] = await runHttp({ paths: ['quote'], rounds, seconds, connections, print, bench: 'x402' });
    const quote = { ratios: spread(outside!.comparison.ratios), target: QUOTE_TARGET };
    const verify = await verifyAndReserve(chain, dir, verifies, log);
    return { quote, verify };
  } finally {
    await chain.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

type ChainReads = 'anvil' | 'anvil-no-code-reuse' | 'no-simulation' | 'in-process';

/** A client as local-facilitator.ts builds it: the facilitator's account, so eth_call is `from` it too. */
function facilitatorClient(rpcUrl: string, network: Network) {
  const chain = defineChain({
    id: chainIdOf(network),
    name: network,
    nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
    rpcUrls: { default: { http: [rpcUrl] } },
  });
  const account = privateKeyToAccount(FACILITATOR_KEY);
  return createWalletClient({ account, chain, transport: http(rpcUrl) }).extend(publicActions);
}

/**
 * The facilitator of services/payments/local-facilitator.ts, with its chain reads optionally
 * answered in-process: the simulation eth_call succeeds without a round trip, and (in-process)
 * getCode is remembered per address after its first answer.
 */
function variantFacilitator(rpcUrl: string, network: Network, reads: ChainReads): FacilitatorClient {
  if (reads === 'anvil' || reads === 'anvil-no-code-reuse') {
    return createLocalFacilitator({
      privateKey: FACILITATOR_KEY,
      networks: [{ network, rpcUrl }],
      confirmationTimeoutMs: 10_000,
      // The deployed default reuses a payer's code for 30 s; 0 reads it twice per payment.
      payerCodeTtlMs: reads === 'anvil' ? 30_000 : 0,
    });
  }
  const client = facilitatorClient(rpcUrl, network);
  // As deployed, a payer's code is reused for 30 s; with every chain read in-process, for good.
  const codes = new CodeCache(reads === 'in-process' ? Number.POSITIVE_INFINITY : 30_000);
  const signer = toFacilitatorEvmSigner({
    address: client.account.address,
    readContract: async (args) => {
      if (args.functionName === 'transferWithAuthorization') return undefined;
      return client.readContract(args as Parameters<typeof client.readContract>[0]);
    },
    verifyTypedData: (args) => client.verifyTypedData(args as Parameters<typeof client.verifyTypedData>[0]),
    writeContract: () => Promise.reject(new Error('the bench never settles')),
    sendTransaction: () => Promise.reject(new Error('the bench never settles')),
    waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args),
    getCode: (args) => codes.get(args.address, () => client.getCode(args)),
  });
  const facilitator = new x402Facilitator();
  facilitator.register(network, new ExactEvmScheme(signer));
  return {
    verify: (payload, requirements) => facilitator.verify(payload, requirements),
    settle: (payload, requirements) => facilitator.settle(payload, requirements),
    async getSupported() {
      return facilitator.getSupported() as SupportedResponse;
    },
  };
}

interface Signed {
  auth: AuthorizationFields;
  signature: Hex;
  header: string;
}

async function signMany(key: Hex, requirement: PaymentRequirements, n: number): Promise<Signed[]> {
  const from = privateKeyToAccount(key).address;
  const now = nowSeconds();
  const out: Signed[] = [];
  for (let i = 0; i < n; i++) {
    const auth: AuthorizationFields = {
      from,
      to: requirement.payTo as Hex,
      value: BigInt(requirement.amount),
      validAfter: now - 60n,
      validBefore: now + 3_600n,
      nonce: randomNonce(),
    };
    const signature = await signAuthorization(key, auth);
    out.push({ auth, signature, header: v2Header({ ...requirement }, auth, signature) });
  }
  return out;
}

/** Exactly what runPaidCall does before it runs the handler, on one decoded PAYMENT-SIGNATURE. */
async function verifyThenReserve(
  server: Awaited<ReturnType<typeof createResourceServer>>,
  ledger: PaymentLedger,
  requirements: PaymentRequirements[],
  signed: Signed,
  i: number,
): Promise<void> {
  const decoded = decodePaymentHeader({ paymentSignature: signed.header, xPayment: undefined });
  if (!decoded?.ok || decoded.payment.version !== 2) throw new Error('payment header did not decode');
  const { payment } = decoded;
  const requirement = server.findMatchingRequirements(requirements, payment.payload);
  if (!requirement) throw new Error('no matching requirement');
  const auth = payment.eip3009.authorization;
  const current = await ledger.read({
    network: requirement.network,
    asset: requirement.asset,
    payer: auth.from,
    nonce: auth.nonce,
  });
  const known = decideReservation(current.state);
  if (!known.ok) throw new Error(`replay refused: ${known.reason}`);
  const verified = await server.verifyPayment(payment.payload, requirement);
  if (!verified.isValid)
    throw new Error(`verify refused: ${verified.invalidReason} ${verified.invalidMessage}`);
  const reserved = await ledger.reserve(
    reservationOf(payment, requirement, {
      url: `http://127.0.0.1${QUOTE_PATH}`,
      requestId: `bench-${i}`,
      tool: 'get_trade_call',
    }),
    current,
  );
  if (!reserved.ok) throw new Error(`reserve refused: ${reserved.reason}`);
}

/**
 * The same-job floor of (b): the least a verifier of this payment does, written straight against
 * viem and lmdb, with none of the service's code. Its chain reads are those @x402/evm's verify
 * makes for an ECDSA (EOA) payer (exact/facilitator: verifyEIP3009), no more: the asset's code
 * (reused 15 min, as @x402/evm's own cache does), the payer's code (reused 30 s, as the service's
 * CodeCache does; read once here, where @x402/evm asks twice and the cache answers the second),
 * and the eth_call simulating transferWithAuthorization with the same arguments. Verify reads no
 * balance or authorizationState: those are read only to explain a failed simulation. Then one
 * reservation record, put and flushed into an LMDB environment opened as the event store opens
 * its own (webhooks-floor.ts), after a look for the nonce, without which it reserves nothing.
 */
function openFloor(rpcUrl: string, network: Network, path: string) {
  const client = facilitatorClient(rpcUrl, network);
  const payerCodes = new CodeCache(30_000);
  const assetCodes = new CodeCache(DEFAULT_ASSET_CONTRACT_CACHE_TTL_MS);
  const store = openFloorStore(path);
  async function verifyAndReserve(signed: Signed, i: number): Promise<void> {
    const { auth, signature } = signed;
    const [assetCode, payerCode] = await Promise.all([
      assetCodes.get(BASE_USDC, () => client.getCode({ address: BASE_USDC })),
      payerCodes.get(auth.from, () => client.getCode({ address: auth.from })),
    ]);
    if (!assetCode || assetCode === '0x') throw new Error('floor: the asset is not a contract');
    // A payer with code would be checked by ERC-1271 on the chain; the bench's payers are EOAs.
    if (payerCode && payerCode !== '0x') throw new Error('floor: the payer is a contract');
    await bareVerify(signed);
    const { v, yParity, r, s } = parseSignature(signature);
    // Throws if the token would revert the transfer (spent nonce, short balance, bad window).
    // readContract, as @x402/evm's simulation calls it (an eth_call; its types admit only views).
    await client.readContract({
      address: BASE_USDC,
      abi: eip3009ABI,
      functionName: 'transferWithAuthorization',
      args: [
        auth.from,
        auth.to,
        auth.value,
        auth.validAfter,
        auth.validBefore,
        auth.nonce,
        v ?? yParity,
        r,
        s,
      ],
    } as unknown as Parameters<typeof client.readContract>[0]);
    const key = `${network}:${BASE_USDC}:${auth.from}:${auth.nonce}`.toLowerCase();
    if (store.get(key) !== undefined) throw new Error('floor: nonce already reserved');
    await putDurably(store, key, {
      payer: auth.from,
      payTo: auth.to,
      amount: auth.value.toString(),
      validAfter: auth.validAfter.toString(),
      validBefore: auth.validBefore.toString(),
      signature,
      requestId: `floor-${i}`,
      at: Date.now(),
    });
  }
  return { verifyAndReserve, close: () => store.close() };
}

async function bareVerify(signed: Signed): Promise<void> {
  const valid = await verifyTypedData({
    address: signed.auth.from,
    domain: { name: 'USD Coin', version: '2', chainId: 8453, verifyingContract: BASE_USDC },
    types: AUTHORIZATION_TYPES,
    primaryType: 'TransferWithAuthorization',
    message: signed.auth,
    signature: signed.signature,
  });
  if (!valid) throw new Error('bare verify refused a good signature');
}

async function verifyAndReserve(
  chain: LocalChain,
  dir: string,
  n: number,
  log: (line: string) => void,
): Promise<X402BenchResult['verify']> {
  const payTo = privateKeyToAccount(randomNonce()).address;
  const config = loadConfig({
    NODE_ENV: 'test',
    EVENT_STORE: 'memory',
    X402_PAY_TO: payTo,
    X402_FACILITATOR_PRIVATE_KEY: FACILITATOR_KEY,
    X402_RPC_URL: chain.rpcUrl,
    X402_ASSET: BASE_USDC,
  });
  const rails: Rail[] = railsFromConfig(config);
  const network = rails[0]!.network;
  const payer = await chain.fundedPayer(10n ** 15n);

  const variants: { name: string; reads: ChainReads; store: 'lmdb' | 'memory' }[] = [
    { name: 'service, as deployed (anvil reads, LMDB)', reads: 'anvil', store: 'lmdb' },
    {
      name: "service, as deployed, payer's code read per payment",
      reads: 'anvil-no-code-reuse',
      store: 'lmdb',
    },
    { name: 'service, simulation answered in-process', reads: 'no-simulation', store: 'lmdb' },
    { name: 'service, no chain round trip (LMDB)', reads: 'in-process', store: 'lmdb' },
    { name: 'service, no chain round trip (memory)', reads: 'in-process', store: 'memory' },
  ];
  const prepared = [];
  for (const [index, v] of variants.entries()) {
    const server = await createResourceServer(variantFacilitator(chain.rpcUrl, network, v.reads), rails);
    const requirements = await new Quoter(server, rails).requirements(config.X402_PRICE_GET_TRADE_CALL);
    const store: EventStore & { close?: () => Promise<void> } =
      v.store === 'lmdb'
        ? await openLmdbEventStore({ path: join(dir, `ledger-${index}`) })
        : new MemoryEventStore();
    const signed = await signMany(payer.key, requirements[0]!, n + 20);
    prepared.push({ ...v, server, requirements, store, ledger: new PaymentLedger(store), signed });
  }
  const floor = openFloor(chain.rpcUrl, network, join(dir, 'floor'));
  // Its own nonces, from the same payer for the same price: the floor reserves them too.
  const floorSigned = await signMany(payer.key, prepared[0]!.requirements[0]!, n + 20);
  const bareSigned = prepared[0]!.signed;
  const [deployedSide, ...others] = prepared;
  const deployedOp = (i: number) =>
    verifyThenReserve(
      deployedSide!.server,
      deployedSide!.ledger,
      deployedSide!.requirements,
      deployedSide!.signed[i]!,
      i,
    );

  const results: VerifyVariant[] = [];
  let floorLatency: LatencyResult;
  let bare: LatencyResult;
  let rpc: LatencyResult;
  try {
    // Warm-up: JIT, RPC connections, asset-contract cache, the getCode memos.
    for (let i = 0; i < 20; i++) {
      await bareVerify(bareSigned[i]!);
      await floor.verifyAndReserve(floorSigned[n + i]!, n + i);
    }
    for (const p of prepared) {
      for (let i = 0; i < 20; i++)
        await verifyThenReserve(p.server, p.ledger, p.requirements, p.signed[n + i]!, i);
    }
    rpc = await latencies(200, () => chain.publicClient.getCode({ address: payer.address }));

    // The target's two sides (and the informational bare check) call by call in turn, in one run.
    const [deployedLatency, floorResult, bareResult] = await interleavedLatencies(n, [
      deployedOp,
      (i) => floor.verifyAndReserve(floorSigned[i]!, i),
      (i) => bareVerify(bareSigned[i]!),
    ]);
    floorLatency = floorResult!;
    bare = bareResult!;
    results.push({ name: deployedSide!.name, latency: deployedLatency!, ratio: 0 });
    // The other variants only explain where the deployed time goes; one after another is enough.
    for (const p of others) {
      const latency = await latencies(n, (i) =>
        verifyThenReserve(p.server, p.ledger, p.requirements, p.signed[i]!, i),
      );
      results.push({ name: p.name, latency, ratio: 0 });
    }
  } finally {
    for (const p of prepared) await p.store.close?.();
    await floor.close();
  }
  for (const r of results) r.ratio = r.latency.meanUs / floorLatency.meanUs;

  log(`\n(b) verify-and-reserve latency, ${n} sequential signed v2 payments per row`);
  log(`  anvil JSON-RPC round trip (eth_getCode): ${fmtUs(rpc.meanUs)} mean`);
  log(
    `  floor (simulation eth_call, verifyTypedData, flushed LMDB put): ${fmtUs(floorLatency.meanUs)} mean, p50 ${fmtUs(floorLatency.p50Us)}, p99 ${fmtUs(floorLatency.p99Us)}`,
  );
  log(`  bare viem verifyTypedData:               ${fmtUs(bare.meanUs)} mean, p50 ${fmtUs(bare.p50Us)}`);
  for (const r of results) {
    log(
      `  ${r.name.padEnd(52)} ${fmtUs(r.latency.meanUs)} mean, p50 ${fmtUs(r.latency.p50Us)}, p99 ${fmtUs(r.latency.p99Us)}` +
        `  → ${r.ratio.toFixed(2)}× floor  ${verdict(r.ratio, VERIFY_TARGET, 'max')}`,
    );
  }
  const deployed = results[0]!;
  // Informational: against a check that does no I/O at all, the ratio measures the chain and disk.
  log(
    `  as deployed / bare viem verifyTypedData: ${(deployed.latency.meanUs / bare.meanUs).toFixed(2)}× (informational)`,
  );
  log(
    recordTarget({
      bench: 'x402',
      measure: `verify-and-reserve mean latency, ${deployed.name} / same-job floor`,
      figure: deployed.ratio,
      unit: '×',
      target: atMost(VERIFY_TARGET),
      detail: `${fmtUs(deployed.latency.meanUs)} vs ${fmtUs(floorLatency.meanUs)}; verifyTypedData alone ${fmtUs(bare.meanUs)}`,
    }),
  );
  return { floor: floorLatency, bare, variants: results, rpcRoundTripUs: rpc.meanUs, target: VERIFY_TARGET };
}

await whenMain(import.meta.url, { seconds: 'number', verifies: 'number', concurrency: 'number' }, run);
