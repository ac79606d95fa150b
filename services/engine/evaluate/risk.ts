import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import type { RiskHorizonKey, VolatilityModel } from '../../../contracts/signals.ts';
import { dayCandles, fitVolatilityModel, forecastVariance, quantile } from '../signals/volatility.ts';
import { byBlock, byDay, DAY_MS, dayBlockInterval, spearman } from './bootstrap.ts';
import type { Estimate, OneSided } from './stats.ts';
import type { Sample } from './walk-forward.ts';

/**
 * The risk forecast as an answer of its own: expected move and band over the next candle, the
 * verdict horizon and one day, each against what a buyer gets for free — a band from the plain
 * trailing variance of the last 20 candles, with its own training quantiles — and the regime
 * labels `volatile`/`squeeze` against a free label from the same trailing variance's rank.
 */

export interface RiskHorizon {
  key: RiskHorizonKey;
  candles: number;
}

export function riskHorizons(tf: Timeframe, verdictHorizon: number): RiskHorizon[] {
  return [
    { key: 'next', candles: 1 },
    { key: 'verdict', candles: verdictHorizon },
    { key: 'day', candles: dayCandles(tf) },
  ];
}

function outcome(s: Sample, key: RiskHorizonKey): { realised: number; logReturn: number } {
  if (key === 'next') return { realised: s.realisedNext, logReturn: s.logReturnNext };
  if (key === 'day') return { realised: s.realisedDay, logReturn: s.logReturnDay };
  return { realised: s.realised, logReturn: Math.log1p(s.forward) };
}

/** HAR features scaled to `candles` (the samples hold them scaled to the verdict horizon). */
function features(s: Sample, candles: number, verdictHorizon: number): [number, number, number] {
  const shift = Math.log(candles / verdictHorizon);
  return [s.f0 + shift, s.f1 + shift, s.f2 + shift];
}

const usable = (s: Sample, key: RiskHorizonKey) => Number.isFinite(outcome(s, key).realised);

export function fitRiskModel(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  split: number,
  h: RiskHorizon,
  verdictHorizon: number,
  coverage: number,
): VolatilityModel | null {
  const horizonMs = h.candles * TIMEFRAME_MS[tf];
  const train: { features: number[]; realised: number; logReturn: number }[] = [];
  for (const series of perCoin) {
    for (const s of series) {
      if (s.closeTime + horizonMs > split || !usable(s, h.key)) continue;
      const o = outcome(s, h.key);
      train.push({ features: features(s, h.candles, verdictHorizon), ...o });
    }
  }
  if (train.length < 500) return null;
  return fitVolatilityModel(train, coverage);
}

/** The free band: trailing variance × candles, scaled by its training quantiles. */
export interface FreeBand {
  low: number;
  high: number;
}

export function fitFreeBand(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  split: number,
  h: RiskHorizon,
  coverage: number,
): FreeBand | null {
  const horizonMs = h.candles * TIMEFRAME_MS[tf];
  const z: number[] = [];
  for (const series of perCoin) {
    for (const s of series) {
      if (s.closeTime + horizonMs > split || !usable(s, h.key) || !(s.trailing > 0)) continue;
      z.push(outcome(s, h.key).logReturn / Math.sqrt(s.trailing * h.candles));
    }
  }
  if (z.length < 500) return null;
  z.sort((a, b) => a - b);
  const tail = (1 - coverage) / 2;
  return { low: quantile(z, tail), high: quantile(z, 1 - tail) };
}

export interface RiskScore {
  points: number;
  rhoForecast: number;
  rhoFree: number;
  coverage: Estimate;
  freeCoverage: Estimate;
}

/**
 * Scored on every closed candle (overlapping horizons), resampled in blocks at least one
 * horizon long. Rank correlations are point figures here (the verdict horizon's interval is in
 * the volatility table); coverage carries its block interval.
 */
export function scoreRisk(
  points: readonly Sample[],
  tf: Timeframe,
  h: RiskHorizon,
  verdictHorizon: number,
  model: VolatilityModel,
  free: FreeBand,
): RiskScore {
  const pts = points
    .filter((s) => usable(s, h.key) && s.trailing > 0)
    .map((s) => {
      const o = outcome(s, h.key);
      const sigma = Math.sqrt(forecastVariance(model, features(s, h.candles, verdictHorizon)));
      const freeSigma = Math.sqrt(s.trailing * h.candles);
      return {
        t: s.closeTime,
        forecast: sigma,
        trailing: s.trailing,
        realised: o.realised,
        inside: o.logReturn >= model.bandLow * sigma && o.logReturn <= model.bandHigh * sigma,
        freeInside: o.logReturn >= free.low * freeSigma && o.logReturn <= free.high * freeSigma,
      };
    });
  type P = (typeof pts)[number];
  const blocks = byBlock(pts, (p) => p.t, Math.max(DAY_MS, h.candles * TIMEFRAME_MS[tf]));
  const share = (key: 'inside' | 'freeInside') => (bs: readonly (readonly P[])[]) => {
    let n = 0;
    let k = 0;
    for (const b of bs) {
      for (const p of b) {
        n++;
        if (p[key]) k++;
      }
    }
    return n === 0 ? Number.NaN : k / n;
  };
  const resamples = { resamples: 200 };
  return {
    points: pts.length,
    rhoForecast: spearman(
      pts.map((p) => p.forecast),
      pts.map((p) => p.realised),
    ),
    rhoFree: spearman(
      pts.map((p) => p.trailing),
      pts.map((p) => p.realised),
    ),
    coverage: {
      value: share('inside')(blocks),
      dayBlock: dayBlockInterval(blocks, share('inside'), resamples),
    },
    freeCoverage: {
      value: share('freeInside')(blocks),
      dayBlock: dayBlockInterval(blocks, share('freeInside'), resamples),
    },
  };
}

// ---- regime labels against free labels ----

/** Window of the free label's rank, the same as the engine's percentile window. */
const RANK_WINDOW = 200;

const ordinal = (regime: string) => (regime === 'volatile' ? 1 : regime === 'squeeze' ? -1 : 0);

interface LabelPoint {
  t: number;
  engine: number;
  /** Rank (0–100) of the trailing variance among the series' last RANK_WINDOW candles. */
  freeRank: number;
  realised: number;
  forwardBps: number;
  regime: string;
}

/** Non-overlapping points in [from, to) with the trailing variance's rank in its window. */
function labelPoints(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  horizon: number,
  from: number,
  to: number,
): LabelPoint[] {
  const step = horizon * TIMEFRAME_MS[tf];
  const out: LabelPoint[] = [];
  for (const series of perCoin) {
    for (let i = RANK_WINDOW; i < series.length; i++) {
      const s = series[i]!;
      if (s.closeTime < from || s.closeTime + step > to || s.closeTime % step !== 0) continue;
      let below = 0;
      for (let k = i - RANK_WINDOW + 1; k <= i; k++) if (series[k]!.trailing <= s.trailing) below++;
      out.push({
        t: s.closeTime,
        engine: ordinal(s.regime),
        freeRank: (100 * below) / RANK_WINDOW,
        realised: s.realised,
        forwardBps: 10_000 * s.forward,
        regime: s.regime,
      });
    }
  }
  return out;
}

/** Free label thresholds: the rank cut-offs that flag as many points as the engine did on training. */
export interface FreeLabelCuts {
  volatileFrom: number;
  squeezeTo: number;
}

export function fitFreeLabelCuts(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  horizon: number,
  split: number,
): FreeLabelCuts | null {
  const pts = labelPoints(perCoin, tf, horizon, 0, split);
  if (pts.length < 200) return null;
  const ranks = pts.map((p) => p.freeRank).sort((a, b) => a - b);
  const volatileShare = pts.filter((p) => p.engine === 1).length / pts.length;
  const squeezeShare = pts.filter((p) => p.engine === -1).length / pts.length;
  return { volatileFrom: quantile(ranks, 1 - volatileShare), squeezeTo: quantile(ranks, squeezeShare) };
}

export interface LabelEvidence {
  points: number;
  /** Rank correlation of the label (squeeze −1, other 0, volatile +1) with realised variance. */
  rhoEngine: number;
  rhoFree: number;
  gain: Estimate<OneSided>;
  /** Inside each free-label class, the engine label's rank correlation with realised (weighted). */
  withinFree: number;
  /** Mean forward return (bps over the verdict horizon) under trending-up, trending-down and overall. */
  trending: {
    upBps: number;
    downBps: number;
    allBps: number;
    upN: number;
    downN: number;
    diff: Estimate;
  };
}

export function labelEvidence(
  perCoin: readonly Sample[][],
  tf: Timeframe,
  horizon: number,
  from: number,
  to: number,
  cuts: FreeLabelCuts,
): LabelEvidence {
  const pts = labelPoints(perCoin, tf, horizon, from, to).map((p) => ({
    ...p,
    free: p.freeRank >= cuts.volatileFrom ? 1 : p.freeRank <= cuts.squeezeTo ? -1 : 0,
  }));
  type P = (typeof pts)[number];
  const rho = (xs: readonly P[], key: 'engine' | 'free') =>
    spearman(
      xs.map((p) => p[key]),
      xs.map((p) => p.realised),
    );
  const days = byDay(pts, (p) => p.t);
  const gain = (ds: readonly (readonly P[])[]) => {
    const flat = ds.flat();
    return rho(flat, 'engine') - rho(flat, 'free');
  };
  let wSum = 0;
  let within = 0;
  for (const c of [-1, 0, 1]) {
    const xs = pts.filter((p) => p.free === c);
    const r = xs.length >= 30 ? rho(xs, 'engine') : Number.NaN;
    if (!Number.isFinite(r)) continue;
    within += r * xs.length;
    wSum += xs.length;
  }
  const meanOf = (xs: readonly P[]) =>
    xs.length === 0 ? Number.NaN : xs.reduce((a, p) => a + p.forwardBps, 0) / xs.length;
  const diff = (ds: readonly (readonly P[])[]) => {
    const flat = ds.flat();
    return (
      meanOf(flat.filter((p) => p.regime === 'trending-up')) -
      meanOf(flat.filter((p) => p.regime === 'trending-down'))
    );
  };
  const up = pts.filter((p) => p.regime === 'trending-up');
  const down = pts.filter((p) => p.regime === 'trending-down');
  return {
    points: pts.length,
    rhoEngine: rho(pts, 'engine'),
    rhoFree: rho(pts, 'free'),
    gain: { value: gain(days), dayBlock: dayBlockInterval(days, gain, { resamples: 50 }) },
    withinFree: wSum === 0 ? Number.NaN : within / wSum,
    trending: {
      upBps: meanOf(up),
      downBps: meanOf(down),
      allBps: meanOf(pts),
      upN: up.length,
      downN: down.length,
      diff: { value: diff(days), dayBlock: dayBlockInterval(days, diff, { resamples: 200 }) },
    },
  };
}
