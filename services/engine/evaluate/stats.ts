/** Small statistics for the evaluation; pure. */

export interface Interval {
  low: number;
  high: number;
}

/** A figure with its day-block bootstrap interval (`lowOneSided`: the one-sided 95 % bound too). */
export interface Estimate<I extends Interval = Interval> {
  value: number;
  dayBlock: I;
}
export type OneSided = Interval & { lowOneSided: number };

/** Wilson score interval for a binomial proportion (z = 1.96 → 95 %). */
export function wilson(successes: number, n: number, z = 1.96): Interval {
  if (n === 0) return { low: 0, high: 1 };
  const p = successes / n;
  const z2 = z * z;
  const denom = 1 + z2 / n;
  const center = (p + z2 / (2 * n)) / denom;
  const half = (z * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))) / denom;
  return { low: Math.max(0, center - half), high: Math.min(1, center + half) };
}

/** Mean squared error of probabilities against 0/1 outcomes. */
export function brier(pairs: ReadonlyArray<{ p: number; hit: boolean }>): number {
  if (pairs.length === 0) return Number.NaN;
  let s = 0;
  for (const { p, hit } of pairs) s += (p - (hit ? 1 : 0)) ** 2;
  return s / pairs.length;
}

export interface ReliabilityBin {
  from: number;
  to: number;
  n: number;
  meanPredicted: number;
  observed: number;
}

/** Predicted-probability bins of equal width with the observed hit share in each. */
export function reliability(
  pairs: ReadonlyArray<{ p: number; hit: boolean }>,
  width = 0.05,
): ReliabilityBin[] {
  const bins = new Map<number, { n: number; sp: number; hits: number }>();
  for (const { p, hit } of pairs) {
    const k = Math.min(Math.floor(p / width), Math.round(1 / width) - 1);
    const b = bins.get(k) ?? { n: 0, sp: 0, hits: 0 };
    b.n++;
    b.sp += p;
    if (hit) b.hits++;
    bins.set(k, b);
  }
  return [...bins.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([k, b]) => ({
      from: k * width,
      to: (k + 1) * width,
      n: b.n,
      meanPredicted: b.sp / b.n,
      observed: b.hits / b.n,
    }));
}
