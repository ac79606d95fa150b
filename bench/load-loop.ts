import { performance } from 'node:perf_hooks';

/**
 * Shared measuring loops of the HTTP/Redis benchmarks: a closed loop of `concurrency` workers
 * for a fixed time (throughput), and a sequential loop (latency). Both sides of a ratio run
 * through the same loop, so the loop's own cost cancels out.
 */

export interface LoopResult {
  ops: number;
  seconds: number;
  perSec: number;
}

/** `concurrency` workers call `op` back to back for `ms` milliseconds. */
export async function closedLoop(
  concurrency: number,
  ms: number,
  op: (worker: number) => Promise<unknown>,
): Promise<LoopResult> {
  const t0 = performance.now();
  const deadline = t0 + ms;
  let ops = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      while (performance.now() < deadline) {
        await op(worker);
        ops++;
      }
    }),
  );
  const seconds = (performance.now() - t0) / 1000;
  return { ops, seconds, perSec: ops / seconds };
}

export interface LatencyResult {
  n: number;
  meanUs: number;
  p50Us: number;
  p99Us: number;
}

/** Runs `op(i)` for i in [0, n) one after another and summarises the per-call latency. */
export async function latencies(n: number, op: (i: number) => Promise<unknown>): Promise<LatencyResult> {
  const samples = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await op(i);
    samples[i] = (performance.now() - t0) * 1000;
  }
  return summarise(samples);
}

function summarise(samples: Float64Array): LatencyResult {
  const n = samples.length;
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / n;
  return {
    n,
    meanUs: mean,
    p50Us: sorted[Math.floor(n * 0.5)]!,
    p99Us: sorted[Math.min(n - 1, Math.floor(n * 0.99))]!,
  };
}

/**
 * `n` sequential calls of each op, taken in turn (op 0, op 1, … then the next i, the order
 * rotating each time), each timed on its own: drift on a shared machine hits every side alike,
 * and none always runs first after another's work.
 */
export async function interleavedLatencies(
  n: number,
  ops: ((i: number) => Promise<unknown>)[],
): Promise<LatencyResult[]> {
  const samples = ops.map(() => new Float64Array(n));
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < ops.length; k++) {
      const side = (i + k) % ops.length;
      const t0 = performance.now();
      await ops[side]!(i);
      samples[side]![i] = (performance.now() - t0) * 1000;
    }
  }
  return samples.map(summarise);
}

/**
 * Runs the sides in turn, `rounds` times over, and keeps each side's best round: drift on a
 * shared, noisy machine then hits every side alike instead of favouring whichever ran in a quiet
 * moment.
 */
export async function bestOfRounds(
  rounds: number,
  sides: (() => Promise<LoopResult>)[],
): Promise<LoopResult[]> {
  const best: (LoopResult | null)[] = sides.map(() => null);
  for (let round = 0; round < rounds; round++) {
    for (const [i, side] of sides.entries()) {
      const result = await side();
      if (best[i] === null || result.perSec > best[i]!.perSec) best[i] = result;
    }
  }
  return best as LoopResult[];
}

export function verdict(ratio: number, target: number, direction: 'min' | 'max'): string {
  const met = direction === 'min' ? ratio >= target : ratio <= target;
  return `${met ? 'MET' : 'NOT MET'} (target ${direction === 'min' ? '≥' : '≤'} ${target})`;
}

export function fmtRate(perSec: number): string {
  return `${Math.round(perSec).toLocaleString('en-US')}/s`;
}

export function fmtUs(us: number): string {
  return us >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(1)} µs`;
}
