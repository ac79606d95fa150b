import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';
import { collectSamples, directionHit, type Sample } from './walk-forward.ts';

const FILE = new URL('../../../sample-data/market/candles/binance-spot/SOLUSDT-5m.csv.gz', import.meta.url)
  .pathname;
let candles: Candle[];
let samples: Sample[];
beforeAll(async () => {
  candles = await readCandleFile(FILE);
  samples = collectSamples(candles, '5m', 6);
});

describe('walk-forward evaluation', () => {
  it('samples carry the forward return over the horizon from the close the score saw', () => {
    const byClose = new Map(candles.map((c) => [c.openTime + 300_000, c]));
    const s = samples[100]!;
    const entry = byClose.get(s.closeTime)!;
    const exit = byClose.get(s.closeTime + 6 * 300_000)!;
    expect(s.forward).toBeCloseTo(exit.close / entry.close - 1, 12);
    expect(samples[samples.length - 1]!.closeTime + 6 * 300_000).toBeLessThanOrEqual(
      candles[candles.length - 1]!.openTime + 300_000,
    );
  });

  it('a hit needs the move to beat the fee in the call direction', () => {
    expect(directionHit(1, 0.002, 0.001)).toBe(true);
    expect(directionHit(1, 0.0005, 0.001)).toBe(false);
    expect(directionHit(-1, -0.002, 0.001)).toBe(true);
    expect(directionHit(-1, 0.002, 0.001)).toBe(false);
  });
});
