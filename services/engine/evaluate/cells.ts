import type { Timeframe } from '../../../contracts/market.ts';
import { TIMEFRAME_MS } from '../../../contracts/market.ts';
import type { CalibrationCurve, VolatilityModel } from '../../../contracts/signals.ts';
import { type CalibrationSample, type Direction, fitCurve, fitDirection } from '../signals/calibration.ts';
import { callFor } from '../signals/verdict.ts';
import { bandFor, fitVolatilityModel, forecastVariance, utcHour } from '../signals/volatility.ts';
import { byBlock, byDay, DAY_MS, dayBlockInterval, ratioOfSums, spearman } from './bootstrap.ts';
import {
  brier,
  type Estimate,
  type Interval,
  type OneSided,
  type ReliabilityBin,
  reliability,
  wilson,
} from './stats.ts';
import { directionHit, minBinSamples, type Sample } from './walk-forward.ts';

/**
 * Direction only where earned, measured per cell (venue kind × timeframe): fit direction and
 * confidence curve on a training window, then score the would-be calls on a later window
 * against random calls at the same BUY:SELL mix, with day-block bootstrap intervals.
 */

export type Kind = 'spot' | 'perp';

export interface Settings {
  horizon: number;
  feeBps: number;
  holdBand: number;
}

export interface CellFit {
  direction: Direction;
  curve: CalibrationCurve;
}

/** Samples whose whole horizon ended before `split`. */
function trainingSamples(perCoin: readonly Sample[][], tf: Timeframe, horizon: number, split: number) {
  const horizonMs = horizon * TIMEFRAME_MS[tf];
  const out: Sample[] = [];
  for (const series of perCoin) {
    for (const s of series) if (s.score !== 0 && s.closeTime + horizonMs <= split) out.push(s);
  }
  return out;
}

/** Smallest step of the confidence curve as a share of the training samples (see curve-choice.ts). */
const DEFAULT_STEP_SHARE = 0.02;

export function fitCell(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  split: number,
  settings: Settings,
  stepShare: number = DEFAULT_STEP_SHARE,
): CellFit | null {
  const train = trainingSamples(perCoin, tf, settings.horizon, split);
  if (train.length < 200) return null;
  const fee = settings.feeBps / 10_000;
  const { direction } = fitDirection(train, { fee, holdBand: settings.holdBand });
  const cal: CalibrationSample[] = train.map((s) => ({
    absScore: Math.abs(s.score),
    hit: directionHit(direction * Math.sign(s.score), s.forward, fee),
  }));
  const curve = fitCurve(cal, {
    minBinSamples: minBinSamples(cal.length, stepShare),
    holdBand: settings.holdBand,
  });
  return { direction, curve: { ...curve, direction } };
}

export function probability(curve: CalibrationCurve, absScore: number): number {
  const bin = curve.bins.find((b) => absScore <= b.upTo) ?? curve.bins[curve.bins.length - 1]!;
  return bin.probability;
}

/** Non-overlapping test points: one every `horizon` candles from `from`, before `to`. */
export function testPoints(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  horizon: number,
  from: number,
  to: number,
): Sample[] {
  const step = horizon * TIMEFRAME_MS[tf];
  const out: Sample[] = [];
  for (const series of perCoin) {
    for (const s of series) {
      if (s.closeTime < from || s.closeTime >= to) continue;
      if ((((s.closeTime - from) % step) + step) % step !== 0) continue;
      out.push(s);
    }
  }
  return out;
}

export interface Rate {
  n: number;
  hits: number;
  rate: number;
  ci: Interval;
}

const rate = (hits: number, n: number): Rate => ({
  n,
  hits,
  rate: n === 0 ? Number.NaN : hits / n,
  ci: wilson(hits, n),
});

export interface LeanCount {
  n: number;
  missed: number;
}

interface Point {
  t: number;
  up: boolean;
  down: boolean;
  /** 1 BUY, -1 SELL, 0 HOLD. */
  dir: number;
  hit: boolean;
  netBps: number;
  p: number;
}

export interface CallScore {
  points: number;
  holds: number;
  holdShare: number;
  buy: Rate;
  sell: Rate;
  calls: Rate;
  /** Day-block interval of the calls' hit rate, beside the Wilson one in `calls.ci`. */
  hitDayBlock: Interval;
  alwaysBuy: number;
  alwaysSell: number;
  randomSame: number;
  /** Hit rate minus random at the same mix, with the day-block interval (and its one-sided 95 % bound). */
  skill: Estimate<OneSided>;
  netBps: { mean: number; dayBlock: OneSided };
  /** Per UTC day: net bps summed over the day's calls and their count (to pool folds and eras). */
  netDays: Array<{ net: number; calls: number }>;
  /**
   * The lean (the direction a call would point, whether or not it is emitted) on every point
   * with a non-zero score, and on those inside the HOLD band: how many, and how many of them
   * did not beat the fee — what a HOLD's confidence claims.
   */
  lean: { all: LeanCount; inBand: LeanCount };
  brier: number;
  brierBase: number;
  reliability: ReliabilityBin[];
  /** Calls split at the median confidence: does the upper half hit more often? */
  lowerHalf: Rate;
  upperHalf: Rate;
  days: number;
}

function sums(days: readonly (readonly Point[])[]) {
  let n = 0;
  let up = 0;
  let down = 0;
  let buy = 0;
  let sell = 0;
  let hits = 0;
  let net = 0;
  for (const d of days) {
    for (const p of d) {
      n++;
      if (p.up) up++;
      if (p.down) down++;
      if (p.dir === 0) continue;
      if (p.dir > 0) buy++;
      else sell++;
      if (p.hit) hits++;
      net += p.netBps;
    }
  }
  return { n, up, down, buy, sell, hits, net, calls: buy + sell };
}

function skillOf(days: readonly (readonly Point[])[]): number {
  const s = sums(days);
  if (s.calls === 0 || s.n === 0) return Number.NaN;
  const random = (s.buy * (s.up / s.n) + s.sell * (s.down / s.n)) / s.calls;
  return s.hits / s.calls - random;
}

/** Scores the calls a fitted cell would make on the points (gate ignored: this is the evidence). */
export function scoreCalls(points: readonly Sample[], fit: CellFit, settings: Settings): CallScore {
  const fee = settings.feeBps / 10_000;
  const lean = { all: { n: 0, missed: 0 }, inBand: { n: 0, missed: 0 } };
  for (const s of points) {
    if (s.score === 0) continue;
    const missed = !directionHit(fit.direction * Math.sign(s.score), s.forward, fee);
    lean.all.n++;
    if (missed) lean.all.missed++;
    if (Math.abs(s.score) < settings.holdBand) {
      lean.inBand.n++;
      if (missed) lean.inBand.missed++;
    }
  }
  const pts: Point[] = points.map((s) => {
    const call = callFor(fit.direction * s.score, settings.holdBand);
    const dir = call === 'BUY' ? 1 : call === 'SELL' ? -1 : 0;
    return {
      t: s.closeTime,
      up: directionHit(1, s.forward, fee),
      down: directionHit(-1, s.forward, fee),
      dir,
      hit: dir !== 0 && directionHit(dir, s.forward, fee),
      netBps: dir * s.forward * 10_000 - settings.feeBps,
      p: probability(fit.curve, Math.abs(s.score)),
    };
  });
  const days = byDay(pts, (p) => p.t);
  const all = sums(days);
  const called = pts.filter((p) => p.dir !== 0);
  const pairs = called.map((p) => ({ p: p.p, hit: p.hit }));
  const sorted = [...called].sort((a, b) => a.p - b.p);
  const mid = Math.floor(sorted.length / 2);
  // The split is at a confidence value, so equal confidences never straddle it.
  const cut = sorted.length === 0 ? 0 : sorted[mid]!.p;
  const lower = called.filter((p) => p.p < cut);
  const upper = called.filter((p) => p.p >= cut);
  const count = (xs: Point[]) => rate(xs.filter((x) => x.hit).length, xs.length);
  const upRate = all.n === 0 ? Number.NaN : all.up / all.n;
  const downRate = all.n === 0 ? Number.NaN : all.down / all.n;
  return {
    points: all.n,
    holds: all.n - all.calls,
    holdShare: all.n === 0 ? Number.NaN : (all.n - all.calls) / all.n,
    buy: count(called.filter((p) => p.dir > 0)),
    sell: count(called.filter((p) => p.dir < 0)),
    calls: rate(all.hits, all.calls),
    hitDayBlock: dayBlockInterval(days, (d) => {
      const x = sums(d);
      return x.calls === 0 ? Number.NaN : x.hits / x.calls;
    }),
    alwaysBuy: upRate,
    alwaysSell: downRate,
    randomSame: all.calls === 0 ? Number.NaN : (all.buy * upRate + all.sell * downRate) / all.calls,
    skill: { value: skillOf(days), dayBlock: dayBlockInterval(days, skillOf) },
    netBps: {
      mean: all.calls === 0 ? Number.NaN : all.net / all.calls,
      dayBlock: dayBlockInterval(days, (d) => {
        const s = sums(d);
        return s.calls === 0 ? Number.NaN : s.net / s.calls;
      }),
    },
    netDays: days.map((d) => {
      const x = sums([d]);
      return { net: x.net, calls: x.calls };
    }),
    lean,
    brier: brier(pairs),
    brierBase: brier(pairs.map((x) => ({ p: fit.curve.baseRate, hit: x.hit }))),
    reliability: reliability(pairs, 0.025),
    lowerHalf: count(lower),
    upperHalf: count(upper),
    days: days.length,
  };
}

/** A walk-forward fold: fit on everything before `from`, score on [from, to). */
export interface FoldWindow {
  from: number;
  to: number;
}

/**
 * The walk-forward folds, split by what they may decide. The expanding-window folds partition
 * the months from the first gate split on (each refits on everything before its start and is
 * scored up to the next boundary, the last to the end of the data). The gate decides on the
 * folds whose test window ends by `split` (before the test months) only; the folds from `split`
 * on are scored after the gate is fixed, as out-of-sample confirmation.
 */
export function foldWindows(
  gateSplits: readonly number[],
  split: number,
  extraSplits: readonly number[],
): { gate: FoldWindow[]; confirmation: FoldWindow[] } {
  const bounds = [...gateSplits, split, ...extraSplits, Number.POSITIVE_INFINITY];
  const windows = bounds.slice(0, -1).map((from, i) => ({ from, to: bounds[i + 1]! }));
  return { gate: windows.filter((w) => w.to <= split), confirmation: windows.filter((w) => w.from >= split) };
}

/** A cell emits only when it has gate evidence and every piece of it passed. */
export function gateEmits(evidence: readonly { pass: boolean }[]): boolean {
  return evidence.length > 0 && evidence.every((e) => e.pass);
}

/** Following the calls paid: the one-sided 95 % day-block bound of mean net bps per call above 0. */
export function pays(score: CallScore): boolean {
  return score.calls.n > 0 && score.netBps.dayBlock.lowOneSided > 0;
}

/**
 * Net bps per call pooled over several scores (folds and eras: their days are distinct), with
 * the one-sided 95 % day-block lower bound.
 */
export function pooledNet(scores: readonly CallScore[]): { meanBps: number; lowBps: number; calls: number } {
  const days = scores.flatMap((s) => s.netDays).map((d) => [d]);
  const mean = (ds: readonly (readonly { net: number; calls: number }[])[]) => {
    let net = 0;
    let calls = 0;
    for (const [d] of ds) {
      net += d!.net;
      calls += d!.calls;
    }
    return calls === 0 ? Number.NaN : net / calls;
  };
  const calls = days.reduce((a, [d]) => a + d!.calls, 0);
  return { meanBps: mean(days), lowBps: dayBlockInterval(days, mean).lowOneSided, calls };
}

/** Pooled share of leans that did not beat the fee (`inBand`: only those inside the HOLD band). */
export function pooledLeanMiss(scores: readonly CallScore[], inBand: boolean): LeanCount {
  const out = { n: 0, missed: 0 };
  for (const s of scores) {
    const c = inBand ? s.lean.inBand : s.lean.all;
    out.n += c.n;
    out.missed += c.missed;
  }
  return out;
}

/** Timing skill shown: the one-sided 95 % day-block bound of (hit − random same mix) above 0. */
export function showsSkill(score: CallScore): boolean {
  return score.calls.n > 0 && score.skill.dayBlock.lowOneSided > 0;
}

// ---- volatility ----

export function fitVolatility(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  split: number,
  horizon: number,
  coverage: number,
): VolatilityModel | null {
  const horizonMs = horizon * TIMEFRAME_MS[tf];
  const train: { features: number[]; realised: number; logReturn: number }[] = [];
  for (const series of perCoin) {
    for (const s of series) {
      if (s.closeTime + horizonMs > split) continue;
      train.push({ features: [s.f0, s.f1, s.f2], realised: s.realised, logReturn: Math.log1p(s.forward) });
    }
  }
  if (train.length < 500) return null;
  return fitVolatilityModel(train, coverage);
}

export interface VolScore {
  points: number;
  forecastRho: number;
  trailingRho: number;
  /** forecastRho − trailingRho with its day-block interval. */
  gain: Estimate;
  coverage: Estimate;
  nominal: number;
  /** Mean forecast σ over mean realised σ (1 = unbiased in scale). */
  scaleRatio: number;
}

/** Share of the points whose H-candle log return fell inside the model's band. */
export function bandCoverage(points: readonly Sample[], model: VolatilityModel, perp = false): number {
  const band = bandFor(model, perp);
  let inside = 0;
  for (const s of points) {
    const sigma = Math.sqrt(forecastVariance(model, [s.f0, s.f1, s.f2], undefined, utcHour(s.closeTime)));
    const r = Math.log1p(s.forward);
    if (r >= band.low * sigma && r <= band.high * sigma) inside++;
  }
  return points.length === 0 ? Number.NaN : inside / points.length;
}

/**
 * Volatility skill and band coverage. `points` may overlap (every candle, not one per horizon):
 * with one point per horizon a 1d band is scored on only ~25 start days over five months and
 * the figure swings by several points with the arbitrary phase. The bootstrap then resamples
 * blocks of `blockMs` (at least a day, at least one horizon) so overlapping outcomes stay
 * inside one block.
 */
export function scoreVolatility(
  points: readonly Sample[],
  model: VolatilityModel,
  nominal: number,
  blockMs: number = DAY_MS,
  perp = false,
): VolScore {
  // A perpetual venue's band as the service serves it (bandFor).
  const band = bandFor(model, perp);
  const pts = points.map((s) => {
    const v = forecastVariance(model, [s.f0, s.f1, s.f2], undefined, utcHour(s.closeTime));
    const sigma = Math.sqrt(v);
    const r = Math.log1p(s.forward);
    return {
      t: s.closeTime,
      forecast: v,
      trailing: s.trailing,
      realised: s.realised,
      inside: r >= band.low * sigma && r <= band.high * sigma,
      r,
    };
  });
  type P = (typeof pts)[number];
  const rho = (days: readonly (readonly P[])[], key: 'forecast' | 'trailing') => {
    const flat = days.flat();
    return spearman(
      flat.map((p) => p[key]),
      flat.map((p) => p.realised),
    );
  };
  const days = byBlock(pts, (p) => p.t, Math.max(DAY_MS, blockMs));
  const forecastRho = rho(days, 'forecast');
  const trailingRho = rho(days, 'trailing');
  const inside = pts.filter((p) => p.inside).length;
  // σ served ÷ realised as the risk desk states it: RMS of the σ over RMS of the horizon's
  // log return (a mean of √(sum of squares) is biased low and read 1.12–1.22 for a level fit).
  let sf = 0;
  let sr = 0;
  for (const p of pts) {
    sf += p.forecast;
    sr += p.r * p.r;
  }
  return {
    points: pts.length,
    forecastRho,
    trailingRho,
    gain: {
      value: forecastRho - trailingRho,
      dayBlock: dayBlockInterval(days, (d) => rho(d, 'forecast') - rho(d, 'trailing'), { resamples: 50 }),
    },
    coverage: {
      value: pts.length === 0 ? Number.NaN : inside / pts.length,
      dayBlock: dayBlockInterval(days, (d) =>
        ratioOfSums(
          d,
          (p) => (p.inside ? 1 : 0),
          () => 1,
        ),
      ),
    },
    nominal,
    scaleRatio: sr === 0 ? Number.NaN : Math.sqrt(sf / sr),
  };
}
