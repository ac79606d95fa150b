import type { Candle, Timeframe } from '../../../contracts/market.ts';
import { TIMEFRAME_MS } from '../../../contracts/market.ts';

/**
 * Candles closed at `nowMs` (openTime + duration ≤ now). Feeds pass only these to
 * MarketState.update: a verdict must never see the still-open candle.
 */
export function closedCandles(candles: readonly Candle[], timeframe: Timeframe, nowMs: number): Candle[] {
  const ms = TIMEFRAME_MS[timeframe];
  const out: Candle[] = [];
  for (const c of candles) if (c.openTime + ms <= nowMs) out.push(c);
  return out;
}
