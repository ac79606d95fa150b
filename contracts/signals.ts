import { z } from 'zod';
import { Call, Regime, Timeframe } from './market.ts';

/**
 * Outputs of the signal engine: regime readings, composite verdicts and the calibration table
 * that gives verdict confidence its meaning. The engine produces these; the api serialises them.
 */

export const RegimeMetricsSchema = z.object({
  adx: z.number(),
  /** ADX now minus ADX five closed candles ago: positive = trend strengthening. */
  adx_slope: z.number(),
  plus_di: z.number(),
  minus_di: z.number(),
  choppiness: z.number(),
  /** ATR(14) as a percentage of the close. */
  atr_pct: z.number(),
  /** Rank of atr_pct within its bounded rolling window, 0–100. */
  atr_pct_percentile: z.number().min(0).max(100),
  /** Bollinger(20, 2) width relative to the middle band. */
  bb_width: z.number(),
  bb_width_percentile: z.number().min(0).max(100),
  /** atr_pct divided by the median atr_pct of the rolling window: > 1 = more volatile than usual. */
  volatility_ratio: z.number(),
  /**
   * Rank (0–100) of the volatility forecast (see VolatilityForecastSchema) within its rolling
   * window: `volatile` and `squeeze` follow it.
   */
  vol_forecast_percentile: z.number().min(0).max(100),
});
export type RegimeMetrics = z.infer<typeof RegimeMetricsSchema>;

/**
 * Forecast of realised volatility over the next `horizon_candles` closed candles and the range
 * the close is expected to end in, from the HAR-type model of volatility.json (fitted on the
 * training months of `npm run evaluate`).
 */
export const VolatilityForecastSchema = z.object({
  horizon_candles: z.number().int().positive().describe('The horizon, in candles of the timeframe.'),
  expected_move_pct: z
    .number()
    .nonnegative()
    .describe(
      'Percent (2.1 means 2.1 %): forecast standard deviation (σ) of the log return over the horizon.',
    ),
  band_coverage: z
    .number()
    .min(0)
    .max(1)
    .describe(
      'Fraction (0–1, not percent): nominal coverage of the band; e.g. 0.8, the close after the horizon lies in [band_low, band_high] that often.',
    ),
  band_low: z.number().positive().describe('Low end of the band, a price in the quote currency (USD).'),
  band_high: z.number().positive().describe('High end of the band, a price in the quote currency (USD).'),
  percentile: z
    .number()
    .min(0)
    .max(100)
    .describe("Rank (0–100) of this forecast within the market's recent forecasts."),
  model_timeframe: Timeframe.describe('Timeframe whose fitted model was used.'),
});
export type VolatilityForecast = z.infer<typeof VolatilityForecastSchema>;

export const RegimeReadingSchema = z.object({
  regime: Regime,
  /** How clearly the metrics favour the label (0–100); a heuristic, not a calibrated probability. */
  confidence: z.number().int().min(0).max(100),
  metrics: RegimeMetricsSchema,
  suggestion: z.string(),
  /** Candidate the metrics favour right now; differs from `regime` while hysteresis holds. */
  candidate: Regime,
  /** Closed candles the current label has held. */
  held_candles: z.number().int().nonnegative(),
});
export type RegimeReading = z.infer<typeof RegimeReadingSchema>;

/** +1 buy, 0 neutral, -1 sell; null when the indicator is not stable yet (excluded from the mean). */
export const Vote = z.union([z.literal(1), z.literal(0), z.literal(-1), z.null()]);
export type Vote = z.infer<typeof Vote>;

export const VotesSchema = z.object({
  ma: z.record(z.string(), Vote),
  oscillators: z.record(z.string(), Vote),
  ma_mean: z.number().min(-1).max(1),
  oscillator_mean: z.number().min(-1).max(1),
  /** Mean of the two group means: the TradingView Technical Rating. */
  technical_rating: z.number().min(-1).max(1),
});
export type Votes = z.infer<typeof VotesSchema>;

/** Optional perpetual-futures context; funding `rate` is per interval of `intervalHours`. */
export const PerpContextSchema = z.object({
  funding: z.object({ rate: z.number(), intervalHours: z.number().positive() }).optional(),
  /** Close of the perpetual and of the spot market for the same closed candle. */
  perpClose: z.number().positive().optional(),
  spotClose: z.number().positive().optional(),
});
export type PerpContext = z.infer<typeof PerpContextSchema>;

/**
 * The direction a call would point (the score's sign, followed or faded as the cell's table
 * says) and what following it earned net of the fee on the evidence before the test months.
 * Present on HOLD answers whose score leans one way: HOLD says what it is declining.
 */
export const LeanSchema = z.object({
  direction: z.enum(['BUY', 'SELL']).describe('The direction a call would point.'),
  timing_skill: z
    .boolean()
    .describe("The cell's calls beat random calls at the same BUY:SELL mix in every fold and era tested."),
  measurable: z
    .boolean()
    .describe(
      'Whether the evidence supports a figure: the interval [expected_net_bps_low, expected_net_bps_high] lies above 0 (following paid) or below 0 (following lost). Where it spans 0 the net is not measurable and expected_net_bps is null.',
    ),
  expected_net_bps: z
    .number()
    .nullable()
    .describe(
      'Mean net return per call after the fee, in basis points, pooled over the folds and eras the gate saw; null where not measurable (or not measured): read the interval instead.',
    ),
  expected_net_bps_low: z
    .number()
    .nullable()
    .describe(
      'Its one-sided 95 % day-block lower bound, bps; the cell sells BUY/SELL only when it is above 0. Null when not measured.',
    ),
  expected_net_bps_high: z
    .number()
    .nullable()
    .describe(
      'The one-sided 95 % upper bound, bps, as far above the mean as the lower bound is below it: with the lower bound, a 90 % interval. Null when not measured.',
    ),
});
export type Lean = z.infer<typeof LeanSchema>;

/**
 * What every answer carrying a verdict says beside its confidence (trade calls, scan rows,
 * webhook payloads): the lean (null when the score is exactly 0, or the verdict's engine is not
 * the one whose table states it) and, in words, what the confidence number means, HOLD included.
 */
export const VerdictMeaning = z.object({
  lean: LeanSchema.nullable().describe(
    'The direction the score leans (followed or faded as the cell says) and what following such leans earned after the fee before the test months: a HOLD says what it declines. Null when the score is exactly 0.',
  ),
  confidence_meaning: z
    .string()
    .min(1)
    .describe(
      'What confidence means for this answer, in words: BUY/SELL, the calibrated chance of beating the fee; HOLD, how often standing aside was right.',
    ),
});
export type VerdictMeaning = z.infer<typeof VerdictMeaning>;

export const VerdictSchema = z.object({
  call: Call,
  /** round(100 × calibrated probability that the call's direction beats the fee over the horizon). */
  confidence: z.number().int().min(0).max(100),
  /** Composite score in [-1, 1] before calibration. */
  score: z.number().min(-1).max(1),
  regime: Regime,
  regime_reading: RegimeReadingSchema,
  votes: VotesSchema,
  /** Contrarian lean from funding and basis in [-1, 1]; 0 when no perp context was given. */
  perp_lean: z.number().min(-1).max(1),
  indicators: z.record(z.string(), z.number().nullable()),
  price: z.number().positive(),
  /** Close time (Unix ms) of the last closed candle the verdict used. */
  candle_close_time: z.number().int(),
  /** Which calibration table row produced the confidence (timeframe it was fitted on). */
  calibration: z.object({ timeframe: Timeframe, probability: z.number().min(0).max(1) }),
  /**
   * Whether the call follows the score's sign or fades it; the table fits this per timeframe on
   * training months (absent on verdicts of engines before signals-2, which always followed).
   */
  stance: z.enum(['follow', 'fade']).optional(),
  /** Whether this market cell (venue kind × timeframe) has measured timing skill; HOLD otherwise. */
  edge: z.object({ cell: z.string(), measured: z.boolean(), reason: z.string() }),
  volatility: VolatilityForecastSchema,
  /** What the lean would have earned; null when the score is exactly 0 (absent before signals-4). */
  lean: LeanSchema.nullable().optional(),
  /** What the confidence number means, in words, for this answer (HOLD included). */
  confidence_meaning: z.string().optional(),
  reasoning: z.string(),
});
export type Verdict = z.infer<typeof VerdictSchema>;

export const CalibrationBinSchema = z.object({
  /** Inclusive upper edge of |score| for this step of the isotonic fit. */
  upTo: z.number().min(0).max(1),
  probability: z.number().min(0).max(1),
  samples: z.number().int().positive(),
});
export type CalibrationBin = z.infer<typeof CalibrationBinSchema>;

export const CalibrationCurveSchema = z.object({
  samples: z.number().int().positive(),
  /** Share of training calls (|score| ≥ hold band, in the fitted direction) that beat the fee. */
  baseRate: z.number().min(0).max(1),
  /** Monotone non-decreasing in upTo and in probability. */
  bins: z.array(CalibrationBinSchema).min(1),
  /**
   * Direction fitted on the training months: 1 = call the score's sign (trend-following),
   * -1 = call against it (mean reversion). Absent means 1. Probabilities are for this direction.
   */
  direction: z.union([z.literal(1), z.literal(-1)]).optional(),
});
export type CalibrationCurve = z.infer<typeof CalibrationCurveSchema>;

export const CalibrationTableSchema = z.object({
  version: z.literal(1),
  method: z.literal('isotonic-pav'),
  engineVersion: z.string(),
  horizonCandles: z.number().int().positive(),
  feeBps: z.number().nonnegative(),
  holdBand: z.number().min(0).max(1),
  /** Training window: verdicts whose candle closed in [from, to) (Unix ms). */
  trainFrom: z.number().int(),
  trainTo: z.number().int(),
  fittedAt: z.iso.datetime(),
  curves: z.partialRecord(Timeframe, CalibrationCurveSchema),
  /** Timeframes without their own curve borrow the named one (e.g. 1m → 5m: no 1m data exists). */
  fallback: z.partialRecord(Timeframe, Timeframe),
  /**
   * Direction only where earned: per cell (`spot:<tf>` / `perp:<tf>`) the walk-forward evidence
   * and whether calls are emitted there. A cell absent or with `emit: false` answers HOLD.
   */
  cells: z
    .record(
      z.string(),
      z.object({
        emit: z.boolean(),
        direction: z.union([z.literal(1), z.literal(-1)]),
        /** Calibration curve of the cell (|score| → probability the call beats the fee). */
        curve: CalibrationCurveSchema,
        /** One line per fold/era: timing skill vs random at the same mix, with its interval. */
        evidence: z.array(z.string()),
        /** Timing skill over random calls at the same mix in every fold and era (the first gate). */
        timingSkill: z.boolean().optional(),
        /**
         * Following the calls, net of the fee, pooled over the gate's folds and eras: mean bps per
         * call and its one-sided 95 % day-block lower bound (the economic gate: emit only above 0).
         */
        net: z
          .object({
            meanBps: z.number().nullable(),
            lowBps: z.number().nullable(),
            calls: z.number().int().nonnegative(),
          })
          .optional(),
        /**
         * What a HOLD's confidence claims: the share of leans (on the gate's folds and eras, out of
         * fold) whose direction did not beat the fee over the horizon.
         */
        hold: z
          .object({ probability: z.number().min(0).max(1), samples: z.number().int().nonnegative() })
          .optional(),
      }),
    )
    .default({}),
});
export type CalibrationTable = z.infer<typeof CalibrationTableSchema>;

export const VolatilityModelSchema = z.object({
  /** log RV = b0 + b1·log(fast·H) + b2·log(mid·H) + b3·log(slow·H) (HAR-type, in logs). */
  coefficients: z.tuple([z.number(), z.number(), z.number(), z.number()]),
  /** Variance of log(realised / forecast) on the training months (describes the fit's spread). */
  residualVariance: z.number().nonnegative(),
  /**
   * Added to the linear predictor to make exp(ŷ + levelLog) the mean forecast variance: 0 for a
   * QLIKE fit. Absent on tables before signals-5 (log least squares), which used s²/2.
   */
  levelLog: z.number().optional(),
  /**
   * Slope of a fourth input, log(variance·H) of a variance measured on hourly returns with a
   * one-day half-life: on candles shorter than an hour the EWMA of squared one-hour log returns
   * per candle (the day's model), on candles of 2h to 1d the EWMA of each candle's summed squared
   * 1h log returns (the next candle's and the day's models, but not the verdict horizon's, which
   * is the day's on 4h). The four slopes sum to 1. Absent:
   * the three EWMA variances alone.
   */
  hourly: z.number().optional(),
  /** Log factors by the UTC hour (0–23) of the close the forecast is made at (intraday seasonality). */
  hourOfDay: z.array(z.number()).length(24).optional(),
  /** Quantiles of z = log(close[t+H]/close[t]) / forecast σ on training, for the band. */
  bandLow: z.number(),
  bandHigh: z.number(),
  /**
   * On perpetual venues the band is bandLow and bandHigh times this: the 80 % quantile of |z| on
   * the perpetuals' training closes over the spot band's half-width (the model is fitted on spot).
   * Absent: too few perpetual closes, the spot band as it is.
   */
  perpBandScale: z.number().positive().optional(),
  samples: z.number().int().positive(),
});
export type VolatilityModel = z.infer<typeof VolatilityModelSchema>;

/** Horizons of the risk forecast: the next candle, the verdict's horizon, one UTC day. */
export const RiskHorizonKey = z.enum(['next', 'verdict', 'day']);
export type RiskHorizonKey = z.infer<typeof RiskHorizonKey>;

export const RiskHorizonModelSchema = z.object({
  key: RiskHorizonKey,
  candles: z.number().int().positive(),
  model: VolatilityModelSchema,
  /**
   * The free baseline it is scored against: quantiles of the return over the plain trailing
   * variance of the last 20 candles (× candles), fitted on the same training months.
   */
  freeBand: z
    .object({
      low: z.number(),
      high: z.number(),
      /** Its level on training (mean r² ÷ trailing variance × candles), for sizing it fairly. */
      scale: z.number().positive().optional(),
    })
    .optional(),
  /**
   * The risk desk's baselines fitted on the same training months (signals-5 on), so a later
   * folder is scored against them without refitting: GARCH(1,1)'s α and β (each coin's long-run
   * variance comes from the data before the months scored) and HAR-RV's look-backs in candles,
   * coefficients (intercept, candle, day, week) and floor.
   */
  garch: z.object({ alpha: z.number().min(0).max(1), beta: z.number().min(0).max(1) }).optional(),
  harRv: z
    .object({
      windows: z.tuple([
        z.number().int().positive(),
        z.number().int().positive(),
        z.number().int().positive(),
      ]),
      coefficients: z.array(z.number()).length(4),
      floor: z.number().nonnegative(),
    })
    .optional(),
});

/**
 * Whether the regime labels carried information on the training months beyond what a buyer
 * gets for free (fitted and decided by `npm run evaluate` before the test months).
 */
export const LabelEvidenceSchema = z.object({
  /** volatile/squeeze ranked later realised volatility better than a trailing-volatility label. */
  volatilityLabelAddsInformation: z.boolean(),
  rhoEngine: z.number().nullable(),
  rhoFree: z.number().nullable(),
  /** trending-up minus trending-down mean forward return had its interval away from 0. */
  trendLabelsInformative: z.boolean(),
  upMinusDownBps: z.number().nullable(),
  /** The free label's rank cut-offs (flagging as many training points as the engine's labels). */
  freeCuts: z.object({ volatileFrom: z.number(), squeezeTo: z.number() }).optional(),
});
export type LabelEvidence = z.infer<typeof LabelEvidenceSchema>;

export const VolatilityTableSchema = z.object({
  version: z.literal(1),
  method: z.literal('har-ewma-log'),
  horizonCandles: z.number().int().positive(),
  /** EWMA half-lives in candles of the three variance components. */
  halfLives: z.tuple([z.number().positive(), z.number().positive(), z.number().positive()]),
  bandCoverage: z.number().min(0).max(1),
  trainTo: z.number().int(),
  fittedAt: z.iso.datetime(),
  models: z.partialRecord(Timeframe, VolatilityModelSchema),
  fallback: z.partialRecord(Timeframe, Timeframe),
  /** Per timeframe, the risk forecast's models for the next candle, the verdict horizon and a day. */
  risk: z.partialRecord(Timeframe, z.array(RiskHorizonModelSchema)).optional(),
  labels: z.partialRecord(Timeframe, LabelEvidenceSchema).optional(),
});
export type VolatilityTable = z.infer<typeof VolatilityTableSchema>;

const Lift = z.object({
  value: z.number().nullable(),
  low: z.number().nullable(),
  high: z.number().nullable(),
});

/** One risk-forecast row scored against EWMA (λ 0.94), GARCH(1,1) and HAR-RV on the test months. */
export const RiskDeskRowSchema = z.object({
  /** RMS of the σ served ÷ RMS of the realised log return over the horizon, block 95 % interval. */
  sigmaRatio: Lift,
  /** Mean QLIKE (realised/h + log h) of each forecaster's variance h; null where it could not be fitted. */
  qlike: z.object({
    service: z.number().nullable(),
    ewma: z.number().nullable(),
    garch: z.number().nullable(),
    harRv: z.number().nullable(),
  }),
  /** Service QLIKE minus each baseline's (below 0: the service is better), block 95 % interval. */
  qlikeVs: z.object({ ewma: Lift, garch: Lift, harRv: Lift }),
  /** Mean squared error of log variance (points with a non-zero realised variance). */
  mseLog: z.object({
    service: z.number().nullable(),
    ewma: z.number().nullable(),
    garch: z.number().nullable(),
    harRv: z.number().nullable(),
  }),
  /** Realised ÷ target volatility of a position sized to risk a fixed budget at one σ. */
  sizing: z.object({ service: Lift, trailing: Lift }),
});
export type RiskDeskRow = z.infer<typeof RiskDeskRowSchema>;

/**
 * Free baselines beside the service's figures, measured out of sample (the test months) by
 * `npm run evaluate` and shipped with the tables; the track record serves them beside its own.
 */
export const BaselinesTableSchema = z.object({
  version: z.literal(1),
  engineVersion: z.string(),
  /** Start of the months scored (Unix ms): every fit and choice used months before it. */
  testFrom: z.number().int(),
  feeBps: z.number().nonnegative(),
  horizonCandles: z.number().int().positive(),
  generatedAt: z.iso.datetime(),
  cells: z.array(
    z.object({
      cell: z.string(),
      emits: z.boolean(),
      /** What following the service's answers earned per answer: 0 where it answers HOLD. */
      serviceNetBpsPerAnswer: z.number().nullable(),
      /** The cell's would-be calls (gate ignored), net bps per call after the fee. */
      wouldBeNetBpsPerCall: z.number().nullable(),
      alwaysHoldNetBps: z.literal(0),
      /** The free fade/follow-the-last-N-candles rule with the best net on the training months. */
      bestFreeRule: z.string(),
      freeNetBpsPerCall: z.number().nullable(),
      /** Would-be calls minus the free rule on the same points, with a day-block 95 % interval. */
      liftNetBps: Lift,
      wouldBeSkillPts: z.number().nullable(),
      freeSkillPts: z.number().nullable(),
      liftSkillPts: Lift,
    }),
  ),
  risk: z.array(
    z.object({
      set: z.string(),
      timeframe: Timeframe,
      horizon: RiskHorizonKey,
      candles: z.number().int().positive(),
      points: z.number().int().nonnegative(),
      coverage: Lift,
      freeCoverage: Lift,
      rankCorrelation: z.number().nullable(),
      freeRankCorrelation: z.number().nullable(),
      /**
       * Against the forecasters a risk desk already has (absent on tables before signals-5): level
       * (RMS of the σ served ÷ RMS of the realised log return), QLIKE of each forecaster's variance
       * (lower is better; the service's minus each baseline's with a block 95 % interval) and the
       * realised ÷ target volatility of a position sized for a fixed risk budget.
       */
      desk: RiskDeskRowSchema.optional(),
    }),
  ),
  labels: z.array(
    z.object({
      set: z.string(),
      timeframe: Timeframe,
      rankCorrelation: z.number().nullable(),
      freeRankCorrelation: z.number().nullable(),
      gain: Lift,
      trendUpMinusDownBps: Lift,
    }),
  ),
});
export type BaselinesTable = z.infer<typeof BaselinesTableSchema>;
