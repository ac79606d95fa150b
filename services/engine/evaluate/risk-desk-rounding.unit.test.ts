import { describe, expect, it } from 'vitest';
import { defaultBaselines } from '../signals/default-baselines.ts';
import { riskEvidenceCounts } from '../signals/risk-forecast.ts';
import type { DeskScore, Lift } from './risk-desk.ts';
import { type DeskRowReport, deskBaselineRows, deskCounts, renderRiskDesk } from './risk-desk-run.ts';

const lift = (value: number, low: number, high: number): Lift => ({ value, low, high });

/** A desk row whose figures beside GARCH(1,1) and EWMA lie within half a unit of the 4th decimal of 0. */
function row(timeframe: '4h' | '8h', vs: { ewma: Lift; garch: Lift; harRv: Lift }): DeskRowReport {
  const one = lift(1, 0.95, 1.05);
  // The report's newer figures too, where its build reads them; a build without them ignores them.
  const score = {
    points: 900,
    blocks: 40,
    sigmaRatio: one,
    coverage: lift(0.8, 0.78, 0.82),
    freeCoverage: lift(0.8, 0.78, 0.82),
    qlike: { service: -4, ewma: -4, garch: -4, harRv: -4 },
    qlikeVs: vs,
    mseLog: { service: 7, ewma: 7, garch: 9, harRv: 10 },
    sizing: { service: one, trailing: one },
    sharpness: { width: one, winkler: one },
    missAfter: { miss: 0.2, hit: 0.2, freeMiss: 0.2 },
    byDay: {
      weekday: { points: 600, coverage: one, sigmaRatio: one },
      weekend: { points: 300, coverage: one, sigmaRatio: one },
    },
  } as unknown as DeskScore;
  return { set: 'spot', timeframe, key: 'verdict', candles: 6, score };
}

describe('the risk rows shipped in baselines.json keep the side of 0 the evaluation counted them on', () => {
  const rows = [
    // Below GARCH(1,1) with its interval below 0, each figure rounding to 0 at the 4th decimal.
    row('4h', {
      ewma: lift(0.00004, -0.00002, 0.00009),
      garch: lift(-0.00003, -0.00004, -0.00001),
      harRv: lift(-0.00002, -0.0001, 0.00004),
    }),
    row('8h', {
      ewma: lift(-0.01, -0.02, -0.005),
      garch: lift(0.00002, 0.00001, 0.00004),
      harRv: lift(0.01, 0.001, 0.02),
    }),
  ];
  const stored = deskBaselineRows(rows);
  const counts = riskEvidenceCounts({ ...defaultBaselines, risk: stored });
  const desk = deskCounts(rows, 0.8);

  it('the served evidence counts from the stored rows what the report counts from the unrounded ones', () => {
    expect(counts.belowGarch).toBe(desk.beats('garch'));
    expect(counts.belowEwma).toBe(desk.beats('ewma'));
    expect(counts.belowHarRv).toBe(desk.beats('harRv'));
    expect(counts.garchIntervalBelow).toBe(desk.clearly('garch'));
    expect(counts.garchIntervalAbove).toBe(1);
    expect([counts.belowGarch, counts.garchIntervalBelow]).toEqual([1, 1]);
    // Stored at its first significant digit, as the report prints it.
    expect(stored[0]!.desk!.qlikeVs.garch).toEqual({ value: -0.00003, low: -0.00004, high: -0.00001 });
  });

  it('the report prints no figure that is not 0 as ±0.000', () => {
    const report = renderRiskDesk(
      { risk: {}, rows },
      { from: '2025-06-01', coverage: 0.8, fitted: 'before 2025-06-01' },
    );
    // The main table's rows (points 900), where the QLIKE differences are.
    const lines = report.split('\n').filter((l) => /^\| spot \| (4h|8h) \| verdict \(6\) \| 900 \|/.test(l));
    expect(lines).toHaveLength(2);
    for (const l of lines) expect(l, l).not.toMatch(/(^|[^\d.])-?0\.000(?!\d)/);
  });
});
