import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { chooseFreeRule, compareWithFree, FREE_RULES, ruleDirection, trainingPoints } from './baselines.ts';
import { fitCell, pays, pooledLeanMiss, pooledNet, scoreCalls, testPoints } from './cells.ts';
import {
  fitFreeBand,
  fitFreeLabelCuts,
  fitRiskModel,
  labelEvidence,
  riskHorizons,
  scoreRisk,
} from './risk.ts';
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

/** Test-period outcomes scrambled: what a choice made on training months may not see. */
const scramble = (xs: Sample[]) =>
  xs.map((s) =>
    s.closeTime >= split
      ? { ...s, forward: -s.forward * 3, realised: s.realised * 9, realisedDay: s.realisedDay * 9 }
      : s,
  );

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
    const mirrored = points.map((s) => ({ ...s, back: Float64Array.from(s.back, () => s.score) }));
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

describe('risk forecast horizons and free labels', () => {
  it('fits every horizon and the free band on training months only, and scores coverage', () => {
    const hs = riskHorizons('5m', 6);
    expect(hs.map((h) => [h.key, h.candles])).toEqual([
      ['next', 1],
      ['verdict', 6],
      ['day', 288],
    ]);
    for (const h of hs) {
      const model = fitRiskModel([samples], '5m', split, h, 6, 0.8)!;
      expect(fitRiskModel([scramble(samples)], '5m', split, h, 6, 0.8)).toEqual(model);
      const free = fitFreeBand([samples], '5m', split, h, 0.8)!;
      expect(fitFreeBand([scramble(samples)], '5m', split, h, 0.8)).toEqual(free);
      expect(free.low).toBeLessThan(0);
      expect(free.high).toBeGreaterThan(0);
      // On the months it was fitted on, each band covers about its nominal share.
      const train = samples.filter((s) => s.closeTime + h.candles * 300_000 <= split);
      const score = scoreRisk(train, '5m', h, 6, model, free);
      expect(score.coverage.value).toBeGreaterThan(0.75);
      expect(score.coverage.value).toBeLessThan(0.85);
      expect(score.freeCoverage.value).toBeGreaterThan(0.75);
      expect(score.freeCoverage.value).toBeLessThan(0.85);
      expect(score.rhoForecast).toBeGreaterThan(0);
    }
  });

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
