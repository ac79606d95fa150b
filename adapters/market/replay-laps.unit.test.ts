import { describe, expect, it } from 'vitest';
import type { Candle } from '../../contracts/market.ts';
import { type Laps, lapCandle, lapsFor, priceDecimals } from './replay-laps.ts';

const DAY = 86_400_000;
const H = 3_600_000;
const laps: Laps = lapsFor({ start: 0, end: 10 * DAY });
const candle = (openTime: number, price: number): Candle => ({
  openTime,
  open: price,
  high: price,
  low: price,
  close: price,
  volume: 7,
});
const prices = (c: Candle) => [c.open, c.high, c.low, c.close];

describe('lapCandle', () => {
  it('rounds a lapped price to the decimals given: no float tail of the scaling', () => {
    // 0.1 × 3 is 0.30000000000000004 as a double.
    expect(prices(lapCandle(candle(0, 0.1), 1, laps, 3))).toEqual(Array(4).fill(0.30000000000000004));
    expect(prices(lapCandle(candle(0, 0.1), 1, laps, 3, 1))).toEqual([0.3, 0.3, 0.3, 0.3]);
    const btc = lapCandle(candle(0, 101234.56), 2, laps, 1.0227, 2);
    expect(btc.close).toBe(Math.round(101234.56 * 1.0227 ** 2 * 100) / 100);
    expect(String(btc.close).split('.')[1]!.length).toBeLessThanOrEqual(2);
    expect(btc.openTime).toBe(2 * laps.period);
    expect(btc.volume).toBe(7);
  });

  it("keeps the data's significant digits where the laps shrink a price, rather than rounding it to 0", () => {
    // A coin that fell by half over the data, 40 laps on: its scale is 2^-40, about 9e-13.
    const doge = lapCandle(candle(0, 0.16234), 40, laps, 0.5, 5);
    const exact = 0.16234 * 0.5 ** 40;
    expect(doge.close).toBeGreaterThan(0);
    expect(Math.abs(doge.close / exact - 1)).toBeLessThan(1e-4);
  });

  it('leaves lap 0 as it is', () => {
    const c = candle(0, 0.1);
    expect(lapCandle(c, 0, laps, 3, 1)).toBe(c);
  });
});

describe('priceDecimals', () => {
  it("is the most decimals the data's last candles to the end write a price with; null without a candle", () => {
    const series = [candle(0, 1.5), { ...candle(H, 2.25), low: 2.125 }, candle(2 * H, 3)];
    expect(priceDecimals(series, '1h', 3 * H)).toBe(3);
    // Only candles closed by the end count.
    expect(priceDecimals(series, '1h', H)).toBe(1);
    expect(priceDecimals(series, '1h', 0)).toBeNull();
    expect(priceDecimals([candle(0, 103538.01), candle(H, 0.00001234)], '1h', 2 * H)).toBe(8);
  });
});
