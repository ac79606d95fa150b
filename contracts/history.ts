import { z } from 'zod';
import { Call, Exchange, FeedKind, Regime, TIMEFRAME_MS, Timeframe } from './market.ts';
import { BaselinesTableSchema } from './signals.ts';

/**
 * The analysts' side: the labelled verdict history (GET /api/verdicts, the export CLI) and the
 * public track record (GET /api/track-record). One row shape for every format, so a file read
 * back from NDJSON, CSV or Parquet is scored and verified by the same code.
 */

/** The methodology's horizon and fee (docs/evaluation.md; the calibration table holds the same). */
export const HORIZON_CANDLES = 6;
export const FEE_BPS = 10;
/** Forward returns are labelled at 1, 6 and 24 candles; the outcome resolves once the last has closed. */
export const OUTCOME_AFTER_CANDLES = 24;
/** A verdict's content is public once its horizon has closed (the rule of GET /verify). */
export const REVEAL_AFTER_CANDLES = HORIZON_CANDLES;

export function revealTime(verdict: { candleCloseTime: number; timeframe: Timeframe }): number {
  return verdict.candleCloseTime + REVEAL_AFTER_CANDLES * TIMEFRAME_MS[verdict.timeframe];
}

/** Stream of a verdict's outcome: one per verdict, so the append is its own idempotency check. */
export function outcomeStream(verdictId: string): string {
  return `verdict-outcome-${verdictId}`;
}

const nullable = <T extends z.ZodType>(t: T) => t.nullable();

/**
 * One history row. Commitment fields are always filled; content fields only once revealed
 * (`revealed: true`), outcome fields (`outcome_id` onwards) only once revealed and resolved. `inputs_json` is the
 * verdict's `inputs` as JSON, so the hash can be recomputed from any format.
 */
export const HistoryRow = z.object({
  position: z.number().int().positive(),
  verdict_id: z.string(),
  stream: z.string(),
  revision: z.number().int().nonnegative(),
  recorded_at: z.iso.datetime(),
  exchange: Exchange,
  coin: z.string(),
  timeframe: Timeframe,
  hash: z.string(),
  prev_hash: nullable(z.string()),
  reveal_at: z.iso.datetime(),
  revealed: z.boolean(),
  call: nullable(Call),
  confidence: nullable(z.number().int()),
  score: nullable(z.number()),
  regime: nullable(Regime),
  price: nullable(z.number()).describe(
    "Close of the verdict's candle, in the quote currency (USD): what every return of the row is measured from.",
  ),
  candle_close_time: nullable(z.number().int()).describe(
    "Close of the verdict's candle: Unix milliseconds in NDJSON and CSV, a UTC timestamp in Parquet.",
  ),
  feed: nullable(FeedKind),
  engine_version: nullable(z.string()),
  trigger: nullable(z.enum(['request', 'schedule'])),
  inputs_json: nullable(z.string()).describe(
    "The verdict's inputs as JSON (its hash covers them), among them the risk forecast it served, which the track record scores: vol_horizon_candles, vol_expected_move_pct (percent: σ of the log return over that horizon), vol_band_low, vol_band_high (prices), vol_band_coverage (a fraction), vol_percentile; replay_lap on a verdict of a looped replay lap, which no track-record figure counts.",
  ),
  outcome_id: nullable(z.string()),
  return_1: nullable(z.number()).describe(
    'Simple return from price to the close 1 candle later, a fraction (0.01 is 1 %, not percent).',
  ),
  return_6: nullable(z.number()).describe(
    'Simple return from price to the close 6 candles later (the verdict horizon), a fraction (0.01 is 1 %).',
  ),
  return_24: nullable(z.number()).describe(
    'Simple return from price to the close 24 candles later, a fraction (0.01 is 1 %).',
  ),
  result: nullable(z.enum(['hit', 'miss', 'no-call'])),
  net_centi_bps: nullable(z.number().int()).describe(
    'BUY or SELL: what following the call earned over 6 candles after the 10 bps fee, in hundredths of a bp (round((±return_6 × 10,000 − 10) × 100)); null for a HOLD (its lean: lean_net_centi_bps).',
  ),
  mae_bps: nullable(z.number()).describe(
    'BUY or SELL: the worst move against the call within the 6 candles (their lows for a BUY, highs for a SELL) from price, in bps, negative when against it; null for a HOLD.',
  ),
  mfe_bps: nullable(z.number()).describe(
    'BUY or SELL: the best move in its favour within the 6 candles (their highs for a BUY, lows for a SELL) from price, in bps; null for a HOLD.',
  ),
  realised_vol: nullable(z.number()).describe(
    "Sample standard deviation of the 24 per-candle log returns after the verdict's candle (the first from price), a fraction per candle: not percent and not over 6 candles (× √6 × 100 reads beside a 6-candle vol_expected_move_pct).",
  ),
  /** The direction the verdict's score leaned, HOLD included (an outcome field: set once resolved). */
  lean: nullable(z.enum(['BUY', 'SELL'])),
  /** What following the lean earned over the horizon after the fee, hundredths of a bp. */
  lean_net_centi_bps: nullable(z.number().int()).describe(
    'What following lean earned over 6 candles after the 10 bps fee, in hundredths of a bp (as net_centi_bps for a call), HOLD included; null without a lean.',
  ),
  /**
   * The outcome's link in its stream's outcome chain (contracts/verdict-hash.ts `outcomeHash`) and
   * the log position it was recorded at; null for outcomes recorded before outcomes were chained.
   */
  outcome_hash: nullable(z.string()),
  outcome_prev_hash: nullable(z.string()),
  outcome_position: nullable(z.number().int().positive()),
  /** The last column, so that a line holding it was written whole. */
  cursor: z
    .string()
    .describe(
      'Where to resume after this row: after=<cursor> with the same filters answers the rows that follow it (a cut stream resumes from its last complete row)',
    ),
});
export type HistoryRow = z.infer<typeof HistoryRow>;
export const HISTORY_COLUMNS = Object.keys(HistoryRow.shape) as (keyof HistoryRow)[];
/**
 * The verdict's content columns: a revealed row shows them all (its hash covers them), a
 * commitment none. The verdict's other columns are its commitment: the chain fields, and the
 * market its stream name states.
 */
export const HISTORY_CONTENT_COLUMNS = [
  'call',
  'confidence',
  'score',
  'regime',
  'price',
  'candle_close_time',
  'feed',
  'engine_version',
  'trigger',
  'inputs_json',
] as const satisfies readonly (keyof HistoryRow)[];

export const HISTORY_FORMATS = ['ndjson', 'csv', 'parquet'] as const;
export const HistoryFormat = z.enum(HISTORY_FORMATS);
export type HistoryFormat = z.infer<typeof HistoryFormat>;
export const HISTORY_MEDIA_TYPES: Record<HistoryFormat, string> = {
  ndjson: 'application/x-ndjson',
  csv: 'text/csv',
  parquet: 'application/vnd.apache.parquet',
};

export const HISTORY_MAX_LIMIT = 1_000_000;
export const HISTORY_MAX_WAIT_S = 30;

/**
 * The last NDJSON line, when asked for (`trailer=true`, or `Accept: application/x-ndjson;
 * profile="trailer"`): where to resume (past rows the filters skipped), how many rows the answer
 * held, and the `_service` block. Off by default: a reader of JSON lines (DuckDB's read_json)
 * reads the file as served, every line a row, and every row carries its own cursor.
 */
export const HISTORY_TRAILER_PROFILE = 'trailer';
export const HistoryTrailer = z.object({
  cursor: z.string(),
  rows: z.number().int().nonnegative(),
  _service: z.unknown().optional(),
});

// ---- track record ----------------------------------------------------------------------------

export const TRACK_RECORD_WINDOWS = ['7d', '30d', '90d', 'all'] as const;
export const TrackRecordWindow = z.enum(TRACK_RECORD_WINDOWS);
export type TrackRecordWindow = z.infer<typeof TrackRecordWindow>;
/** The window of the track-record line a trade call carries (delivered, and in its test sample). */
export const TRADE_CALL_TRACK_RECORD_WINDOW: TrackRecordWindow = '90d';

const Rate = z.object({
  hitRate: z.number().nullable(),
  interval: z.object({ low: z.number(), high: z.number() }).nullable(),
  meanNetBps: z.number().nullable(),
});

export const ConfidenceBucketLine = z.object({
  bucket: z.string(),
  from: z.number().int(),
  to: z.number().int(),
  calls: z.number().int(),
  hits: z.number().int(),
  hitRate: z.number().nullable(),
  meanConfidence: z.number().nullable(),
});

/**
 * The risk forecast each resolved verdict served (its `volatility`), scored on the return that
 * followed over the forecast's horizon: the same figures `npm run evaluate` reports per row.
 */
export const RiskRecord = z.object({
  /** Resolved verdicts whose served forecast was scored. */
  points: z.number().int(),
  /** Of those, how many closed inside the served band after the forecast's horizon. */
  covered: z.number().int(),
  coverage: z.number().nullable(),
  /** The coverage the band states (its `band_coverage`, averaged over the points). */
  nominalCoverage: z.number().nullable(),
  /** RMS of the σ served ÷ RMS of the realised log return over the horizon; 1 is right in level. */
  sigmaRatio: z.number().nullable(),
  /**
   * The blocks the points fall in, the units the intervals resample as the evaluation's do: UTC
   * days, grouped into spans of at least two forecast horizons (two days on 4h, twelve on 1d).
   */
  blocks: z.number().int(),
  /**
   * 95 % day-block bootstrap interval of sigmaRatio and of coverage (every point of a block
   * resampled together, as in docs/evaluation-risk.md); null on fewer than MIN_INTERVAL_BLOCKS
   * (20) blocks, where the figure is too few days to tell a biased forecast from a few days' moves.
   */
  sigmaRatioInterval: z.object({ low: z.number(), high: z.number() }).nullable(),
  coverageInterval: z.object({ low: z.number(), high: z.number() }).nullable(),
  /** Resolved verdicts with no forecast to score: recorded without one, or a horizon not labelled (1, 6, 24). */
  unscored: z.number().int(),
});
export type RiskRecord = z.infer<typeof RiskRecord>;

/**
 * A replay verdict's `inputs` key that marks a looping replay's later lap: the lap (1, 2, …) of
 * the data served again after its end (adapters/market/replay-laps.ts) that the verdict's candle
 * or the candles labelling its outcome (its close plus OUTCOME_AFTER_CANDLES candles) fall in.
 * Absent on live verdicts and on replay verdicts labelled from the data as it is. The verdict's
 * hash covers it; its outcome copies it (`replayLap`) and the track record counts no such verdict.
 */
export const REPLAY_LAP_INPUT = 'replay_lap';

/** The looped lap a verdict's inputs mark (REPLAY_LAP_INPUT), 0 for none. */
export function replayLapOf(inputs: Record<string, unknown>): number {
  const lap = inputs[REPLAY_LAP_INPUT];
  return typeof lap === 'number' && Number.isInteger(lap) && lap > 0 ? lap : 0;
}

/**
 * Which feed a line's resolved verdicts (calls and HOLDs) came from. Every figure of the line is
 * made of the `live` and `replay` ones; `replayLooped` are not counted in any figure.
 */
export const TrackRecordFeeds = z.object({
  live: z.number().int().describe('Resolved verdicts counted from the live feed (venues as they trade)'),
  replay: z
    .number()
    .int()
    .describe('Resolved verdicts counted from the replay feed: recorded market data served as if live'),
  replayLooped: z
    .number()
    .int()
    .describe(
      "Replay verdicts left out of every figure: their candle or their outcome's fell in a looped lap, the replay's data served again (shifted in time) after it ended, which can include the months the model was fitted on",
    ),
});
export type TrackRecordFeeds = z.infer<typeof TrackRecordFeeds>;

/** What a whole track record answer is built from: 'none' when it counts no resolved verdict. */
export const TrackRecordFeed = z.enum(['live', 'replay', 'mixed', 'none']);
export type TrackRecordFeed = z.infer<typeof TrackRecordFeed>;

export const TrackRecordLine = z.object({
  exchange: z.union([Exchange, z.literal('ALL')]),
  timeframe: z.union([Timeframe, z.literal('ALL')]),
  /** BUY and SELL calls resolved in the window; HOLDs counted apart. */
  calls: z.number().int(),
  holds: z.number().int(),
  holdShare: z.number().nullable(),
  buys: z.number().int(),
  sells: z.number().int(),
  hits: z.number().int(),
  /** Following the calls. */
  following: Rate,
  alwaysBuy: Rate,
  alwaysSell: Rate,
  /** Random BUY/SELL at the calls' own mix, on the same points: its expected figures. */
  random: Rate,
  brier: z.number().nullable(),
  baseRateBrier: z.number().nullable(),
  buckets: z.array(ConfidenceBucketLine),
  /** The risk forecast's record over every resolved verdict of the line, HOLD included. */
  risk: RiskRecord,
  /** The feeds its resolved verdicts came from, and the looped-lap replay verdicts left out. */
  feeds: TrackRecordFeeds,
});
export type TrackRecordLine = z.infer<typeof TrackRecordLine>;

export const TrackRecordPoint = z.object({
  day: z.string(),
  calls: z.number().int(),
  hitRate: z.number().nullable(),
  alwaysBuy: z.number().nullable(),
  alwaysSell: z.number().nullable(),
  random: z.number().nullable(),
  cumNetBps: z.number(),
  cumRandomNetBps: z.number(),
  /** The risk forecast, cumulative from the window's start: points scored, coverage, σ ratio. */
  riskPoints: z.number().int(),
  coverage: z.number().nullable(),
  sigmaRatio: z.number().nullable(),
});

/**
 * Funding carry. The service keeps no record per opportunity (the scan answers and forgets), so
 * no expected-vs-realised figure is tracked live; what it serves is the carry model shipped with
 * the build, fitted by `npm run evaluate` on the funding history's training months (its
 * test-month expected ÷ realised ratios are in docs/evaluation.md).
 */
export const CarryRecord = z.object({
  recorded: z.literal(false),
  note: z.string(),
  trainFrom: z.string(),
  trainTo: z.string(),
  buckets: z.array(
    z.object({
      /** Spread now, bps per 8 h, lower edge of the bucket. */
      fromBps: z.number(),
      horizons: z.array(
        z.object({
          hours: z.number().int(),
          /** Carry collected ÷ (spread now × hours) on the training opportunities. */
          retention: z.number(),
          /** Share of them whose carry beat both legs' fees by this horizon. */
          shareNetPositive: z.number(),
          samples: z.number().int(),
        }),
      ),
    }),
  ),
});
export type CarryRecord = z.infer<typeof CarryRecord>;

export const TrackRecordResponse = z.object({
  asOf: z
    .string()
    .describe(
      "What the figures are as of, which the window's UTC days end at: the latest time an outcome they count fell due (its close plus 24 candles), at most now. Which outcomes they count is asOfPosition",
    ),
  asOfPosition: z
    .number()
    .int()
    .describe(
      "The log position the figures are folded to: every outcome they count is at or before it (an export row's `outcome_position`). `history score --as-of <asOf> --as-of-position <asOfPosition>` reproduces them from any later export, whatever was labelled since",
    ),
  window: TrackRecordWindow.describe(
    "7d, 30d or 90d: the verdicts whose candle closed on the last 7, 30 or 90 UTC days up to asOf's day, each counted once its outcome (24 candles on) is in, so a 1d verdict counts in 30d only when it closed 24 to 30 days before asOf, and never in 7d; all: every resolved verdict",
  ),
  feed: TrackRecordFeed.describe(
    "The feed the figures come from: 'live' (venues as they trade), 'replay' (recorded market data served as if live: not a live track record), 'mixed' (both; each line's `feeds` counts them) or 'none' (no resolved verdict in the window)",
  ),
  feedNote: z
    .string()
    .describe('The same in words, with the counts, and the looped-lap replay verdicts left out if any'),
  feeBps: z.number(),
  horizonCandles: z.number().int(),
  overall: TrackRecordLine,
  lines: z.array(TrackRecordLine),
  /** Day by day for the overall line, cumulative from the window's start. */
  series: z.array(TrackRecordPoint),
  /**
   * Free baselines beside the figures sold, measured out of sample by `npm run evaluate`
   * (docs/evaluation.md): always-HOLD and the best fade/follow rule per cell, the free
   * trailing-volatility band per timeframe and horizon, the free regime label.
   */
  baselines: BaselinesTableSchema.optional(),
  carry: CarryRecord,
});
export type TrackRecordResponse = z.infer<typeof TrackRecordResponse>;

/**
 * How often calls like a trade call were right, as the trade_call webhook payload carries it: the
 * payload's published versions pin this shape (contracts/webhook-schemas.unit.test.ts), so a field
 * is added to TrackRecordBrief, not here.
 */
export const TrackRecordBriefPayload = z.object({
  window: TrackRecordWindow,
  exchange: Exchange,
  timeframe: Timeframe,
  confidenceBucket: z.string(),
  calls: z.number().int(),
  hits: z.number().int(),
  hitRate: z.number().nullable().describe('hits ÷ calls. Null when calls is 0.'),
  interval: z
    .object({ low: z.number(), high: z.number() })
    .nullable()
    .describe('The 95 % Wilson interval of hitRate. Null when calls is 0.'),
  randomHitRate: z
    .number()
    .nullable()
    .describe(
      "The hit rate of random calls at the same BUY:SELL mix over the same candles, on this exchange and timeframe's resolved calls of every confidence bucket in the window. Null when it has none.",
    ),
  /**
   * Which feed the line's resolved verdicts came from (as the full record's `feed`): a call on
   * live venues may carry a line built from the replay. Optional for clients of earlier answers.
   */
  feed: TrackRecordFeed.optional(),
});
export type TrackRecordBriefPayload = z.infer<typeof TrackRecordBriefPayload>;

/**
 * What a trade call carries (get_trade_call, over MCP and /x402): the payload's line, with the
 * HOLDs its exchange and timeframe resolved and, when it counts no call, why.
 */
export const TrackRecordBrief = TrackRecordBriefPayload.extend({
  holds: z
    .number()
    .int()
    .optional()
    .describe(
      'HOLD verdicts of this exchange and timeframe (every confidence) resolved in the window, those of looped replay laps aside: a HOLD is no call, so calls, hits and both hit rates count none of them.',
    ),
  note: z
    .string()
    .optional()
    .describe(
      'Why calls is 0, in words: no verdict of this exchange and timeframe resolved in the window, every one resolved a HOLD, its calls in other confidence buckets, or every one due in a looped replay lap (which no figure counts; named apart beside the others). Absent when calls is above 0.',
    ),
});
export type TrackRecordBrief = z.infer<typeof TrackRecordBrief>;
