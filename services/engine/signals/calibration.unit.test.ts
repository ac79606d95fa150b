import { describe, expect, it } from 'vitest';
import type { CalibrationTable } from '../../../contracts/signals.ts';
import {
  type CalibrationSample,
  calibratedProbability,
  callDirection,
  cellDecision,
  fitCurve,
  fitDirection,
  leanNet,
  netWords,
  parseCalibrationTable,
} from './calibration.ts';
import { defaultBaselines } from './default-baselines.ts';
import { defaultCalibration } from './default-calibration.ts';
import { CalibrationError } from './errors.ts';

/** Deterministic pseudo-random samples where P(hit) = truth(|score|). */
function samples(n: number, truth: (x: number) => number, seed = 7): CalibrationSample[] {
  let s = seed;
  const rnd = () => {
    s = (s * 1_103_515_245 + 12_345) % 2 ** 31;
    return s / 2 ** 31;
  };
  return Array.from({ length: n }, () => {
    const absScore = Math.round(rnd() * 100) / 100;
    return { absScore, hit: rnd() < truth(absScore) };
  });
}

function isMonotone(table: { bins: Array<{ upTo: number; probability: number }> }): boolean {
  return table.bins.every(
    (b, i) =>
      i === 0 || (b.upTo >= table.bins[i - 1]!.upTo && b.probability >= table.bins[i - 1]!.probability),
  );
}

describe('calibration fit (isotonic / PAV)', () => {
  it('is monotone, bounded, ends at |score| 1 and every step has enough samples', () => {
    const curve = fitCurve(
      samples(20_000, (x) => 0.4 + 0.3 * x),
      { minBinSamples: 400, holdBand: 0.1 },
    );
    expect(isMonotone(curve)).toBe(true);
    expect(curve.bins.length).toBeGreaterThan(3);
    expect(curve.bins[curve.bins.length - 1]!.upTo).toBe(1);
    for (const b of curve.bins) {
      expect(b.probability).toBeGreaterThanOrEqual(0);
      expect(b.probability).toBeLessThanOrEqual(1);
      expect(b.samples).toBeGreaterThanOrEqual(400);
    }
    expect(curve.bins.reduce((a, b) => a + b.samples, 0)).toBe(20_000);
    expect(curve.bins[0]!.probability).toBeLessThan(0.47);
    expect(curve.bins[curve.bins.length - 1]!.probability).toBeGreaterThan(0.63);
  });

  it('collapses to one flat step when hit rate falls with |score| (it cannot invent a rising relation)', () => {
    const data = samples(10_000, (x) => 0.5 - 0.2 * x);
    const curve = fitCurve(data, { minBinSamples: 100, holdBand: 0.1 });
    expect(curve.bins).toHaveLength(1);
    expect(curve.bins[0]!.probability).toBeCloseTo(data.filter((d) => d.hit).length / data.length, 12);
  });

  it('base rate counts only calls at or above the hold band', () => {
    const data: CalibrationSample[] = [
      { absScore: 0.05, hit: true },
      { absScore: 0.05, hit: true },
      { absScore: 0.5, hit: false },
      { absScore: 0.6, hit: true },
    ];
    expect(fitCurve(data, { minBinSamples: 1, holdBand: 0.1 }).baseRate).toBe(0.5);
    expect(() => fitCurve([], { minBinSamples: 1, holdBand: 0.1 })).toThrow(CalibrationError);
  });

  it('lookup follows the step function and the fallback timeframe', () => {
    const table: CalibrationTable = {
      ...defaultCalibration,
      curves: {
        '5m': {
          samples: 300,
          baseRate: 0.5,
          bins: [
            { upTo: 0.2, probability: 0.4, samples: 100 },
            { upTo: 0.5, probability: 0.5, samples: 100 },
            { upTo: 1, probability: 0.7, samples: 100 },
          ],
        },
      },
      fallback: { '1m': '5m' },
    };
    expect(calibratedProbability(table, '5m', 0.2).probability).toBe(0.4);
    expect(calibratedProbability(table, '5m', 0.21).probability).toBe(0.5);
    expect(calibratedProbability(table, '1m', 0.9)).toEqual({ probability: 0.7, timeframe: '5m' });
    expect(() => calibratedProbability(table, '1h', 0.3)).toThrow(CalibrationError);
  });

  it('rejects a table that is not monotone or names a missing fallback', () => {
    const bad = {
      ...defaultCalibration,
      curves: {
        '1h': {
          samples: 200,
          baseRate: 0.5,
          bins: [
            { upTo: 0.5, probability: 0.6, samples: 100 },
            { upTo: 1, probability: 0.5, samples: 100 },
          ],
        },
      },
      fallback: {},
    };
    expect(() => parseCalibrationTable(bad)).toThrow(CalibrationError);
    expect(() => parseCalibrationTable({ ...defaultCalibration, fallback: { '1m': '3m' } })).toThrow(
      CalibrationError,
    );
    expect(() => parseCalibrationTable({ ...defaultCalibration, version: 2 })).toThrow();
  });

  it('direction: fades when training calls reverted, follows when they continued or on a tie', () => {
    const fee = 0.001;
    const opts = { fee, holdBand: 0.1 };
    const reverting = [
      { score: 0.5, forward: -0.01 },
      { score: -0.4, forward: 0.02 },
      { score: 0.3, forward: 0.005 },
    ];
    expect(fitDirection(reverting, opts)).toEqual({ direction: -1, calls: 3, followHits: 1, fadeHits: 2 });
    const continuing = reverting.map((s) => ({ ...s, forward: -s.forward }));
    expect(fitDirection(continuing, opts).direction).toBe(1);
    // Moves inside the fee count for neither side; scores inside the HOLD band are not calls.
    const tie = [
      { score: 0.5, forward: 0.01 },
      { score: 0.5, forward: -0.01 },
      { score: 0.5, forward: 0.0005 },
      { score: 0.05, forward: -0.5 },
      { score: 0, forward: -0.5 },
    ];
    expect(fitDirection(tie, opts)).toEqual({ direction: 1, calls: 3, followHits: 1, fadeHits: 1 });
    expect(fitDirection([], opts).direction).toBe(1);
  });

  it('call direction follows the fallback, defaults to following, and fails on a missing curve', () => {
    const curve = { samples: 100, baseRate: 0.5, bins: [{ upTo: 1, probability: 0.5, samples: 100 }] };
    const table: CalibrationTable = {
      ...defaultCalibration,
      curves: { '5m': { ...curve, direction: -1 }, '1h': curve },
      fallback: { '1m': '5m' },
    };
    expect(callDirection(table, '5m')).toBe(-1);
    expect(callDirection(table, '1m')).toBe(-1);
    expect(callDirection(table, '1h')).toBe(1);
    expect(() => callDirection(table, '4h')).toThrow(CalibrationError);
    expect(() =>
      parseCalibrationTable({ ...defaultCalibration, curves: { '1h': { ...curve, direction: 0 } } }),
    ).toThrow();
  });

  it('the shipped table covers all eleven timeframes and was fitted before its split', () => {
    for (const tf of ['1m', '3m', '5m', '15m', '30m', '1h', '2h', '4h', '8h', '12h', '1d'] as const) {
      expect(calibratedProbability(defaultCalibration, tf, 0.5).probability).toBeGreaterThan(0);
    }
    expect(defaultCalibration.trainFrom).toBeLessThan(defaultCalibration.trainTo);
  });

  it('the shipped table sells a direction only where its calls paid: skill, and a net bound above 0', () => {
    const cells = Object.entries(defaultCalibration.cells);
    expect(cells.length).toBe(15);
    for (const [cell, entry] of cells) {
      const pays = entry.timingSkill === true && (entry.net?.lowBps ?? Number.NEGATIVE_INFINITY) > 0;
      expect({ cell, emit: entry.emit }).toEqual({ cell, emit: pays });
    }
    // The track record's free baselines describe the same cells selling the same way.
    const emitting = Object.fromEntries(cells.map(([cell, e]) => [cell, e.emit]));
    expect(Object.fromEntries(defaultBaselines.cells.map((c) => [c.cell, c.emits]))).toEqual(emitting);
    // No cell pays today: every market's answer is HOLD, on every timeframe, 1m and 3m included.
    for (const tf of ['1m', '3m', '5m', '15m', '30m', '1h', '2h', '4h', '8h', '12h', '1d'] as const)
      for (const exchange of ['BINANCE_SPOT', 'BINANCE'] as const)
        expect(cellDecision(defaultCalibration, exchange, tf, 0.9).emit).toBe(false);
  });
});

describe('a lean serves a net figure only where its evidence supports one', () => {
  it('spot 12h (+4.43, bound −100.92) and spot 1d (+139.14, bound −139.47): not measurable, the interval kept', () => {
    const h12 = leanNet(4.43, -100.92);
    expect(h12).toEqual({
      meanBps: null,
      lowBps: -100.92,
      highBps: expect.closeTo(109.78, 9),
      measurable: false,
    });
    expect(netWords(h12)).toBe(
      'earned a net per call that is not measurable (90 % interval −100.9 to +109.8 bps spans 0)',
    );
    const d1 = leanNet(139.14, -139.47);
    expect(d1).toEqual({
      meanBps: null,
      lowBps: -139.47,
      highBps: expect.closeTo(417.75, 9),
      measurable: false,
    });
    expect(netWords(d1)).not.toContain('139.1 ');
  });

  it('spot 5m (−10.29, bound −11.13): a measured loss, its interval below 0', () => {
    const net = leanNet(-10.29, -11.13);
    expect(net).toEqual({
      meanBps: -10.29,
      lowBps: -11.13,
      highBps: expect.closeTo(-9.45, 9),
      measurable: true,
    });
    expect(netWords(net)).toBe('lost 10.3 bps per call (90 % interval −11.1 to −9.4 bps)');
  });

  it('a bound above 0 is a paying edge; an interval that spans 0 however narrowly is not measurable', () => {
    const paying = leanNet(4, 1);
    expect(paying).toMatchObject({ meanBps: 4, measurable: true });
    expect(netWords(paying)).toBe('earned +4.0 bps per call (one-sided 95 % bound +1.0 bps)');
    // spot 1h's evidence: −9.39, bound −20.80, so the upper bound is +2.02.
    expect(leanNet(-9.39, -20.8)).toMatchObject({ meanBps: null, measurable: false });
    expect(leanNet(0, 0)).toMatchObject({ meanBps: null, measurable: false });
    expect(leanNet(null, null)).toEqual({ meanBps: null, lowBps: null, highBps: null, measurable: false });
    expect(netWords(leanNet(null, null))).toContain('not measured');
  });

  it('serves its figures to 0.01 bps, measurable decided on the unrounded values', () => {
    // spot 5m as the table holds it: the bounds' float tails are no information a buyer can use.
    expect(leanNet(-10.29010890499872, -11.134923398949502)).toEqual({
      meanBps: -10.29,
      lowBps: -11.13,
      highBps: -9.45,
      measurable: true,
    });
    // An upper bound just below 0 stays measurable even where it rounds to 0.
    expect(leanNet(-5.001, -10)).toEqual({ meanBps: -5, lowBps: -10, highBps: 0, measurable: true });
    const decimals = (x: number | null) => (x === null ? 0 : (String(x).split('.')[1] ?? '').length);
    for (const [cell, entry] of Object.entries(defaultCalibration.cells)) {
      const net = leanNet(entry.net?.meanBps ?? null, entry.net?.lowBps ?? null);
      for (const x of [net.meanBps, net.lowBps, net.highBps])
        expect(decimals(x), cell).toBeLessThanOrEqual(2);
    }
  });

  it('the shipped table never serves a positive figure beside a bound below 0', () => {
    for (const [cell, entry] of Object.entries(defaultCalibration.cells)) {
      const net = leanNet(entry.net?.meanBps ?? null, entry.net?.lowBps ?? null);
      if (net.meanBps !== null && net.meanBps > 0) expect(net.lowBps, cell).toBeGreaterThan(0);
      if (net.meanBps !== null) expect(net.measurable, cell).toBe(true);
      const [kind, timeframe] = cell.split(':') as ['spot' | 'perp', '1h'];
      const decision = cellDecision(
        defaultCalibration,
        kind === 'spot' ? 'BINANCE_SPOT' : 'BINANCE',
        timeframe,
        0.5,
      );
      expect(decision.net, cell).toEqual(net);
    }
  });
});
