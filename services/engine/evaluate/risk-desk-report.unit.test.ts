import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MIN_INTERVAL_BLOCKS } from '../signals/risk-forecast.ts';
import { parseVolatilityTable } from '../signals/volatility.ts';
import type { DeskScore, Lift } from './risk-desk.ts';
import {
  type DeskRowReport,
  deskBaselineRows,
  deskCounts,
  renderRiskDesk,
  renderRiskDeskRows,
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
    sharpness: { width: lift(1), winkler: lift(1) },
    missAfter: { miss: 0.2, hit: 0.2, freeMiss: 0.2 },
    byDay: {
      weekday: { points: 600, coverage: lift(0.8), sigmaRatio: lift(1) },
      weekend: { points: 300, coverage: lift(0.8), sigmaRatio: lift(1) },
    },
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

  it("states beside the counts what a buyer should know: level error against each baseline, sizing against the trailing σ's, sharpness, clustering and weekends", () => {
    const a = row(40, lift(-0.05, -0.1, -0.01));
    const b = row(40, lift(0.03, 0.01, 0.05));
    b.score.mseLog = { service: 6, ewma: 6.5, garch: 9, harRv: 10 };
    b.score.sizing = { service: lift(1.01), trailing: lift(1.05) };
    b.score.sharpness = { width: lift(0.97), winkler: lift(0.98) };
    b.score.missAfter = { miss: 0.23, hit: 0.19, freeMiss: 0.25 };
    b.score.byDay.weekend.coverage = lift(0.75);
    const both = { risk: {}, rows: [a, { ...b, timeframe: '12h' as const }] };
    const report = renderRiskDesk(both, { ...meta, rowsFile: 'evaluation-risk-rows.csv' });
    expect(report).toContain(
      'MSE of log variance below EWMA on 1 (spot 12h verdict), GARCH(1,1) on 2, HAR-RV on 2.',
    );
    expect(report).toContain(
      'only ties with GARCH(1,1), the standard volatility model of a risk desk: lower on 1 of 2 rows, the interval below 0 on 1, above 0 on 1',
    );
    expect(report).toContain('ours is the nearer to 1 on 1 (ours 1.010–1.020, trailing 1.000–1.050)');
    expect(report).toContain("ours is 0.970–1.000 × the trailing band's");
    expect(report).toContain('lower on 1 of 2 rows');
    expect(report).toContain('the band missed 0.20–0.23 of the time, after a hit 0.19–0.20 (nominal 0.20)');
    expect(report).toContain('covered 75.0–80.0 % (within ±3 points on 1 of 2 rows)');
    expect(report).toContain('Not wholly out of sample');
    expect(report).toContain('(per row in evaluation-risk-rows.csv beside this report)');
    // The per-row figures go to their own file, not a table in the report (the chat's index).
    expect(report).not.toContain('| spot | 12h | verdict (6) | 0.970');
    const csv = renderRiskDeskRows(both).split('\n');
    expect(csv[0]).toMatch(/^set,timeframe,horizon,candles,width_ratio,/);
    expect(csv[2]).toBe(
      'spot,12h,verdict,6,0.970,0.970,0.970,0.980,0.980,0.980,0.230,0.250,0.190,80.0,80.0,80.0,75.0,75.0,75.0,600,300,1.000,1.000',
    );
  });

  it('prints a bound below 0 that rounds to 0.000 at its first digit, so the table agrees with the count', () => {
    const near = row(40, lift(-0.066, -0.127, -0.00043));
    const report = renderRiskDesk({ risk: {}, rows: [near] }, meta);
    expect(cells(report)[12]).toBe('-0.066 [-0.127, -0.0004]');
    expect(report).toContain('below GARCH(1,1) on 1 (1)');
  });

  it("states the perpetuals' band scale of the table it scores, 1d's included", () => {
    // The shipped table scales every perpetual horizon from 1h to 1d (its fit had 500 perpetual
    // closes on 1d too); 5m has no perpetual candles and serves the spot band as it is.
    const shipped = parseVolatilityTable(
      JSON.parse(readFileSync(join(import.meta.dirname, '../signals/calibration/volatility.json'), 'utf8')),
    );
    const risk = shipped.risk!;
    const oneDay = risk['1d']!.map((r) => r.model.perpBandScale);
    expect(oneDay.every((k) => k !== undefined && k < 1)).toBe(true);
    const report = renderRiskDesk({ risk, rows: [row(40, lift(-0.05))] }, meta);
    expect(report).not.toContain('1d, keeps the spot band');
    const range = (xs: (number | undefined)[]) =>
      `${Math.min(...(xs as number[])).toFixed(2)}–${Math.max(...(xs as number[])).toFixed(2)}`;
    expect(report).toContain(`${range(oneDay)} on 1d`);
    expect(report).toContain('serves the spot band as it is on 5m, 15m and 30m');
    // A fit whose 1d horizons have no scale (too few perpetual closes) says that instead.
    const unscaled = risk['1d']!.map((r) => ({ ...r, model: { ...r.model, perpBandScale: undefined } }));
    const fold = renderRiskDesk(
      { risk: { '1h': risk['1h']!, '1d': unscaled }, rows: [row(40, lift(-0.05))] },
      meta,
    );
    expect(fold).toContain('serves the spot band as it is on 1d)');
  });
});
