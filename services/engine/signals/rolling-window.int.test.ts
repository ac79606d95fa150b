import { CHOP, SMA } from 'trading-signals';
import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';
import { Choppiness } from './choppiness.ts';
import { RollingPercentile } from './rolling-percentile.ts';
import { Lagged, RollingExtreme, RollingMean } from './rolling-window.ts';

const FILE = new URL('../../../sample-data/market/candles/binance-spot/BTCUSDT-5m.csv.gz', import.meta.url)
  .pathname;
let candles: Candle[];
beforeAll(async () => {
  candles = await readCandleFile(FILE);
});

const close = (a: number, b: number) => Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(b));

describe('O(1) window pieces against trading-signals and naive references (real BTC 5m candles)', () => {
  it('RollingMean equals trading-signals SMA at every step', () => {
    for (const period of [10, 200]) {
      const ours = new RollingMean(period);
      const ref = new SMA(period);
      for (const c of candles) {
        const a = ours.push(c.close);
        const b = ref.add(c.close);
        expect(a === null).toBe(b === null);
        if (a !== null && b !== null && !close(a, b)) expect(a).toBe(b);
      }
    }
  });

  it('Choppiness equals trading-signals CHOP at every step', () => {
    const ours = new Choppiness(14);
    const ref = new CHOP(14);
    let compared = 0;
    for (const c of candles) {
      const a = ours.update(c);
      const b = ref.add(c);
      expect(a === null).toBe(b === null);
      if (a !== null && b !== null) {
        compared++;
        if (!close(a, b)) expect(a).toBe(b);
      }
    }
    expect(compared).toBeGreaterThan(10_000);
  });

  it('RollingExtreme equals a window scan', () => {
    const max = new RollingExtreme(26, 'max');
    const min = new RollingExtreme(26, 'min');
    for (let i = 0; i < 3000; i++) {
      const hi = max.push(candles[i]!.high);
      const lo = min.push(candles[i]!.low);
      if (i < 25) {
        expect(hi).toBeNull();
        continue;
      }
      const window = candles.slice(i - 25, i + 1);
      expect(hi).toBe(Math.max(...window.map((c) => c.high)));
      expect(lo).toBe(Math.min(...window.map((c) => c.low)));
    }
  });

  it('RollingPercentile equals a sort of the window, ties counting half', () => {
    const p = new RollingPercentile(50);
    for (let i = 0; i < 2000; i++) {
      const v = Math.round(candles[i]!.close / 10);
      p.push(v);
      const window = candles.slice(Math.max(0, i - 49), i + 1).map((c) => Math.round(c.close / 10));
      const below = window.filter((x) => x < v).length;
      const equal = window.filter((x) => x === v).length;
      expect(p.percentile).toBeCloseTo((100 * (below + equal / 2)) / window.length, 10);
      const sorted = [...window].sort((a, b) => a - b);
      const mid = sorted.length >> 1;
      expect(p.median).toBe(sorted.length % 2 ? sorted[mid] : (sorted[mid - 1]! + sorted[mid]!) / 2);
    }
  });

  it('Lagged returns the value lag pushes ago, null before', () => {
    const lag = new Lagged(5);
    for (let i = 0; i < 20; i++) {
      lag.push(i);
      expect(lag.value).toBe(i < 5 ? null : i - 5);
    }
  });

  it('rejects a non-positive period', () => {
    expect(() => new RollingMean(0)).toThrow(RangeError);
    expect(() => new RollingExtreme(1.5, 'max')).toThrow(RangeError);
    expect(() => new RollingPercentile(1)).toThrow(RangeError);
    expect(() => new Choppiness(1)).toThrow(RangeError);
  });
});
