import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import { callFor } from '../signals/verdict.ts';
import { byDay, dayBlockInterval } from './bootstrap.ts';
import { type CellFit, type Settings, testPoints } from './cells.ts';
import type { Estimate, OneSided } from './stats.ts';
import { directionHit, FREE_LOOKBACKS, type Sample } from './walk-forward.ts';

/**
 * Free baselines for the direction calls: rules any buyer computes from the candles alone.
 * Always-HOLD earns 0 per point; following or fading the last N candles' return calls on every
 * point. Which rule is "the best free rule" is chosen on the training months (highest mean net
 * bps per call, then timing skill), never on the months it is compared on.
 */

export interface FreeRule {
  /** Index into FREE_LOOKBACKS (Sample.back). */
  index: number;
  lookback: number;
  /** 1 follows the last N candles' return, -1 fades it. */
  sign: 1 | -1;
  name: string;
}

export const FREE_RULES: readonly FreeRule[] = FREE_LOOKBACKS.flatMap((lookback, index) =>
  ([1, -1] as const).map((sign) => ({
    index,
    lookback,
    sign,
    name: `${sign === 1 ? 'follow' : 'fade'} the last ${lookback} candle${lookback === 1 ? '' : 's'}`,
  })),
);

export function ruleDirection(rule: FreeRule, s: Sample): number {
  return rule.sign * Math.sign(s.back[rule.index]!);
}

interface Sums {
  n: number;
  up: number;
  down: number;
  buy: number;
  sell: number;
  hits: number;
  net: number;
}

const zero = (): Sums => ({ n: 0, up: 0, down: 0, buy: 0, sell: 0, hits: 0, net: 0 });

function add(into: Sums, dir: number, s: Sample, fee: number, feeBps: number): void {
  into.n++;
  if (directionHit(1, s.forward, fee)) into.up++;
  if (directionHit(-1, s.forward, fee)) into.down++;
  if (dir === 0) return;
  if (dir > 0) into.buy++;
  else into.sell++;
  if (directionHit(dir, s.forward, fee)) into.hits++;
  into.net += dir * s.forward * 10_000 - feeBps;
}

function merged(days: readonly (readonly Sums[])[], side: 0 | 1): Sums {
  const out = zero();
  for (const d of days) {
    const x = d[side]!;
    out.n += x.n;
    out.up += x.up;
    out.down += x.down;
    out.buy += x.buy;
    out.sell += x.sell;
    out.hits += x.hits;
    out.net += x.net;
  }
  return out;
}

function skill(x: Sums): number {
  const calls = x.buy + x.sell;
  if (calls === 0 || x.n === 0) return Number.NaN;
  return x.hits / calls - (x.buy * (x.up / x.n) + x.sell * (x.down / x.n)) / calls;
}

const netPerCall = (x: Sums) => (x.buy + x.sell === 0 ? Number.NaN : x.net / (x.buy + x.sell));

/** The free rule with the best mean net bps per call on `train` (then the better timing skill). */
export function chooseFreeRule(train: readonly Sample[], settings: Settings): FreeRule {
  const fee = settings.feeBps / 10_000;
  let best = FREE_RULES[0]!;
  let bestNet = Number.NEGATIVE_INFINITY;
  let bestSkill = Number.NEGATIVE_INFINITY;
  for (const rule of FREE_RULES) {
    const x = zero();
    for (const s of train) add(x, ruleDirection(rule, s), s, fee, settings.feeBps);
    const net = netPerCall(x);
    const sk = skill(x);
    if (net > bestNet || (net === bestNet && sk > bestSkill)) {
      best = rule;
      bestNet = net;
      bestSkill = sk;
    }
  }
  return best;
}

export interface SideFigures {
  calls: number;
  hitRate: number;
  skill: number;
  netBps: number;
}

export interface FreeComparison {
  rule: FreeRule;
  service: SideFigures;
  free: SideFigures;
  /** Service minus free rule, on the same points, with paired day-block intervals. */
  liftNetBps: Estimate;
  liftSkill: Estimate;
  /** Service's net per call against always-HOLD (0 per point): the service's own net, its interval. */
  netVsHold: Estimate<OneSided>;
}

function figures(x: Sums): SideFigures {
  const calls = x.buy + x.sell;
  return {
    calls,
    hitRate: calls === 0 ? Number.NaN : x.hits / calls,
    skill: skill(x),
    netBps: netPerCall(x),
  };
}

/**
 * The cell's would-be calls (the fit, gate ignored) beside the free rule on the same points.
 * Both sides are resampled together by day, so the lift's interval accounts for their shared days.
 */
export function compareWithFree(
  points: readonly Sample[],
  fit: CellFit,
  rule: FreeRule,
  settings: Settings,
): FreeComparison {
  const fee = settings.feeBps / 10_000;
  const days = byDay(points, (s) => s.closeTime).map((day) => {
    const service = zero();
    const free = zero();
    for (const s of day) {
      const call = callFor(fit.direction * s.score, settings.holdBand);
      add(service, call === 'BUY' ? 1 : call === 'SELL' ? -1 : 0, s, fee, settings.feeBps);
      add(free, ruleDirection(rule, s), s, fee, settings.feeBps);
    }
    return [service, free] as const;
  });
  const lift = (stat: (x: Sums) => number) => (ds: readonly (readonly Sums[])[]) =>
    stat(merged(ds, 0)) - stat(merged(ds, 1));
  const liftNet = lift(netPerCall);
  const liftSkill = lift(skill);
  const own = (ds: readonly (readonly Sums[])[]) => netPerCall(merged(ds, 0));
  return {
    rule,
    service: figures(merged(days, 0)),
    free: figures(merged(days, 1)),
    liftNetBps: { value: liftNet(days), dayBlock: dayBlockInterval(days, liftNet) },
    liftSkill: { value: liftSkill(days), dayBlock: dayBlockInterval(days, liftSkill) },
    netVsHold: { value: own(days), dayBlock: dayBlockInterval(days, own) },
  };
}

/** Non-overlapping points whose whole horizon ended before `split` (the free rule's training set). */
export function trainingPoints(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  horizon: number,
  split: number,
): Sample[] {
  // closeTime + one horizon ≤ split, on the same phase as every other set of points.
  return testPoints(perCoin, tf, horizon, 0, split - horizon * TIMEFRAME_MS[tf] + 1);
}
