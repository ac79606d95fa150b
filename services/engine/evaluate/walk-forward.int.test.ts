import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';
import { CalibrationTableSchema } from '../../../contracts/signals.ts';
import { collectSamples, directionHit, evaluateTimeframe, fitTable, type Sample } from './walk-forward.ts';

const FILE = new URL('../../../sample-data/market/candles/binance-spot/SOLUSDT-5m.csv.gz', import.meta.url)
  .pathname;
const HOUR = 3_600_000;
let candles: Candle[];
let samples: Sample[];
let split: number;
beforeAll(async () => {
  candles = await readCandleFile(FILE);
  samples = collectSamples(candles, '5m', 6);
  split =
    samples[Math.floor(samples.length * 0.6)]!.closeTime -
    (samples[Math.floor(samples.length * 0.6)]!.closeTime % HOUR);
});

const settings = () => ({ split, horizon: 6, feeBps: 10, holdBand: 0.1 });

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

  it('fits only on the training range: altering test-period outcomes leaves the table unchanged', () => {
    const a = fitTable(new Map([['5m', [samples]]]), settings(), {});
    const scrambled = samples.map((s) => (s.closeTime >= split ? { ...s, forward: -s.forward * 7 } : s));
    const b = fitTable(new Map([['5m', [scrambled]]]), settings(), {});
    expect({ ...b, fittedAt: '' }).toEqual({ ...a, fittedAt: '' });
    CalibrationTableSchema.parse(a);
    const trainCount = samples.filter((s) => s.score !== 0 && s.closeTime + 6 * 300_000 <= split).length;
    expect(a.curves['5m']!.samples).toBe(trainCount);
    expect(a.trainTo).toBe(split);
  });

  it('fits the direction on training outcomes: mirrored outcomes flip it and give the same hit rates', () => {
    const a = fitTable(new Map([['5m', [samples]]]), settings(), {});
    const mirrored = samples.map((s) => ({ ...s, forward: -s.forward }));
    const b = fitTable(new Map([['5m', [mirrored]]]), settings(), {});
    const da = a.curves['5m']!.direction;
    expect(da === 1 || da === -1).toBe(true);
    expect(b.curves['5m']!.direction).toBe(-da!);
    expect(b.curves['5m']!.bins).toEqual(a.curves['5m']!.bins);
    const ra = evaluateTimeframe('5m', [samples], a, split, Number.POSITIVE_INFINITY);
    const rb = evaluateTimeframe('5m', [mirrored], b, split, Number.POSITIVE_INFINITY);
    expect(rb.direction).toBe(-ra.direction);
    expect(rb.calls).toEqual(ra.calls);
    expect(rb.buy).toEqual(ra.sell);
    expect(rb.byRegime).toEqual(ra.byRegime);
  });

  it('evaluates test points only, one per horizon, with baselines and intervals', () => {
    const table = fitTable(new Map([['5m', [samples]]]), settings(), {});
    const r = evaluateTimeframe('5m', [samples], table, split, Number.POSITIVE_INFINITY);
    const expectedPoints = samples.filter(
      (s) => s.closeTime >= split && (s.closeTime - split) % (6 * 300_000) === 0,
    );
    expect(r.points).toBe(expectedPoints.length);
    expect(r.buy.n + r.sell.n + Math.round(r.holdShare * r.points)).toBe(r.points);
    expect(r.calls.ci.low).toBeLessThanOrEqual(r.calls.rate);
    expect(r.calls.ci.high).toBeGreaterThanOrEqual(r.calls.rate);
    expect(r.buckets.reduce((a, b) => a + b.rate.n, 0)).toBe(r.calls.n);
    expect(r.byRegime.reduce((a, b) => a + b.rate.n, 0)).toBe(r.calls.n);
    if (r.topStep !== null) expect(r.topStep.top.n + r.topStep.below.n).toBe(r.calls.n);
    expect(r.brier).toBeGreaterThan(0);
  });
});
