import { describe, expect, it } from 'vitest';
import type { BaselinesTable } from '../../contracts/signals.ts';
import { defaultBaselines } from '../engine/signals/default-baselines.ts';
import { riskEvidenceCounts } from '../engine/signals/risk-forecast.ts';
import { trackRecordPage } from './page.ts';

type Lift = { value: number | null; low: number | null; high: number | null };

/** The page's own lift(l) (and the helpers it calls), taken from its script: what a reader sees. */
function pageLift(): (l: Lift) => string {
  const page = trackRecordPage();
  const num = page.match(/function num\(x, d\) \{[^\n]*\}/)?.[0];
  const lift = page.match(
    /(function fig\(x, d\) \{[^\n]*\}\n\s*)?function lift\(l\) \{[\s\S]*?\n {2}\}/,
  )?.[0];
  expect(num, 'the page formats figures with num(x, d)').toBeDefined();
  expect(lift, 'the page formats intervals with lift(l)').toBeDefined();
  return new Function(`${num}\n${lift}; return lift;`)() as (l: Lift) => string;
}

/** "−0.04 [−0.05, −0.0004]" → [value, low, high] as numbers (low/high null without an interval, [–]). */
function read(printed: string): (number | null)[] {
  const m = printed.match(/^(\S+)(?: \[(\S+), (\S+)\]| \[–\])?$/);
  expect(m, printed).not.toBeNull();
  return [m![1]!, m![2], m![3]].map((x) => (x === undefined ? null : Number(x)));
}

describe('the track-record page prints the risk rows so that its signs agree with the counts', () => {
  const lift = pageLift();
  const rows = defaultBaselines.risk.flatMap((r) => (r.desk ? [{ row: r, desk: r.desk }] : []));

  it('no figure that is not 0 prints as ±0.00: its sign is the figure’s', () => {
    for (const { row, desk } of rows) {
      for (const [name, l] of Object.entries({ ...desk.qlikeVs, sigmaRatio: desk.sigmaRatio })) {
        const shown = read(lift(l));
        [l.value, l.low, l.high].forEach((x, i) => {
          if (x === null || shown[i] === null) return;
          const at = `${row.set} ${row.timeframe} ${row.horizon} ${name} ${lift(l)}`;
          expect(Math.sign(shown[i]!), at).toBe(Math.sign(x));
        });
      }
    }
  });

  it('a row shipped without an interval says so, [–], as the report does (the 1d six-candle rows)', () => {
    const bare = rows.filter(({ desk }) => desk.sigmaRatio.low === null);
    expect(bare.map(({ row }) => `${row.set} ${row.timeframe} ${row.horizon}`)).toEqual([
      'spot 1d verdict',
      'perp 1d verdict',
    ]);
    for (const { desk } of bare) expect(lift(desk.qlikeVs.garch)).toMatch(/^\S+ \[–\]$/);
    expect(trackRecordPage()).toContain('[–]: no interval, as on the 1d six-candle rows');
  });

  it('counts the risk evidence states (below GARCH(1,1), its interval below 0) from the rows as printed', () => {
    const printed = (pick: (d: (typeof rows)[number]['desk']) => Lift, at: 0 | 1 | 2) =>
      rows.filter(({ desk }) => {
        const x = read(lift(pick(desk)))[at];
        return x !== null && x !== undefined && x < 0;
      }).length;
    const counts = riskEvidenceCounts(defaultBaselines as BaselinesTable);
    expect(printed((d) => d.qlikeVs.garch, 0)).toBe(counts.belowGarch);
    expect(printed((d) => d.qlikeVs.ewma, 0)).toBe(counts.belowEwma);
    expect(printed((d) => d.qlikeVs.harRv, 0)).toBe(counts.belowHarRv);
    expect(printed((d) => d.qlikeVs.garch, 2)).toBe(counts.garchIntervalBelow);
    expect(counts.garchIntervalBelow).toBeGreaterThan(0);
  });
});
