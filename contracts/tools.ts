import { z } from 'zod';
import type { Config } from './config.ts';
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

/**
 * Omitted, the venue is the feed's default: BINANCE (the USDT-M perpetual) on the live feed;
 * on the replay feed BINANCE_SPOT, the only venue whose candles build every timeframe from 5m up
 * (the perpetual's replay candles are 1h only).
 */
const DefaultedExchange = Exchange.optional();

/** The default risk budget of the sizing block, in USD (the quote currency). */
export const DEFAULT_RISK_BUDGET_USD = 100;
/** The largest risk budget a call may state, in USD: a larger figure is likelier a unit slip than a budget. */
export const MAX_RISK_BUDGET_USD = 10_000_000;
/** The smallest: a cent, the unit the sizing's USD amounts are given in. */
export const MIN_RISK_BUDGET_USD = 0.01;

/**
 * What the caller is willing to lose on a one-σ move over the horizon, in USD (the quote
 * currency): the answer's `sizing` is the position that risks it. Above 0, at most 10,000,000.
 */
const RiskBudgetUsd = z
  .number()
  // Below a cent the notional and the losses at the stops would read 0 beside a quantity that is not.
  .min(MIN_RISK_BUDGET_USD, `must be at least ${MIN_RISK_BUDGET_USD} (USD)`)
  .max(MAX_RISK_BUDGET_USD, `must be at most ${MAX_RISK_BUDGET_USD} (USD)`)
  .default(DEFAULT_RISK_BUDGET_USD)
  .describe(
    'Risk budget in USD (at least 0.01, at most 10,000,000; default 100): the answer sizes the position whose one-σ move over each horizon is this amount.',
  );

/** A stop the band implies: its price, its distance from the price and the loss there for the notional. */
const SizingStop = z.object({
  price: z.number().positive(),
  /** |stop − price| ÷ price × 100. */
  distance_pct: z.number().positive(),
  /** What the sized notional loses if the stop is hit, in USD: notional × distance_pct / 100. */
  loss_usd: z.number().nonnegative().nullable(),
});

/**
 * Sizing for the caller's risk budget over one horizon: the notional whose one-σ move is the
 * budget, where σ is the forecast standard deviation of the log return over the horizon
 * (`expected_move_pct` / 100), and the stops the band beside it implies.
 */
export const SizingSchema = z.object({
  /** The budget it was sized for, in USD (the call's `riskBudgetUsd`, default 100). */
  risk_budget_usd: z.number().positive(),
  /**
   * Notional in USD sized for one σ of the log return over the horizon: risk_budget_usd ÷ σ, so a
   * one-σ move of the log return gains or loses about the budget. Null when σ is 0.
   */
  notional_usd: z
    .number()
    .nonnegative()
    .nullable()
    .describe(
      'USD notional sized for one σ of the log return over the horizon: risk_budget_usd ÷ (expected_move_pct / 100); null when σ is 0.',
    ),
  /** notional_usd ÷ price: the quantity in coins at the answer's price. Null when σ is 0. */
  quantity: z.number().nonnegative().nullable(),
  /** A long's stop at band_low; null when band_low is not below the price. */
  long_stop: SizingStop.nullable(),
  /** A short's stop at band_high; null when band_high is not above the price. */
  short_stop: SizingStop.nullable(),
});
export type Sizing = z.infer<typeof SizingSchema>;

export const GetTradeCallInput = strictInput({
  coin: Coin,
  timeframe: Timeframe.default('15m'),
  exchange: DefaultedExchange,
  includeReasoning: z.boolean().default(true),
  riskBudgetUsd: RiskBudgetUsd,
});
export type GetTradeCallInput = z.input<typeof GetTradeCallInput>;

export const TradeCall = z.object({
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  call: Call,
  /**
   * BUY/SELL: the calibrated chance the call beats the fee over the horizon. HOLD: the share of
   * comparable leans that did not beat it (how often standing aside was right). `confidence_meaning`
   * says which, in words.
   */
  confidence: z.number().int().min(0).max(100),
  /** What `confidence` means for this answer, in words (every trade call, HOLD included). */
  confidence_meaning: VerdictMeaning.shape.confidence_meaning,
  /** Raw composite score in [-1, 1] behind the call. */
  score: z.number(),
  regime: Regime,
  price: z.number(),
  /** Epoch seconds of the close of the last candle used. */
  timestamp: z.number().int(),
  feed: FeedKind,
  reasoning: z.string().optional(),
  indicators: Indicators,
  /** Id of the VerdictRecorded event and its chained content hash, for later verification. */
  verdictId: z.uuid(),
  signalHash: z.string(),
  /** Public proof of recording (GET /verify/...): the chain now, the content once the outcome is known. */
  verifyUrl: z.url().optional(),
  engineVersion: z.string(),
  /**
   * Forecast realised volatility over the next candles and the expected-move band, with the
   * sizing for the call's `riskBudgetUsd` over that horizon.
   */
  volatility: VolatilityForecastSchema.extend({ sizing: SizingSchema }).optional(),
  /**
   * Whether calls are emitted in this cell (venue kind × timeframe): only where walk-forward
   * evidence showed timing skill in every fold and era; elsewhere the call is HOLD and the
   * reason says "no measured edge here".
   */
  edge: z.object({ cell: z.string(), measured: z.boolean(), reason: z.string() }).optional(),
  /**
   * The direction the score leans (followed or faded as the cell's table says) and what following
   * such leans earned after the fee before the test months: a HOLD says what it declines and why.
   */
  lean: VerdictMeaning.shape.lean,
  /** How often calls of this exchange, timeframe and confidence bucket were right (revealed ones). */
  trackRecord: TrackRecordBrief.optional(),
});
export type TradeCall = z.infer<typeof TradeCall>;

export const GetMarketRegimeInput = strictInput({
  coin: Coin,
  timeframe: Timeframe.default('4h'),
  exchange: DefaultedExchange,
});
export type GetMarketRegimeInput = z.input<typeof GetMarketRegimeInput>;

export const RegimeReading = z.object({
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  regime: Regime,
  confidence: z.number().int().min(0).max(100),
  suggestion: z.string(),
  metrics: Indicators,
  price: z.number(),
  timestamp: z.number().int(),
  feed: FeedKind,
  /** `volatile` / `squeeze` follow this forecast's percentile. */
  volatility: VolatilityForecastSchema,
  /** Whether these labels carried information beyond a free trailing-volatility label, in words. */
  label_evidence: z.string().optional(),
  /** What `confidence` means here, in words (a heuristic, not a probability). */
  confidence_meaning: z.string().optional(),
});
export type RegimeReading = z.infer<typeof RegimeReading>;

/** A regime reading's input; the default timeframe is the hour. */
export const GetRiskForecastInput = GetMarketRegimeInput.extend({
  timeframe: Timeframe.default('1h'),
  riskBudgetUsd: RiskBudgetUsd,
});
export type GetRiskForecastInput = z.input<typeof GetRiskForecastInput>;

export const RiskHorizonForecast = z.object({
  /** `next`: the next candle; `verdict`: the trade call's horizon (6 candles); `day`: one UTC day. */
  horizon: RiskHorizonKey,
  candles: z.number().int().positive(),
  hours: z.number().positive(),
  /** Forecast standard deviation of the log return over the horizon, in percent. */
  expected_move_pct: z.number().nonnegative(),
  /** Nominal share of closes after the horizon inside [band_low, band_high]. */
  band_coverage: z.number().min(0).max(1),
  band_low: z.number().positive(),
  band_high: z.number().positive(),
  /** Timeframe whose fitted model was used. */
  model_timeframe: Timeframe,
  /** The position that risks the call's `riskBudgetUsd` at one σ over this horizon, and its stops. */
  sizing: SizingSchema,
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
  /** Rank (0–100) of the verdict-horizon forecast among the market's recent forecasts. */
  percentile: z.number().min(0).max(100),
  /** What the regime labels are worth against a free trailing-volatility label, in words. */
  label_evidence: z.string(),
  /** How the bands and the ranking held up out of sample (docs/evaluation.md), in words. */
  evidence: z.string(),
});
export type RiskForecast = z.infer<typeof RiskForecast>;

/** What one tool result may hold, in characters: what MCP hosts accept. */
export const MAX_TOOL_RESULT_CHARS = 150_000;
export const MAX_FUNDING_ARB_LIMIT = 30;
export const MAX_SCAN_LIMIT = 100;

/**
 * What a scan ranks its rows by, largest first: `confidence` (then |score|), `lean` (lean
 * strength: |score|, then confidence), `expectedMove` (expectedMovePct; rows without one last),
 * `volume` (24 h quote volume).
 */
export const ScanRankBy = z.enum(['confidence', 'lean', 'expectedMove', 'volume']);
export type ScanRankBy = z.infer<typeof ScanRankBy>;

export const ScanTradeCallsInput = strictInput({
  topN: z.number().int().min(1).max(100).default(20),
  timeframe: Timeframe.default('15m'),
  exchange: DefaultedExchange,
  minConfidence: z.number().int().min(0).max(100).default(0),
  /** HOLDs are rows like any other (with their lean, expected move and regime); false asks for BUY/SELL calls only. */
  includeHolds: z.boolean().default(true),
  limit: z.number().int().min(1).max(MAX_SCAN_LIMIT).default(10),
  rankBy: ScanRankBy.default('confidence'),
});
export type ScanTradeCallsInput = z.input<typeof ScanTradeCallsInput>;

export const ScanTradeCallsOutput = z.object({
  timeframe: Timeframe,
  exchange: Exchange,
  feed: FeedKind,
  timestamp: z.number().int(),
  /** How many of the top-N markets were evaluated. */
  scanned: z.number().int(),
  calls: z.array(
    z.object({
      rank: z.number().int().positive(),
      coin: z.string(),
      call: Call,
      confidence: z.number().int(),
      score: z.number(),
      regime: Regime,
      price: z.number(),
      quoteVolume24h: z.number().nullable(),
      verdictId: z.uuid(),
      /** Forecast σ of the log return over the verdict horizon, percent (see get_trade_call). */
      expectedMovePct: z.number().nullable(),
      /** The direction a call would point and what such leans earned (see get_trade_call). */
      lean: VerdictMeaning.shape.lean,
      /** What `confidence` means for this row, in words (HOLD included). */
      confidence_meaning: VerdictMeaning.shape.confidence_meaning,
    }),
  ),
  /**
   * Every market of the top-N not among the rows, and why: not evaluated (no candles, no
   * verdict), left out by a filter asked for (`includeHolds: false`, `minConfidence`), or ranked
   * below `limit`.
   */
  skipped: z.array(z.object({ coin: z.string(), reason: z.string() })),
  /** Present when `calls` is empty: why, in words (an empty list never comes without one). */
  note: z.string().optional(),
});
export type ScanTradeCallsOutput = z.infer<typeof ScanTradeCallsOutput>;

export const ScanFundingArbInput = strictInput({
  /**
   * Spread now, bps per 8 h. The default is the smallest spread the carry model was fitted on:
   * smaller spreads have no measured carry. Most spreads do not cover the fee within 72 h; the
   * figures below say so rather than a threshold hiding it.
   */
  minSpreadBps: z.number().min(0).max(10_000).default(0.5),
  /**
   * At most 30: an opportunity is about 1,700 characters on three venues (more on more), and an
   * MCP result carries its JSON twice (structuredContent and its escaped text): 40 measured
   * 139,000 of the 150,000 characters hosts take, too close for opportunities on more venues.
   */
  limit: z.number().int().min(1).max(MAX_FUNDING_ARB_LIMIT).default(10),
  /** Restrict to these coins; default every coin listed on at least two venues. */
  coins: z.array(Coin).min(1).max(200).optional(),
  /** Restrict to these venues (two or more, none twice); default every venue the feed has funding for. */
  exchanges: z
    .array(Exchange)
    .min(2)
    .refine((v) => new Set(v).size === v.length, 'exchanges must not repeat')
    .optional(),
  /** Leave out venues whose 24 h quote volume is below this (unknown volume is left out too). */
  minLiquidityUsd: z.number().min(0).optional(),
});
export type ScanFundingArbInput = z.input<typeof ScanFundingArbInput>;

export const VenueFunding = z.object({
  exchange: Exchange,
  /** The rate of one settlement, as the venue states it. */
  rate: z.number(),
  intervalHours: z.number().positive(),
  hourlyRate: z.number(),
  /** hourlyRate × 8760 × 100. */
  annualizedPct: z.number(),
  fundingTime: z.number().int(),
  nextFundingTime: z.number().int().nullable(),
  quoteVolume24h: z.number().nullable(),
});

export const CarryHorizon = z.object({
  hours: z.number().int().positive(),
  /** Spread now × hours: what the spread alone advertises (bps of one leg's notional). */
  naiveCarryBps: z.number(),
  /** Carry expected to be collected over the horizon, from how spreads decayed in history. */
  expectedCarryBps: z.number(),
  /** expectedCarryBps minus the fee for entering and leaving both legs. */
  expectedNetBps: z.number(),
  /** Share of similar historical opportunities that ended net positive at this horizon. */
  shareNetPositive: z.number().min(0).max(1),
  /** Training opportunities behind the figures. */
  samples: z.number().int().nonnegative(),
});

export const Carry = z.object({
  /** Taker fees on entry and exit of both legs, bps of one leg's notional. */
  feeBps: z.number().nonnegative(),
  horizons: z.array(CarryHorizon),
  /** Hours until the expected carry covers the fee; null when not within 7 days. */
  breakEvenHours: z.number().nullable(),
  /** Best expected net carry over the horizons (the ranking key) and the horizon it is reached at. */
  expectedNetCarryBps: z.number(),
  bestHorizonHours: z.number().int().positive(),
});

export const ScanFundingArbOutput = z.object({
  feed: FeedKind,
  timestamp: z.number().int(),
  /** Ranked by expected net carry (carry.expectedNetCarryBps), best first. */
  opportunities: z.array(
    z.object({
      coin: z.string(),
      venues: z.array(VenueFunding),
      best: z.object({
        /** Go long where funding is lowest (longs receive or pay least)... */
        longVenue: Exchange,
        /** ...and short where it is highest. */
        shortVenue: Exchange,
        /** Spread of the hourly-normalised rates, expressed per 8 h, in basis points. */
        spreadBps: z.number(),
        spreadBpsPerHour: z.number(),
        annualizedPct: z.number(),
        longNextFundingTime: z.number().int().nullable(),
        shortNextFundingTime: z.number().int().nullable(),
      }),
      carry: Carry,
    }),
  ),
  venues: z.array(VenueStatusSchema),
  /** Present when `opportunities` is empty: why, in words, each filter with how many coins it removed. */
  note: z.string().optional(),
  /** Present when `opportunities` is not empty: how many of them are expected to cover both legs' fees within 72 h, in words. */
  fees: z.string().optional(),
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
      'Composite BUY / SELL / HOLD verdict for a coin on one timeframe and venue, from closed candles only, with calibrated confidence, regime, indicator readings, a verifiable signal hash, and sizing for a stated risk budget (riskBudgetUsd, default 100 USD): the notional whose one-σ move over the horizon is the budget, and the stops its band implies.',
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
      'Expected move and its 80 % band for a coin on one timeframe and venue, over the next candle, six candles and one day (HAR-type volatility model fitted by QLIKE before the test months and scored out of sample against RiskMetrics EWMA, GARCH(1,1), HAR-RV and a free trailing band), each with sizing for a stated risk budget (riskBudgetUsd, default 100 USD): the notional whose one-σ move over the horizon is the budget, and the stops the band implies.',
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
