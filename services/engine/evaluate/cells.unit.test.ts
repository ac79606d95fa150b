import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { chooseFreeRule, compareWithFree, FREE_RULES, ruleDirection, trainingPoints } from './baselines.ts';
import { byBlock, byDay, dayBlockInterval, spearman } from './bootstrap.ts';
import {
  fitCell,
  fitVolatility,
  foldWindows,
  gateEmits,
  pays,
  pooledLeanMiss,
  pooledNet,
  scoreCalls,
  scoreVolatility,
  testPoints,
} from './cells.ts';
import { chooseStepShare, monthStarts, STEP_SHARE_CANDIDATES } from './curve-choice.ts';
import { fitCarryTable, loadFundingHistory } from './funding.ts';
import { fitFreeLabelCuts, labelEvidence } from './risk.ts';
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

  it('the training count is every scored sample whose horizon ended before the split', () => {
    const fit = fitCell([samples], '5m', split, settings)!;
    const trainCount = samples.filter((s) => s.score !== 0 && s.closeTime + 6 * 300_000 <= split).length;
    expect(fit.curve.samples).toBe(trainCount);
  });

  it('fits the direction on training outcomes: mirrored outcomes flip it and give the same hit rates', () => {
    const mirrored = samples.map((s) => ({ ...s, forward: -s.forward }));
    const a = fitCell([samples], '5m', split, settings)!;
    const b = fitCell([mirrored], '5m', split, settings)!;
    expect(a.direction === 1 || a.direction === -1).toBe(true);
    expect(b.direction).toBe(-a.direction);
    expect(b.curve.bins).toEqual(a.curve.bins);
    const ra = scoreCalls(testPoints([samples], '5m', 6, split, Number.POSITIVE_INFINITY), a, settings);
    const rb = scoreCalls(testPoints([mirrored], '5m', 6, split, Number.POSITIVE_INFINITY), b, settings);
    expect(rb.calls).toEqual(ra.calls);
    expect(rb.buy).toEqual(ra.sell);
    expect(rb.sell).toEqual(ra.buy);
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

describe('free baselines and the economic gate', () => {
  it('chooses the free rule on training months only, by net per call', () => {
    const train = trainingPoints([samples], '5m', 6, split);
    expect(train.every((s) => s.closeTime + 6 * 300_000 <= split)).toBe(true);
    expect(chooseFreeRule(trainingPoints([scramble(samples)], '5m', 6, split), settings)).toEqual(
      chooseFreeRule(train, settings),
    );
    // The chosen rule's training net is the best of all rules'.
    const net = (rule: (typeof FREE_RULES)[number]) => {
      let sum = 0;
      let n = 0;
      for (const s of train) {
        const d = ruleDirection(rule, s);
        if (d === 0) continue;
        sum += d * s.forward * 10_000 - settings.feeBps;
        n++;
      }
      return sum / n;
    };
    const chosen = chooseFreeRule(train, settings);
    for (const rule of FREE_RULES) expect(net(chosen)).toBeGreaterThanOrEqual(net(rule));
  });

  it('puts the cell beside the free rule on the same points; an identical rule has zero lift', () => {
    const fit = fitCell([samples], '5m', split, settings)!;
    const points = testPoints([samples], '5m', 6, split, Number.POSITIVE_INFINITY);
    const rule = chooseFreeRule(trainingPoints([samples], '5m', 6, split), settings);
    const cmp = compareWithFree(points, fit, rule, settings);
    const own = scoreCalls(points, fit, settings);
    expect(cmp.service.netBps).toBeCloseTo(own.netBps.mean, 9);
    expect(cmp.service.skill).toBeCloseTo(own.skill.value, 9);
    expect(cmp.liftNetBps.value).toBeCloseTo(cmp.service.netBps - cmp.free.netBps, 9);
    expect(cmp.liftNetBps.dayBlock.low).toBeLessThanOrEqual(cmp.liftNetBps.dayBlock.high);
    // Points whose return equals the score's sign: the "follow the last candle" rule then calls
    // exactly what a following cell calls outside the HOLD band.
    const mirrored = points.map((s) => ({ ...s, back: s.back.map(() => s.score) }));
    const follow = FREE_RULES.find((r) => r.lookback === 1 && r.sign === 1)!;
    const same = compareWithFree(mirrored, { ...fit, direction: 1 }, follow, { ...settings, holdBand: 0 });
    expect(same.liftNetBps.value).toBeCloseTo(0, 9);
    expect(same.liftSkill.value).toBeCloseTo(0, 9);
  });

  it('pays only when the net bound is above 0, and pools folds by their calls', () => {
    const fit = fitCell([samples], '5m', split, settings)!;
    const a = scoreCalls(testPoints([samples], '5m', 6, 0, split), fit, settings);
    const b = scoreCalls(testPoints([samples], '5m', 6, split, Number.POSITIVE_INFINITY), fit, settings);
    const pooled = pooledNet([a, b]);
    expect(pooled.calls).toBe(a.calls.n + b.calls.n);
    expect(pooled.meanBps).toBeCloseTo(
      (a.netBps.mean * a.calls.n + b.netBps.mean * b.calls.n) / (a.calls.n + b.calls.n),
      9,
    );
    expect(pooled.lowBps).toBeLessThan(pooled.meanBps);
    expect(pays(a)).toBe(a.netBps.dayBlock.lowOneSided > 0);
    // A cell whose every call wins by 50 bps pays; one that loses the fee every time does not.
    const winning = testPoints([samples], '5m', 6, 0, split).map((s) => ({
      ...s,
      forward: 0.006 * Math.sign(fit.direction * s.score),
    }));
    expect(pays(scoreCalls(winning, fit, settings))).toBe(true);
    const flat = winning.map((s) => ({ ...s, forward: 0 }));
    expect(pays(scoreCalls(flat, fit, settings))).toBe(false);
    // HOLD's claim: every flat lean missed the fee.
    const miss = pooledLeanMiss([scoreCalls(flat, fit, settings)], false);
    expect(miss.missed).toBe(miss.n);
    expect(miss.n).toBeGreaterThan(0);
  });
});

describe('free labels', () => {
  it('flags as many points with the free label as the engine did on training months', () => {
    const cuts = fitFreeLabelCuts([samples], '5m', 6, split)!;
    expect(fitFreeLabelCuts([scramble(samples)], '5m', 6, split)).toEqual(cuts);
    expect(cuts.squeezeTo).toBeLessThan(cuts.volatileFrom);
    const e = labelEvidence([samples], '5m', 6, split, Number.POSITIVE_INFINITY, cuts);
    expect(e.points).toBeGreaterThan(100);
    expect(e.gain.value).toBeCloseTo(e.rhoEngine - e.rhoFree, 9);
    expect(e.trending.upN + e.trending.downN).toBeLessThanOrEqual(e.points);
  });
});
