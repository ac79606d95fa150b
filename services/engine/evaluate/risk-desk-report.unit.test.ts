import { describe, expect, it } from 'vitest';
import type { DeskScore, Lift } from './risk-desk.ts';
import {
  type DeskRowReport,
  deskBaselineRows,
  deskCounts,
  MIN_INTERVAL_BLOCKS,
  renderRiskDesk,
} from './risk-desk-run.ts';

const lift = (value: number, low = value, high = value): Lift => ({ value, low, high });

function row(blocks: number, garch: Lift): DeskRowReport {
  const score: DeskScore = {
    points: 900,
    blocks,
    sigmaRatio: lift(2.313),
    coverage: lift(0.8),
    freeCoverage: lift(0.79),
    qlike: { service: -4, ewma: -4, garch: -4, harRv: -4 },
    qlikeVs: { ewma: lift(-0.01, -0.02, -0.005), garch, harRv: lift(-0.1, -0.2, -0.05) },
    mseLog: { service: 7, ewma: 7, garch: 9, harRv: 10 },
    sizing: { service: lift(1.02, 0.9, 1.1), trailing: lift(1, 0.9, 1.1) },
  };
  return { set: 'spot', timeframe: '1d', key: 'verdict', candles: 6, score };
}

const cells = (report: string) =>
  report
    .split('\n')
    .find((l) => l.startsWith('| spot | 1d |'))!
    .split('|')
    .slice(1, -1)
    .map((c) => c.trim());

const meta = { from: '2025-06-01', coverage: 0.8, fitted: 'before 2025-06-01' };

describe('the risk desk report', () => {
  it(`prints no interval on fewer than ${MIN_INTERVAL_BLOCKS} blocks (one block resamples to the estimate itself)`, () => {
    const few = row(1, lift(-0.05));
    const report = renderRiskDesk({ risk: {}, rows: [few] }, meta);
    const c = cells(report);
    expect(c[4]).toBe('2.313 [–]');
    expect(c[5]).toBe('80.0% [–]');
    expect(c[12]).toBe('-0.050 [–]');
    expect(report).not.toContain('2.313 [2.313, 2.313]');
    // An interval not printed is not counted as below 0 either.
    expect(deskCounts([few], 0.8).clearly('garch')).toBe(0);
    expect(deskCounts([few], 0.8).clearly('harRv')).toBe(0);
    // Nor shipped to the track record, which shows the baselines' intervals beside the report's.
    const [stored] = deskBaselineRows([few]);
    expect(stored!.desk!.sigmaRatio).toEqual({ value: 2.313, low: null, high: null });
    expect(stored!.coverage).toEqual({ value: 0.8, low: null, high: null });
    expect(stored!.desk!.qlikeVs.garch).toEqual({ value: -0.05, low: null, high: null });
    const many = row(MIN_INTERVAL_BLOCKS, lift(-0.05, -0.1, -0.01));
    expect(cells(renderRiskDesk({ risk: {}, rows: [many] }, meta))[12]).toBe('-0.050 [-0.100, -0.010]');
    expect(deskCounts([many], 0.8).clearly('garch')).toBe(1);
    expect(deskBaselineRows([many])[0]!.desk!.qlikeVs.garch).toEqual({
      value: -0.05,
      low: -0.1,
      high: -0.01,
    });
  });

  it('prints a bound below 0 that rounds to 0.000 at its first digit, so the table agrees with the count', () => {
    const near = row(40, lift(-0.066, -0.127, -0.00043));
    const report = renderRiskDesk({ risk: {}, rows: [near] }, meta);
    expect(cells(report)[12]).toBe('-0.066 [-0.127, -0.0004]');
    expect(report).toContain('below GARCH(1,1) on 1 (1)');
  });
});
