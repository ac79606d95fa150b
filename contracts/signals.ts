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
});
export type RegimeMetrics = z.infer<typeof RegimeMetricsSchema>;

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
});
export type CalibrationTable = z.infer<typeof CalibrationTableSchema>;
