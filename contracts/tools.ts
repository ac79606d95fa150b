import { z } from 'zod';
import { Call, Coin, Exchange, FeedKind, Regime, Timeframe, VenueStatusSchema } from './market.ts';

/**
 * Inputs and outputs of the four sold operations. The HTTP (x402, API key) and MCP channels
 * expose these schemas unchanged and add the `_service` block; field names follow the public
 * peer so its clients work against us.
 */

const Indicators = z.record(z.string(), z.number().nullable());

export const GetTradeCallInput = z.strictObject({
  coin: Coin,
  timeframe: Timeframe.default('15m'),
  exchange: Exchange.default('BINANCE'),
  includeReasoning: z.boolean().default(true),
});
export type GetTradeCallInput = z.input<typeof GetTradeCallInput>;

export const TradeCall = z.object({
  coin: z.string(),
  timeframe: Timeframe,
  exchange: Exchange,
  call: Call,
  /** Calibrated: the share of past calls at this confidence whose direction was right. */
  confidence: z.number().int().min(0).max(100),
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
});
export type TradeCall = z.infer<typeof TradeCall>;

export const GetMarketRegimeInput = z.strictObject({
  coin: Coin,
  timeframe: Timeframe.default('4h'),
  exchange: Exchange.default('BINANCE'),
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
});
export type RegimeReading = z.infer<typeof RegimeReading>;

export const ScanTradeCallsInput = z.strictObject({
  topN: z.number().int().min(1).max(100).default(20),
  timeframe: Timeframe.default('15m'),
  exchange: Exchange.default('BINANCE'),
  minConfidence: z.number().int().min(0).max(100).default(0),
  includeHolds: z.boolean().default(false),
  limit: z.number().int().min(1).max(100).default(10),
  rankBy: z.enum(['confidence', 'volume']).default('confidence'),
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
    }),
  ),
  /** Markets of the top-N that could not be evaluated, and why (never silently dropped). */
  skipped: z.array(z.object({ coin: z.string(), reason: z.string() })),
});
export type ScanTradeCallsOutput = z.infer<typeof ScanTradeCallsOutput>;

export const ScanFundingArbInput = z.strictObject({
  minSpreadBps: z.number().min(0).max(10_000).default(5),
  limit: z.number().int().min(1).max(200).default(10),
  /** Restrict to these coins; default every coin listed on at least two venues. */
  coins: z.array(Coin).min(1).max(200).optional(),
  /** Restrict to these venues; default every venue the feed has funding for. */
  exchanges: z.array(Exchange).min(2).optional(),
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

export const ScanFundingArbOutput = z.object({
  feed: FeedKind,
  timestamp: z.number().int(),
  rows: z.array(
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
    }),
  ),
  venues: z.array(VenueStatusSchema),
});
export type ScanFundingArbOutput = z.infer<typeof ScanFundingArbOutput>;

export const TOOL_SCHEMAS = {
  get_trade_call: { input: GetTradeCallInput, output: TradeCall },
  get_market_regime: { input: GetMarketRegimeInput, output: RegimeReading },
  scan_trade_calls: { input: ScanTradeCallsInput, output: ScanTradeCallsOutput },
  scan_funding_arb: { input: ScanFundingArbInput, output: ScanFundingArbOutput },
} as const;
export type ToolName = keyof typeof TOOL_SCHEMAS;
