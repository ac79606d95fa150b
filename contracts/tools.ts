import { z } from 'zod';
import type { Config } from './config.ts';
import { FailureReason } from './failure-reason.ts';
import { TrackRecordBrief, TrackRecordResponse, TrackRecordWindow } from './history.ts';
import {
  Call,
  Coin,
  Exchange,
  FeedKind,
  Regime,
  TIMEFRAMES,
  Timeframe,
  VenueStatusSchema,
} from './market.ts';
import { RiskHorizonKey, VerdictMeaning, VolatilityForecastSchema } from './signals.ts';
import { strictInput } from './strict-input.ts';

/**
 * The sold tools: their inputs and outputs, how they are described and what they cost (TOOLS, at
 * the end). The HTTP (x402, API key) and MCP channels expose these schemas unchanged and add the
 * `_service` block; field names follow the public peer so its clients work against us.
 */

const Indicators = z.record(z.string(), z.number().nullable());

const DefaultedExchange = Exchange.optional().describe(
  "Omitted: the feed's default, BINANCE (the USDT-M perpetual) on the live feed; BINANCE_SPOT on the replay feed, whose replayed candles build every timeframe from 5m up (the perpetual's are 1h).",
);

/** The coin argument of the per-coin tools. */
const CoinArg = Coin.describe(
  'Coin symbol, e.g. BTC or ETH: letters and digits, upper-cased; the market is its USDT pair (spot or perpetual by exchange).',
);

/** A `timeframe` argument and its default; `horizon` says what the answer covers in its candles. */
const timeframeArg = (fallback: Timeframe, horizon: string) =>
  Timeframe.default(fallback).describe(`Candle timeframe (default ${fallback}): ${horizon}.`);

/** The default risk budget of the sizing block, in USD (the quote currency). */
export const DEFAULT_RISK_BUDGET_USD = 100;
/** The largest risk budget a call may state, in USD: a larger figure is likelier a unit slip than a budget. */
export const MAX_RISK_BUDGET_USD = 10_000_000;
/** The smallest: a cent, the unit the sizing's USD amounts are given in. */
export const MIN_RISK_BUDGET_USD = 0.01;

const RiskBudgetUsd = z
  .number()
  // Below a cent the notional and the losses at the stops would read 0 beside a quantity that is not.
  // No message of its own: issue-text words the refusal from these bounds with the value sent.
  .min(MIN_RISK_BUDGET_USD)
  .max(MAX_RISK_BUDGET_USD)
  .default(DEFAULT_RISK_BUDGET_USD)
  .describe(
    'Risk budget in USD (at least 0.01, at most 10,000,000; default 100): the answer sizes the position whose one-σ move over each horizon is this amount.',
  );

/** A stop the band implies: its price, its distance from the price and the loss there for the notional. */
const SizingStop = z.object({
  price: z.number().positive().describe('Stop price, in the quote currency (USD).'),
  distance_pct: z
    .number()
    .positive()
    .describe('Distance from the price, in percent: |stop − price| ÷ price × 100, to four decimals.'),
  loss_usd: z
    .number()
    .nonnegative()
    .nullable()
    .describe(
      "What the sized notional loses if the stop is hit, in USD: notional_usd × |stop − price| ÷ price (the distance before distance_pct's rounding), so risk_budget_usd × the stop's distance in σ.",
    ),
});

/**
 * Sizing for the caller's risk budget over one horizon: the notional whose one-σ move is the
 * budget, where σ is the forecast standard deviation of the log return over the horizon
 * (`expected_move_pct` / 100), and the stops the band beside it implies.
 */
export const SizingSchema = z.object({
  risk_budget_usd: z
    .number()
    .positive()
    .describe("The budget it was sized for, in USD (the call's riskBudgetUsd, default 100)."),
  notional_usd: z
    .number()
    .nonnegative()
    .nullable()
    .describe(
      'USD notional sized for one σ of the log return over the horizon: risk_budget_usd ÷ (expected_move_pct / 100), so a one-σ move gains or loses about the budget; null when σ is 0.',
    ),
  quantity: z
    .number()
    .nonnegative()
    .nullable()
    .describe(
      "The quantity in coins at the answer's price: the notional ÷ price to eight significant digits, taken before notional_usd's rounding to cents, so quantity × price lies within half a cent plus 5 × 10⁻⁸ of notional_usd, a share that shows at a budget of a few cents; null when σ is 0.",
    ),
  long_stop: SizingStop.nullable().describe(
    "A long's stop at band_low; null when band_low is not below the price.",
  ),
  short_stop: SizingStop.nullable().describe(
    "A short's stop at band_high; null when band_high is not above the price.",
  ),
});
export type Sizing = z.infer<typeof SizingSchema>;

export const GetTradeCallInput = strictInput({
  coin: CoinArg,
  timeframe: timeframeArg('15m', 'the verdict is computed on its closed candles and looks six of them ahead'),
  exchange: DefaultedExchange,
  includeReasoning: z
    .boolean()
    .default(true)
    .describe('Include `reasoning`, the call explained in words (default true).'),
  riskBudgetUsd: RiskBudgetUsd,
});
export type GetTradeCallInput = z.input<typeof GetTradeCallInput>;

/** Close time of the candle an answer used, as the answers carry it. */
const CloseSeconds = z
  .number()
  .int()
  .describe('Unix time in seconds (not ms) of the close of the last candle used.');
const LastPrice = z.number().describe('Close of the last candle used, in the quote currency (USD).');
const Score = z.number().describe('Raw composite score in [-1, 1] behind the call.');

/** Confidence of an answer carrying a verdict. */
const VerdictConfidence = z
  .number()
  .int()
  .min(0)
  .max(100)
  .describe(
    'Percent, 0–100. BUY/SELL: the calibrated chance the call beats the fee over the horizon. HOLD: the share of comparable leans that did not beat it (how often standing aside was right). confidence_meaning says which, in words.',
  );

/** What BUY, SELL and HOLD mean, on every answer carrying a verdict (trade calls, scan rows). */
const VerdictCall = Call.describe(
  'The verdict over the horizon (six candles of the timeframe): BUY, go long; SELL, go short; HOLD, stand aside (no trade advised): the score is inside the neutral band (|score| < 0.1), or this cell (venue kind × timeframe) has no direction that beat the 10 bps fee on the walk-forward evidence. lean says which way the score leans and what following it earned.',
);
/** What each regime label means, on every answer carrying one (docs/methodology.md, Market regimes). */
const AnswerRegime = Regime.describe(
  'The market regime from closed candles. trending-up / trending-down: directional strength (ADX) with the direction of +DI against −DI; they describe the move so far (the returns after them did not measurably differ on the training months). ranging: no directional strength, the price moved sideways. volatile: forecast volatility in the top of its recent range, larger swings ahead (size smaller for the same risk, widen stops). squeeze: forecast volatility near the bottom of its recent range, smaller swings, though a quiet stretch can end abruptly either way.',
);
/** Which feed an answer came from, said where a trading agent reads it. */
const AnswerFeed = FeedKind.describe(
  "live: computed from the venues' live candles and funding; replay: from recorded candles and funding replayed on an accelerated clock (a demonstration, not the market now).",
);

export const TradeCall = z.object({
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  call: VerdictCall,
  confidence: VerdictConfidence,
  confidence_meaning: VerdictMeaning.shape.confidence_meaning,
  score: Score,
  regime: AnswerRegime,
  price: LastPrice,
  timestamp: CloseSeconds,
  feed: AnswerFeed,
  reasoning: z.string().optional(),
  indicators: Indicators,
  verdictId: z.uuid().describe('Id of the recorded verdict, for later verification.'),
  signalHash: z
    .string()
    .describe("The verdict's content hash, chained to its market's previous verdict (checked at verifyUrl)."),
  verifyUrl: z
    .url()
    .optional()
    .describe(
      'Public proof that the verdict was recorded before its outcome (GET /verify/…): the hash chain now, the content once six candles have closed.',
    ),
  engineVersion: z.string(),
  /**
   * Forecast realised volatility over the next candles and the expected-move band, with the
   * sizing for the call's `riskBudgetUsd` over that horizon (its fields say their units).
   */
  volatility: VolatilityForecastSchema.extend({ sizing: SizingSchema }).optional(),
  edge: z
    .object({ cell: z.string(), measured: z.boolean(), reason: z.string() })
    .optional()
    .describe(
      'Whether this cell (venue kind × timeframe) emits BUY/SELL: only where walk-forward evidence showed timing skill in every fold and era and a net return above the fee; reason says why a HOLD is a HOLD.',
    ),
  lean: VerdictMeaning.shape.lean,
  trackRecord: TrackRecordBrief.optional().describe(
    'How often calls of this exchange, timeframe and confidence bucket were right once their outcomes were revealed (get_track_record has the whole record).',
  ),
});
export type TradeCall = z.infer<typeof TradeCall>;

export const GetMarketRegimeInput = strictInput({
  coin: CoinArg,
  timeframe: timeframeArg('4h', 'the regime is read from its closed candles'),
  exchange: DefaultedExchange,
});
export type GetMarketRegimeInput = z.input<typeof GetMarketRegimeInput>;

export const RegimeReading = z.object({
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  regime: AnswerRegime,
  confidence: z
    .number()
    .int()
    .min(0)
    .max(100)
    .describe('0–100: how clearly the metrics favour the label; a heuristic, not a probability.'),
  suggestion: z.string().describe('What the label says about the market, and what it does not, in words.'),
  metrics: Indicators,
  price: LastPrice,
  timestamp: CloseSeconds,
  feed: AnswerFeed,
  /** `volatile` / `squeeze` follow this forecast's percentile. */
  volatility: VolatilityForecastSchema,
  label_evidence: z
    .string()
    .optional()
    .describe(
      'Whether these labels carried information beyond a free trailing-volatility label on the training months, in words; for risk, use volatility.expected_move_pct.',
    ),
  confidence_meaning: z
    .string()
    .optional()
    .describe('What confidence means here, in words (a heuristic, not a probability).'),
});
export type RegimeReading = z.infer<typeof RegimeReading>;

/** A regime reading's input; the default timeframe is the hour. */
export const GetRiskForecastInput = GetMarketRegimeInput.extend({
  timeframe: timeframeArg('1h', 'the horizons are its next candle, six of its candles and one UTC day'),
  riskBudgetUsd: RiskBudgetUsd,
});
export type GetRiskForecastInput = z.input<typeof GetRiskForecastInput>;

export const RiskHorizonForecast = z.object({
  horizon: RiskHorizonKey.describe(
    "next: the next candle; verdict: the trade call's horizon (6 candles); day: one UTC day.",
  ),
  candles: z.number().int().positive().describe('The horizon in candles of the timeframe.'),
  hours: z.number().positive().describe('The horizon in hours.'),
  expected_move_pct: VolatilityForecastSchema.shape.expected_move_pct,
  band_coverage: VolatilityForecastSchema.shape.band_coverage,
  band_low: VolatilityForecastSchema.shape.band_low,
  band_high: VolatilityForecastSchema.shape.band_high,
  model_timeframe: VolatilityForecastSchema.shape.model_timeframe,
  sizing: SizingSchema.describe(
    "The position that risks the call's riskBudgetUsd at one σ over this horizon, and its stops.",
  ),
});

/** The market, price, close time and feed of a regime reading, and the horizons. */
export const RiskForecast = RegimeReading.pick({
  coin: true,
  timeframe: true,
  exchange: true,
  price: true,
  timestamp: true,
  feed: true,
  regime: true,
}).extend({
  horizons: z.array(RiskHorizonForecast),
  percentile: z
    .number()
    .min(0)
    .max(100)
    .describe("Rank (0–100) of the verdict-horizon forecast among the market's recent forecasts."),
  label_evidence: z
    .string()
    .describe('What the regime labels are worth against a free trailing-volatility label, in words.'),
  /**
   * How the forecast held up on the test months (docs/evaluation-risk.md), counted from the shipped
   * baselines; on a timeframe never scored (1m, 3m) that it was not evaluated and whose models it runs.
   */
  evidence: z.string(),
});
export type RiskForecast = z.infer<typeof RiskForecast>;

/** What one tool result may hold, in characters: what MCP hosts accept. */
export const MAX_TOOL_RESULT_CHARS = 150_000;
export const MAX_FUNDING_ARB_LIMIT = 30;
export const MAX_SCAN_LIMIT = 100;

/** What a scan ranks its rows by (the rankBy argument says each key's order). */
export const ScanRankBy = z.enum(['confidence', 'lean', 'expectedMove', 'volume']);
export type ScanRankBy = z.infer<typeof ScanRankBy>;

export const ScanTradeCallsInput = strictInput({
  topN: z
    .number()
    .int()
    .min(1)
    .max(100)
    .default(20)
    .describe(
      'How many markets to evaluate (1–100, default 20): the largest, by open interest where every market reports it, else by 24 h quote volume. Each is either a row of calls or named in skipped.',
    ),
  timeframe: timeframeArg('15m', 'each market is evaluated as get_trade_call evaluates it on this timeframe'),
  exchange: DefaultedExchange,
  minConfidence: z
    .number()
    .int()
    .min(0)
    .max(100)
    .default(0)
    .describe('Leave out rows whose confidence (0–100) is below this (default 0); each is named in skipped.'),
  includeHolds: z
    .boolean()
    .default(true)
    .describe(
      'HOLDs are rows like any other, with their lean, expected move and regime (default true); false keeps BUY/SELL calls and names each HOLD in skipped.',
    ),
  limit: z
    .number()
    .int()
    .min(1)
    .max(MAX_SCAN_LIMIT)
    .default(10)
    .describe(
      `The most rows to return (1–${MAX_SCAN_LIMIT}, default 10), in rankBy order after the filters, from the topN markets evaluated; the rows ranked below it are named in skipped ("ranked N by <rankBy>, below the limit asked"). A limit of topN or more returns every market evaluated.`,
    ),
  rankBy: ScanRankBy.default('confidence').describe(
    'Order of the rows, largest first (default confidence): confidence (then |score|), lean (lean strength: |score|, then confidence), expectedMove (expectedMovePct; rows without one last), volume (24 h quote volume).',
  ),
});
export type ScanTradeCallsInput = z.input<typeof ScanTradeCallsInput>;

const QuoteVolume24h = z
  .number()
  .nullable()
  .describe('Volume of the last 24 h in the quote currency (USD); null when the feed does not know it.');

export const ScanTradeCallsOutput = z.object({
  timeframe: Timeframe,
  exchange: Exchange,
  feed: AnswerFeed,
  timestamp: z.number().int().describe('Unix time in seconds (not ms) of the feed when the scan ran.'),
  scanned: z.number().int().describe('How many markets the scan took: topN, or fewer when there are fewer.'),
  calls: z.array(
    z.object({
      rank: z.number().int().positive().describe('Position in rankBy order, from 1.'),
      coin: z.string(),
      call: VerdictCall,
      confidence: VerdictConfidence,
      score: Score,
      regime: AnswerRegime,
      price: LastPrice,
      timestamp: CloseSeconds.describe(
        "Unix time in seconds (not ms) of the close of the candle this row's verdict is for, as get_trade_call's timestamp (the scan's own timestamp is when it ran).",
      ),
      quoteVolume24h: QuoteVolume24h,
      verdictId: z.uuid().describe('Id of the recorded verdict, for later verification.'),
      // No sizing per row: at topN and limit 100 the longest row measured (PEPE, 708 characters)
      // makes a 147,118-character MCP result of the 150,000 hosts accept; the notional alone
      // takes it to 151,118-152,718 (budgets 0.01 to 10,000,000), notional and both stop
      // distances to 163,518-168,718 (short keys to long ones), the full block to
      // 194,318-200,518. The words say how.
      expectedMovePct: z
        .number()
        .nullable()
        .describe(
          "Percent (not a fraction): forecast standard deviation of the log return over the verdict horizon (six candles), as get_trade_call's volatility.expected_move_pct; null without a forecast. Rows carry no sizing: the notional whose one-σ move is a budget B is B ÷ (expectedMovePct / 100) USD, and get_trade_call answers it, with the stops its band implies, for its riskBudgetUsd.",
        ),
      lean: VerdictMeaning.shape.lean,
      confidence_meaning: VerdictMeaning.shape.confidence_meaning,
    }),
  ),
  skipped: z
    .array(z.object({ coin: z.string(), reason: z.string() }))
    .describe(
      'Every market scanned that is not a row, and why: not evaluated (no candles, no verdict), left out by a filter asked for (includeHolds: false, minConfidence), or ranked below limit.',
    ),
  note: z
    .string()
    .optional()
    .describe('Present when calls is empty: why, in words (calls is never empty without it).'),
});
export type ScanTradeCallsOutput = z.infer<typeof ScanTradeCallsOutput>;

export const ScanFundingArbInput = strictInput({
  // The default is the smallest spread the carry model was fitted on: smaller spreads have no
  // measured carry. No threshold hides the fee: the carry figures and `fees` say what it costs.
  minSpreadBps: z
    .number()
    .min(0)
    .max(10_000)
    .default(0.5)
    .describe(
      'Smallest spread now to return, in basis points per 8 h (the hourly-normalised funding spread × 8; 1 bps = 0.01 %). Default 0.5, the smallest spread the carry figures were fitted on.',
    ),
  // At most 30: an opportunity is about 1,700 characters on three venues (more on more), and an
  // MCP result carries its JSON twice (structuredContent and its escaped text): 40 measured
  // 139,000 of the 150,000 characters hosts take, too close for opportunities on more venues.
  limit: z
    .number()
    .int()
    .min(1)
    .max(MAX_FUNDING_ARB_LIMIT)
    .default(10)
    .describe(
      `The most opportunities to return (1–${MAX_FUNDING_ARB_LIMIT}, default 10), the best by expected net carry first.`,
    ),
  coins: z
    .array(Coin)
    .min(1)
    .max(200)
    .optional()
    .describe(
      'Restrict to these symbols (such as BTC; 1–200; a symbol named twice, in any letter case, is read once). Omitted: all with funding on two venues or more.',
    ),
  // Declared in the schema the tool advertises (uniqueItems), so a client validating against it
  // is told before the call what the refine refuses.
  exchanges: z
    .array(Exchange)
    .min(2)
    .refine((v) => new Set(v).size === v.length, 'exchanges must not repeat')
    .meta({ uniqueItems: true })
    .optional()
    .describe('Restrict to these perpetual venues (two or more, none twice). Omitted: all with funding.'),
  minLiquidityUsd: z
    .number()
    .min(0)
    .optional()
    .describe(
      'Drop a leg whose 24 h quote volume, in USD, is below this, or unknown (quoteVolume24h null, as BYBIT and HYPERLIQUID in the shipped data). Omitted: no volume filter.',
    ),
});
export type ScanFundingArbInput = z.input<typeof ScanFundingArbInput>;

const unixMs = (what: string) => `${what}, Unix time in milliseconds (not seconds)`;

export const VenueFunding = z.object({
  exchange: Exchange,
  rate: z
    .number()
    .describe(
      'The rate of one settlement as the venue states it: a decimal fraction (0.0001 = 0.01 %) per intervalHours.',
    ),
  intervalHours: z
    .number()
    .positive()
    .describe("Hours between the venue's settlements of this coin (1, 4 or 8)."),
  hourlyRate: z.number().describe('rate ÷ intervalHours: a decimal fraction per hour.'),
  annualizedPct: z.number().describe('hourlyRate × 8760 × 100: percent per year.'),
  fundingTime: z
    .number()
    .int()
    .describe(`${unixMs('When the settlement of rate was made')}.`),
  nextFundingTime: z
    .number()
    .int()
    .nullable()
    .describe(`${unixMs('When the next settlement is due')}; null when the venue does not say.`),
  quoteVolume24h: QuoteVolume24h,
});

export const CarryHorizon = z.object({
  hours: z.number().int().positive().describe('Holding time, hours.'),
  naiveCarryBps: z
    .number()
    .describe("Spread now × hours: what the spread alone advertises, in bps of one leg's notional."),
  expectedCarryBps: z
    .number()
    .describe(
      "Carry expected to be collected over the horizon, from how spreads decayed in history, in bps of one leg's notional.",
    ),
  expectedNetBps: z
    .number()
    .describe(
      'expectedCarryBps minus feeBps (entering and leaving both legs), bps; below 0 the fees are not covered.',
    ),
  shareNetPositive: z
    .number()
    .min(0)
    .max(1)
    .describe(
      'Fraction (0–1, not percent) of similar training opportunities (the same spread bucket), to 4 decimals, whose carry beat feeBps by this horizon, each weighted by recency: halved for every halfLifeDays of the carry fit (7 in the shipped fit) between its outcome and the end of the training months, so the last weeks of training weigh most.',
    ),
  samples: z
    .number()
    .int()
    .nonnegative()
    .describe(
      'Training opportunities behind the figures, counted unweighted (shareNetPositive weighs them by recency).',
    ),
});

export const Carry = z.object({
  feeBps: z
    .number()
    .nonnegative()
    .describe("Taker fees on entry and exit of both legs, in bps of one leg's notional."),
  horizons: z.array(CarryHorizon),
  breakEvenHours: z
    .number()
    .nullable()
    .describe('Hours until the expected carry covers feeBps; null when not within 7 days.'),
  expectedNetCarryBps: z
    .number()
    .describe(
      'Best expectedNetBps over the horizons, bps (the ranking key); below 0 no horizon covers the fees.',
    ),
  bestHorizonHours: z
    .number()
    .int()
    .positive()
    .describe('The horizon, hours, that expectedNetCarryBps is reached at.'),
});

export const ScanFundingArbOutput = z.object({
  feed: AnswerFeed,
  timestamp: z.number().int().describe('Unix time in seconds (not ms) of the feed when the scan ran.'),
  opportunities: z
    .array(
      z.object({
        coin: z.string(),
        venues: z
          .array(VenueFunding)
          .describe("Each venue's latest fresh settlement, lowest hourly rate first."),
        best: z.object({
          longVenue: Exchange.describe('Go long where funding is lowest (longs receive or pay least)...'),
          shortVenue: Exchange.describe('...and short where it is highest.'),
          spreadBps: z
            .number()
            .describe(
              'Spread of the hourly-normalised rates, expressed per 8 h, in basis points (as minSpreadBps).',
            ),
          spreadBpsPerHour: z.number().describe('The same spread per hour, in basis points.'),
          annualizedPct: z.number().describe('The spread per year, in percent.'),
          longNextFundingTime: z
            .number()
            .int()
            .nullable()
            .describe(`${unixMs("The long venue's next settlement")}; null when unknown.`),
          shortNextFundingTime: z
            .number()
            .int()
            .nullable()
            .describe(`${unixMs("The short venue's next settlement")}; null when unknown.`),
        }),
        carry: Carry,
      }),
    )
    .describe('Ranked by expected net carry (carry.expectedNetCarryBps), best first.'),
  venues: z
    .array(
      VenueStatusSchema.extend({
        lastError: FailureReason.optional().describe(
          `Present when the venue's last request failed: ${FailureReason.description}`,
        ),
      }),
    )
    .describe(
      'The state of each venue scanned; one that could not answer is ok: false and left out of opportunities.',
    ),
  note: z
    .string()
    .optional()
    .describe(
      'Present when opportunities is empty: why, in words, each filter with how many coins it removed (opportunities is never empty without it).',
    ),
  fees: z
    .string()
    .optional()
    .describe(
      "Present when opportunities is not empty: how many of them are expected to cover both legs' fees within 72 h, in words.",
    ),
});
export type ScanFundingArbOutput = z.infer<typeof ScanFundingArbOutput>;

/** The track record over a window, as GET /api/track-record?window= serves it, narrowed as asked. */
export const GetTrackRecordInput = strictInput({
  window: TrackRecordWindow.default('all').describe(
    '7d, 30d, 90d or all (default): the resolved verdicts counted',
  ),
  exchange: Exchange.optional().describe(
    "Only this venue's lines, and the baselines of its kind (spot or perp); omitted: every venue",
  ),
  timeframe: Timeframe.optional().describe(
    "Only this timeframe's lines and baselines; omitted: every timeframe",
  ),
});
export type GetTrackRecordInput = z.input<typeof GetTrackRecordInput>;

/** A config key holding one call's price, in atomic units of the rails' asset. */
export type PriceKey = Extract<keyof Config, `X402_PRICE_${string}`>;
export type ToolPrices = Pick<Config, PriceKey>;

/**
 * Which configured price a call pays. `by` prices by one input field (the value as parsed, so a
 * defaulted field prices as its default); every value the field can take is listed, so discovery
 * can publish each amount without guessing the field's domain.
 */
export interface PriceRule {
  key: PriceKey;
  by?: { field: string; keys: Record<string, PriceKey> };
}

/** MCP tool annotations: hints a client may use to decide whether to ask before calling. */
export interface ToolAnnotations {
  title: string;
  readOnlyHint: boolean;
  openWorldHint: boolean;
}

/**
 * One sold tool, as every channel publishes it: MCP tools/list, the x402 quote and its bazaar
 * extension, the OpenAPI document, /.well-known/*, /llms.txt and server.json all read this.
 */
export interface ToolSpec<I extends z.ZodType = z.ZodType, O extends z.ZodType = z.ZodType> {
  input: I;
  output: O;
  title: string;
  description: string;
  annotations: ToolAnnotations;
  /** Valid arguments, shown by discovery documents and sent by the discovery test. */
  example: z.input<I>;
  price: PriceRule;
}

// The title is written once; the annotations' copy is what MCP clients that only read
// annotations display. Every sold tool is read-only (a call records a verdict but changes nothing
// the caller owns) and open-world (answers follow live markets outside the service).
function tool<I extends z.ZodType, O extends z.ZodType>(
  spec: Omit<ToolSpec<I, O>, 'annotations'>,
): ToolSpec<I, O> {
  return { ...spec, annotations: { title: spec.title, readOnlyHint: true, openWorldHint: true } };
}

/** Short timeframes cost more; the rest pay the base trade-call price. */
const TRADE_CALL_PRICE_KEYS: Record<Timeframe, PriceKey> = {
  ...(Object.fromEntries(TIMEFRAMES.map((t) => [t, 'X402_PRICE_GET_TRADE_CALL'])) as Record<
    Timeframe,
    PriceKey
  >),
  '1m': 'X402_PRICE_GET_TRADE_CALL_1M',
  '3m': 'X402_PRICE_GET_TRADE_CALL_3M',
  '5m': 'X402_PRICE_GET_TRADE_CALL_5M',
};

/** The sold tools. A new paid tool is one entry here and its operation in the MCP registry. */
export const TOOLS = {
  get_trade_call: tool({
    input: GetTradeCallInput,
    output: TradeCall,
    title: 'Trade call',
    description:
      'Composite BUY / SELL / HOLD verdict for a coin on one timeframe and venue, from closed candles only (HOLD: stand aside, no trade advised), with confidence (0–100; confidence_meaning says what it measures), regime, indicator readings, a verifiable signal hash, and sizing for a stated risk budget (riskBudgetUsd, default 100 USD): the notional whose one-σ move over the horizon is the budget, and the stops its band implies.',
    example: { coin: 'BTC', timeframe: '1h' },
    price: { key: 'X402_PRICE_GET_TRADE_CALL', by: { field: 'timeframe', keys: TRADE_CALL_PRICE_KEYS } },
  }),
  get_market_regime: tool({
    input: GetMarketRegimeInput,
    output: RegimeReading,
    title: 'Market regime',
    // The labels are the enum's own, so the description cannot name one the answer never carries.
    description: `Market regime (${Regime.options.join(', ')}) for a coin and timeframe, with the metrics behind it.`,
    example: { coin: 'ETH', timeframe: '4h' },
    price: { key: 'X402_PRICE_GET_MARKET_REGIME' },
  }),
  get_risk_forecast: tool({
    input: GetRiskForecastInput,
    output: RiskForecast,
    title: 'Risk forecast',
    description:
      'Expected move and its 80 % band for a coin on one timeframe and venue, over the next candle, six candles and one day (HAR-type volatility model fitted by QLIKE before the test months and scored on them against RiskMetrics EWMA, GARCH(1,1), HAR-RV and a free trailing band; 1m and 3m run the 5m models, unscored), each with sizing for a stated risk budget (riskBudgetUsd, default 100 USD): the notional whose one-σ move over the horizon is the budget, and the stops the band implies.',
    example: { coin: 'BTC', timeframe: '1h' },
    // Priced like a regime reading: the same computation over the same market state.
    price: { key: 'X402_PRICE_GET_MARKET_REGIME' },
  }),
  get_track_record: tool({
    input: GetTrackRecordInput,
    output: TrackRecordResponse,
    title: 'Track record',
    description:
      "How the service's own answers did once their outcomes were in, over a window (7d, 30d, 90d or all): overall and per venue and timeframe, calls, hit rate with its 95 % interval beside always-BUY, always-SELL and random calls at the same mix, mean net bps after the 10 bps fee, and the risk forecast's record (band coverage beside the coverage it states, σ served ÷ realised); the free baselines measured out of sample (always-HOLD, the best fade/follow rule, a trailing-volatility band, EWMA/GARCH/HAR-RV where scored); the shipped funding-carry fit. GET /api/track-record's answer, its lines and baselines narrowed to the exchange and timeframe asked (overall stays the whole service's line, labelled ALL): hit rates per confidence bucket, and the risk baselines at the next-candle and one-day horizons beside the six-candle one, come when one exchange or timeframe is asked; the day-by-day series is left to GET /api/track-record.",
    example: { window: '30d' },
    // Priced like a regime reading: a read of state the service already holds.
    price: { key: 'X402_PRICE_GET_MARKET_REGIME' },
  }),
  scan_trade_calls: tool({
    input: ScanTradeCallsInput,
    output: ScanTradeCallsOutput,
    title: 'Scan trade calls',
    description:
      "Evaluates a venue's top-N markets (topN, default 20) and lists up to limit of them (default 10) ranked by confidence, lean strength, expected move or volume (rankBy): each row with its call (HOLD included unless includeHolds is false), lean, expected move and regime. Every market evaluated and not listed (filtered out, not evaluable, or ranked below limit) is named in skipped with the reason, and an empty list carries a note saying why.",
    example: { limit: 5 },
    price: { key: 'X402_PRICE_SCAN_TRADE_CALLS' },
  }),
  scan_funding_arb: tool({
    input: ScanFundingArbInput,
    output: ScanFundingArbOutput,
    title: 'Funding arbitrage scan',
    // The ranking is the sort of services/engine/funding-scan.ts; the horizons those of
    // CARRY_HORIZONS_HOURS (services/engine/funding/carry.ts): tool-table.unit.test.ts checks both.
    description:
      'Perpetual funding-rate spreads across venues, normalised per hour and annualised, with the best long/short pair per coin, ranked by expected net carry (carry.expectedNetCarryBps: the most, over horizons of 8 hours to 7 days, that the spread is expected to collect, judged by how such spreads decayed in history, after entry and exit fees on both legs), not by the spread now. fees says in words how many listed cover the fees within 72 h; an empty list carries a note saying which filter left out what.',
    example: { limit: 5 },
    price: { key: 'X402_PRICE_SCAN_FUNDING_ARB' },
  }),
} as const;
export type ToolName = keyof typeof TOOLS;
export const TOOL_NAMES = Object.keys(TOOLS) as ToolName[];

/** Input and output per tool, for readers that need only the contracts. */
export const TOOL_SCHEMAS = Object.fromEntries(
  TOOL_NAMES.map((name) => [name, { input: TOOLS[name].input, output: TOOLS[name].output }]),
) as { [N in ToolName]: { input: (typeof TOOLS)[N]['input']; output: (typeof TOOLS)[N]['output'] } };

/** The price key a call reads: `input` is the parsed body, or null for the base call. */
export function priceKeyOf(rule: PriceRule, input: unknown | null): PriceKey {
  if (!rule.by || input === null || typeof input !== 'object') return rule.key;
  const value = (input as Record<string, unknown>)[rule.by.field];
  return (typeof value === 'string' ? rule.by.keys[value] : undefined) ?? rule.key;
}
