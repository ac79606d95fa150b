import { z } from 'zod';

/** The eleven timeframes the service sells, finest first. */
export const TIMEFRAMES = ['1m', '3m', '5m', '15m', '30m', '1h', '2h', '4h', '8h', '12h', '1d'] as const;
export const Timeframe = z.enum(TIMEFRAMES);
export type Timeframe = z.infer<typeof Timeframe>;

const MINUTE = 60_000;
export const TIMEFRAME_MS: Record<Timeframe, number> = {
  '1m': MINUTE,
  '3m': 3 * MINUTE,
  '5m': 5 * MINUTE,
  '15m': 15 * MINUTE,
  '30m': 30 * MINUTE,
  '1h': 60 * MINUTE,
  '2h': 120 * MINUTE,
  '4h': 240 * MINUTE,
  '8h': 480 * MINUTE,
  '12h': 720 * MINUTE,
  '1d': 1440 * MINUTE,
};

/** Venues the service knows by name; upper-case as the peer spells them. */
export const EXCHANGES = ['BINANCE', 'BINANCE_SPOT', 'BYBIT', 'OKX', 'HYPERLIQUID'] as const;
export const Exchange = z.enum(EXCHANGES);
export type Exchange = z.infer<typeof Exchange>;

/** BINANCE_SPOT is the one spot venue; the others are USDT-margined perpetuals. */
export const venueKind = (exchange: Exchange): 'spot' | 'perp' =>
  exchange === 'BINANCE_SPOT' ? 'spot' : 'perp';

/** Which feed produced a figure: never let replayed data pass for live data. */
export const FeedKind = z.enum(['live', 'replay']);
export type FeedKind = z.infer<typeof FeedKind>;

/** Coin symbols: upper-cased, at most 20 characters, letters and digits only. */
export const Coin = z
  .string()
  .trim()
  .min(1)
  .max(20)
  .regex(/^[A-Za-z0-9]+$/, 'letters and digits only, a coin symbol such as BTC (the market is its USDT pair)')
  .transform((s) => s.toUpperCase());

/** A closed OHLCV candle; openTime in Unix ms UTC, volume in base units. */
export const CandleSchema = z.object({
  openTime: z.number().int(),
  open: z.number(),
  high: z.number(),
  low: z.number(),
  close: z.number(),
  volume: z.number().nonnegative(),
});
export type Candle = z.infer<typeof CandleSchema>;

/** One funding settlement: `rate` is the decimal rate for one interval of `intervalHours`. */
export const FundingRateSchema = z.object({
  fundingTime: z.number().int(),
  rate: z.number(),
  intervalHours: z.number().positive(),
});
export type FundingRate = z.infer<typeof FundingRateSchema>;

export const MarketKey = z.object({ exchange: Exchange, coin: z.string(), timeframe: Timeframe });
export type MarketKey = z.infer<typeof MarketKey>;

/** A market as one string, `EXCHANGE:COIN:timeframe`: the key of per-market state and caches. */
export function marketKey(exchange: string, coin: string, timeframe: string): string {
  return `${exchange}:${coin}:${timeframe}`;
}

export const Regime = z.enum(['trending-up', 'trending-down', 'ranging', 'volatile', 'squeeze']);
export type Regime = z.infer<typeof Regime>;

export const Call = z.enum(['BUY', 'SELL', 'HOLD']);
export type Call = z.infer<typeof Call>;

/**
 * One tradable market of a venue as the feed sees it, for ranking top-N. `quoteVolume24h` is the
 * quote-currency volume over the 24 h of feed time before now (null when the feed has no candles
 * for it); `openInterest` is in quote currency, null when the venue does not report it.
 */
export const MarketInfoSchema = z.object({
  exchange: Exchange,
  coin: z.string(),
  /** The venue's own symbol (ccxt unified symbol live, file symbol in replay). */
  symbol: z.string(),
  quoteVolume24h: z.number().nonnegative().nullable(),
  openInterest: z.number().nonnegative().nullable(),
  hasCandles: z.boolean(),
  hasFunding: z.boolean(),
});
export type MarketInfo = z.infer<typeof MarketInfoSchema>;

/** When the next funding settlement of a perpetual is due, and the interval it covers. */
export const NextFundingSchema = z.object({
  exchange: Exchange,
  coin: z.string(),
  nextFundingTime: z.number().int(),
  intervalHours: z.number().positive(),
  /** The venue's current estimate for that settlement; null when unknown (always null in replay). */
  predictedRate: z.number().nullable(),
});
export type NextFunding = z.infer<typeof NextFundingSchema>;

/** Health of one venue as the feed last saw it; reported in /readyz and in responses. */
export const VenueStatusSchema = z.object({
  exchange: Exchange,
  ok: z.boolean(),
  lastError: z.string().optional(),
  /**
   * Unix ms (not seconds, unlike an answer's `timestamp`) of the last successful request (live:
   * the wall clock) or read of the replay data (replay: the feed's clock, the one its answers'
   * timestamps are taken from).
   */
  lastOkAt: z.number().int().optional(),
});
export type VenueStatus = z.infer<typeof VenueStatusSchema>;

/** A candle of `timeframe` has closed at `closeTime` (feed time). */
export const CandleCloseSchema = z.object({
  timeframe: Timeframe,
  openTime: z.number().int(),
  closeTime: z.number().int(),
});
export type CandleClose = z.infer<typeof CandleCloseSchema>;
