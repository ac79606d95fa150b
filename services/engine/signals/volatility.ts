import { type Exchange, TIMEFRAME_MS, type Timeframe, venueKind } from '../../../contracts/market.ts';
import {
  type RiskHorizonKey,
  type VolatilityForecast,
  type VolatilityModel,
  type VolatilityTable,
  VolatilityTableSchema,
} from '../../../contracts/signals.ts';
import { CalibrationError } from './errors.ts';

/**
 * Volatility forecast, HAR-type: three exponentially weighted variances of one-candle log
 * returns (a fast, a medium and a slow half-life, the "day/week/month" of HAR scaled to candles)
 * predict the variance of the return over the next H candles through a log link, h = exp(b·x),
 * with slopes summing to 1 (the forecast reverts to the coin's own slow variance), fitted by
 * minimising QLIKE (realised/h + log h, the loss a volatility forecast is judged by; the Gamma
 * quasi-likelihood). That fit makes h the mean of the realised variance, at every horizon: on the
 * training months the weighted mean of realised/h is 1 exactly (each close weighted by fitWeight,
 * the recent months most). (The earlier fit, least squares on log realised
 * variance turned back into a mean by exp(ŷ + s²/2), overstated the next candle's σ 2–3×: one
 * candle's log squared return is log-χ²-like, far from normal.) The expected-move band uses the
 * training quantiles of the standardised H-candle return, so its coverage is whatever the
 * training months showed, not a normal assumption.
 *
 * On candles shorter than an hour the day's model has a fourth input, the hourly variance: an
 * EWMA (half-life one day) of the squared log return over the last hour, per candle. Returns a
 * few minutes long revert (a 5m move is partly undone by the next ones), so three EWMAs of them,
 * the slowest a few hours long, overstated the day's variance; the hourly returns and the
 * day-long memory carry what a day forecast needs. Its slope is fitted with the others (all four
 * summing to 1). Chosen on an inner fold of the training months (docs/evaluation-risk.md).
 *
 * On candles of 2h to 1d the next candle's and the day's models have that fourth input from the
 * hours instead: the fine variance (FineVariance), each candle's summed squared 1h log returns
 * averaged over about a day, a far less noisy measure of a candle's variance than its one squared
 * return; a market state on those timeframes is fed the market's 1h candles for it. The verdict
 * horizon's model does not read it, so on 4h, where the day is the verdict's six candles, only
 * the next candle's model does. Also chosen on the inner fold.
 *
 * Every horizon's model on timeframes shorter than a day also carries a log factor per UTC hour of
 * the close the forecast is made at (intraday seasonality: a 5m candle at the US open moves more
 * than one at 03:00 UTC, and a day forecast made at a busy hour reads busy-hour EWMAs), fitted
 * with the slopes. The verdict horizon's model is also the one trade calls and the regime's
 * volatility percentile read, so they see the same hour-dependent forecast.
 */

export const VOL_HALF_LIVES: readonly [number, number, number] = [6, 30, 120];
/** Variances below this are treated as this (a candle with no trades would give log(0)). */
const FLOOR = 1e-12;

/** Streaming EWMA variances of log returns (mean taken as 0, as is usual for short horizons). */
export class EwmaVariances {
  readonly #alpha: number[];
  readonly #v: number[] = [0, 0, 0];
  #lastClose = Number.NaN;
  #n = 0;

  constructor(halfLives: readonly number[] = VOL_HALF_LIVES) {
    this.#alpha = halfLives.map((h) => 1 - 2 ** (-1 / h));
  }

  /** Feeds one close; returns the variances once the slow one has had two half-lives. */
  push(close: number): readonly number[] | null {
    if (Number.isFinite(this.#lastClose) && this.#lastClose > 0 && close > 0) {
      const r = Math.log(close / this.#lastClose);
      const r2 = r * r;
      for (let i = 0; i < 3; i++) {
        this.#v[i] = this.#n === 0 ? r2 : this.#v[i]! + this.#alpha[i]! * (r2 - this.#v[i]!);
      }
      this.#n++;
    }
    this.#lastClose = close;
    return this.ready ? this.#v : null;
  }

  get ready(): boolean {
    return this.#n >= 60;
  }

  get values(): readonly number[] {
    return this.#v;
  }
}

/** Half-life of the hourly variance, in hours (the day of HAR). */
const HOURLY_HALF_LIFE_HOURS = 24;

/**
 * Streaming EWMA of squared log returns over the last hour (overlapping, one per candle), ÷ the
 * candles in an hour: a per-candle variance like EwmaVariances', for candles shorter than an hour.
 * The average is bias-corrected (the weights so far sum to 1), so a state that has seen a day
 * or two of candles (the engine's warm-up) reads the mean of what it saw, not a first value.
 */
export class HourlyVariance {
  readonly #k: number;
  readonly #decay: number;
  readonly #closes: number[] = [];
  #sum = 0;
  #weight = 0;

  constructor(timeframe: Timeframe) {
    const ms = TIMEFRAME_MS[timeframe];
    this.#k = Math.round(3_600_000 / ms);
    if (this.#k < 2)
      throw new CalibrationError(`hourly variance needs candles shorter than an hour, not ${timeframe}`);
    this.#decay = 2 ** (-ms / (HOURLY_HALF_LIFE_HOURS * 3_600_000));
  }

  /** Feeds one close; the variance once an hour of closes has passed, else null. */
  push(close: number): number | null {
    this.#closes.push(close);
    if (this.#closes.length > this.#k + 1) this.#closes.shift();
    const first = this.#closes[0]!;
    if (this.#closes.length === this.#k + 1 && first > 0 && close > 0) {
      const r = Math.log(close / first);
      this.#sum = this.#decay * this.#sum + (r * r) / this.#k;
      this.#weight = this.#decay * this.#weight + 1;
    }
    return this.value;
  }

  get value(): number | null {
    return this.#weight > 0 ? this.#sum / this.#weight : null;
  }
}

/** Whether a timeframe's candles are short enough for an hourly variance. */
export const hasHourly = (timeframe: Timeframe) => Math.round(3_600_000 / TIMEFRAME_MS[timeframe]) >= 2;

const HOUR_MS = TIMEFRAME_MS['1h'];

/**
 * Realised variance from the hourly candles inside each candle, for candles of two hours or more:
 * per candle the sum of the squared log returns between the closes of the same market's 1h
 * candles inside it (the first return starting at the candle's open), averaged by an EWMA with a
 * one-day half-life (bias-corrected, as HourlyVariance). A candle whose hourly returns are not all
 * there counts its own squared log return instead. The sum of a candle's hourly squared returns
 * measures its variance with far less noise than its one squared return (the realised variance of
 * HAR-RV), which the next candle's and the day's models read as their fourth input (the `hourly`
 * slot, as the hourly variance on shorter candles). Null until one candle's hourly returns were all
 * there, so a state never fed 1h candles has no value rather than a degraded one.
 */
export class FineVariance {
  readonly #tfMs: number;
  readonly #k: number;
  readonly #decay: number;
  #bucket = Number.NaN;
  #bucketSum = 0;
  #bucketCount = 0;
  #lastHourOpen = Number.NaN;
  #lastHourClose = Number.NaN;
  #lastClose = Number.NaN;
  #sum = 0;
  #weight = 0;
  #complete = false;

  constructor(timeframe: Timeframe) {
    this.#tfMs = TIMEFRAME_MS[timeframe];
    this.#k = Math.round(this.#tfMs / HOUR_MS);
    if (!hasFine(timeframe))
      throw new CalibrationError(`fine variance needs candles of two hours or more, not ${timeframe}`);
    this.#decay = 2 ** (-1 / dayCandles(timeframe));
  }

  /**
   * Feeds one closed 1h candle of the same market, before the candle holding its close is pushed.
   * Candles at or before the last one fed are ignored (an advance's overlap).
   */
  pushHour(openTime: number, close: number): void {
    if (openTime <= this.#lastHourOpen) return;
    const a = this.#lastHourClose;
    if (openTime - this.#lastHourOpen === HOUR_MS && a > 0 && close > 0) {
      // The return ending at this hour's close belongs to the candle holding that close.
      const bucket = Math.floor((openTime + HOUR_MS - 1) / this.#tfMs) * this.#tfMs;
      if (bucket !== this.#bucket) {
        this.#bucket = bucket;
        this.#bucketSum = 0;
        this.#bucketCount = 0;
      }
      const r = Math.log(close / a);
      this.#bucketSum += r * r;
      this.#bucketCount++;
    }
    this.#lastHourOpen = openTime;
    this.#lastHourClose = close;
  }

  /**
   * Feeds `hours[from…]` that close by `closeTime`, the close of the candle pushed next, and returns
   * the index of the first hour left. The one rule by which the market state (serving) and the risk
   * desk (scoring) interleave the hours with the candles, so the two read the same input.
   */
  pushHoursUntil(
    hours: readonly { openTime: number; close: number }[],
    from: number,
    closeTime: number,
  ): number {
    let h = from;
    while (h < hours.length && hours[h]!.openTime + HOUR_MS <= closeTime) {
      this.pushHour(hours[h]!.openTime, hours[h]!.close);
      h++;
    }
    return h;
  }

  /** Feeds the candle itself (after its hours); returns the variance, or null before any full candle. */
  push(openTime: number, close: number): number | null {
    const full = this.#bucket === openTime && this.#bucketCount === this.#k;
    const prev = this.#lastClose;
    let x = Number.NaN;
    if (full) x = this.#bucketSum;
    else if (prev > 0 && close > 0) x = Math.log(close / prev) ** 2;
    if (full) this.#complete = true;
    if (Number.isFinite(x)) {
      this.#sum = this.#decay * this.#sum + x;
      this.#weight = this.#decay * this.#weight + 1;
    }
    this.#lastClose = close;
    return this.value;
  }

  get value(): number | null {
    return this.#complete && this.#weight > 0 ? this.#sum / this.#weight : null;
  }
}

/** Whether a timeframe's candles hold two or more whole hours (a fine variance). */
export const hasFine = (timeframe: Timeframe) => {
  const ms = TIMEFRAME_MS[timeframe];
  return ms >= 2 * HOUR_MS && ms % HOUR_MS === 0;
};

/**
 * The longest half-life, in candles of `timeframe`, among the variances a market state keeps: the
 * slow EWMA's, and on candles shorter than an hour the hourly variance's day (a 5m state's
 * remembers 288 candles). A state fed fewer candles than several of these serves a σ that still
 * carries its start (the EWMAs' seed, the first day's hourly returns), not the σ of a state fed
 * the whole history, which is the one the evaluation scored. The fine variance's day is at most
 * 12 candles on the timeframes that keep one, and reads 1h candles of its own.
 */
export function longestVarianceHalfLife(timeframe: Timeframe): number {
  const slow = Math.max(...VOL_HALF_LIVES);
  if (!hasHourly(timeframe)) return slow;
  return Math.max(slow, (HOURLY_HALF_LIFE_HOURS * HOUR_MS) / TIMEFRAME_MS[timeframe]);
}

/** The regression's inputs: logs of the three variances scaled to the horizon. */
export function harFeatures(variances: readonly number[], horizon: number): [number, number, number] {
  return [
    Math.log(Math.max(FLOOR, variances[0]! * horizon)),
    Math.log(Math.max(FLOOR, variances[1]! * horizon)),
    Math.log(Math.max(FLOOR, variances[2]! * horizon)),
  ];
}

/**
 * What turns the linear predictor into the mean forecast variance: 0 for a QLIKE fit (its
 * predictor is the log of the mean already), s²/2 for the log least-squares fits of tables
 * before signals-5, which carry no `levelLog`.
 */
const levelOf = (model: VolatilityModel) => model.levelLog ?? model.residualVariance / 2;

/**
 * Forecast variance of the H-candle log return (a mean, not a median). `hourly` is the log of the
 * hourly variance × H, read when the model has an hourly slope; `hour` the UTC hour of the close
 * (utcHour), read when it has hour-of-day factors.
 */
export function forecastVariance(
  model: VolatilityModel,
  features: readonly number[],
  hourly?: number,
  hour?: number,
): number {
  const [b0, b1, b2, b3] = model.coefficients;
  let y = b0 + b1 * features[0]! + b2 * features[1]! + b3 * features[2]!;
  if (model.hourly !== undefined) y += model.hourly * hourly!;
  if (model.hourOfDay !== undefined) y += model.hourOfDay[hour!]!;
  return Math.exp(y + levelOf(model));
}

/**
 * `forecastVariance(model, harFeatures(variances, horizon), hourlyFeature(hourly, horizon))` with
 * the same arithmetic in the same order (so the same double), without the feature array: a market
 * state runs it on every candle. A model with an hourly slope needs `hourly` (HourlyVariance), one
 * with hour-of-day factors the close's `hour` (utcHour).
 */
export function forecastVarianceOf(
  model: VolatilityModel,
  variances: readonly number[],
  horizon: number,
  hourly?: number | null,
  hour?: number,
): number {
  const b = model.coefficients;
  let y =
    b[0] +
    b[1] * Math.log(Math.max(FLOOR, variances[0]! * horizon)) +
    b[2] * Math.log(Math.max(FLOOR, variances[1]! * horizon)) +
    b[3] * Math.log(Math.max(FLOOR, variances[2]! * horizon));
  if (model.hourly !== undefined) {
    if (hourly === null || hourly === undefined) {
      throw new CalibrationError('volatility model has an hourly slope but no hourly variance was given');
    }
    y += model.hourly * hourlyFeature(hourly, horizon);
  }
  if (model.hourOfDay !== undefined) {
    if (hour === undefined)
      throw new CalibrationError('volatility model has hour-of-day factors but no hour was given');
    y += model.hourOfDay[hour]!;
  }
  return Math.exp(y + levelOf(model));
}

/** UTC hour (0–23) of a close time: what a model's hour-of-day factor is looked up by. */
export const utcHour = (closeTime: number) =>
  Math.floor((((closeTime % 86_400_000) + 86_400_000) % 86_400_000) / 3_600_000);

/** The hourly input of a model: log of the hourly variance scaled to the horizon. */
export const hourlyFeature = (hourly: number, horizon: number) => Math.log(Math.max(FLOOR, hourly * horizon));

export function modelFor(
  table: VolatilityTable,
  timeframe: Timeframe,
): { model: VolatilityModel; timeframe: Timeframe } {
  const tf = table.models[timeframe] ? timeframe : table.fallback[timeframe];
  const model = tf === undefined ? undefined : table.models[tf];
  if (tf === undefined || model === undefined) {
    throw new CalibrationError(`volatility table has no model for ${timeframe}`);
  }
  return { model, timeframe: tf };
}

/**
 * The band's quantiles of the standardised return on a venue: the spot fit's, widened or narrowed
 * by perpBandScale on a perpetual venue (perpetuals moved differently around the same forecast σ
 * on the training months).
 */
export function bandFor(model: VolatilityModel, perp: boolean): { low: number; high: number } {
  const k = perp ? (model.perpBandScale ?? 1) : 1;
  return { low: model.bandLow * k, high: model.bandHigh * k };
}

/**
 * How far one resolved forecast moves a band's log scale (BandScale), on horizons up to 6 candles; a
 * longer horizon's step is 6/candles of it, as its outcomes overlap that many closes deep (with the
 * full step, a day band on 5m candles drifts to 0.15–82 × its width on a calibrated series). Chosen on
 * the inner fold (fit before 2025-04-01, scored to 2025-06-01) among 0.005, 0.02, 0.05 and 0.1 by the
 * most rows with coverage within ±3 points (38 of 41 without; 38, 40, 40, 40), ties to the smaller.
 */
export const BAND_STEP = 0.02;

/**
 * A risk band's adaptive width on one market and horizon (adaptive conformal inference, Gibbs and
 * Candès 2021, on the band's scale): when the forecast made `candles` closes ago resolves, the log
 * scale moves by its step (BAND_STEP) × (1 if that close's band missed, else 0, less the nominal miss rate), so
 * the share of misses tends to the nominal one whatever the market does after the training months.
 * Fed every close, in order, with the forecast σ it serves there (null: none), its band `band` × σ.
 */
export class BandScale {
  #logScale = 0;
  #at = 0;
  readonly #step: number;
  readonly #close: Float64Array;
  readonly #low: Float64Array;
  readonly #high: Float64Array;

  constructor(
    readonly candles: number,
    private readonly miss: number,
    /** The band's edges in units of σ (bandFor). */
    private readonly band: { readonly low: number; readonly high: number },
  ) {
    this.#step = (BAND_STEP * Math.min(6, candles)) / candles;
    this.#close = new Float64Array(candles);
    this.#low = new Float64Array(candles).fill(Number.NaN);
    this.#high = new Float64Array(candles);
  }

  /** Resolves the forecast of `candles` closes ago; returns the scale of this close's band. */
  push(close: number, sigma: number | null): number {
    const slot = this.#at++ % this.candles;
    const from = this.#low[slot]!;
    if (!Number.isNaN(from)) {
      const r = Math.log(close / this.#close[slot]!);
      this.#logScale += this.#step * ((r < from || r > this.#high[slot]! ? 1 : 0) - this.miss);
    }
    const scale = Math.exp(this.#logScale);
    this.#close[slot] = close;
    this.#low[slot] = sigma === null ? Number.NaN : this.band.low * sigma * scale;
    this.#high[slot] = sigma === null ? Number.NaN : this.band.high * sigma * scale;
    return scale;
  }

  /**
   * What a restart needs to go on where this scale stopped: its log scale and the forecasts not yet
   * resolved (a slot with no band holds null for its edges).
   */
  saved(): SavedBandScale {
    const edge = (x: number) => (Number.isNaN(x) ? null : x);
    return {
      candles: this.candles,
      band: { low: this.band.low, high: this.band.high },
      logScale: this.#logScale,
      at: this.#at,
      close: Array.from(this.#close),
      low: Array.from(this.#low, edge),
      high: Array.from(this.#high, edge),
    };
  }

  /**
   * Goes on from `saved` (taken at the close this scale has just been fed, by a scale of the same
   * horizon and band); false, leaving this scale as it was, when it is not one of those.
   */
  resume(saved: SavedBandScale): boolean {
    if (
      saved.candles !== this.candles ||
      saved.band.low !== this.band.low ||
      saved.band.high !== this.band.high ||
      saved.close.length !== this.candles ||
      saved.low.length !== this.candles ||
      saved.high.length !== this.candles ||
      !Number.isFinite(saved.logScale)
    ) {
      return false;
    }
    this.#logScale = saved.logScale;
    this.#at = saved.at;
    this.#close.set(saved.close);
    this.#low.set(saved.low.map((x) => x ?? Number.NaN));
    this.#high.set(saved.high.map((x) => x ?? Number.NaN));
    return true;
  }
}

/** A BandScale as saved (BandScale.saved): plain numbers, so that any snapshot store keeps it. */
export interface SavedBandScale {
  candles: number;
  band: { low: number; high: number };
  logScale: number;
  at: number;
  close: number[];
  low: (number | null)[];
  high: (number | null)[];
}

/** Significant digits of the price a band edge (and so a stop) is given to. */
const PRICE_DIGITS = 6;

/**
 * `value`, a price near `price` (a band edge), rounded to the decimals that give `price` its
 * PRICE_DIGITS significant digits: 4022.19 beside 4145.15, 0.231274 beside 0.23293. An edge that
 * would round to 0 keeps its own PRICE_DIGITS.
 */
export function atPriceScale(value: number, price: number): number {
  return Number(atPriceScaleText(value, price));
}

/**
 * The same edge as text, every digit the answer's figure has (a reasoning that shows the band quotes
 * the fields): an edge past a power of ten from the price has one more significant digit than it,
 * 100.0123 beside 99.9512, which six significant digits would cut.
 */
export function atPriceScaleText(value: number, price: number): string {
  const decimals = Math.min(100, Math.max(0, PRICE_DIGITS - 1 - Math.floor(Math.log10(price))));
  const text = value.toFixed(decimals);
  return Number(text) > 0 ? text : value.toPrecision(PRICE_DIGITS);
}

/** Whether a venue trades perpetuals (every venue but Binance spot): its band is bandFor(…, true). */
export const isPerpVenue = (exchange: Exchange) => venueKind(exchange) === 'perp';

/**
 * The forecast from a forecast variance already computed (a market state computes it per candle),
 * its band's width scaled by `scale` (its market's BandScale on the verdict horizon).
 */
export function forecastFromVariance(
  table: VolatilityTable,
  { model, timeframe: tf }: { model: VolatilityModel; timeframe: Timeframe },
  variance: number,
  close: number,
  percentile: number,
  exchange: Exchange,
  scale: number,
): VolatilityForecast {
  const sigma = Math.sqrt(variance);
  const band = bandFor(model, isPerpVenue(exchange));
  return {
    horizon_candles: table.horizonCandles,
    expected_move_pct: 100 * sigma,
    band_coverage: table.bandCoverage,
    band_low: atPriceScale(close * Math.exp(band.low * sigma * scale), close),
    band_high: atPriceScale(close * Math.exp(band.high * sigma * scale), close),
    percentile,
    model_timeframe: tf,
  };
}

/** A risk horizon of a market: its model and its candles on the market's own timeframe. */
export interface RiskRow {
  key: RiskHorizonKey;
  model: VolatilityModel;
  candles: number;
}

/**
 * A market's risk horizons: next candle, the verdict's horizon and one UTC day, from the per-horizon
 * models `npm run evaluate` fitted on the training months (volatility.json `risk`; a fallback
 * timeframe's models keep the market's own day). A table without them (older ones) serves the
 * verdict horizon alone, on `verdict`.
 */
export function riskRows(
  table: VolatilityTable,
  timeframe: Timeframe,
  verdict: { model: VolatilityModel; timeframe: Timeframe },
): { timeframe: Timeframe; rows: RiskRow[] } {
  const tf = table.risk?.[timeframe] ? timeframe : table.fallback[timeframe];
  const rows = tf === undefined ? undefined : table.risk?.[tf];
  if (tf === undefined || rows === undefined)
    return {
      timeframe: verdict.timeframe,
      rows: [{ key: 'verdict', model: verdict.model, candles: table.horizonCandles }],
    };
  return {
    timeframe: tf,
    rows: rows.map((r) => ({
      key: r.key,
      model: r.model,
      candles: riskHorizonCandles(r.key, timeframe, table.horizonCandles),
    })),
  };
}

/** A risk horizon's candles: the next candle, the verdict's horizon, or one UTC day. */
export function riskHorizonCandles(
  key: RiskHorizonKey,
  timeframe: Timeframe,
  verdictHorizon: number,
): number {
  return key === 'next' ? 1 : key === 'verdict' ? verdictHorizon : dayCandles(timeframe);
}

/** Candles in one UTC day on a timeframe (the risk forecast's day horizon; at least one). */
export function dayCandles(timeframe: Timeframe): number {
  return Math.max(1, Math.round(86_400_000 / TIMEFRAME_MS[timeframe]));
}

/** Ordinary least squares via the normal equations (4 × 4, Gaussian elimination with pivoting). */
export function leastSquares(rows: readonly (readonly number[])[], ys: readonly number[]): number[] {
  const k = rows[0]!.length;
  const a = Array.from({ length: k }, () => new Array<number>(k + 1).fill(0));
  for (let r = 0; r < rows.length; r++) {
    const x = rows[r]!;
    for (let i = 0; i < k; i++) {
      for (let j = 0; j < k; j++) a[i]![j]! += x[i]! * x[j]!;
      a[i]![k]! += x[i]! * ys[r]!;
    }
  }
  for (let c = 0; c < k; c++) {
    let pivot = c;
    for (let r = c + 1; r < k; r++) if (Math.abs(a[r]![c]!) > Math.abs(a[pivot]![c]!)) pivot = r;
    [a[c], a[pivot]] = [a[pivot]!, a[c]!];
    const d = a[c]![c]!;
    if (Math.abs(d) < 1e-15) throw new CalibrationError('volatility fit: singular design');
    for (let r = 0; r < k; r++) {
      if (r === c) continue;
      const f = a[r]![c]! / d;
      for (let j = c; j <= k; j++) a[r]![j]! -= f * a[c]![j]!;
    }
  }
  return a.map((row, i) => row[k]! / row[i]!);
}

export interface VolatilityFitSample {
  /** log features at the close (harFeatures). */
  features: readonly number[];
  /** Realised variance of the next H one-candle log returns (sum of squares). */
  realised: number;
  /** log(close[t+H] / close[t]). */
  logReturn: number;
  /** hourlyFeature at the close, when the model is fitted with an hourly slope (all samples or none). */
  hourly?: number;
  /** UTC hour of the close, when the model is fitted with hour-of-day factors (all samples or none). */
  hour?: number;
  /** Weight of the close in the fit (fitWeight: recent training closes count more); absent: 1. */
  weight?: number;
}

/**
 * Weight of a training close in the fit: halved every FIT_HALF_LIFE_DAYS before the end of
 * training, so the fit leans on the recent months (volatility's level drifts) without dropping
 * the older ones. Chosen on the inner fold (docs/evaluation-risk.md).
 */
export const FIT_HALF_LIFE_DAYS = 180;
export const fitWeight = (closeTime: number, trainEnd: number) =>
  2 ** (-(trainEnd - closeTime) / (FIT_HALF_LIFE_DAYS * 86_400_000));

/**
 * Log-link regression of a non-negative target on `rows` (each starting with 1) by minimising
 * QLIKE, Σ y/h + log h with h = exp(b·x): Fisher scoring (each step a least-squares fit of the
 * working response η + y/h − 1), halving a step that does not lower the loss. The loss is convex
 * in b, so this finds its minimum; a target of 0 (a candle that did not move) is a valid point.
 */
export function fitQlike(
  rows: readonly (readonly number[])[],
  ys: readonly number[],
  /** A known part of each point's log forecast (coefficient 1), when the model has one. */
  offsets?: readonly number[],
  /** Each point's weight in the loss (default 1). */
  weights?: readonly number[],
): number[] {
  const k = rows[0]!.length;
  const n = rows.length;
  const off = (i: number) => (offsets ? offsets[i]! : 0);
  const wt = (i: number) => (weights ? weights[i]! : 1);
  let wsum = 0;
  let mean = 0;
  for (let i = 0; i < n; i++) {
    wsum += wt(i);
    mean += wt(i) * ys[i]! * Math.exp(-off(i));
  }
  mean = Math.max(FLOOR, mean / wsum);
  let beta = new Array<number>(k).fill(0);
  beta[0] = Math.log(mean);
  const eta = (b: readonly number[], i: number) => {
    const x = rows[i]!;
    let e = off(i);
    for (let j = 0; j < k; j++) e += b[j]! * x[j]!;
    return e;
  };
  const loss = (b: readonly number[]) => {
    let l = 0;
    for (let i = 0; i < n; i++) {
      const e = eta(b, i);
      l += wt(i) * (ys[i]! * Math.exp(-e) + e);
    }
    return l / wsum;
  };
  let current = loss(beta);
  for (let iter = 0; iter < 50; iter++) {
    const z = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      const e = eta(beta, i);
      z[i] = e - off(i) + ys[i]! * Math.exp(-e) - 1;
    }
    // Weighted least squares: each row and its working response times √weight.
    const target = weights
      ? leastSquares(
          rows.map((x, i) => x.map((v) => v * Math.sqrt(wt(i)))),
          z.map((v, i) => v * Math.sqrt(wt(i))),
        )
      : leastSquares(rows, z);
    let step = 1;
    let next = beta;
    let nextLoss = current;
    for (let halving = 0; halving < 30; halving++) {
      const trial = beta.map((b, j) => b + step * (target[j]! - b));
      const l = loss(trial);
      if (l < current) {
        next = trial;
        nextLoss = l;
        break;
      }
      step /= 2;
    }
    const gain = current - nextLoss;
    beta = next;
    current = nextLoss;
    if (!(gain > 1e-12 * Math.max(1, Math.abs(current)))) break;
  }
  return beta;
}

/** Fits one timeframe's model on training samples (QLIKE, so its forecast is a mean at any horizon). */
export function fitVolatilityModel(
  samples: readonly VolatilityFitSample[],
  coverage: number,
): VolatilityModel {
  if (samples.length < 50) throw new CalibrationError('volatility fit: too few samples');
  // Anchored: the slopes sum to 1 (b3 = 1 − b1 − b2), so a forecast reverts to the coin's own slow
  // variance rather than to the pooled coins' mean, which overstated calm coins (BTC) and
  // understated wild ones. Chosen over the free fit on an inner fold of the training months.
  const withHourly = samples[0]!.hourly !== undefined;
  // Hour-of-day factors: one column per UTC hour the closes fall on but the first (which the
  // intercept holds); hours no close falls on keep 0.
  const seen =
    samples[0]!.hour === undefined ? [] : [...new Set(samples.map((s) => s.hour!))].sort((a, b) => a - b);
  const hours = seen.length >= 2 ? seen : [];
  const dummies = hours.slice(1);
  const fitted = fitQlike(
    samples.map((s) => [
      1,
      s.features[0]! - s.features[2]!,
      s.features[1]! - s.features[2]!,
      ...(withHourly ? [s.hourly! - s.features[2]!] : []),
      ...dummies.map((h) => (s.hour === h ? 1 : 0)),
    ]),
    samples.map((s) => s.realised),
    samples.map((s) => s.features[2]!),
    samples[0]!.weight === undefined ? undefined : samples.map((s) => s.weight!),
  );
  const [b0, b1, b2] = fitted;
  const bh = withHourly ? fitted[3]! : 0;
  const beta = [b0!, b1!, b2!, 1 - b1! - b2! - bh];
  const firstDummy = withHourly ? 4 : 3;
  const hourOfDay = hours.length === 0 ? undefined : new Array<number>(24).fill(0);
  dummies.forEach((h, j) => {
    hourOfDay![h] = fitted[firstDummy + j]!;
  });
  const rows = samples.map((s) => [1, ...s.features]);
  // The spread of log(realised / forecast), kept to describe the fit (the level uses levelLog).
  let ss = 0;
  let m = 0;
  for (let i = 0; i < rows.length; i++) {
    const x = rows[i]!;
    const e =
      Math.log(Math.max(FLOOR, samples[i]!.realised)) -
      x.reduce((y, v, j) => y + beta[j]! * v, 0) -
      bh * (samples[i]!.hourly ?? 0) -
      (hourOfDay ? hourOfDay[samples[i]!.hour!]! : 0);
    ss += e * e;
    m += e;
  }
  m /= rows.length;
  const model: VolatilityModel = {
    coefficients: [beta[0]!, beta[1]!, beta[2]!, beta[3]!],
    residualVariance: Math.max(0, ss / rows.length - m * m),
    levelLog: 0,
    ...(withHourly ? { hourly: bh } : {}),
    ...(hourOfDay ? { hourOfDay } : {}),
    bandLow: 0,
    bandHigh: 0,
    samples: samples.length,
  };
  const z = samples
    .map((s) => s.logReturn / Math.sqrt(forecastVariance(model, s.features, s.hourly, s.hour)))
    .sort((a, b) => a - b);
  const tail = (1 - coverage) / 2;
  return { ...model, bandLow: quantile(z, tail), bandHigh: quantile(z, 1 - tail) };
}

/** Linear-interpolated quantile of a sorted array. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const pos = q * (sorted.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(sorted.length - 1, lo + 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (pos - lo);
}

export function parseVolatilityTable(json: unknown): VolatilityTable {
  const table = VolatilityTableSchema.parse(json);
  for (const [tf, to] of Object.entries(table.fallback)) {
    if (!table.models[to])
      throw new CalibrationError(`volatility fallback ${tf} → ${to} names a missing model`);
  }
  return table;
}
