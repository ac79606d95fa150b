import type { Candle, Regime, Timeframe } from '../../../contracts/market.ts';
import { TIMEFRAME_MS } from '../../../contracts/market.ts';
import type { CalibrationTable } from '../../../contracts/signals.ts';
import { createMarketState } from '../signals/market-state.ts';
import { computeScore, ENGINE_VERSION } from '../signals/verdict.ts';
import { harFeatures } from '../signals/volatility.ts';

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
   * (the fade/follow-the-last-N-candles baselines). A plain array of numbers: a Float64Array of
   * six took 506 bytes a sample against 338 (a million samples, 2026-11-27), and a score-only run
   * on the full data holds over a million.
   */
  back: readonly number[];
}

/** Look-backs of the free fade/follow rules, in candles. */
export const FREE_LOOKBACKS: readonly number[] = [1, 3, 6, 12, 24, 48];

/** Window of the trailing-volatility baseline the forecast has to beat. */
const TRAILING_CANDLES = 20;

/**
 * Every closed candle's sample. `keepFrom`: closes before it still feed the engine's state (a
 * warm-up) but are not kept, which bounds memory when only later months are scored.
 */
export function collectSamples(
  candles: readonly Candle[],
  timeframe: Timeframe,
  horizon: number,
  keepFrom = Number.NEGATIVE_INFINITY,
): Sample[] {
  const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'EVAL', timeframe });
  const out: Sample[] = [];
  const last = candles.length - horizon;
  const r2 = new Float64Array(candles.length);
  for (let i = 1; i < candles.length; i++) {
    const a = candles[i - 1]!.close;
    const b = candles[i]!.close;
    r2[i] = a > 0 && b > 0 ? Math.log(b / a) ** 2 : 0;
  }
  let trailingSum = 0;
  for (let i = 0; i < last; i++) {
    const c = candles[i]!;
    state.update(c);
    trailingSum += r2[i]!;
    if (i >= TRAILING_CANDLES) trailingSum -= r2[i - TRAILING_CANDLES]!;
    if (c.openTime + TIMEFRAME_MS[timeframe] < keepFrom || state.missingForVerdict().length > 0) continue;
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
      back: FREE_LOOKBACKS.map((n) =>
        i >= n && candles[i - n]!.close > 0 ? c.close / candles[i - n]!.close - 1 : 0,
      ),
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
