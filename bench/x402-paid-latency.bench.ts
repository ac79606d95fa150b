/**
 * Paid-call latency on a chain that mines every 2 s, as Base does (issue 17 item 5): anvil with
 * `--block-time 2`, our ERC-3009 token, the in-process facilitator, the whole HTTP stack. A paid
 * call (v2 PAYMENT-SIGNATURE, one payer, sequential) is answered once the settlement is
 * broadcast; the baseline is the same call served from a pro key's quota in the same run (the
 * handler, no payment). Target from the issue: paid p50 <= 300 ms, within a few RPC round trips
 * of the keyed call; each settlement confirmed about one block after its answer; every call
 * settled exactly once, the payer charged exactly N times the price.
 *
 * Also the settlement-pending path: with the chain not mining, the answer still comes at
 * broadcast, and the background receipt wait gives up after X402_SETTLE_CONFIRM_TIMEOUT_MS.
 *
 *   npx tsx bench/x402-paid-latency.bench.ts [--calls=20]
 */
import type { Hex } from 'viem';
import { startLocalChain } from '../test/chain/local-chain.ts';
import {
  nowSeconds,
  randomNonce,
  signAuthorization,
  startX402Stack,
  toBase64Json,
  type X402Stack,
} from '../test/chain/x402-app.ts';
import { atMost, recordTarget, whenMain } from './harness.ts';

const PATH = '/x402/get_market_regime';
const BODY = { coin: 'BTC', timeframe: '1h' };
const PRICE = 20_000n;

export interface PaidLatencyResult {
  paidP50Ms: number;
  keyedP50Ms: number;
  confirmP50Ms: number;
  pendingAnswerMs: number;
  pendingRecordedMs: number;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((sorted.length - 1) * p))]!;
}

async function paidCall(stack: X402Stack, accepted: Record<string, unknown>, key: Hex, from: Hex) {
  const now = nowSeconds();
  const auth = {
    from,
    to: stack.payTo,
    value: PRICE,
    validAfter: now - 600n,
    validBefore: now + 300n,
    nonce: randomNonce(),
  };
  const signature = await signAuthorization(key, auth);
  const header = toBase64Json({
    x402Version: 2,
    accepted,
    payload: {
      signature,
      authorization: {
        ...auth,
        value: auth.value.toString(),
        validAfter: auth.validAfter.toString(),
        validBefore: auth.validBefore.toString(),
      },
    },
  });
  const started = performance.now();
  const res = await fetch(`${stack.url}${PATH}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'payment-signature': header },
    body: JSON.stringify(BODY),
  });
  const body = (await res.json()) as { _service?: { payment?: { transaction: Hex | null } } };
  const answeredAt = performance.now();
  if (res.status !== 200) throw new Error(`paid call answered ${res.status}: ${JSON.stringify(body)}`);
  return { ms: answeredAt - started, answeredAt, tx: body._service!.payment!.transaction, nonce: auth.nonce };
}

export async function run(options: { calls?: number; print?: boolean } = {}): Promise<PaidLatencyResult> {
  const calls = options.calls ?? 20;
  const log = (line: string) => {
    if (options.print !== false) console.log(line);
  };
  const chain = await startLocalChain({ blockTime: 2 });
  const stack = await startX402Stack({ X402_SETTLE_CONFIRM_TIMEOUT_MS: '3000' }, chain);
  try {
    const payer = await chain.fundedPayer(PRICE * BigInt(calls + 10));
    const quote = await fetch(`${stack.url}${PATH}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(BODY),
    });
    const accepted = (
      JSON.parse(Buffer.from(quote.headers.get('payment-required')!, 'base64').toString()) as {
        accepts: Record<string, unknown>[];
      }
    ).accepts[0]!;
    const { key } = await stack.issue('pro');

    // Baseline: the same call served from a key's quota (handler, no payment).
    const keyed: number[] = [];
    for (let i = 0; i < calls + 2; i++) {
      const started = performance.now();
      const res = await fetch(`${stack.url}${PATH}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: JSON.stringify(BODY),
      });
      await res.arrayBuffer();
      if (i >= 2) keyed.push(performance.now() - started);
    }

    // Paid calls, one after another; each settlement's confirmation is watched in the background.
    await paidCall(stack, accepted, payer.key, payer.address); // warm-up (counted in the balance check)
    const paid: number[] = [];
    const confirmations: Promise<number>[] = [];
    const nonces: Hex[] = [];
    for (let i = 0; i < calls; i++) {
      const call = await paidCall(stack, accepted, payer.key, payer.address);
      paid.push(call.ms);
      nonces.push(call.nonce);
      if (!call.tx) throw new Error('a paid answer without its settlement transaction');
      confirmations.push(
        chain.publicClient
          .waitForTransactionReceipt({ hash: call.tx, pollingInterval: 50 })
          .then(() => performance.now() - call.answeredAt),
      );
    }
    const confirm = await Promise.all(confirmations);
    await stack.x402.settled();

    // Nothing served twice or unpaid: one PaymentSettled per call, the payer charged exactly.
    for (const nonce of nonces) {
      const types = (await stack.paymentEvents(nonce, payer.address)).map((e) => e.type);
      if (types.filter((t) => t === 'PaymentSettled').length !== 1) {
        throw new Error(`payment ${nonce} not settled exactly once: ${types.join(', ')}`);
      }
    }
    const left = await chain.balanceOf(payer.address);
    const expected = PRICE * BigInt(calls + 10) - PRICE * BigInt(calls + 1);
    if (left !== expected) throw new Error(`payer balance ${left}, expected ${expected}`);

    // The pending path: the chain stops mining; the answer still comes at broadcast.
    await chain.testClient.setIntervalMining({ interval: 0 });
    const pending = await paidCall(stack, accepted, payer.key, payer.address);
    const waitStarted = performance.now();
    await stack.x402.settled();
    const pendingRecordedMs = performance.now() - waitStarted + pending.ms;
    await chain.testClient.setIntervalMining({ interval: 2 });

    const result: PaidLatencyResult = {
      paidP50Ms: percentile(paid, 0.5),
      keyedP50Ms: percentile(keyed, 0.5),
      confirmP50Ms: percentile(confirm, 0.5),
      pendingAnswerMs: pending.ms,
      pendingRecordedMs,
    };
    log(`  anvil --block-time 2, ${calls} sequential paid calls from one payer (get_market_regime)`);
    log(
      `  keyed call (baseline) p50 ${result.keyedP50Ms.toFixed(1)} ms | paid call p50 ${result.paidP50Ms.toFixed(1)} ms, ` +
        `p95 ${percentile(paid, 0.95).toFixed(1)} ms (target <= 300 ms)`,
    );
    log(
      `  ratio paid / keyed p50: ${(result.paidP50Ms / result.keyedP50Ms).toFixed(2)}; ` +
        `extra per paid call ${(result.paidP50Ms - result.keyedP50Ms).toFixed(1)} ms`,
    );
    log(
      `  settlement confirmed after the answer: p50 ${result.confirmP50Ms.toFixed(0)} ms, ` +
        `max ${Math.max(...confirm).toFixed(0)} ms (one block = 2000 ms)`,
    );
    log(`  every payment settled once; payer charged exactly ${calls + 1} x ${PRICE}`);
    log(
      recordTarget({
        bench: 'x402-paid',
        measure: 'paid call p50 on anvil mining every 2 s',
        figure: Math.round(result.paidP50Ms),
        unit: ' ms',
        target: atMost(300),
        detail: `keyed call p50 ${result.keyedP50Ms.toFixed(1)} ms`,
      }),
    );
    log(
      `  chain not mining: answered in ${result.pendingAnswerMs.toFixed(0)} ms (at broadcast); ` +
        `recorded pending after ${result.pendingRecordedMs.toFixed(0)} ms (X402_SETTLE_CONFIRM_TIMEOUT_MS=3000)`,
    );
    return result;
  } finally {
    await stack.stop();
    await chain.stop();
  }
}

await whenMain(import.meta.url, { calls: 'number' }, run);
