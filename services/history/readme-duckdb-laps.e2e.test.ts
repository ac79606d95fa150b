import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HistoryRow, replayLapOf } from '../../contracts/history.ts';
import { MARKETS, type SettledHistory, startSettledHistory } from '../../test/history-harness.ts';

/**
 * The README's DuckDB queries on an export that crosses the replay's end: the rows of a looped
 * lap (the data served again, training months included) are left out, as the track record leaves
 * them out. The queries as printed counted them: after a default `npm start` had run past its
 * data's end (75 minutes), spot 1h's would-be figure read −10.36 bps against −11.70 without them.
 */
describe("the README's DuckDB queries count no looped replay lap", () => {
  let settled: SettledHistory;
  let server: SettledHistory['server'];
  let key: string;
  let dir: string;

  beforeAll(async () => {
    // Hourly verdicts from two days before the shipped data's end (2025-11-01) to a day past it:
    // the outcomes of the last day's verdicts come from the looped lap.
    const market = MARKETS.filter((m) => m.exchange === 'BINANCE' && m.coin === 'BTC');
    settled = await startSettledHistory({
      steps: 72,
      markets: market,
      start: Date.UTC(2025, 9, 30),
      settleHours: 30,
      tmpPrefix: 'readme-duckdb-laps-',
    });
    ({ server, key, dir } = settled);
  });
  afterAll(async () => {
    await settled?.close();
  });

  it('the would-be figure and the typed read, as printed, leave the looped rows out', async () => {
    const headers = { authorization: `Bearer ${key}` };
    const ndjson = join(dir, 'verdicts.ndjson');
    writeFileSync(ndjson, await (await fetch(`${server.url}/api/verdicts`, { headers })).text());
    const parquet = join(dir, 'verdicts.parquet');
    const answer = await fetch(`${server.url}/api/verdicts?format=parquet`, { headers });
    writeFileSync(parquet, Buffer.from(await answer.arrayBuffer()));
    const rows = readFileSync(ndjson, 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as HistoryRow);
    const leaned = rows.filter((r) => r.lean_net_centi_bps !== null);
    const counted = leaned.filter((r) => replayLapOf(JSON.parse(r.inputs_json!)) === 0);
    // Some resolved rows are of the looped lap, some are not: the filter matters.
    expect(counted.length).toBeGreaterThan(0);
    expect(counted.length).toBeLessThan(leaned.length);
    const mean = counted.reduce((a, r) => a + r.lean_net_centi_bps!, 0) / counted.length / 100;

    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    // Each query by what it computes: the README's section holds others beside them.
    const printed = [...readme.matchAll(/duckdb -c "(SELECT [^"]+)"/g)].map((m) => m[1]!);
    const wouldBe = printed.filter((q) => q.includes('AS would_be_calls'));
    const fromParquet = wouldBe.find((q) => q.includes('read_parquet('));
    const fromJson = wouldBe.find((q) => q.includes('read_json('));
    const typed = printed.find((q) => q.includes('AS calls') && q.includes('read_json('));
    const connection = await (await DuckDBInstance.create()).connect();
    const run = async (sql: string) => (await connection.runAndReadAll(sql)).getRowObjectsJson();
    for (const [sql, file] of [
      [
        fromParquet!.replace("read_parquet('exports/verdicts/*.parquet')", `read_parquet('${parquet}')`),
        parquet,
      ],
      [fromJson!.replace("'exports/verdicts.ndjson'", `'${ndjson}'`), ndjson],
    ] as const) {
      expect(sql, file).toContain(file);
      const [cell, ...none] = await run(sql);
      expect(none).toEqual([]);
      expect(cell).toMatchObject({ cell: 'perp:1h', would_be_calls: String(counted.length) });
      expect(Math.abs(Number(cell!.mean_net_bps) - mean)).toBeLessThanOrEqual(0.005 + 1e-9);
    }
    // The typed read of the calls' columns counts the same rows (HOLDs only here: no call).
    const [line] = await run(typed!.replace("'exports/verdicts.ndjson'", `'${ndjson}'`));
    expect(line).toMatchObject({ timeframe: '1h', calls: '0' });
  });
});
