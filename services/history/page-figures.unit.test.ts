import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { Lift } from '../engine/evaluate/risk-desk.ts';
import { type DeskRowReport, deskBaselineRows, renderRiskDesk } from '../engine/evaluate/risk-desk-run.ts';
import { defaultBaselines } from '../engine/signals/default-baselines.ts';
import { trackRecordPage } from './page.ts';

/** The page's own percent formatting, taken from its script: what a reader of /track-record sees. */
function pagePct(): (x: number | null) => string {
  const source = trackRecordPage().match(/function pct\(x\) \{[^\n]*\}/)?.[0];
  expect(source, 'the page formats shares with pct(x)').toBeDefined();
  return new Function(`${source}; return pct;`)() as (x: number | null) => string;
}

/** "72.7% [63.2, 81.3]" (the report) → ['72.7', '63.2', '81.3']; "72.7% [–]" (no interval) → ['72.7', '–', '–']. */
function reportShare(cell: string): string[] {
  const m = cell.trim().match(/^([\d.]+)% (?:\[([\d.]+), ([\d.]+)\]|\[–\])$/);
  expect(m, cell).not.toBeNull();
  return [m![1]!, m![2] ?? '–', m![3] ?? '–'];
}

const shown = (pct: (x: number | null) => string, l: Lift) =>
  [l.value, l.low, l.high].map((x) => pct(x).replace(' %', ''));

describe('the track-record page shows the risk baselines as the evaluation report does', () => {
  it('every coverage figure of the shipped baselines reads as docs/evaluation-risk.md prints it', () => {
    const pct = pagePct();
    const rows = readFileSync(new URL('../../docs/evaluation-risk.md', import.meta.url), 'utf8')
      .split('\n')
      .filter((l) => /^\| (spot|perp) \|/.test(l))
      .map((l) => l.split('|').slice(1, -1));
    expect(rows).toHaveLength(defaultBaselines.risk.length);
    rows.forEach((cells, i) => {
      const r = defaultBaselines.risk[i]!;
      const row = `${r.set} ${r.timeframe} ${r.horizon}`;
      expect(`${cells[0]!.trim()} ${cells[1]!.trim()} ${cells[2]!.trim().split(' ')[0]}`).toBe(row);
      expect(shown(pct, r.coverage), `${row} coverage`).toEqual(reportShare(cells[5]!));
      expect(shown(pct, r.freeCoverage), `${row} free coverage`).toEqual(reportShare(cells[6]!));
    });
  });

  it('the evaluator stores a coverage rounded once, at the 0.1 point the report and the page show', () => {
    const lift = (value: number): Lift => ({ value, low: value - 0.05, high: value + 0.05 });
    // Just below a half at the fourth decimal: 72.746 % is 72.7 % rounded once; 0.7275, then 72.8 %, twice.
    const score = {
      points: 900,
      blocks: 40,
      sigmaRatio: lift(1),
      coverage: lift(0.72746),
      freeCoverage: lift(0.77551),
      qlike: { service: -4, ewma: -4, garch: -4, harRv: -4 },
      qlikeVs: { ewma: lift(0), garch: lift(0), harRv: lift(0) },
      mseLog: { service: 7, ewma: 7, garch: 9, harRv: 10 },
      sizing: { service: lift(1), trailing: lift(1) },
      sharpness: { width: lift(1), winkler: lift(1) },
      missAfter: { miss: 0.2, hit: 0.2, freeMiss: 0.2 },
      byDay: {
        weekday: { points: 600, coverage: lift(0.8), sigmaRatio: lift(1) },
        weekend: { points: 300, coverage: lift(0.8), sigmaRatio: lift(1) },
      },
    };
    const row: DeskRowReport = { set: 'perp', timeframe: '1d', key: 'verdict', candles: 6, score };
    const [stored] = deskBaselineRows([row]);
    const report = renderRiskDesk(
      { risk: {}, rows: [row] },
      { from: '2025-06-01', coverage: 0.8, fitted: 'before 2025-06-01' },
    );
    const cells = report
      .split('\n')
      .find((l) => l.startsWith('| perp | 1d |'))!
      .split('|')
      .slice(1, -1);
    const pct = pagePct();
    expect(shown(pct, stored!.coverage)).toEqual(reportShare(cells[5]!));
    expect(shown(pct, stored!.freeCoverage)).toEqual(reportShare(cells[6]!));
    expect(shown(pct, stored!.coverage)[0]).toBe('72.7');
    expect(shown(pct, stored!.freeCoverage)[0]).toBe('77.6');
  });
});
