import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import type { BaselinesTable } from '../../../contracts/signals.ts';
import { defaultBaselines } from './default-baselines.ts';
import { defaultVolatility } from './default-volatility.ts';
import { riskEvidenceText } from './risk-forecast.ts';

/** The shipped baselines as the file holds them, read apart from the service's import. */
type RawRow = {
  timeframe: string;
  coverage: { value: number };
  desk: {
    sigmaRatio: { value: number };
    qlikeVs: Record<'ewma' | 'garch' | 'harRv', { value: number; low: number; high: number }>;
  };
};
const raw = JSON.parse(readFileSync(new URL('./calibration/baselines.json', import.meta.url), 'utf8')) as {
  risk: RawRow[];
};

/** The figure after `before` in `text`, as a number (− read as a minus). */
function figure(text: string, before: RegExp): number {
  const m = before.exec(text);
  if (m === null) throw new Error(`no ${before} in: ${text}`);
  return m[1] === 'none' ? 0 : Number(m[1]!.replace('−', '-'));
}

describe('the risk forecast evidence', () => {
  it('on 1m and 3m says the timeframe was not evaluated and which models it runs, quoting no figure', () => {
    for (const tf of ['1m', '3m'] as const) {
      const text = riskEvidenceText(defaultVolatility, tf);
      expect(text).toContain(`The risk forecast on ${tf} was not evaluated`);
      expect(text).toContain(`runs the 5m models (fitted on 5m candles) on ${tf} candles`);
      expect(text).not.toMatch(/\d+ of \d+/);
      expect(text).not.toContain('%');
    }
  });

  it("on every evaluated timeframe quotes its own rows' counts of the shipped baselines.json, recounted here, then every row's", () => {
    const all = raw.risk;
    const level = (rows: RawRow[]) =>
      rows.filter((r) => r.desk.sigmaRatio.value >= 0.9 && r.desk.sigmaRatio.value <= 1.1).length;
    const timeframes = [...new Set(all.map((r) => r.timeframe))];
    expect(timeframes).toEqual(['5m', '15m', '30m', '1h', '2h', '4h', '8h', '12h', '1d']);
    const texts = new Set<string>();
    for (const tf of timeframes) {
      const rows = all.filter((r) => r.timeframe === tf);
      const n = rows.length;
      const garch = rows.map((r) => r.desk.qlikeVs.garch);
      const below = garch.filter((g) => g.high !== null && g.high < 0);
      const coverage = rows.map((r) => r.coverage.value);
      const text = riskEvidenceText(defaultVolatility, tf as '1h');
      texts.add(text);
      expect(text).toContain('not wholly out of sample');
      expect(figure(text, /On the (\d+) \w+ rows/)).toBe(n);
      expect(text).toContain(`On the ${n} ${tf} rows`);
      expect(figure(text, /within 0\.9–1\.1 on (\d+) of/)).toBe(level(rows));
      expect(figure(text, /coverage ([\d.]+)–/)).toBe(Number((100 * Math.min(...coverage)).toFixed(1)));
      expect(figure(text, /coverage [\d.]+–([\d.]+) %/)).toBe(
        Number((100 * Math.max(...coverage)).toFixed(1)),
      );
      const ewma = rows.filter((r) => r.desk.qlikeVs.ewma.value < 0).length;
      const harRv = rows.filter((r) => r.desk.qlikeVs.harRv.value < 0).length;
      if (ewma === harRv) expect(figure(text, /below EWMA and HAR-RV on (\d+) of/)).toBe(ewma);
      else {
        expect(figure(text, /below EWMA on (\d+) and/)).toBe(ewma);
        expect(figure(text, /HAR-RV on (\d+) of/)).toBe(harRv);
      }
      expect(figure(text, /below GARCH\(1,1\) on (\d+) \(/)).toBe(garch.filter((g) => g.value < 0).length);
      expect(text).toContain(`interval below 0 on ${below.length === 0 ? 'none' : below.length}`);
      if (below.length > 0)
        expect(figure(text, /closest to 0 ending at ([−\d.]+)/)).toBe(Math.max(...below.map((g) => g.high)));
      const above = garch.filter((g) => g.low !== null && g.low > 0).length;
      expect(text).toContain(`above 0 on ${above === 0 ? 'none' : above})`);
      // Then every timeframe's rows, the same for each.
      expect(figure(text, /Over every timeframe's (\d+) rows/)).toBe(all.length);
      expect(figure(text, /Over every timeframe's \d+ rows: within 0\.9–1\.1 on (\d+)/)).toBe(level(all));
      expect(
        figure(text, /Over every timeframe's \d+ rows: within 0\.9–1\.1 on \d+, below GARCH\(1,1\) on (\d+)/),
      ).toBe(all.filter((r) => r.desk.qlikeVs.garch.value < 0).length);
    }
    // A 5m caller reads the 5m rows' figures, not the 41 rows' (4 of the rows outside 0.9–1.1 are 5m–30m).
    expect(texts.size).toBe(timeframes.length);
  });

  it('follows the data: a row moved out of 0.9–1.1 or above GARCH(1,1) changes the counts served', () => {
    const before = riskEvidenceText(defaultVolatility, '1h');
    const changed: BaselinesTable = structuredClone(defaultBaselines);
    const row = changed.risk.find(
      (r) =>
        r.timeframe === '1h' &&
        r.desk !== undefined &&
        r.desk.sigmaRatio.value !== null &&
        r.desk.sigmaRatio.value <= 1.1,
    )!;
    row.desk!.sigmaRatio.value = 1.3;
    const clear = changed.risk.find(
      (r) => r.timeframe === '1h' && r.desk?.qlikeVs.garch.high != null && r.desk.qlikeVs.garch.high < 0,
    )!;
    clear.desk!.qlikeVs.garch = { value: 0.01, low: 0.005, high: 0.02 };
    const after = riskEvidenceText(defaultVolatility, '1h', changed);
    expect(figure(after, /within 0\.9–1\.1 on (\d+) of/)).toBe(
      figure(before, /within 0\.9–1\.1 on (\d+) of/) - 1,
    );
    expect(figure(after, /interval below 0 on (\d+|none)/)).toBe(
      figure(before, /interval below 0 on (\d+|none)/) - 1,
    );
    expect(after).toContain('above 0 on 1)');
  });
});
