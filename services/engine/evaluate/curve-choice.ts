import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import { type CellFit, fitCell, probability, type Settings, testPoints } from './cells.ts';
import { brier, reliability } from './stats.ts';
import { directionHit, type Sample } from './walk-forward.ts';

/**
 * How coarse the confidence curve is, chosen on the training months alone. A fine isotonic
 * curve (steps of 2 % of the training samples) puts its top steps on a few hundred calls, and
 * out of sample those steps did not keep their order: a higher confidence that hits less often
 * is worse than none. Coarser steps trade resolution for steps that hold. Which step size is
 * shipped is decided by walk-forward inside the training months: each inner fold refits
 * direction and curve on everything before its month and scores that month, with the two
 * checks the evaluation applies to confidence (Brier at or below the base-rate Brier; observed
 * hit share rising from one 2.5-point reliability bin of ≥ 100 calls to the next).
 */

/** Smallest step as a share of the training samples: 2 % is the earlier curve, 33 % at most three steps. */
export const STEP_SHARE_CANDIDATES: readonly number[] = [0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.33];

export interface InnerCase {
  cell: string;
  fold: number;
  calls: number;
  brier: number;
  brierBase: number;
  rises: boolean;
  pass: boolean;
}

export interface StepShareChoice {
  stepShare: number;
  /** Inner fold starts (each scored up to the next, the last up to the split). */
  folds: number[];
  cells: string[];
  candidates: Array<{ stepShare: number; passes: number; cases: number; meanBrierGain: number }>;
}

export interface CellSamples {
  cell: string;
  timeframe: Timeframe;
  perCoin: readonly Sample[][];
}

/** Month starts (UTC) from `first` (inclusive) up to `split` (exclusive). */
export function monthStarts(first: number, split: number): number[] {
  const out: number[] = [];
  const d = new Date(first);
  for (let k = 0; ; k++) {
    const t = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + k, 1);
    if (t >= split) break;
    if (t >= first) out.push(t);
  }
  return out;
}

function scoreCase(points: readonly Sample[], fit: CellFit, settings: Settings) {
  const fee = settings.feeBps / 10_000;
  const pairs: { p: number; hit: boolean }[] = [];
  for (const s of points) {
    if (s.score === 0 || Math.abs(s.score) < settings.holdBand) continue;
    pairs.push({
      p: probability(fit.curve, Math.abs(s.score)),
      hit: directionHit(fit.direction * Math.sign(s.score), s.forward, fee),
    });
  }
  const bins = reliability(pairs, 0.025).filter((b) => b.n >= 100);
  return {
    calls: pairs.length,
    brier: brier(pairs),
    brierBase: brier(pairs.map((x) => ({ p: fit.curve.baseRate, hit: x.hit }))),
    rises: bins.every((b, i) => i === 0 || b.observed >= bins[i - 1]!.observed),
  };
}

/**
 * Scores every candidate step share on the inner folds of the given cells. Reads only samples
 * whose horizon ended before `split`. The winner passes both checks on the most (cell, fold)
 * cases; ties go to the larger mean Brier gain over the base rate, then to the coarser curve.
 */
export function chooseStepShare(
  cells: readonly CellSamples[],
  folds: readonly number[],
  split: number,
  settings: Settings,
): StepShareChoice {
  const candidates = STEP_SHARE_CANDIDATES.map((stepShare) => {
    const cases: InnerCase[] = [];
    for (const c of cells) {
      const horizonMs = settings.horizon * TIMEFRAME_MS[c.timeframe];
      folds.forEach((start, i) => {
        const end = folds[i + 1] ?? split;
        const fit = fitCell(c.perCoin, c.timeframe, start, settings, stepShare);
        if (!fit) return;
        const points = testPoints(c.perCoin, c.timeframe, settings.horizon, start, end).filter(
          (s) => s.closeTime + horizonMs <= split,
        );
        const r = scoreCase(points, fit, settings);
        if (r.calls === 0) return;
        cases.push({
          cell: c.cell,
          fold: start,
          ...r,
          pass: r.brier <= r.brierBase && r.rises,
        });
      });
    }
    const gain = cases.reduce((a, x) => a + (x.brierBase - x.brier), 0);
    return {
      stepShare,
      passes: cases.filter((x) => x.pass).length,
      cases: cases.length,
      meanBrierGain: cases.length === 0 ? Number.NaN : gain / cases.length,
    };
  });
  let best = candidates[0]!;
  for (const c of candidates) {
    if (
      c.passes > best.passes ||
      (c.passes === best.passes && c.meanBrierGain > best.meanBrierGain) ||
      (c.passes === best.passes && c.meanBrierGain === best.meanBrierGain && c.stepShare > best.stepShare)
    ) {
      best = c;
    }
  }
  return { stepShare: best.stepShare, folds: [...folds], cells: cells.map((c) => c.cell), candidates };
}
