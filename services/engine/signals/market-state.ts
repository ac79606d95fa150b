import {
  ADX,
  AO,
  ATR,
  BollingerBands,
  CCI,
  ElderRay,
  EMA,
  HMA,
  MACD,
  MOM,
  RSI,
  SMA,
  StochasticOscillator,
  StochasticRSI,
  UltimateOscillator,
  VWMA,
  WilliamsR,
  WSMA,
} from 'trading-signals';
import type { Candle, Exchange, Timeframe } from '../../../contracts/market.ts';
import { marketKey, TIMEFRAME_MS } from '../../../contracts/market.ts';
import type { RegimeMetrics, VolatilityModel, VolatilityTable } from '../../../contracts/signals.ts';
import { Choppiness } from './choppiness.ts';
import { defaultVolatility } from './default-volatility.ts';
import { DEFAULT_REGIME_OPTIONS, type RegimeOptions, type RegimeState, stepRegimeWith } from './regime.ts';
import { RollingPercentile } from './rolling-percentile.ts';
import { Lagged, RollingExtreme, RollingMean } from './rolling-window.ts';
import {
  BandScale,
  bandFor,
  EwmaVariances,
  FineVariance,
  forecastVarianceOf,
  HourlyVariance,
  hasFine,
  hasHourly,
  isPerpVenue,
  modelFor,
  type RiskRow,
  riskRows,
  type SavedBandScale,
  utcHour,
} from './volatility.ts';

/**
 * A market's band scales as saved at one close (MarketState.savedBandScales): a state rebuilt
 * after a restart goes on from them (resumeBandScales) instead of from its warm-up's start.
 */
export interface SavedBandScales {
  closeTime: number;
  rows: SavedBandScale[];
}

export const MA_PERIODS = [10, 20, 30, 50, 100, 200] as const;
export type MaPeriod = (typeof MA_PERIODS)[number];
/**
 * One moving-average reading per period, keyed `p<period>` (`sma.p200`). Named keys rather than
 * the periods themselves: an object keyed 10…200 is, to V8, an array of 201 slots, allocated
 * twice per candle.
 */
export type MaReadings = Readonly<Record<`p${MaPeriod}`, number | null>>;
// The readings literals in `update` list the periods in this order: keep them in step.
MA_PERIODS satisfies readonly [10, 20, 30, 50, 100, 200];
/** MAs that may still be warming up when a verdict is asked for; they vote once stable. */
const OPTIONAL_MA_PERIODS = new Set<number>([100, 200]);
export const PERCENTILE_WINDOW = 200;
/** Percentiles are reported once this many values are in the window (a quarter of it). */
export const MIN_PERCENTILE_SAMPLES = 50;

/** Shared by every ready state: asked on every close, so no new empty array each time. */
const NOTHING_MISSING: readonly string[] = Object.freeze([]);

export class OutOfOrderCandleError extends Error {
  override readonly name = 'OutOfOrderCandleError';
}

export interface MarketStateOptions {
  exchange: Exchange;
  coin: string;
  timeframe: Timeframe;
  regime?: Partial<RegimeOptions>;
  /** Volatility model whose forecast percentile drives volatile/squeeze; default the shipped one. */
  volatility?: VolatilityTable;
}

/** Indicator readings after the latest closed candle; null = not stable yet. */
export interface Readings {
  close: number;
  high: number;
  low: number;
  closeTime: number;
  candles: number;
  sma: MaReadings;
  ema: MaReadings;
  hma9: number | null;
  vwma20: number | null;
  ichimokuBase: number | null;
  rsi: number | null;
  rsiPrev: number | null;
  stochK: number | null;
  stochD: number | null;
  cci: number | null;
  cciPrev: number | null;
  adx: number | null;
  adxPrev: number | null;
  adxSlope: number | null;
  plusDi: number | null;
  minusDi: number | null;
  ao: number | null;
  aoPrev: number | null;
  mom: number | null;
  momPrev: number | null;
  macd: number | null;
  macdSignal: number | null;
  stochRsiK: number | null;
  stochRsiD: number | null;
  williamsR: number | null;
  williamsRPrev: number | null;
  bullPower: number | null;
  bullPowerPrev: number | null;
  bearPower: number | null;
  bearPowerPrev: number | null;
  ultimate: number | null;
  regimeMetrics: RegimeMetrics | null;
  /** EWMA variances of one-candle log returns (fast, medium, slow), once warmed up. */
  volVariances: readonly number[] | null;
  /**
   * The risk models' fourth input (volatility.ts): the hourly variance on candles shorter than an
   * hour, the fine variance (from the 1h candles fed by updateHours) on candles of two hours or
   * more; null on 1h candles and before it has a value.
   */
  volHourly: number | null;
  /** Rank (0–100) of the current volatility forecast in its rolling window. */
  volPercentile: number | null;
  /**
   * Each risk horizon's forecast σ at this close (null: its model's hourly input is missing) and its
   * band's scale (riskRows order; BandScale), worked out once per close; empty while warming up.
   */
  volRisk: readonly { sigma: number | null; scale: number }[];
}

const pct = (v: number | null) => (v === null ? null : v * 100);

/**
 * The indicators, rolling windows and variances a market state feeds each closed candle, with the
 * engine's parameters. The engine bench feeds this same set raw as its baseline.
 */
export function createIndicators() {
  return {
    sma: MA_PERIODS.map((p) => new RollingMean(p)),
    ema: MA_PERIODS.map((p) => new EMA(p)),
    hma: new HMA(9),
    vwma: new VWMA(20),
    baseHigh: new RollingExtreme(26, 'max'),
    baseLow: new RollingExtreme(26, 'min'),
    rsi: new RSI(14),
    stoch: new StochasticOscillator({ kPeriod: 14, kSlowingPeriod: 3, dPeriod: 3 }),
    cci: new CCI(20),
    adx: new ADX(14),
    ao: new AO(5, 34),
    mom: new MOM(10),
    macd: new MACD(new EMA(12), new EMA(26), new EMA(9)),
    stochRsi: new StochasticRSI(14, WSMA, { k: new SMA(3), d: new SMA(3) }),
    willr: new WilliamsR(14),
    elder: new ElderRay(13),
    uo: new UltimateOscillator({ shortPeriod: 7, mediumPeriod: 14, longPeriod: 28 }),
    atr: new ATR(14),
    bb: new BollingerBands(20, 2),
    chop: new Choppiness(14),
    atrPct: new RollingPercentile(PERCENTILE_WINDOW),
    bbWidth: new RollingPercentile(PERCENTILE_WINDOW),
    ewma: new EwmaVariances(),
  };
}

/**
 * Streaming indicator state for one (exchange, coin, timeframe). `update` takes one CLOSED
 * candle and advances every indicator once — constant work per candle, no history kept beyond
 * the indicator windows. Indicators come from `trading-signals` where it has them; SMA, the
 * Ichimoku base line and Choppiness use the O(1) pieces in rolling-window.ts.
 */
export class MarketState {
  readonly exchange: Exchange;
  readonly coin: string;
  readonly timeframe: Timeframe;
  readonly key: string;
  readonly #tfMs: number;
  readonly #regimeOptions: RegimeOptions;

  /** The indicators, windows and variances fed each closed candle. */
  readonly #ind = createIndicators();
  readonly #adxLag = new Lagged(5);
  readonly #volForecast = new RollingPercentile(PERCENTILE_WINDOW);
  readonly #volatility: VolatilityTable;
  /** The day model's hourly variance, kept on candles shorter than an hour. */
  readonly #hourly: HourlyVariance | null;
  /** The next candle's and the day's fine variance, kept on candles of two hours or more. */
  readonly #fine: FineVariance | null;
  /** The volatility model for this timeframe, resolved on first use (the table never changes). */
  #volModel: { model: VolatilityModel; timeframe: Timeframe } | null = null;
  /** Forecast variance at the latest close, null while the EWMA variances warm up. */
  #volForecastVariance: number | null = null;
  #riskRows: { timeframe: Timeframe; rows: RiskRow[] } | null = null;
  /** Each risk horizon's band scale, fed from the first close with variances. */
  #bandScales: BandScale[] | null = null;

  #readings: Readings | null = null;
  #regime: RegimeState | null = null;
  #lastOpenTime = Number.NEGATIVE_INFINITY;
  /** Stable indicators never become unstable again, so readiness is decided once. */
  #ready = false;
  #candles = 0;

  constructor(options: MarketStateOptions) {
    this.exchange = options.exchange;
    this.coin = options.coin;
    this.timeframe = options.timeframe;
    this.key = marketKey(options.exchange, options.coin, options.timeframe);
    this.#tfMs = TIMEFRAME_MS[options.timeframe];
    this.#regimeOptions = { ...DEFAULT_REGIME_OPTIONS, ...options.regime };
    this.#volatility = options.volatility ?? defaultVolatility;
    this.#hourly = hasHourly(options.timeframe) ? new HourlyVariance(options.timeframe) : null;
    this.#fine = hasFine(options.timeframe) ? new FineVariance(options.timeframe) : null;
  }

  /** Whether this state reads the same market's 1h candles (updateHours) beside its own. */
  get readsHours(): boolean {
    return this.#fine !== null;
  }

  /**
   * Feed the same market's closed 1h candles `hours[from…]` that close by `closeTime`, before the
   * candle of this timeframe closing then (MarketStates does); returns the index of the first hour
   * left. Hours at or before the last one fed are ignored.
   */
  updateHours(hours: readonly Candle[], from: number, closeTime: number): number {
    return this.#fine ? this.#fine.pushHoursUntil(hours, from, closeTime) : from;
  }

  get volatility(): VolatilityTable {
    return this.#volatility;
  }

  get candleCount(): number {
    return this.#candles;
  }

  /** Close time (Unix ms) of the last closed candle fed, or null before the first. */
  get lastCloseTime(): number | null {
    return this.#candles === 0 ? null : this.#lastOpenTime + this.#tfMs;
  }

  get regimeState(): RegimeState | null {
    return this.#regime;
  }

  /** The hysteresis the regime label is held by (what a reading's words say it takes to switch). */
  get regimeOptions(): RegimeOptions {
    return this.#regimeOptions;
  }

  /** The volatility model in use and the timeframe it was fitted on. */
  get volatilityModel(): { model: VolatilityModel; timeframe: Timeframe } {
    this.#volModel ??= modelFor(this.#volatility, this.timeframe);
    return this.#volModel;
  }

  /** The risk forecast's horizons on this market (riskRows), resolved on first use. */
  get riskRows(): { timeframe: Timeframe; rows: RiskRow[] } {
    this.#riskRows ??= riskRows(this.#volatility, this.timeframe, this.volatilityModel);
    return this.#riskRows;
  }

  /** Forecast variance of the H-candle log return at the latest close, null while warming up. */
  get volForecastVariance(): number | null {
    return this.#volForecastVariance;
  }

  /** Feed one closed candle. Candles must arrive in strictly increasing open time. */
  update(candle: Candle): void {
    if (!(candle.openTime > this.#lastOpenTime)) {
      throw new OutOfOrderCandleError(
        `${this.key}: candle ${candle.openTime} is not after the last one (${this.#lastOpenTime})`,
      );
    }
    this.#lastOpenTime = candle.openTime;
    const n = ++this.#candles;
    const prev = this.#readings;
    const { close, high, low } = candle;

    const s = this.#ind.sma;
    const sma: MaReadings = {
      p10: s[0]!.push(close),
      p20: s[1]!.push(close),
      p30: s[2]!.push(close),
      p50: s[3]!.push(close),
      p100: s[4]!.push(close),
      p200: s[5]!.push(close),
    };
    const ema: MaReadings = {
      p10: this.#emaAt(0, close, n),
      p20: this.#emaAt(1, close, n),
      p30: this.#emaAt(2, close, n),
      p50: this.#emaAt(3, close, n),
      p100: this.#emaAt(4, close, n),
      p200: this.#emaAt(5, close, n),
    };
    const hma9 = this.#ind.hma.add(close);
    const vwma20 = this.#ind.vwma.add(candle);
    const bh = this.#ind.baseHigh.push(high);
    const bl = this.#ind.baseLow.push(low);

    const rsi = this.#ind.rsi.add(close);
    const stoch = this.#ind.stoch.add(candle);
    const cci = this.#ind.cci.add(candle);
    const adx = this.#ind.adx.add(candle);
    if (adx !== null) this.#adxLag.push(adx);
    const adxLagged = this.#adxLag.value;
    const ao = this.#ind.ao.add(candle);
    const mom = this.#ind.mom.add(close);
    const macd = this.#ind.macd.add(close);
    const stochRsiRaw = this.#ind.stochRsi.add(close);
    const willr = this.#ind.willr.add(candle);
    const elder = this.#ind.elder.add(candle);
    const uo = this.#ind.uo.add(candle);
    const atr = this.#ind.atr.add(candle);
    const bands = this.#ind.bb.add(close);
    const chop = this.#ind.chop.update(candle);

    const atrPct = atr === null ? null : (100 * atr) / close;
    if (atrPct !== null) this.#ind.atrPct.push(atrPct);
    const bbWidth = bands === null || bands.middle === 0 ? null : (bands.upper - bands.lower) / bands.middle;
    if (bbWidth !== null) this.#ind.bbWidth.push(bbWidth);

    const variances = this.#ind.ewma.push(close);
    const hourly =
      this.#hourly !== null
        ? this.#hourly.push(close)
        : this.#fine !== null
          ? this.#fine.push(candle.openTime, close)
          : null;
    if (variances !== null) {
      const forecast = forecastVarianceOf(
        this.volatilityModel.model,
        variances,
        this.#volatility.horizonCandles,
        hourly,
        utcHour(candle.openTime + this.#tfMs),
      );
      this.#volForecast.push(forecast);
      this.#volForecastVariance = forecast;
    } else {
      this.#volForecastVariance = null;
    }
    const volPercentile =
      variances !== null && this.#volForecast.size >= MIN_PERCENTILE_SAMPLES
        ? this.#volForecast.percentile
        : null;

    const plusDi = adx === null ? null : pct(this.#ind.adx.pdi ?? null);
    const minusDi = adx === null ? null : pct(this.#ind.adx.mdi ?? null);
    const adxSlope = adx !== null && adxLagged !== null ? adx - adxLagged : null;

    let regimeMetrics: RegimeMetrics | null = null;
    if (
      adx !== null &&
      adxSlope !== null &&
      plusDi !== null &&
      minusDi !== null &&
      chop !== null &&
      atrPct !== null &&
      bbWidth !== null &&
      this.#ind.atrPct.size >= MIN_PERCENTILE_SAMPLES &&
      this.#ind.bbWidth.size >= MIN_PERCENTILE_SAMPLES &&
      volPercentile !== null
    ) {
      const median = this.#ind.atrPct.median!;
      regimeMetrics = {
        adx,
        adx_slope: adxSlope,
        plus_di: plusDi,
        minus_di: minusDi,
        choppiness: chop,
        atr_pct: atrPct,
        atr_pct_percentile: this.#ind.atrPct.percentile!,
        bb_width: bbWidth,
        bb_width_percentile: this.#ind.bbWidth.percentile!,
        volatility_ratio: median > 0 ? atrPct / median : 1,
        vol_forecast_percentile: volPercentile,
      };
      this.#regime = stepRegimeWith(this.#regime, regimeMetrics, this.#regimeOptions);
    }

    // StochRSI: trading-signals yields its raw 0–1 value; TradingView votes on the SMA(3)
    // smoothed %K and %D, scaled to 0–100.
    const stochRsiK = stochRsiRaw === null ? null : pct(this.#ind.stochRsi.smoothing.k.getResult());
    const stochRsiD = stochRsiRaw === null ? null : pct(this.#ind.stochRsi.smoothing.d.getResult());

    this.#readings = {
      close,
      high,
      low,
      closeTime: candle.openTime + this.#tfMs,
      candles: this.#candles,
      sma,
      ema,
      hma9,
      vwma20,
      ichimokuBase: bh === null || bl === null ? null : (bh + bl) / 2,
      rsi,
      rsiPrev: prev?.rsi ?? null,
      stochK: stoch?.stochK ?? null,
      stochD: stoch?.stochD ?? null,
      cci,
      cciPrev: prev?.cci ?? null,
      adx,
      adxPrev: prev?.adx ?? null,
      adxSlope,
      plusDi,
      minusDi,
      ao,
      aoPrev: prev?.ao ?? null,
      mom,
      momPrev: prev?.mom ?? null,
      macd: macd?.macd ?? null,
      macdSignal: macd?.signal ?? null,
      stochRsiK,
      stochRsiD,
      williamsR: willr,
      williamsRPrev: prev?.williamsR ?? null,
      bullPower: elder?.bullPower ?? null,
      bullPowerPrev: prev?.bullPower ?? null,
      bearPower: elder?.bearPower ?? null,
      bearPowerPrev: prev?.bearPower ?? null,
      ultimate: uo,
      regimeMetrics,
      volVariances: variances === null ? null : [variances[0]!, variances[1]!, variances[2]!],
      volHourly: hourly,
      volPercentile,
      volRisk: variances === null ? [] : this.#riskAt(close, variances, hourly, candle.openTime),
    };
  }

  /** Each risk horizon's σ at this close, its band scale fed the band it serves here. */
  #riskAt(close: number, variances: readonly number[], hourly: number | null, openTime: number) {
    const { rows } = this.riskRows;
    if (this.#bandScales === null) {
      const miss = 1 - this.#volatility.bandCoverage;
      const perp = isPerpVenue(this.exchange);
      this.#bandScales = rows.map((row) => new BandScale(row.candles, miss, bandFor(row.model, perp)));
    }
    const scales = this.#bandScales;
    const hour = utcHour(openTime + this.#tfMs);
    return rows.map(({ model, candles }, i) => {
      const sigma =
        model.hourly !== undefined && hourly === null
          ? null
          : Math.sqrt(forecastVarianceOf(model, variances, candles, hourly, hour));
      return { sigma, scale: scales[i]!.push(close, sigma) };
    });
  }

  /**
   * Feeds EMA `i` (period MA_PERIODS[i]); its value once stable. An EMA is stable once it has
   * had `period` values, one per candle here; asking the library (`isStable`) throws and catches
   * an error on every warming-up candle.
   */
  #emaAt(i: number, close: number, candles: number): number | null {
    const value = this.#ind.ema[i]!.add(close);
    return candles >= MA_PERIODS[i]! ? value : null;
  }

  /** Latest readings, or null before the first candle. The object is replaced, never mutated. */
  snapshot(): Readings | null {
    return this.#readings;
  }

  /** Each risk row's band scale at the last close fed; null while the variances warm up. */
  savedBandScales(): SavedBandScales | null {
    const closeTime = this.lastCloseTime;
    if (this.#bandScales === null || closeTime === null) return null;
    return { closeTime, rows: this.#bandScales.map((scale) => scale.saved()) };
  }

  /**
   * Goes on from band scales saved at the close just fed (a state rebuilt from its warm-up after a
   * restart, at the close its predecessor saved them): each row's scale and its forecasts not yet
   * resolved become the saved ones, and this close's readings serve the saved scale. False, and
   * nothing changed, when they were saved at another close or for other rows or bands.
   */
  resumeBandScales(saved: SavedBandScales): boolean {
    const scales = this.#bandScales;
    const readings = this.#readings;
    if (
      scales === null ||
      readings === null ||
      saved.closeTime !== this.lastCloseTime ||
      saved.rows.length !== scales.length ||
      readings.volRisk.length !== scales.length
    ) {
      return false;
    }
    const resumed = scales.map((scale, i) => {
      const next = new BandScale(scale.candles, 1 - this.#volatility.bandCoverage, saved.rows[i]!.band);
      return next.resume(saved.rows[i]!) ? next : null;
    });
    if (resumed.some((scale, i) => scale === null || !sameBand(saved.rows[i]!, scales[i]!.saved()))) {
      return false;
    }
    this.#bandScales = resumed as BandScale[];
    this.#readings = {
      ...readings,
      volRisk: readings.volRisk.map((r, i) => ({ sigma: r.sigma, scale: Math.exp(saved.rows[i]!.logScale) })),
    };
    return true;
  }

  /** Names of the readings a verdict needs that are not stable yet; empty when ready. */
  missingForVerdict(): readonly string[] {
    if (this.#ready) return NOTHING_MISSING;
    const r = this.#readings;
    if (r === null) return ['candles'];
    const missing: string[] = [];
    for (const p of MA_PERIODS) {
      if (OPTIONAL_MA_PERIODS.has(p)) continue;
      if (r.sma[`p${p}`] === null) missing.push(`sma${p}`);
      if (r.ema[`p${p}`] === null) missing.push(`ema${p}`);
    }
    const required: Array<[string, number | null]> = [
      ['hma9', r.hma9],
      ['vwma20', r.vwma20],
      ['ichimoku_base', r.ichimokuBase],
      ['rsi', r.rsiPrev],
      ['stoch', r.stochD],
      ['cci', r.cciPrev],
      ['adx', r.adxPrev],
      ['ao', r.aoPrev],
      ['mom', r.momPrev],
      ['macd', this.#ind.macd.signal.isStable ? r.macdSignal : null],
      ['stoch_rsi', r.stochRsiD],
      ['williams_r', r.williamsRPrev],
      ['bull_bear_power', r.bearPowerPrev],
      ['ultimate', r.ultimate],
    ];
    for (const [name, v] of required) if (v === null) missing.push(name);
    if (r.regimeMetrics === null || this.#regime === null) missing.push('regime_metrics');
    this.#ready = missing.length === 0;
    return missing;
  }
}

export function createMarketState(options: MarketStateOptions): MarketState {
  return new MarketState(options);
}

/** Whether two saved scales are of the same horizon and band. */
const sameBand = (a: SavedBandScale, b: SavedBandScale) =>
  a.candles === b.candles && a.band.low === b.band.low && a.band.high === b.band.high;
