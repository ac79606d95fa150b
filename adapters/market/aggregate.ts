import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';

/**
 * Builds candles of a coarser timeframe from finer closed candles. Buckets are aligned to UTC
 * epoch boundaries (a 4h bucket starts at 00, 04, 08 … UTC; 1d at 00:00 UTC), which is how
 * Binance, Bybit and Hyperliquid stamp their own candles. A bucket missing any of its source
 * candles (the still-forming one at the end, or one across a gap) is not emitted: a partial
 * candle would look like a closed one to every consumer.
 */
export function aggregateCandles(source: readonly Candle[], from: Timeframe, to: Timeframe): Candle[] {
  const fromMs = TIMEFRAME_MS[from];
  const toMs = TIMEFRAME_MS[to];
  if (toMs % fromMs !== 0) throw new RangeError(`cannot build ${to} candles from ${from} candles`);
  if (toMs === fromMs) return source.slice();
  const perBucket = toMs / fromMs;
  const out: Candle[] = [];
  let bucket: Candle | undefined;
  let bucketStart = Number.NaN;
  let count = 0;
  let expectedNext = Number.NaN;
  const flush = () => {
    if (bucket !== undefined && count === perBucket) out.push(bucket);
    bucket = undefined;
    count = 0;
  };
  for (const c of source) {
    if (c.openTime % fromMs !== 0)
      throw new RangeError(`${from} candle at ${c.openTime} is not on a ${from} boundary`);
    if (c.openTime < expectedNext)
      throw new RangeError(`candles are not in ascending order at ${c.openTime}`);
    const start = c.openTime - (c.openTime % toMs);
    if (start !== bucketStart) {
      flush();
      bucketStart = start;
      // A series that begins mid-bucket leaves that bucket short: never emitted.
      if (c.openTime === start) {
        bucket = {
          openTime: start,
          open: c.open,
          high: c.high,
          low: c.low,
          close: c.close,
          volume: c.volume,
        };
        count = 1;
      }
    } else if (bucket !== undefined && c.openTime === expectedNext) {
      if (c.high > bucket.high) bucket.high = c.high;
      if (c.low < bucket.low) bucket.low = c.low;
      bucket.close = c.close;
      bucket.volume += c.volume;
      count++;
    } else {
      // A gap inside the bucket: it can no longer be complete.
      bucket = undefined;
    }
    expectedNext = c.openTime + fromMs;
  }
  flush();
  return out;
}

/**
 * The source timeframe to build `target` from: `target` itself when available, else the
 * coarsest available timeframe that divides it (fewest candles to read). Undefined when none
 * does, e.g. 3m from 5m data.
 */
export function sourceTimeframe(target: Timeframe, available: readonly Timeframe[]): Timeframe | undefined {
  let best: Timeframe | undefined;
  for (const tf of available) {
    const ms = TIMEFRAME_MS[tf];
    if (ms > TIMEFRAME_MS[target] || TIMEFRAME_MS[target] % ms !== 0) continue;
    if (best === undefined || ms > TIMEFRAME_MS[best]) best = tf;
  }
  return best;
}
