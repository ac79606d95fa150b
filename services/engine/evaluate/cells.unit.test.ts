import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { byDay, dayBlockInterval, spearman } from './bootstrap.ts';
import { fitCell, fitVolatility, scoreCalls, scoreVolatility, testPoints } from './cells.ts';
import { fitCarryTable, loadFundingHistory } from './funding.ts';
import { collectSamples, type Sample } from './walk-forward.ts';

const DIR = new URL('../../../sample-data/market/', import.meta.url).pathname;
const settings = { horizon: 6, feeBps: 10, holdBand: 0.1 };
let samples: Sample[];
let split: number;
beforeAll(async () => {
  const candles = await readCandleFile(`${DIR}candles/binance-spot/SOLUSDT-5m.csv.gz`);
  samples = collectSamples(candles, '5m', 6);
  const mid = samples[Math.floor(samples.length * 0.6)]!.closeTime;
  split = mid - (mid % 86_400_000);
});

/** Test-period outcomes scrambled: what a fit may not see. */
const scramble = (xs: Sample[]) =>
  xs.map((s) => (s.closeTime >= split ? { ...s, forward: -s.forward * 3, realised: s.realised * 9 } : s));

describe('walk-forward fits see no test months', () => {
  it('direction, confidence curve and volatility model ignore outcomes after the split', () => {
    expect(fitCell([scramble(samples)], '5m', split, settings)).toEqual(
      fitCell([samples], '5m', split, settings),
    );
    expect(fitVolatility([scramble(samples)], '5m', split, 6, 0.8)).toEqual(
      fitVolatility([samples], '5m', split, 6, 0.8),
    );
  });

  it('the funding carry fit ignores settlements after the split', async () => {
    const history = await loadFundingHistory(DIR);
    const cut = Date.UTC(2025, 9, 15);
    const a = fitCarryTable(history, cut);
    for (const perVenue of history.series.values()) {
      for (const [venue, rows] of perVenue) {
        perVenue.set(
          venue,
          rows.map((r) => (r.fundingTime > cut ? { ...r, rate: r.rate * -5 } : r)),
        );
      }
    }
    const b = fitCarryTable(history, cut);
    expect({ ...b, fittedAt: '' }).toEqual({ ...a, fittedAt: '' });
    expect(a.buckets[0]!.horizons.map((h) => h.hours)).toEqual([8, 24, 72, 168]);
  });
});

describe('scores with day-block intervals', () => {
  it('measures timing skill against random calls at the same mix, and volatility skill against trailing volatility', () => {
    const fit = fitCell([samples], '5m', split, settings)!;
    const points = testPoints([samples], '5m', 6, split, Number.POSITIVE_INFINITY);
    const s = scoreCalls(points, fit, settings);
    expect(s.points).toBe(points.length);
    expect(s.calls.n + s.holds).toBe(s.points);
    expect(s.skill.value).toBeCloseTo(s.calls.rate - s.randomSame, 12);
    expect(s.skill.dayBlock.low).toBeLessThanOrEqual(s.skill.dayBlock.high);
    const model = fitVolatility([samples], '5m', split, 6, 0.8)!;
    const v = scoreVolatility(points, model, 0.8);
    expect(v.coverage.value).toBeGreaterThan(0.6);
    expect(v.coverage.value).toBeLessThan(0.95);
    expect(v.forecastRho).toBeGreaterThan(0);
  });

  it('resamples whole days: a statistic constant within days has no spread', () => {
    const items = [0, 1, 2, 3].flatMap((d) => [1, 2, 3].map((k) => ({ t: d * 86_400_000 + k, v: 5 })));
    const days = byDay(items, (x) => x.t);
    expect(days).toHaveLength(4);
    const i = dayBlockInterval(days, (ds) => ds.flat().reduce((a, x) => a + x.v, 0) / ds.flat().length);
    expect(i).toMatchObject({ low: 5, high: 5 });
    expect(spearman([1, 2, 3, 4], [10, 20, 30, 40])).toBeCloseTo(1, 12);
    expect(spearman([1, 2, 3, 4], [4, 3, 2, 1])).toBeCloseTo(-1, 12);
  });
});
