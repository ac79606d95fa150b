import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { byBlock, byDay, dayBlockInterval, spearman } from './bootstrap.ts';
import {
  fitCell,
  fitVolatility,
  foldWindows,
  gateEmits,
  scoreCalls,
  scoreVolatility,
  testPoints,
} from './cells.ts';
import { chooseStepShare, monthStarts, STEP_SHARE_CANDIDATES } from './curve-choice.ts';
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
    expect(a.choice?.folds).toEqual([Date.UTC(2025, 7, 1), Date.UTC(2025, 8, 1), Date.UTC(2025, 9, 1)]);
    for (const perVenue of history.series.values()) {
      for (const [venue, rows] of perVenue) {
        perVenue.set(
          venue,
          rows.map((r) => (r.fundingTime > cut ? { ...r, rate: r.rate * -5 } : r)),
        );
      }
    }
    // The half-life choice (inner folds) and the fit both stay inside the months before the cut.
    const b = fitCarryTable(history, cut);
    expect(b.choice).toEqual(a.choice);
    expect({ ...b.table, fittedAt: '' }).toEqual({ ...a.table, fittedAt: '' });
    expect(a.table.buckets[0]!.horizons.map((h) => h.hours)).toEqual([8, 24, 72, 168]);
    // The shipped table records the half-life the training folds chose.
    expect(a.table.halfLifeDays ?? null).toBe(a.choice!.halfLifeDays);
  });
});

describe('the gate decides on folds before the test months only', () => {
  it('gives the gate the folds that end by the split, and the later ones to confirmation', () => {
    const [feb, apr, jun, aug] = [1, 3, 5, 7].map((m) => Date.UTC(2025, m, 1));
    const { gate, confirmation } = foldWindows([feb!, apr!], jun!, [aug!]);
    expect(gate).toEqual([
      { from: feb, to: apr },
      { from: apr, to: jun },
    ]);
    expect(confirmation).toEqual([
      { from: jun, to: aug },
      { from: aug, to: Number.POSITIVE_INFINITY },
    ]);
    expect(gateEmits([{ pass: true }, { pass: true }])).toBe(true);
    expect(gateEmits([{ pass: true }, { pass: false }])).toBe(false);
    expect(gateEmits([])).toBe(false);
  });

  it('chooses the confidence curve step size without reading outcomes after the split', () => {
    const folds = monthStarts(samples[0]!.closeTime + 7 * 86_400_000, split);
    expect(folds.length).toBeGreaterThan(0);
    expect(folds.every((f) => f < split)).toBe(true);
    const cells = (xs: Sample[]) => [{ cell: 'spot:5m', timeframe: '5m' as const, perCoin: [xs] }];
    const a = chooseStepShare(cells(samples), folds, split, settings);
    expect(chooseStepShare(cells(scramble(samples)), folds, split, settings)).toEqual(a);
    expect(STEP_SHARE_CANDIDATES).toContain(a.stepShare);
    expect(a.candidates).toHaveLength(STEP_SHARE_CANDIDATES.length);
  });
});

describe('scores with day-block intervals', () => {
  it('keeps overlapping horizons in one bootstrap block', () => {
    const DAY = 86_400_000;
    const items = Array.from({ length: 12 }, (_, d) => ({ t: d * DAY }));
    expect(byBlock(items, (x) => x.t, 6 * DAY).map((b) => b.length)).toEqual([6, 6]);
    expect(byDay(items, (x) => x.t)).toHaveLength(12);
  });

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
