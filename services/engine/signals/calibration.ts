import { type Exchange, type Timeframe, venueKind } from '../../../contracts/market.ts';
import {
  type CalibrationBin,
  type CalibrationCurve,
  type CalibrationTable,
  CalibrationTableSchema,
} from '../../../contracts/signals.ts';
import { CalibrationError } from './errors.ts';

/**
 * Confidence that means something: an isotonic (pool-adjacent-violators) fit of "the call's
 * direction beat the fee over the horizon" against |score|, per timeframe, directions pooled.
 * Pooling BUY and SELL assumes the score is symmetric; a per-direction fit would mostly learn
 * the training months' drift (crypto rose or fell), which is exactly what should not carry over.
 * Which way a call points relative to the score (follow or fade) is fitted first, on the same
 * training calls: one sign per timeframe, nothing finer, so there is little to overfit.
 */

export type Direction = 1 | -1;

export interface DirectionSample {
  score: number;
  /** Forward return over the horizon from the close the score saw. */
  forward: number;
}

/**
 * The direction whose training calls (|score| ≥ hold band) beat the fee more often. A tie keeps
 * following the score: fading needs the training data to say so.
 */
export function fitDirection(
  samples: readonly DirectionSample[],
  options: { fee: number; holdBand: number },
): { direction: Direction; calls: number; followHits: number; fadeHits: number } {
  let calls = 0;
  let followHits = 0;
  let fadeHits = 0;
  for (const s of samples) {
    if (s.score === 0 || Math.abs(s.score) < options.holdBand) continue;
    calls++;
    const move = Math.sign(s.score) * s.forward;
    if (move > options.fee) followHits++;
    else if (-move > options.fee) fadeHits++;
  }
  return { direction: fadeHits > followHits ? -1 : 1, calls, followHits, fadeHits };
}

export interface CalibrationSample {
  absScore: number;
  hit: boolean;
}

export interface FitOptions {
  /** Steps with fewer samples are merged with a neighbour, so no probability rests on a handful. */
  minBinSamples: number;
  holdBand: number;
}

interface Block {
  hi: number;
  hits: number;
  n: number;
}

/** Isotonic fit of hit rate on |score|: non-decreasing, every step ≥ minBinSamples samples. */
export function fitCurve(samples: readonly CalibrationSample[], options: FitOptions): CalibrationCurve {
  if (samples.length === 0) throw new CalibrationError('no samples to fit');
  const sorted = [...samples].sort((a, b) => a.absScore - b.absScore);
  const blocks: Block[] = [];
  for (const s of sorted) {
    const last = blocks[blocks.length - 1];
    if (last !== undefined && last.hi === s.absScore) {
      last.hits += s.hit ? 1 : 0;
      last.n++;
    } else {
      blocks.push({ hi: s.absScore, hits: s.hit ? 1 : 0, n: 1 });
    }
  }
  const pooled: Block[] = [];
  for (const b of blocks) {
    pooled.push({ ...b });
    while (pooled.length > 1) {
      const cur = pooled[pooled.length - 1]!;
      const prev = pooled[pooled.length - 2]!;
      if (prev.hits / prev.n <= cur.hits / cur.n) break;
      pooled.splice(pooled.length - 2, 2, { hi: cur.hi, hits: prev.hits + cur.hits, n: prev.n + cur.n });
    }
  }
  const minN = Math.min(options.minBinSamples, samples.length);
  // Merging adjacent steps of a non-decreasing sequence keeps it non-decreasing.
  for (let i = 0; i < pooled.length && pooled.length > 1; ) {
    const b = pooled[i]!;
    if (b.n >= minN) {
      i++;
      continue;
    }
    const left = pooled[i - 1];
    const right = pooled[i + 1];
    const p = b.hits / b.n;
    const intoLeft =
      right === undefined ||
      (left !== undefined && Math.abs(left.hits / left.n - p) <= Math.abs(right.hits / right.n - p));
    if (intoLeft) {
      const l = left!;
      pooled.splice(i - 1, 2, { hi: b.hi, hits: l.hits + b.hits, n: l.n + b.n });
      i--;
    } else {
      const r = right;
      pooled.splice(i, 2, { hi: r.hi, hits: r.hits + b.hits, n: r.n + b.n });
    }
  }
  const bins: CalibrationBin[] = pooled.map((b, i) => ({
    upTo: i === pooled.length - 1 ? 1 : b.hi,
    probability: b.hits / b.n,
    samples: b.n,
  }));
  let calls = 0;
  let callHits = 0;
  for (const s of samples) {
    if (s.absScore < options.holdBand) continue;
    calls++;
    if (s.hit) callHits++;
  }
  return { samples: samples.length, baseRate: calls === 0 ? 0 : callHits / calls, bins };
}

/** The curve a timeframe uses (its own, else the table's fallback) and the timeframe it was fitted on. */
export function curveFor(
  table: CalibrationTable,
  timeframe: Timeframe,
): { curve: CalibrationCurve; timeframe: Timeframe } {
  const tf = table.curves[timeframe] ? timeframe : table.fallback[timeframe];
  const curve = tf === undefined ? undefined : table.curves[tf];
  if (tf === undefined || curve === undefined) {
    throw new CalibrationError(`calibration table has no curve for ${timeframe}`);
  }
  return { curve, timeframe: tf };
}

/** Calibrated probability for |score| on a timeframe (following the table's fallback). */
export function calibratedProbability(
  table: CalibrationTable,
  timeframe: Timeframe,
  absScore: number,
): { probability: number; timeframe: Timeframe } {
  const { curve, timeframe: tf } = curveFor(table, timeframe);
  const bins = curve.bins;
  for (const bin of bins) if (absScore <= bin.upTo) return { probability: bin.probability, timeframe: tf };
  return { probability: bins[bins.length - 1]!.probability, timeframe: tf };
}

/** Direction of calls on a timeframe (following the table's fallback); 1 when the curve has none. */
export function callDirection(table: CalibrationTable, timeframe: Timeframe): Direction {
  return curveFor(table, timeframe).curve.direction ?? 1;
}

/** Validates a parsed JSON table; monotonicity is checked because the schema cannot say it. */
export function parseCalibrationTable(json: unknown): CalibrationTable {
  const table = CalibrationTableSchema.parse(json);
  for (const [tf, curve] of Object.entries(table.curves)) {
    for (let i = 1; i < curve.bins.length; i++) {
      const a = curve.bins[i - 1]!;
      const b = curve.bins[i]!;
      if (b.upTo < a.upTo || b.probability < a.probability) {
        throw new CalibrationError(`calibration curve ${tf} is not monotone at step ${i}`);
      }
    }
  }
  for (const [tf, to] of Object.entries(table.fallback)) {
    if (!table.curves[to]) throw new CalibrationError(`fallback ${tf} → ${to} names a missing curve`);
  }
  return table;
}

/** Cells group markets whose calls were evaluated together: the venue kind and the timeframe. */
export function cellKey(exchange: Exchange, timeframe: Timeframe): string {
  return `${venueKind(exchange)}:${timeframe}`;
}

export const NO_EDGE_REASON = 'no measured edge here';
export const NO_PROFIT_REASON = 'timing skill, but no profit after the fee here';

/**
 * Net bps per call of following the cell's calls, on the gate's evidence, as a lean serves it: a
 * point figure only where the evidence supports one (see leanNet); the interval always.
 */
export interface CellNet {
  /** Mean net bps per call where measurable; null where not measurable or not measured. */
  meanBps: number | null;
  /** The table's one-sided 95 % day-block lower bound. */
  lowBps: number | null;
  /** The one-sided 95 % upper bound, mirrored about the mean: [low, high] is a 90 % interval. */
  highBps: number | null;
  /** The evidence supports a figure: a paying edge (low above 0) or a loss (high below 0). */
  measurable: boolean;
}

/**
 * A served net figure to 0.01 bps: the table's bootstrap bounds carry no meaning past that, and
 * their float tails (and the upper bound's, mirrored) only lengthen every answer. Whether a figure
 * is measurable is decided on the unrounded values.
 */
const centi = (bps: number): number => Math.round(bps * 100) / 100 || 0;

/**
 * What a cell's pooled net supports. The table keeps the mean and its one-sided 95 % lower bound;
 * the upper bound is that distance above the mean (the day-block bootstrap of a mean over hundreds
 * of days is close to symmetric). A figure is served only when the interval lies on one side of 0:
 * following the calls paid (low above 0) or lost (high below 0). Elsewhere the mean says nothing a
 * buyer could act on, however far from 0 it is, and is withheld: a positive point beside a bound
 * below 0 reads as an edge that the evidence does not show.
 */
export function leanNet(meanBps: number | null, lowBps: number | null): CellNet {
  if (meanBps === null || lowBps === null)
    return {
      meanBps: null,
      lowBps: lowBps === null ? null : centi(lowBps),
      highBps: null,
      measurable: false,
    };
  const highBps = 2 * meanBps - lowBps;
  const measurable = lowBps > 0 || highBps < 0;
  return {
    meanBps: measurable ? centi(meanBps) : null,
    lowBps: centi(lowBps),
    highBps: centi(highBps),
    measurable,
  };
}

const signed = (x: number) => `${x >= 0 ? '+' : '−'}${Math.abs(x).toFixed(1)}`;

/**
 * What following such calls earned, in words, as a clause after "following … calls": "earned
 * +x bps per call (…)", "lost x bps per call (…)" or "earned a net that is not measurable (…)".
 */
export function netWords(net: CellNet): string {
  if (net.lowBps === null || net.highBps === null)
    return 'earned a net that was not measured (no calls were evaluated)';
  const interval = `90 % interval ${signed(net.lowBps)} to ${signed(net.highBps)} bps`;
  if (!net.measurable || net.meanBps === null) {
    return `earned a net per call that is not measurable (${interval} spans 0)`;
  }
  return net.meanBps >= 0
    ? `earned ${signed(net.meanBps)} bps per call (one-sided 95 % bound ${signed(net.lowBps)} bps)`
    : `lost ${Math.abs(net.meanBps).toFixed(1)} bps per call (${interval})`;
}

/** What a HOLD's confidence claims and where that share was measured. */
export interface HoldClaim {
  probability: number;
  /** In words: which cell and which months the share comes from. */
  source: string;
}

export interface CellDecision {
  cell: string;
  emit: boolean;
  direction: Direction;
  probability: number;
  /** Timeframe of the curve the probability came from. */
  curveTimeframe: Timeframe;
  reason: string;
  timingSkill: boolean;
  net: CellNet;
  hold: HoldClaim;
}

/** What a cell's decision does not owe to the score: fixed for a given table, so worked out once. */
interface CellPlan {
  cell: string;
  emit: boolean;
  direction: Direction;
  bins: readonly { upTo: number; probability: number }[];
  curveTimeframe: Timeframe;
  reason: string;
  timingSkill: boolean;
  net: CellNet;
  hold: HoldClaim;
}

/** Plans by table, then exchange, then timeframe: tables are parsed once and never mutated. */
const plans = new WeakMap<CalibrationTable, Map<Exchange, Map<Timeframe, CellPlan>>>();

function cellPlan(table: CalibrationTable, exchange: Exchange, timeframe: Timeframe): CellPlan {
  let byExchange = plans.get(table);
  if (byExchange === undefined) {
    byExchange = new Map();
    plans.set(table, byExchange);
  }
  let byTimeframe = byExchange.get(exchange);
  if (byTimeframe === undefined) {
    byTimeframe = new Map();
    byExchange.set(exchange, byTimeframe);
  }
  let plan = byTimeframe.get(timeframe);
  if (plan === undefined) {
    plan = planCell(table, exchange, timeframe);
    byTimeframe.set(timeframe, plan);
  }
  return plan;
}

type CellEntry = CalibrationTable['cells'][string];

/**
 * HOLD's claim: the share of leans that did not beat the fee, measured out of fold on the gate's
 * folds and eras where the table has it; on older tables, the training curve's base rate.
 */
function holdClaim(entry: CellEntry, cell: string, before: string): HoldClaim {
  if (entry.hold !== undefined) {
    return {
      probability: entry.hold.probability,
      source: `${cell}, ${entry.hold.samples} leans on walk-forward folds before ${before}`,
    };
  }
  return { probability: 1 - entry.curve.baseRate, source: `${cell}, training months before ${before}` };
}

function planCell(table: CalibrationTable, exchange: Exchange, timeframe: Timeframe): CellPlan {
  const cell = cellKey(exchange, timeframe);
  const entry = table.cells[cell];
  const before = new Date(table.trainTo).toISOString().slice(0, 10);
  if (entry !== undefined) {
    const timingSkill = entry.timingSkill ?? entry.emit;
    const net = leanNet(entry.net?.meanBps ?? null, entry.net?.lowBps ?? null);
    const evidence = `following ${cell} calls ${netWords(net)} after the ${table.feeBps} bps fee on the walk-forward folds and eras before ${before}`;
    return {
      cell,
      emit: entry.emit,
      direction: entry.direction,
      bins: entry.curve.bins,
      curveTimeframe: timeframe,
      reason: entry.emit
        ? `timing skill over random calls at the same BUY:SELL mix and ${evidence}, in every fold and era tested (${entry.evidence.length})`
        : timingSkill
          ? `${NO_PROFIT_REASON}: its calls beat random timing in every fold and era, but ${evidence}`
          : `${NO_EDGE_REASON}: walk-forward evidence for ${cell} did not show timing skill in every fold and era; ${evidence}`,
      timingSkill,
      net,
      hold: holdClaim(entry, cell, before),
    };
  }
  const { curve, timeframe: tf } = curveFor(table, timeframe);
  // A cell never evaluated (1m/3m, perpetual timeframes the replay lacks) borrows the HOLD claim
  // of the spot cell whose curve it uses, and says so.
  const borrowed = table.cells[`spot:${tf}`];
  return {
    cell,
    emit: false,
    direction: curve.direction ?? 1,
    bins: curve.bins,
    curveTimeframe: tf,
    reason: `${NO_EDGE_REASON}: ${cell} has no walk-forward evidence (no data of this venue kind and timeframe was evaluated)`,
    timingSkill: false,
    net: leanNet(null, null),
    hold:
      borrowed !== undefined
        ? holdClaim(borrowed, `spot:${tf}`, before)
        : { probability: 1 - curve.baseRate, source: `the ${tf} curve's training months before ${before}` },
  };
}

/**
 * Whether a market may get BUY/SELL and with which probability: only cells whose walk-forward
 * evidence showed timing skill in every fold and era emit; every other cell answers HOLD.
 */
export function cellDecision(
  table: CalibrationTable,
  exchange: Exchange,
  timeframe: Timeframe,
  absScore: number,
): CellDecision {
  const plan = cellPlan(table, exchange, timeframe);
  const bins = plan.bins;
  let bin = bins[bins.length - 1]!;
  for (let i = 0; i < bins.length; i++) {
    if (absScore <= bins[i]!.upTo) {
      bin = bins[i]!;
      break;
    }
  }
  return {
    cell: plan.cell,
    emit: plan.emit,
    direction: plan.direction,
    probability: bin.probability,
    curveTimeframe: plan.curveTimeframe,
    reason: plan.reason,
    timingSkill: plan.timingSkill,
    net: plan.net,
    hold: plan.hold,
  };
}
