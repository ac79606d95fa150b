import type { OneSided } from './stats.ts';

/**
 * Day-block bootstrap: coins move together, so test points of one day are not independent.
 * Whole days (every coin's points of that UTC day) are resampled with replacement and the
 * statistic recomputed from the resampled days' sums. Deterministic (seeded), so the report
 * does not change between runs on the same data.
 */

export const DAY_MS = 86_400_000;
const BOOTSTRAP_RESAMPLES = 400;
/** The resamples' seed: an interval of the same data is the same wherever it is computed. */
export const BOOTSTRAP_SEED = 20_251_122;

/** Small, fast, seeded PRNG (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Groups items by UTC day of `time(item)`. */
export function byDay<T>(items: readonly T[], time: (item: T) => number): T[][] {
  return byBlock(items, time, DAY_MS);
}

/**
 * Groups items by blocks of `blockMs` (UTC-aligned). Overlapping outcomes (a horizon longer
 * than a day) need blocks at least one horizon long, or the resampled blocks are not close to
 * independent and the interval comes out too narrow.
 */
export function byBlock<T>(items: readonly T[], time: (item: T) => number, blockMs: number): T[][] {
  const days = new Map<number, T[]>();
  for (const it of items) {
    const d = Math.floor(time(it) / blockMs);
    let list = days.get(d);
    if (list === undefined) {
      list = [];
      days.set(d, list);
    }
    list.push(it);
  }
  return [...days.entries()].sort((a, b) => a[0] - b[0]).map(([, v]) => v);
}

/**
 * Σ top(x) / Σ bottom(x) over every item of the days (NaN when the bottoms sum to 0): a ratio of
 * sums, the form of statistic a day-resample recomputes (a mean when `bottom` is 1, a share when
 * `top` is 0 or 1).
 */
export function ratioOfSums<T>(
  days: readonly (readonly T[])[],
  top: (item: T) => number,
  bottom: (item: T) => number,
): number {
  let t = 0;
  let b = 0;
  for (const day of days) {
    for (const x of day) {
      t += top(x);
      b += bottom(x);
    }
  }
  return b === 0 ? Number.NaN : t / b;
}

/**
 * Percentile interval of `stat` over day-resamples. `stat` receives the resampled days (the
 * same day may appear several times) and returns NaN when undefined for that resample.
 */
export function dayBlockInterval<T>(
  days: readonly (readonly T[])[],
  stat: (days: readonly (readonly T[])[]) => number,
  options: { resamples?: number; level?: number; seed?: number } = {},
): OneSided {
  const b = options.resamples ?? BOOTSTRAP_RESAMPLES;
  const rnd = seededRandom(options.seed ?? BOOTSTRAP_SEED);
  const values: number[] = [];
  if (days.length === 0) return { low: Number.NaN, high: Number.NaN, lowOneSided: Number.NaN };
  const pick: (readonly T[])[] = new Array(days.length);
  for (let i = 0; i < b; i++) {
    for (let k = 0; k < days.length; k++) pick[k] = days[Math.floor(rnd() * days.length)]!;
    const v = stat(pick);
    if (Number.isFinite(v)) values.push(v);
  }
  return percentileInterval(values, options.level);
}

/**
 * The percentile interval at `level` (95 % unless given) of a statistic's resampled values (sorted
 * here, in place): both tails and the one-sided lower bound; NaN when there is no value.
 */
export function percentileInterval(values: number[] | Float64Array, level = 0.95): OneSided {
  const n = values.length;
  if (n === 0) return { low: Number.NaN, high: Number.NaN, lowOneSided: Number.NaN };
  values.sort((x, y) => x - y);
  const q = (p: number) => values[Math.min(n - 1, Math.max(0, Math.floor(p * n)))]!;
  const tail = (1 - level) / 2;
  return { low: q(tail), high: q(1 - tail), lowOneSided: q(1 - level) };
}

/** Spearman rank correlation (average ranks for ties). */
export function spearman(xs: readonly number[], ys: readonly number[]): number {
  const n = xs.length;
  if (n < 3) return Number.NaN;
  const rx = ranks(xs);
  const ry = ranks(ys);
  let mx = 0;
  let my = 0;
  for (let i = 0; i < n; i++) {
    mx += rx[i]!;
    my += ry[i]!;
  }
  mx /= n;
  my /= n;
  let sxy = 0;
  let sxx = 0;
  let syy = 0;
  for (let i = 0; i < n; i++) {
    const a = rx[i]! - mx;
    const b = ry[i]! - my;
    sxy += a * b;
    sxx += a * a;
    syy += b * b;
  }
  return sxx === 0 || syy === 0 ? Number.NaN : sxy / Math.sqrt(sxx * syy);
}

function ranks(v: readonly number[]): Float64Array {
  const idx = Array.from(v.keys()).sort((a, b) => v[a]! - v[b]!);
  const out = new Float64Array(v.length);
  for (let i = 0; i < idx.length; ) {
    let j = i;
    while (j + 1 < idx.length && v[idx[j + 1]!] === v[idx[i]!]) j++;
    const r = (i + j) / 2;
    for (let k = i; k <= j; k++) out[idx[k]!] = r;
    i = j + 1;
  }
  return out;
}
