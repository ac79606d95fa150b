import { type Candle, type Exchange, TIMEFRAME_MS, Timeframe } from '../../contracts/market.ts';
import { firstIndex } from '../first-index.ts';
import { CandleColumns } from './candle-columns.ts';
import { UnsupportedTimeframeError } from './errors.ts';

/** Candles sorted by openTime: objects, or the replay's compact columns. */
export type CandleSeries = readonly Candle[] | CandleColumns;

/** Index of the first candle whose close time is after `until`. */
function firstOpenAfter(candles: CandleSeries, tfMs: number, until: number): number {
  if (candles instanceof CandleColumns) {
    const openTime = candles.openTime;
    return firstIndex(candles.length, (i) => openTime[i]! + tfMs > until);
  }
  return firstIndex(candles.length, (i) => candles[i]!.openTime + tfMs > until);
}

/**
 * The last `limit` candles that had closed by `until` (close time = openTime + timeframe
 * <= until), oldest first. A candle still forming at `until` is never included.
 */
export function closedCandles(
  candles: CandleSeries,
  timeframe: Timeframe,
  until: number,
  limit: number,
): Candle[] {
  const end = firstOpenAfter(candles, TIMEFRAME_MS[timeframe], until);
  return candles.slice(Math.max(0, end - limit), end);
}

/** Close time of the newest candle of `timeframe` that should have closed by `until`. */
export function lastBoundary(timeframe: Timeframe, until: number): number {
  const ms = TIMEFRAME_MS[timeframe];
  return until - (until % ms);
}

/** The timeframe a candle request names; UnsupportedTimeframeError when it is not one of ours. */
export function requestedTimeframe(timeframe: string, exchange: Exchange): Timeframe {
  const parsed = Timeframe.safeParse(timeframe);
  if (!parsed.success)
    throw new UnsupportedTimeframeError(timeframe, exchange, 'not one of the eleven timeframes');
  return parsed.data;
}

/** A candle request's `limit` must be a positive integer. */
export function assertCandleLimit(limit: number): void {
  if (!Number.isInteger(limit) || limit < 1) {
    throw new RangeError(`candles: limit must be a positive integer, got ${limit}`);
  }
}
