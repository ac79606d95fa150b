import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import { quantile } from '../signals/volatility.ts';
import { byDay, dayBlockInterval, spearman } from './bootstrap.ts';
import type { Estimate, OneSided } from './stats.ts';
import type { Sample } from './walk-forward.ts';

/**
 * The regime labels `volatile`/`squeeze` against what a buyer gets for free: a label from the
 * rank of the plain trailing variance of the last 20 candles in its window. (The risk forecast's
 * own scores are the risk desk's: risk-desk.ts.)
 */

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
