import type { Candle, Regime, Timeframe } from '../../../contracts/market.ts';
import { TIMEFRAME_MS } from '../../../contracts/market.ts';
import type { CalibrationTable } from '../../../contracts/signals.ts';
import {
  type CalibrationSample,
  calibratedProbability,
  curveFor,
  fitCurve,
  fitDirection,
} from '../signals/calibration.ts';
import { createMarketState } from '../signals/market-state.ts';
import { callFor, computeScore, ENGINE_VERSION } from '../signals/verdict.ts';
import { dayCandles, harFeatures } from '../signals/volatility.ts';
import { brier, type Interval, type ReliabilityBin, reliability, wilson } from './stats.ts';

/**
 * Walk-forward evaluation, pure: stream closed candles through the engine, record the composite
 * score at each close together with the forward return over a fixed horizon, fit calibration on
 * the training window only, and score calls on the later test window.
 */

export interface Sample {
  /** Close time of the candle the score was computed on (the entry is that close). */
  closeTime: number;
  score: number;
  /** close[t + horizon] / close[t] − 1. */
  forward: number;
  /** Regime label the engine held at that close (for the per-regime breakdown only). */
  regime: Regime;
  /** HAR inputs at the close: logs of the fast/medium/slow EWMA variances scaled to the horizon. */
  f0: number;
  f1: number;
  f2: number;
  /** Plain trailing variance (mean squared log return of the last TRAILING_CANDLES): the baseline. */
  trailing: number;
  /** Realised variance of the next `horizon` one-candle log returns (sum of squares). */
  realised: number;
  /**
   * close[t] / close[t − N] − 1 for each N of FREE_LOOKBACKS: what a buyer computes for free
   * (the fade/follow-the-last-N-candles baselines).
   */
  back: Float64Array;
  /** The risk forecast's other horizons (RISK_HORIZONS): realised variance and log return; NaN past the data. */
  realisedNext: number;
  logReturnNext: number;
  realisedDay: number;
  logReturnDay: number;
}

/** Look-backs of the free fade/follow rules, in candles. */
export const FREE_LOOKBACKS: readonly number[] = [1, 3, 6, 12, 24, 48];

/** Window of the trailing-volatility baseline the forecast has to beat. */
const TRAILING_CANDLES = 20;

export function collectSamples(candles: readonly Candle[], timeframe: Timeframe, horizon: number): Sample[] {
  const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'EVAL', timeframe });
  const out: Sample[] = [];
  const last = candles.length - horizon;
  const r2 = new Float64Array(candles.length);
  for (let i = 1; i < candles.length; i++) {
    const a = candles[i - 1]!.close;
    const b = candles[i]!.close;
    r2[i] = a > 0 && b > 0 ? Math.log(b / a) ** 2 : 0;
  }
  // Prefix sums of squared returns: realised variance over any horizon in O(1).
  const cum = new Float64Array(candles.length + 1);
  for (let i = 0; i < candles.length; i++) cum[i + 1] = cum[i]! + r2[i]!;
  const dayH = dayCandles(timeframe);
  const realisedOver = (i: number, h: number) =>
    i + h < candles.length ? cum[i + h + 1]! - cum[i + 1]! : Number.NaN;
  const logReturnOver = (i: number, h: number) =>
    i + h < candles.length ? Math.log(candles[i + h]!.close / candles[i]!.close) : Number.NaN;
  let trailingSum = 0;
  for (let i = 0; i < last; i++) {
    const c = candles[i]!;
    state.update(c);
    trailingSum += r2[i]!;
    if (i >= TRAILING_CANDLES) trailingSum -= r2[i - TRAILING_CANDLES]!;
    if (state.missingForVerdict().length > 0) continue;
    const { score, readings } = computeScore(state);
    const [f0, f1, f2] = harFeatures(readings.volVariances!, horizon);
    let realised = 0;
    for (let k = 1; k <= horizon; k++) realised += r2[i + k]!;
    out.push({
      closeTime: c.openTime + TIMEFRAME_MS[timeframe],
      score,
      forward: candles[i + horizon]!.close / c.close - 1,
      regime: state.regimeState!.regime,
      f0,
      f1,
      f2,
      trailing: Math.max(0, trailingSum) / TRAILING_CANDLES,
      realised,
      back: Float64Array.from(FREE_LOOKBACKS, (n) =>
        i >= n && candles[i - n]!.close > 0 ? c.close / candles[i - n]!.close - 1 : 0,
      ),
      realisedNext: realisedOver(i, 1),
      logReturnNext: logReturnOver(i, 1),
      realisedDay: realisedOver(i, dayH),
      logReturnDay: logReturnOver(i, dayH),
    });
  }
  return out;
}

/** The call's direction was right: the move in its direction exceeded the round-trip fee. */
export function directionHit(direction: number, forward: number, fee: number): boolean {
  return direction * forward > fee;
}

export interface FitSettings {
  split: number;
  horizon: number;
  feeBps: number;
  holdBand: number;
}

export function minBinSamples(n: number, share = 0.02): number {
  return Math.max(100, Math.round(n * share));
}

/**
 * Fits one curve per timeframe on samples whose whole horizon ended before the split: first the
 * direction (follow or fade the score), then the isotonic curve of that direction's hits.
 */
export function fitTable(
  samples: ReadonlyMap<Timeframe, readonly Sample[][]>,
  settings: FitSettings,
  fallback: CalibrationTable['fallback'],
): CalibrationTable {
  const fee = settings.feeBps / 10_000;
  const curves: CalibrationTable['curves'] = {};
  let trainFrom = Number.POSITIVE_INFINITY;
  for (const [tf, perCoin] of samples) {
    const horizonMs = settings.horizon * TIMEFRAME_MS[tf];
    const trainSamples: Sample[] = [];
    for (const series of perCoin) {
      for (const s of series) {
        if (s.score === 0 || s.closeTime + horizonMs > settings.split) continue;
        trainFrom = Math.min(trainFrom, s.closeTime);
        trainSamples.push(s);
      }
    }
    if (trainSamples.length === 0) continue;
    const { direction } = fitDirection(trainSamples, { fee, holdBand: settings.holdBand });
    const train: CalibrationSample[] = trainSamples.map((s) => ({
      absScore: Math.abs(s.score),
      hit: directionHit(direction * Math.sign(s.score), s.forward, fee),
    }));
    curves[tf] = {
      ...fitCurve(train, { minBinSamples: minBinSamples(train.length), holdBand: settings.holdBand }),
      direction,
    };
  }
  return calibrationTable(settings, trainFrom, { curves, fallback, cells: {} });
}

/** A calibration table fitted now on the months from `trainFrom` (the earliest sample) to the split. */
export function calibrationTable(
  settings: FitSettings,
  trainFrom: number,
  fitted: Pick<CalibrationTable, 'curves' | 'fallback' | 'cells'>,
): CalibrationTable {
  return {
    version: 1,
    method: 'isotonic-pav',
    engineVersion: ENGINE_VERSION,
    horizonCandles: settings.horizon,
    feeBps: settings.feeBps,
    holdBand: settings.holdBand,
    trainFrom: Number.isFinite(trainFrom) ? trainFrom : settings.split,
    trainTo: settings.split,
    fittedAt: new Date().toISOString(),
    ...fitted,
  };
}

export interface Rate {
  n: number;
  hits: number;
  rate: number;
  ci: Interval;
}

function rate(hits: number, n: number): Rate {
  return { n, hits, rate: n === 0 ? Number.NaN : hits / n, ci: wilson(hits, n) };
}

export interface TimeframeResult {
  timeframe: Timeframe;
  points: number;
  buy: Rate;
  sell: Rate;
  calls: Rate;
  holdShare: number;
  alwaysBuy: Rate;
  alwaysSell: Rate;
  /** Expected hit rate of random BUY/SELL calls at the engine's BUY:SELL mix on the same points. */
  randomSameRate: number;
  brier: number;
  /** Brier of always predicting the training base rate (the no-skill reference). */
  brierBaseRate: number;
  buckets: Array<{ label: string; rate: Rate }>;
  reliability: ReliabilityBin[];
  /** Hit rate of calls by |score| band: does a stronger score mean a better call? */
  scoreBands: Array<{ label: string; rate: Rate }>;
  /** Calls with |score| at or above the training-fitted break-even band (p ≥ 0.5), if one exists. */
  breakEven: { band: number; calls: Rate } | null;
  /** Direction the table fitted on training months for this timeframe. */
  direction: 1 | -1;
  /** Calls in the curve's top training step against calls below it (null when the curve is flat). */
  topStep: { from: number; probability: number; top: Rate; below: Rate } | null;
  /** Hit rate of calls by the regime the engine held at the call. */
  byRegime: Array<{ regime: Regime; rate: Rate }>;
}

const REGIMES: readonly Regime[] = ['trending-up', 'trending-down', 'ranging', 'volatile', 'squeeze'];

const SCORE_BANDS: Array<{ label: string; from: number; to: number }> = [
  { label: '0.1–0.2', from: 0.1, to: 0.2 },
  { label: '0.2–0.3', from: 0.2, to: 0.3 },
  { label: '0.3–0.4', from: 0.3, to: 0.4 },
  { label: '0.4–0.5', from: 0.4, to: 0.5 },
  { label: '≥ 0.5', from: 0.5, to: 1.01 },
];

const BUCKETS: Array<{ label: string; from: number; to: number }> = [
  { label: '< 50', from: 0, to: 50 },
  { label: '50–59', from: 50, to: 60 },
  { label: '60–69', from: 60, to: 70 },
  { label: '≥ 70', from: 70, to: 101 },
];

/**
 * Test points are non-overlapping: one every `horizon` candles from the split onwards, so the
 * forward windows of consecutive points of one coin do not share candles (the Wilson intervals
 * still ignore the correlation between coins moving together).
 */
export function evaluateTimeframe(
  timeframe: Timeframe,
  perCoin: readonly Sample[][],
  table: CalibrationTable,
  testFrom: number,
  testTo: number,
): TimeframeResult {
  const fee = table.feeBps / 10_000;
  const tfMs = TIMEFRAME_MS[timeframe];
  const stepMs = table.horizonCandles * tfMs;
  const { curve } = curveFor(table, timeframe);
  const direction = curve.direction ?? 1;
  const bins = curve.bins;
  const topBin = bins.length > 1 ? bins[bins.length - 1]! : null;
  const topFrom = topBin === null ? null : bins[bins.length - 2]!.upTo;
  const breakEvenBand = bins.findIndex((b) => b.probability >= 0.5);
  const band = breakEvenBand === -1 ? null : (bins[breakEvenBand - 1]?.upTo ?? 0);
  let points = 0;
  let buyN = 0;
  let buyHits = 0;
  let sellN = 0;
  let sellHits = 0;
  let holds = 0;
  let upHits = 0;
  let downHits = 0;
  let beN = 0;
  let beHits = 0;
  const pairs: Array<{ p: number; hit: boolean; confidence: number; absScore: number; regime: Regime }> = [];
  for (const series of perCoin) {
    for (const s of series) {
      if (s.closeTime < testFrom || s.closeTime >= testTo) continue;
      if ((s.closeTime - testFrom) % stepMs !== 0) continue;
      points++;
      if (directionHit(1, s.forward, fee)) upHits++;
      if (directionHit(-1, s.forward, fee)) downHits++;
      if (band !== null && s.score !== 0 && Math.abs(s.score) > band) {
        beN++;
        if (directionHit(direction * Math.sign(s.score), s.forward, fee)) beHits++;
      }
      const call = callFor(direction * s.score, table.holdBand);
      if (call === 'HOLD') {
        holds++;
        continue;
      }
      const dir = call === 'BUY' ? 1 : -1;
      const hit = directionHit(dir, s.forward, fee);
      if (dir > 0) {
        buyN++;
        if (hit) buyHits++;
      } else {
        sellN++;
        if (hit) sellHits++;
      }
      const { probability } = calibratedProbability(table, timeframe, Math.abs(s.score));
      pairs.push({
        p: probability,
        hit,
        confidence: Math.round(100 * probability),
        absScore: Math.abs(s.score),
        regime: s.regime,
      });
    }
  }
  const calls = buyN + sellN;
  const upRate = points === 0 ? 0 : upHits / points;
  const downRate = points === 0 ? 0 : downHits / points;
  const baseRate = curve.baseRate;
  const hitsOf = (xs: typeof pairs) => rate(xs.filter((x) => x.hit).length, xs.length);
  return {
    timeframe,
    points,
    buy: rate(buyHits, buyN),
    sell: rate(sellHits, sellN),
    calls: rate(buyHits + sellHits, calls),
    holdShare: points === 0 ? Number.NaN : holds / points,
    alwaysBuy: rate(upHits, points),
    alwaysSell: rate(downHits, points),
    randomSameRate: calls === 0 ? Number.NaN : (buyN * upRate + sellN * downRate) / calls,
    brier: brier(pairs),
    brierBaseRate: brier(pairs.map((x) => ({ p: baseRate, hit: x.hit }))),
    buckets: BUCKETS.map((b) => ({
      label: b.label,
      rate: hitsOf(pairs.filter((x) => x.confidence >= b.from && x.confidence < b.to)),
    })),
    reliability: reliability(pairs),
    scoreBands: SCORE_BANDS.map((b) => ({
      label: b.label,
      rate: hitsOf(pairs.filter((x) => x.absScore >= b.from && x.absScore < b.to)),
    })),
    breakEven: band === null ? null : { band, calls: rate(beHits, beN) },
    direction,
    topStep:
      topBin === null || topFrom === null
        ? null
        : {
            from: topFrom,
            probability: topBin.probability,
            top: hitsOf(pairs.filter((x) => x.absScore > topFrom)),
            below: hitsOf(pairs.filter((x) => x.absScore <= topFrom)),
          },
    byRegime: REGIMES.map((regime) => ({ regime, rate: hitsOf(pairs.filter((x) => x.regime === regime)) })),
  };
}
