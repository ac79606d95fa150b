import type { Exchange, Timeframe } from '../contracts/market.ts';
import type { ScoredPoint } from '../services/history/track-record.ts';

/**
 * The `i`th scored point of a synthetic track record, its call and figures drawn from sin(7.1 i),
 * with the risk forecast it served (so each line's risk intervals are resampled).
 */
export function scoredPoint(
  exchange: Exchange,
  timeframe: Timeframe,
  candleCloseTime: number,
  i: number,
): ScoredPoint {
  const x = Math.sin(i * 7.1);
  return {
    exchange,
    timeframe,
    call: x > 0.2 ? 'BUY' : x < -0.2 ? 'SELL' : 'HOLD',
    confidence: 40 + Math.floor(Math.abs(x) * 50),
    candleCloseTime,
    return6: x / 100,
    result: x > 0.2 ? 'hit' : 'miss',
    netCentiBps: Math.round(x * 1000),
    price: 100,
    return1: x / 300,
    return24: x / 50,
    feed: 'replay',
    volatility: {
      horizonCandles: 6,
      bandLow: 99,
      bandHigh: 100.5 + x,
      bandCoverage: 0.8,
      expectedMovePct: 1,
    },
  };
}
