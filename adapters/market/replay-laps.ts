import { type Candle, type FundingRate, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { type CandleSeries, closedCandles } from './candle-window.ts';
import { firstAfter } from './funding-series.ts';

/**
 * The replay loops instead of stalling at the end of its data: after `end`, feed time keeps
 * moving forward and the last `period` of the data (a whole number of days, so every candle
 * boundary and funding schedule stays aligned) is served again, shifted by one period per lap.
 * Candle times, verdict ids and hash chains therefore stay unique and increasing. Prices carry on
 * across the seam instead of jumping back to where the period began: lap j's open, high, low and
 * close are the data's times factor^j (`seamFactor`), rounded to the decimals the data writes the
 * market's prices with (`priceDecimals`, one more per power of ten the factor shrinks them by), so
 * each lap starts where the one before ended and every return inside a lap is the data's but for
 * that rounding (within half a unit of the last place); volume and funding are served as they are.
 * A timeframe's history runs across the seam: until a lap has closed its first candle of the
 * timeframe, the latest are the lap before's. Pure functions.
 */

const DAY_MS = 86_400_000;

export interface Laps {
  /** Data time where every lap after the first starts (exclusive lower bound of its candles' close). */
  loopStart: number;
  /** Data end: feed time up to here is lap 0, the data as it is. */
  end: number;
  period: number;
}

export function lapsFor(range: { start: number; end: number }): Laps {
  const period = Math.floor((range.end - range.start) / DAY_MS) * DAY_MS;
  if (period < DAY_MS) throw new RangeError('replay: less than a day of data cannot loop');
  return { loopStart: range.end - period, end: range.end, period };
}

/** Lap of feed time `t`: 0 up to the data end, then 1, 2, … one per period. */
export function lapOf(laps: Laps, t: number): number {
  return t <= laps.end ? 0 : Math.ceil((t - laps.end) / laps.period);
}

/** Data time that feed time `t` replays. */
export function dataTime(laps: Laps, t: number): number {
  return t - lapOf(laps, t) * laps.period;
}

/**
 * The factor one lap's prices are re-based by, so the first looped candle opens at the close the
 * lap before ended on: the close of the candle that ends at `end` over the open of the candle that
 * starts at `loopStart`, read from `series` (a market's finest file; every timeframe of the market,
 * and the perpetual of a coin with spot, must use the same factor: see ReplayFeed). 1 (no
 * re-basing) when the series has no candle at either place.
 */
export function seamFactor(series: CandleSeries, timeframe: Timeframe, laps: Laps): number {
  const ms = TIMEFRAME_MS[timeframe];
  const last = closedCandles(series, timeframe, laps.end, 1)[0];
  const first = closedCandles(series, timeframe, laps.loopStart + ms, 1)[0];
  if (last === undefined || first === undefined) return 1;
  if (last.openTime + ms !== laps.end || first.openTime !== laps.loopStart) return 1;
  const f = last.close / first.open;
  return Number.isFinite(f) && f > 0 ? f : 1;
}

/** The most decimals a price can be given to (a data file's prices carry fewer). */
const MAX_DECIMALS = 12;
/** Prices of a series read for its decimals: the last ones before the data's end (the venue's tick as it is). */
const DECIMALS_SAMPLE = 1000;

/** The decimals `p` is written with: the fewest it is a whole number of, but for a double's rounding. */
function decimalsOf(p: number): number {
  for (let d = 0; d < MAX_DECIMALS; d++) {
    const scaled = p * 10 ** d;
    if (Math.abs(scaled - Math.round(scaled)) <= 1e-12 * Math.max(1, Math.abs(scaled))) return d;
  }
  return MAX_DECIMALS;
}

/**
 * The price precision of a market's data, in decimals: the most any open, high, low or close of
 * its last DECIMALS_SAMPLE candles to `end` is written with (the venue's tick, e.g. 2 for BTCUSDT
 * spot, 5 for DOGEUSDT). A lapped price is rounded to it (lapCandle), so a later lap answers with
 * prices the venue could quote instead of a product's float tail (103538.00062195644). Read from
 * the data alone: every reader of the same folder (the service, `history verify --data`) rounds
 * the same way. null when the series holds no candle before `end`.
 */
export function priceDecimals(series: CandleSeries, timeframe: Timeframe, end: number): number | null {
  const sample = closedCandles(series, timeframe, end, DECIMALS_SAMPLE);
  if (sample.length === 0) return null;
  let most = 0;
  for (const c of sample)
    for (const p of [c.open, c.high, c.low, c.close]) most = Math.max(most, decimalsOf(p));
  return most;
}

/** The most places a lapped price is rounded to: 10^20 and its multiples stay exact doubles. */
const MAX_PLACES = 20;

/**
 * A data candle as lap `j` serves it: `j` periods later, prices times factor^j, volume as it is.
 * With `decimals` (priceDecimals) the prices are rounded to that many places, one more for each
 * power of ten the lap's scale has shrunk them by: a coin that fell over the data keeps the
 * data's significant digits lap after lap instead of rounding to 0. Every lapped price the replay
 * answers with comes through here.
 */
export function lapCandle(
  c: Candle,
  j: number,
  laps: Laps,
  factor: number,
  decimals: number | null = null,
): Candle {
  return lapper(j, laps, factor, decimals)(c);
}

/**
 * lapCandle for every candle of lap `j`: the lap's scale and places worked out once, not per
 * candle. Each price is rounded to the double nearest its decimal, as the data's own prices are.
 */
function lapper(j: number, laps: Laps, factor: number, decimals: number | null): (c: Candle) => Candle {
  if (j === 0) return (c) => c;
  const scale = factor ** j;
  const shift = j * laps.period;
  const places =
    decimals === null ? null : Math.min(MAX_PLACES, decimals + Math.max(0, Math.round(-Math.log10(scale))));
  const unit = places === null ? 1 : 10 ** places;
  const price =
    places === null ? (p: number) => p * scale : (p: number) => Math.round(p * scale * unit) / unit;
  return (c) => ({
    openTime: c.openTime + shift,
    open: price(c.open),
    high: price(c.high),
    low: price(c.low),
    close: price(c.close),
    volume: c.volume,
  });
}

/**
 * The last `limit` candles closed by feed time `until`, across laps, oldest first; lap j's prices
 * re-based by `factor`^j (see seamFactor; 1 serves the data's prices in every lap) and rounded to
 * `decimals` places when given (priceDecimals).
 */
export function lappedCandles(
  series: CandleSeries,
  timeframe: Timeframe,
  until: number,
  limit: number,
  laps: Laps,
  factor = 1,
  decimals: number | null = null,
): Candle[] {
  const k = lapOf(laps, until);
  if (k === 0) return closedCandles(series, timeframe, until, limit);
  const parts: Candle[][] = [];
  let have = 0;
  let local = until - k * laps.period;
  for (let j = k; j >= 0 && have < limit; j--) {
    let part = closedCandles(series, timeframe, local, limit - have);
    if (j > 0) part = part.filter((c) => c.openTime >= laps.loopStart);
    // A lap younger than one candle of the timeframe has closed none yet (a day of feed time for
    // 1d): the lap before it holds the latest, so the answer carries on from there.
    if (j > 0 && part.length === 0 && local < laps.loopStart + TIMEFRAME_MS[timeframe]) {
      local = laps.end;
      continue;
    }
    parts.unshift(part.map(lapper(j, laps, factor, decimals)));
    have += part.length;
    // Only a lap that starts at loopStart joins the lap before it; a series with a hole there
    // ends here rather than passing older candles off as the latest.
    if (j > 0 && (part.length === 0 || part[0]!.openTime !== laps.loopStart)) break;
    local = laps.end;
  }
  return parts.flat();
}

const shiftFunding = (f: FundingRate, by: number): FundingRate =>
  by === 0 ? f : { ...f, fundingTime: f.fundingTime + by };

/** Settlements at or before feed time `now` (at most `limit`, newest last), across laps. */
export function lappedFunding(
  series: readonly FundingRate[],
  now: number,
  limit: number,
  laps: Laps,
): FundingRate[] {
  const k = lapOf(laps, now);
  const parts: FundingRate[][] = [];
  let have = 0;
  let local = now - k * laps.period;
  for (let j = k; j >= 0 && have < limit; j--) {
    // Laps hold the settlements of [loopStart, end): one at exactly `end` would fall on the same
    // feed time as the next lap's first, so it is left to that lap.
    const endIdx = firstAfter(series, Math.min(local, laps.end - 1));
    let startIdx = Math.max(0, endIdx - (limit - have));
    if (j > 0) startIdx = Math.max(startIdx, firstAfter(series, laps.loopStart - 1));
    const part = series.slice(startIdx, endIdx).map((f) => shiftFunding(f, j * laps.period));
    parts.unshift(part);
    have += part.length;
    local = laps.end;
  }
  return parts.flat();
}

/** The first settlement after feed time `now`, across laps; undefined past the data of lap 0 only. */
export function nextLappedFunding(
  series: readonly FundingRate[],
  now: number,
  laps: Laps,
  loop: boolean,
): FundingRate | undefined {
  const k = lapOf(laps, now);
  const local = now - k * laps.period;
  const i = firstAfter(series, local);
  const next = series[i];
  if (next !== undefined && (!loop || next.fundingTime < laps.end))
    return shiftFunding(next, k * laps.period);
  if (!loop) return undefined;
  const first = series[firstAfter(series, laps.loopStart - 1)];
  return first === undefined ? undefined : shiftFunding(first, (k + 1) * laps.period);
}
