import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import { RiskHorizonKey, type VolatilityModel } from '../../../contracts/signals.ts';
import {
  BandScale,
  bandFor,
  dayCandles,
  EwmaVariances,
  FineVariance,
  fitVolatilityModel,
  fitWeight,
  forecastVarianceOf,
  HourlyVariance,
  hasFine,
  hasHourly,
  hourlyFeature,
  leastSquares,
  quantile,
  riskHorizonCandles,
  utcHour,
  VOL_HALF_LIVES,
} from '../signals/volatility.ts';
import { DAY_MS, dayBlockInterval } from './bootstrap.ts';

/**
 * The risk forecast against the forecasters a risk desk already has, on the same closes and the
 * same realised figures:
 *
 * - RiskMetrics EWMA, λ = 0.94, of one-candle squared log returns, × the horizon in candles;
 * - GARCH(1,1) with variance targeting (each coin's long-run variance from its training months),
 *   α and β fitted by Gaussian maximum likelihood on the pooled training months (no well-kept
 *   GARCH or optimiser package exists for Node: `fmin`, the usual Nelder–Mead, ships a broken ES
 *   module; the two-parameter likelihood is searched on a grid refined around its best point),
 *   forecast over the horizon with the usual mean-reverting sum;
 * - HAR-RV (Corsi): least squares in levels of the horizon's squared log return on the realised
 *   variance of the last candle, the last day and the last week, each built from finer candles
 *   where the data has them (5m inside every candle up to 12h, 1h inside a day), else from the
 *   candle's own squared return;
 *
 * each fitted on the training months by its own rules and never on the test months. Every fit and
 * score targets r², the squared log return over the horizon, what the σ served is the forecast
 * of. The scores: the level (RMS of the σ served ÷ RMS of r), the band's coverage, QLIKE
 * (r²/h + log h) and the MSE of log variance (closes where r is not 0), and a position sized to
 * risk a fixed budget at one σ (realised ÷ target volatility), beside the same sizing from a
 * trailing 20-candle σ scaled to its own training level.
 */

export const EWMA_LAMBDA = 0.94;
const TRAILING = 20;
const FLOOR = 1e-12;

/** One coin's closes on one timeframe, with what every forecaster reads at each close. */
export interface DeskSeries {
  closeTime: Float64Array;
  close: Float64Array;
  /** Squared one-candle log return ending at each close. */
  r2: Float64Array;
  /** Realised variance inside each candle from finer candles (r2 where there are none). */
  rv: Float64Array;
  /** The service's three EWMA variances at each close (NaN until the engine's warm-up is done). */
  v0: Float64Array;
  v1: Float64Array;
  v2: Float64Array;
  ewma: Float64Array;
  trailing: Float64Array;
  /**
   * The service's fourth input at each close: the hourly variance on candles shorter than an
   * hour, the fine variance (FineVariance, from the 1h candles) on candles of two hours or more;
   * NaN on 1h candles and where there is none yet.
   */
  hourly: Float64Array;
}

/**
 * Builds a coin's series. `fine`, when given, is the same coin on a finer timeframe whose
 * candles tile these (5m inside 1h): each candle's realised variance (HAR-RV's input) is the sum
 * of the squared fine log returns ending inside it. `hours`, the same market's 1h candles, feed
 * the service's fine variance on candles of two hours or more, as a market state is fed them.
 */
export function deskSeries(
  candles: readonly Candle[],
  timeframe: Timeframe,
  fine?: readonly Candle[],
  hours?: readonly Candle[],
): DeskSeries {
  const n = candles.length;
  const tfMs = TIMEFRAME_MS[timeframe];
  const s: DeskSeries = {
    closeTime: new Float64Array(n),
    close: new Float64Array(n),
    r2: new Float64Array(n),
    rv: new Float64Array(n),
    v0: new Float64Array(n),
    v1: new Float64Array(n),
    v2: new Float64Array(n),
    ewma: new Float64Array(n),
    trailing: new Float64Array(n),
    hourly: new Float64Array(n).fill(Number.NaN),
  };
  // Fine realised variance per coarse candle, keyed by the coarse candle's open time.
  const fineRv = new Map<number, { sum: number; count: number }>();
  let perCandle = 0;
  if (fine && fine.length > 1) {
    const fineMs = fine[1]!.openTime - fine[0]!.openTime;
    perCandle = Math.round(tfMs / fineMs);
    for (let i = 1; i < fine.length; i++) {
      const a = fine[i - 1]!.close;
      const b = fine[i]!.close;
      if (!(a > 0 && b > 0) || fine[i]!.openTime - fine[i - 1]!.openTime !== fineMs) continue;
      // The return ending at fine candle i's close belongs to the coarse candle holding that close.
      const bucket = Math.floor((fine[i]!.openTime + fineMs - 1) / tfMs) * tfMs;
      const e = fineRv.get(bucket) ?? { sum: 0, count: 0 };
      e.sum += Math.log(b / a) ** 2;
      e.count++;
      fineRv.set(bucket, e);
    }
  }
  const ewma = new EwmaVariances(VOL_HALF_LIVES);
  const hourly = hasHourly(timeframe) ? new HourlyVariance(timeframe) : null;
  const fineVar = hours && hasFine(timeframe) ? new FineVariance(timeframe) : null;
  let hour = 0;
  let v94 = Number.NaN;
  let trailingSum = 0;
  for (let i = 0; i < n; i++) {
    const c = candles[i]!;
    s.closeTime[i] = c.openTime + tfMs;
    s.close[i] = c.close;
    const prev = i > 0 ? candles[i - 1]!.close : Number.NaN;
    const r2 = prev > 0 && c.close > 0 ? Math.log(c.close / prev) ** 2 : 0;
    s.r2[i] = r2;
    const f = fineRv.get(c.openTime);
    s.rv[i] = f !== undefined && f.count === perCandle ? f.sum : r2;
    const v = ewma.push(c.close);
    s.v0[i] = v ? v[0]! : Number.NaN;
    s.v1[i] = v ? v[1]! : Number.NaN;
    s.v2[i] = v ? v[2]! : Number.NaN;
    if (hourly) s.hourly[i] = hourly.push(c.close) ?? Number.NaN;
    if (fineVar) {
      // The hours closing by this candle's close, then the candle, as MarketStates feeds them.
      hour = fineVar.pushHoursUntil(hours!, hour, s.closeTime[i]!);
      s.hourly[i] = fineVar.push(c.openTime, c.close) ?? Number.NaN;
    }
    if (i > 0) v94 = Number.isNaN(v94) ? r2 : EWMA_LAMBDA * v94 + (1 - EWMA_LAMBDA) * r2;
    s.ewma[i] = i >= TRAILING ? v94 : Number.NaN;
    trailingSum += r2;
    if (i >= TRAILING) trailingSum -= s.r2[i - TRAILING]!;
    s.trailing[i] = i >= TRAILING ? Math.max(0, trailingSum) / TRAILING : Number.NaN;
  }
  return s;
}

/** HAR-RV look-backs in candles: the last candle, day and week (a daily series: 1, 5, 22). */
export function harWindows(timeframe: Timeframe): [number, number, number] {
  const day = dayCandles(timeframe);
  return day === 1 ? [1, 5, 22] : [1, day, 7 * day];
}

/** Prefix sums of a series (index i holds the sum of the first i values). */
function prefix(xs: Float64Array): Float64Array {
  const out = new Float64Array(xs.length + 1);
  for (let i = 0; i < xs.length; i++) out[i + 1] = out[i]! + xs[i]!;
  return out;
}

const windowMean = (cum: Float64Array, i: number, w: number) => (cum[i + 1]! - cum[i + 1 - w]!) / w;

export interface GarchParams {
  alpha: number;
  beta: number;
}

/** One coin's GARCH(1,1) one-step variances, σ²[i] = forecast for the candle after close i. */
function garchFilter(r2: Float64Array, from: number, longRun: number, p: GarchParams): Float64Array {
  const out = new Float64Array(r2.length).fill(Number.NaN);
  const omega = longRun * (1 - p.alpha - p.beta);
  let v = longRun;
  for (let i = from; i < r2.length; i++) {
    // v is the variance forecast for the return ending at close i; update with that return.
    v = omega + p.alpha * r2[i]! + p.beta * v;
    out[i] = v;
  }
  return out;
}

/** Fits α, β on the training closes of every coin (pooled Gaussian likelihood, variance targeting). */
export function fitGarch(
  coins: readonly { r2: Float64Array; trainEnd: number; longRun: number }[],
): GarchParams {
  const unpack = ([a, b]: number[]): GarchParams => {
    // Map the free pair onto α, β > 0 with α + β < 1.
    const ea = Math.exp(a!);
    const eb = Math.exp(b!);
    const total = 1 + ea + eb;
    return { alpha: ea / total, beta: eb / total };
  };
  const negLogLik = (x: number[]) => {
    const p = unpack(x);
    let nll = 0;
    let count = 0;
    for (const c of coins) {
      if (c.trainEnd < 2) continue;
      const omega = c.longRun * (1 - p.alpha - p.beta);
      let v = c.longRun;
      for (let i = 1; i < c.trainEnd; i++) {
        // v: forecast for the return ending at close i, made at close i - 1.
        nll += Math.log(Math.max(FLOOR, v)) + c.r2[i]! / Math.max(FLOOR, v);
        count++;
        v = omega + p.alpha * c.r2[i]! + p.beta * v;
      }
    }
    return count === 0 ? Number.POSITIVE_INFINITY : nll / count;
  };
  // Grid over (α, β) in the free coordinates, refined four times around the best point: the
  // likelihood is smooth and has one basin inside α + β < 1.
  let best = { x: [Math.log(0.08 / 0.02), Math.log(0.9 / 0.02)], fx: Number.POSITIVE_INFINITY };
  best.fx = negLogLik(best.x);
  let span = 4;
  for (let round = 0; round < 5; round++) {
    const centre = best.x;
    for (let a = -3; a <= 3; a++) {
      for (let b = -3; b <= 3; b++) {
        const x = [centre[0]! + (a * span) / 3, centre[1]! + (b * span) / 3];
        const fx = negLogLik(x);
        if (fx < best.fx) best = { x, fx };
      }
    }
    span /= 3;
  }
  return unpack(best.x);
}

/** Σ over the next h candles of GARCH(1,1) forecasts from the one-step variance `next`. */
function garchOver(next: number, longRun: number, p: GarchParams, h: number): number {
  const persistence = p.alpha + p.beta;
  let total = 0;
  let dev = next - longRun;
  for (let k = 0; k < h; k++) {
    total += longRun + dev;
    dev *= persistence;
  }
  return total;
}

export interface HarRvModel {
  windows: [number, number, number];
  coefficients: number[];
  /** Forecasts below this are raised to it (least squares in levels can go below 0). */
  floor: number;
}

/** Per horizon: the service's model, HAR-RV and the trailing band's quantiles, fitted on training. */
export interface DeskFit {
  key: RiskHorizonKey;
  candles: number;
  service: VolatilityModel;
  harRv: HarRvModel;
  /**
   * The free trailing-σ forecast's band quantiles and its level scale (mean of r² over the
   * trailing variance × h on training: the same level fit the service gets, so sizing compares
   * forecasts, not a missing scale).
   */
  freeBand: { low: number; high: number; scale?: number | undefined };
}

export interface DeskCoin {
  series: DeskSeries;
  /**
   * The coin's long-run variance for GARCH: its mean squared return before `split`, or, for a
   * coin with no such closes (a folder of later months without a warm-up), over its first week.
   */
  longRun: number;
  garch: Float64Array;
  /** Closes before this are not scored (the first week that gave `longRun`, when it did). */
  scoreFrom: number;
}

/** Index of the first close at or after `t` (binary search on the ascending close times). */
function firstAtOrAfter(closeTime: Float64Array, t: number): number {
  let lo = 0;
  let hi = closeTime.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (closeTime[mid]! < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The horizons scored: the next candle, the verdict's horizon and one UTC day. */
export function deskHorizons(
  timeframe: Timeframe,
  verdictHorizon: number,
): { key: RiskHorizonKey; candles: number }[] {
  return RiskHorizonKey.options.map((key) => ({
    key,
    candles: riskHorizonCandles(key, timeframe, verdictHorizon),
  }));
}

const ready = (s: DeskSeries, i: number, w: number) =>
  i + 1 >= w && Number.isFinite(s.v2[i]!) && Number.isFinite(s.ewma[i]!) && Number.isFinite(s.trailing[i]!);

/** Closes of a series usable for horizon h between [from, to) (outcome inside `to` too when asked). */
function* closes(s: DeskSeries, h: number, w: number, from: number, to: number, outcomeBefore: boolean) {
  const candleMs = s.closeTime.length > 1 ? s.closeTime[1]! - s.closeTime[0]! : 0;
  for (let i = firstAtOrAfter(s.closeTime, from); i + h < s.closeTime.length; i++) {
    const t = s.closeTime[i]!;
    if (t >= to) break;
    if (outcomeBefore && t + h * candleMs > to) break;
    if (!ready(s, i, w)) continue;
    yield i;
  }
}

/**
 * Fits, on the closes whose horizon ends before `split`, the service's risk model, HAR-RV and the
 * free band for one timeframe and horizon (GARCH is fitted once per timeframe, in `prepareCoins`).
 */
export function fitDesk(
  coins: readonly DeskCoin[],
  timeframe: Timeframe,
  horizon: { key: RiskHorizonKey; candles: number },
  split: number,
  coverage: number,
): DeskFit | null {
  const h = horizon.candles;
  const windows = harWindows(timeframe);
  const w = windows[2];
  // The day's model on candles shorter than an hour reads the hourly variance too, the next
  // candle's and the day's on candles of two hours or more the fine variance (volatility.ts); the
  // verdict horizon's model (trade calls, the regime's percentile) reads neither.
  const withHourly =
    (horizon.key === 'day' && hasHourly(timeframe)) || (horizon.key !== 'verdict' && hasFine(timeframe));
  // Hour-of-day factors on every horizon of a timeframe shorter than a day (a 1d candle closes at
  // one hour), the verdict horizon's model included: trade calls and the regime's volatility
  // percentile read it as the risk forecast does.
  const seasonal = TIMEFRAME_MS[timeframe] < DAY_MS;
  const samples: {
    features: number[];
    realised: number;
    logReturn: number;
    hourly?: number;
    hour?: number;
    weight: number;
  }[] = [];
  const harRows: number[][] = [];
  const harYs: number[] = [];
  const z: number[] = [];
  let scaleSum = 0;
  for (const { series: s } of coins) {
    const cumRv = prefix(s.rv);
    for (const i of closes(s, h, w, Number.NEGATIVE_INFINITY, split, true)) {
      const logReturn = Math.log(s.close[i + h]! / s.close[i]!);
      // The target is the horizon's own squared log return, not the sum of its candles' squared
      // returns: where candles mean-revert (5m) the sum overstates the horizon's variance.
      const realised = logReturn * logReturn;
      samples.push({
        features: [
          Math.log(Math.max(FLOOR, s.v0[i]! * h)),
          Math.log(Math.max(FLOOR, s.v1[i]! * h)),
          Math.log(Math.max(FLOOR, s.v2[i]! * h)),
        ],
        realised,
        logReturn,
        ...(withHourly ? { hourly: hourlyFeature(s.hourly[i]!, h) } : {}),
        ...(seasonal ? { hour: utcHour(s.closeTime[i]!) } : {}),
        weight: fitWeight(s.closeTime[i]!, split),
      });
      harRows.push([
        1,
        windowMean(cumRv, i, windows[0]),
        windowMean(cumRv, i, windows[1]),
        windowMean(cumRv, i, windows[2]),
      ]);
      harYs.push(realised);
      if (s.trailing[i]! > 0) {
        z.push(logReturn / Math.sqrt(s.trailing[i]! * h));
        scaleSum += realised / (s.trailing[i]! * h);
      }
    }
  }
  if (samples.length < 500) return null;
  const service = fitVolatilityModel(samples, coverage);
  let mean = 0;
  for (const y of harYs) mean += y;
  mean /= harYs.length;
  const harRv: HarRvModel = { windows, coefficients: leastSquares(harRows, harYs), floor: 0.01 * mean };
  z.sort((a, b) => a - b);
  const tail = (1 - coverage) / 2;
  return {
    key: horizon.key,
    candles: h,
    service,
    harRv,
    freeBand: { low: quantile(z, tail), high: quantile(z, 1 - tail), scale: scaleSum / z.length },
  };
}

/**
 * The perpetuals' band scale for a model fitted on spot: the `coverage` quantile of |z| (the
 * log return over the forecast σ) on the perpetual coins' closes whose horizon ends before
 * `split`, over the spot band's half-width. Undefined with fewer than 500 closes (the spot band
 * is then served as it is). Chosen on the inner fold (docs/evaluation-risk.md).
 */
export function perpBandScale(
  coins: readonly DeskCoin[],
  fit: DeskFit,
  split: number,
  coverage: number,
): number | undefined {
  const h = fit.candles;
  const z: number[] = [];
  const vars = [0, 0, 0];
  for (const { series: s } of coins) {
    for (const i of closes(s, h, fit.harRv.windows[2], Number.NEGATIVE_INFINITY, split, true)) {
      vars[0] = s.v0[i]!;
      vars[1] = s.v1[i]!;
      vars[2] = s.v2[i]!;
      const sigma = Math.sqrt(
        forecastVarianceOf(fit.service, vars, h, s.hourly[i], utcHour(s.closeTime[i]!)),
      );
      z.push(Math.abs(Math.log(s.close[i + h]! / s.close[i]!)) / sigma);
    }
  }
  if (z.length < 500) return undefined;
  z.sort((a, b) => a - b);
  return quantile(z, coverage) / ((fit.service.bandHigh - fit.service.bandLow) / 2);
}

/** Each coin's GARCH filter with the timeframe's fitted α, β (long-run variance from its training). */
export function prepareCoins(
  series: readonly DeskSeries[],
  split: number,
  garch?: GarchParams,
): { coins: DeskCoin[]; garch: GarchParams } {
  const base = series.map((s) => {
    const trainEnd = firstAtOrAfter(s.closeTime, split);
    const mean = (to: number) => {
      let sum = 0;
      for (let i = 1; i < to; i++) sum += s.r2[i]!;
      return to > 1 ? sum / (to - 1) : Number.NaN;
    };
    if (trainEnd > 100) {
      return {
        s,
        trainEnd,
        longRun: mean(trainEnd),
        ownLongRun: Number.NaN,
        scoreFrom: Number.NEGATIVE_INFINITY,
      };
    }
    const perDay = s.closeTime.length > 1 ? Math.round(DAY_MS / (s.closeTime[1]! - s.closeTime[0]!)) : 1;
    const week = Math.min(s.closeTime.length - 1, Math.max(101, 7 * perDay));
    return {
      s,
      trainEnd,
      longRun: Number.NaN,
      ownLongRun: mean(week),
      scoreFrom: s.closeTime[week] ?? Number.POSITIVE_INFINITY,
    };
  });
  const known = base
    .filter((b) => Number.isFinite(b.longRun))
    .map((b) => b.longRun)
    .sort((a, b) => a - b);
  // A coin without closes before `split` takes the median coin's long-run variance, or when no
  // coin has any, its own first week's (which is then not scored).
  const fallback = known.length > 0 ? quantile(known, 0.5) : Number.NaN;
  const params =
    garch ??
    fitGarch(
      base
        .filter((b) => Number.isFinite(b.longRun))
        .map((b) => ({ r2: b.s.r2, trainEnd: b.trainEnd, longRun: b.longRun })),
    );
  return {
    garch: params,
    coins: base.map((b) => {
      const longRun = Number.isFinite(b.longRun)
        ? b.longRun
        : Number.isFinite(fallback)
          ? fallback
          : b.ownLongRun;
      const scoreFrom =
        Number.isFinite(b.longRun) || Number.isFinite(fallback) ? Number.NEGATIVE_INFINITY : b.scoreFrom;
      return { series: b.s, longRun, garch: garchFilter(b.s.r2, 1, longRun, params), scoreFrom };
    }),
  };
}

/** Per-block sums: a block resample recomputes every statistic from them. */
interface BlockSums {
  n: number;
  served2: number;
  realised2: number;
  inside: number;
  freeInside: number;
  qlike: [number, number, number, number];
  mseN: number;
  mse: [number, number, number, number];
  sized: number;
  trailingSized: number;
  /** Closes with a free band (trailing σ above 0), where the two bands' sharpness is compared. */
  sharpN: number;
  /** Summed widths (in log return) of the served and the free band, and their interval scores. */
  width: number;
  freeWidth: number;
  winkler: number;
  freeWinkler: number;
  /**
   * Closes whose last resolved forecast (made `h` closes before, its horizon ending at this close)
   * missed, and how many of those missed too; the same after a hit; the free band's after a miss.
   */
  afterMiss: number;
  missAfterMiss: number;
  afterHit: number;
  missAfterHit: number;
  freeAfterMiss: number;
  freeMissAfterMiss: number;
  /** Closes at a Saturday or Sunday UTC (index 1) or another day (0): count, inside, σ² and r² sums. */
  dayN: [number, number];
  dayInside: [number, number];
  dayServed2: [number, number];
  dayRealised2: [number, number];
}

const emptyBlock = (): BlockSums => ({
  n: 0,
  served2: 0,
  realised2: 0,
  inside: 0,
  freeInside: 0,
  qlike: [0, 0, 0, 0],
  mseN: 0,
  mse: [0, 0, 0, 0],
  sized: 0,
  trailingSized: 0,
  sharpN: 0,
  width: 0,
  freeWidth: 0,
  winkler: 0,
  freeWinkler: 0,
  afterMiss: 0,
  missAfterMiss: 0,
  afterHit: 0,
  missAfterHit: 0,
  freeAfterMiss: 0,
  freeMissAfterMiss: 0,
  dayN: [0, 0],
  dayInside: [0, 0],
  dayServed2: [0, 0],
  dayRealised2: [0, 0],
});

/** BlockSums' fields, each a sum or a tuple of sums. */
const SUM_FIELDS = Object.keys(emptyBlock()) as (keyof BlockSums)[];

/** Adds `b`'s sums into `t`, field by field (a tuple element by element): a block resample's totals. */
function addSums(t: BlockSums, b: BlockSums): void {
  const into = t as unknown as Record<string, number | number[]>;
  const from = b as unknown as Record<string, number | number[]>;
  for (const field of SUM_FIELDS) {
    const v = from[field]!;
    if (typeof v === 'number') (into[field] as number) += v;
    else {
      const sums = into[field] as number[];
      for (let k = 0; k < v.length; k++) sums[k]! += v[k]!;
    }
  }
}

/**
 * The interval score of a central band with `miss` nominal outside share (Gneiting & Raftery
 * 2007, Winkler 1972): its width plus 2 ÷ miss × how far outside it the outcome fell. Lower is
 * better; it rewards a narrower band only while the misses it adds stay near the nominal share.
 */
export function intervalScore(low: number, high: number, y: number, miss: number): number {
  return high - low + (2 / miss) * (Math.max(0, low - y) + Math.max(0, y - high));
}

/** Whether a close falls on a Saturday or Sunday, UTC (1 January 1970 was a Thursday). */
export const isWeekendUtc = (t: number): boolean => {
  const weekday = (Math.floor(t / DAY_MS) + 4) % 7;
  return weekday === 0 || weekday === 6;
};

export interface Lift {
  value: number | null;
  low: number | null;
  high: number | null;
}

/**
 * A coin's band scale at each close (BandScale), fed as a market state feeds it: from the first close
 * with EWMA variances, every close, with the band served there (none where the model's hourly input is
 * missing).
 */
export function bandScales(
  s: DeskSeries,
  model: VolatilityModel,
  h: number,
  perp: boolean,
  miss: number,
): Float64Array {
  const scales = new Float64Array(s.close.length).fill(1);
  const fold = new BandScale(h, miss, bandFor(model, perp));
  for (let i = 0; i < s.close.length; i++) {
    if (Number.isNaN(s.v0[i]!)) continue;
    const hourly = s.hourly[i]!;
    const vars = [s.v0[i]!, s.v1[i]!, s.v2[i]!];
    const sigma =
      model.hourly !== undefined && Number.isNaN(hourly)
        ? null
        : Math.sqrt(forecastVarianceOf(model, vars, h, hourly, utcHour(s.closeTime[i]!)));
    scales[i] = fold.push(s.close[i]!, sigma);
  }
  return scales;
}

export interface DeskScore {
  points: number;
  /** Blocks the intervals resample: below MIN_INTERVAL_BLOCKS the report prints no interval. */
  blocks: number;
  sigmaRatio: Lift;
  coverage: Lift;
  freeCoverage: Lift;
  qlike: { service: number | null; ewma: number | null; garch: number | null; harRv: number | null };
  qlikeVs: { ewma: Lift; garch: Lift; harRv: Lift };
  mseLog: { service: number | null; ewma: number | null; garch: number | null; harRv: number | null };
  sizing: { service: Lift; trailing: Lift };
  /**
   * The served band against the free trailing-σ band on the same closes (reported only; no fit
   * reads them): mean width ratio and mean interval-score ratio (below 1: ours is better).
   */
  sharpness: { width: Lift; winkler: Lift };
  /**
   * The share of closes whose band missed, given that the last resolved forecast of the same coin
   * and horizon (made `h` closes earlier) missed, or hit; the free band's after its own miss. A
   * band whose misses do not cluster misses the nominal share after either.
   */
  missAfter: { miss: number | null; hit: number | null; freeMiss: number | null };
  /** Coverage and σ served ÷ realised of the forecasts made on Monday–Friday and on weekends, UTC. */
  byDay: {
    weekday: { points: number; coverage: Lift; sigmaRatio: Lift };
    weekend: { points: number; coverage: Lift; sigmaRatio: Lift };
  };
}

const fin = (x: number) => (Number.isFinite(x) ? x : null);

/**
 * Scores one horizon on the closes in [from, to) of every coin, with blocks at least a day and
 * two horizons long, all coins of a block resampled together.
 */
export function scoreDesk(
  coins: readonly DeskCoin[],
  timeframe: Timeframe,
  fit: DeskFit,
  garch: GarchParams,
  from: number,
  to: number,
  resamples = 200,
  perp = false,
  miss = 0.2,
): DeskScore {
  const h = fit.candles;
  // A perpetual venue's band is the spot fit's scaled by perpBandScale, as the service serves it.
  const band = bandFor(fit.service, perp);
  // A close's outcome runs h candles past it: blocks twice the horizon long (at least a day) keep
  // most overlapping outcomes inside one block, so the intervals are not too narrow on day rows.
  const blockMs = Math.max(DAY_MS, 2 * h * TIMEFRAME_MS[timeframe]);
  const blocks = new Map<number, BlockSums>();
  const [b0, b1, b2, b3] = fit.harRv.coefficients as [number, number, number, number];
  for (const c of coins) {
    const s = c.series;
    const cumRv = prefix(s.rv);
    const vars = [0, 0, 0];
    const scale = bandScales(s, fit.service, h, perp, miss);
    // Per close scored: 1 where the band missed, 0 where it held (-1 not scored), served and free.
    const missed = new Int8Array(s.close.length).fill(-1);
    const freeMissed = new Int8Array(s.close.length).fill(-1);
    for (const i of closes(
      s,
      h,
      fit.harRv.windows[2],
      Math.max(from, c.scoreFrom),
      to,
      Number.isFinite(to),
    )) {
      vars[0] = s.v0[i]!;
      vars[1] = s.v1[i]!;
      vars[2] = s.v2[i]!;
      const service = forecastVarianceOf(fit.service, vars, h, s.hourly[i], utcHour(s.closeTime[i]!));
      const ewma = s.ewma[i]! * h;
      const garchH = garchOver(c.garch[i]!, c.longRun, garch, h);
      const harRv = Math.max(
        fit.harRv.floor,
        b0 +
          b1 * windowMean(cumRv, i, fit.harRv.windows[0]) +
          b2 * windowMean(cumRv, i, fit.harRv.windows[1]) +
          b3 * windowMean(cumRv, i, fit.harRv.windows[2]),
      );
      const logReturn = Math.log(s.close[i + h]! / s.close[i]!);
      const realised = logReturn * logReturn;
      const sigma = Math.sqrt(service);
      const free = Math.sqrt(s.trailing[i]! * h);
      const key = Math.floor(s.closeTime[i]! / blockMs);
      let b = blocks.get(key);
      if (b === undefined) {
        b = emptyBlock();
        blocks.set(key, b);
      }
      b.n++;
      b.served2 += service;
      b.realised2 += logReturn * logReturn;
      const low = band.low * sigma * scale[i]!;
      const high = band.high * sigma * scale[i]!;
      const inside = logReturn >= low && logReturn <= high;
      const freeLow = fit.freeBand.low * free;
      const freeHigh = fit.freeBand.high * free;
      const freeIn = logReturn >= freeLow && logReturn <= freeHigh;
      if (inside) b.inside++;
      if (freeIn) b.freeInside++;
      missed[i] = inside ? 0 : 1;
      freeMissed[i] = freeIn ? 0 : 1;
      if (free > 0) {
        b.sharpN++;
        b.width += high - low;
        b.freeWidth += freeHigh - freeLow;
        b.winkler += intervalScore(low, high, logReturn, miss);
        b.freeWinkler += intervalScore(freeLow, freeHigh, logReturn, miss);
      }
      // The last forecast resolved by this close: made h closes earlier, its horizon ending here.
      const last = i >= h ? missed[i - h]! : -1;
      if (last === 1) {
        b.afterMiss++;
        if (!inside) b.missAfterMiss++;
      } else if (last === 0) {
        b.afterHit++;
        if (!inside) b.missAfterHit++;
      }
      if (i >= h && freeMissed[i - h] === 1) {
        b.freeAfterMiss++;
        if (!freeIn) b.freeMissAfterMiss++;
      }
      const d = isWeekendUtc(s.closeTime[i]!) ? 1 : 0;
      b.dayN[d]++;
      if (inside) b.dayInside[d]++;
      b.dayServed2[d] += service;
      b.dayRealised2[d] += realised;
      const forecasts = [service, ewma, garchH, harRv];
      for (let k = 0; k < 4; k++) {
        const f = Math.max(FLOOR, forecasts[k]!);
        b.qlike[k]! += realised / f + Math.log(f);
      }
      if (realised > 0) {
        b.mseN++;
        for (let k = 0; k < 4; k++)
          b.mse[k]! += (Math.log(realised) - Math.log(Math.max(FLOOR, forecasts[k]!))) ** 2;
      }
      // A position of notional budget/σ: its P&L over the horizon in budgets is logReturn/σ.
      b.sized += (logReturn * logReturn) / Math.max(FLOOR, service);
      if (free > 0) b.trailingSized += (logReturn * logReturn) / (free * free * (fit.freeBand.scale ?? 1));
    }
  }
  const list = [...blocks.entries()].sort((a, b) => a[0] - b[0]).map(([, v]) => [v]);
  const total = (bs: readonly (readonly BlockSums[])[]) => {
    const t = emptyBlock();
    for (const [b] of bs) addSums(t, b!);
    return t;
  };
  const all = total(list);
  const lift = (stat: (t: BlockSums) => number): Lift => {
    const value = stat(all);
    if (!Number.isFinite(value)) return { value: null, low: null, high: null };
    const iv = dayBlockInterval(list, (bs) => stat(total(bs)), { resamples });
    return { value, low: fin(iv.low), high: fin(iv.high) };
  };
  const q = (k: number) => (t: BlockSums) => (t.n === 0 ? Number.NaN : t.qlike[k]! / t.n);
  const m = (k: number) => (t: BlockSums) => (t.mseN === 0 ? Number.NaN : t.mse[k]! / t.mseN);
  const vs = (k: number) => lift((t) => q(0)(t) - q(k)(t));
  const byDay = (d: 0 | 1) => ({
    points: all.dayN[d]!,
    coverage: lift((t) => t.dayInside[d]! / t.dayN[d]!),
    sigmaRatio: lift((t) => Math.sqrt(t.dayServed2[d]! / t.dayRealised2[d]!)),
  });
  return {
    points: all.n,
    blocks: list.length,
    sigmaRatio: lift((t) => Math.sqrt(t.served2 / t.realised2)),
    coverage: lift((t) => t.inside / t.n),
    freeCoverage: lift((t) => t.freeInside / t.n),
    qlike: { service: fin(q(0)(all)), ewma: fin(q(1)(all)), garch: fin(q(2)(all)), harRv: fin(q(3)(all)) },
    qlikeVs: { ewma: vs(1), garch: vs(2), harRv: vs(3) },
    mseLog: { service: fin(m(0)(all)), ewma: fin(m(1)(all)), garch: fin(m(2)(all)), harRv: fin(m(3)(all)) },
    sizing: {
      service: lift((t) => Math.sqrt(t.sized / t.n)),
      trailing: lift((t) => Math.sqrt(t.trailingSized / t.n)),
    },
    sharpness: {
      width: lift((t) => t.width / t.freeWidth),
      winkler: lift((t) => t.winkler / t.freeWinkler),
    },
    missAfter: {
      miss: all.afterMiss > 0 ? all.missAfterMiss / all.afterMiss : null,
      hit: all.afterHit > 0 ? all.missAfterHit / all.afterHit : null,
      freeMiss: all.freeAfterMiss > 0 ? all.freeMissAfterMiss / all.freeAfterMiss : null,
    },
    byDay: {
      weekday: byDay(0),
      weekend: byDay(1),
    },
  };
}
