import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HISTORY_COLUMNS, type HistoryRow, TrackRecordResponse } from '../../contracts/history.ts';
import { type SettledHistory, startSettledHistory } from '../../test/history-harness.ts';
import { DEFAULT_HOLD_BAND } from '../engine/signals/verdict.ts';
import { KINDS } from './writers.ts';

const exec = promisify(execFile);

/** The Parquet physical types as DuckDB names them. */
const DUCKDB_TYPES = {
  utf8: 'VARCHAR',
  int64: 'BIGINT',
  int32: 'INTEGER',
  float64: 'DOUBLE',
  bool: 'BOOLEAN',
  timestamp: 'TIMESTAMP WITH TIME ZONE',
};

/**
 * The "done when", as an analyst does it: `npm run history -- export` pulls the labelled
 * history of every market from a running service as Parquet, `verify` checks its chains, `score`
 * reproduces the public /api/track-record from the file alone, and DuckDB, a reader we do not
 * write, reads the export (the README's one-liner: the evaluation's would-be figure per cell).
 */
describe('an analyst with a key, through npm run history and DuckDB', () => {
  let settled: SettledHistory;
  let server: SettledHistory['server'];
  let key: string;
  let dir: string;

  beforeAll(async () => {
    settled = await startSettledHistory({ steps: 40, tmpPrefix: 'history-analyst-' });
    ({ server, key, dir } = settled);
  });
  afterAll(async () => {
    await settled?.close();
  });

  /** `npm run history -- …` in its own process; its answer is the JSON after npm's banner. */
  async function history(...args: string[]): Promise<unknown> {
    const { stdout } = await exec('npm', ['run', 'history', '--', ...args], {
      cwd: process.cwd(),
      env: { ...process.env, LOG_LEVEL: 'silent' },
      maxBuffer: 16 * 1024 * 1024,
    });
    return JSON.parse(stdout.slice(stdout.indexOf('\n{') + 1));
  }

  it('exports every market as Parquet, verifies its chains, scores it to the public track record, and DuckDB reads it', async () => {
    const out = join(dir, 'verdicts');
    const exported = (await history(
      'export',
      ...['--url', server.url, '--key', key, '--format', 'parquet', '--out', out],
    )) as { rows: number };
    expect(exported.rows).toBe(120);
    expect(readdirSync(out).some((f) => f.endsWith('.parquet'))).toBe(true);

    expect(await history('verify', out)).toMatchObject({
      ok: true,
      rows: 120,
      streams: 3,
      firstBroken: null,
    });

    const live = TrackRecordResponse.parse(
      await (await fetch(`${server.url}/api/track-record?window=all`)).json(),
    );
    expect(live.overall.calls).toBeGreaterThan(20);
    expect(await history('score', out, '--window', 'all', '--as-of', live.asOf)).toEqual(live);

    const db = await DuckDBInstance.create(':memory:');
    const connection = await db.connect();
    try {
      const files = `read_parquet('${join(out, '*.parquet')}')`;
      const schema = (await connection.runAndReadAll(`DESCRIBE SELECT * FROM ${files}`)).getRowObjectsJson();
      expect(schema.map((c) => [c.column_name, c.column_type])).toEqual(
        HISTORY_COLUMNS.map((c) => [c, DUCKDB_TYPES[KINDS[c]]]),
      );
      const [totals] = (
        await connection.runAndReadAll(
          `SELECT count(*) AS rows, count(DISTINCT (exchange, coin, timeframe)) AS markets,
             count(*) FILTER (WHERE revealed) AS revealed, count(result) AS labelled,
             count(*) FILTER (WHERE NOT revealed AND call IS NOT NULL) AS leaked FROM ${files}`,
        )
      ).getRowObjectsJson();
      expect(totals).toMatchObject({ rows: '120', markets: '3', leaked: '0' });
      expect(Number(totals!.labelled)).toBeGreaterThan(0);
      expect(Number(totals!.revealed)).toBeLessThan(120);

      // The README's one-liner, as printed there, on this export: the would-be figure per cell.
      const readmeText = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
      const printed = /duckdb -c "(SELECT [^"]+)"/.exec(readmeText)![1]!;
      expect(printed).toContain("read_parquet('exports/verdicts/*.parquet')");
      const wouldBe = (
        await connection.runAndReadAll(printed.replace("read_parquet('exports/verdicts/*.parquet')", files))
      ).getRowObjectsJson();
      // The same figure from the NDJSON rows the API serves: every resolved verdict with a lean,
      // HOLD included, its return over six candles in the lean's direction less the 10 bps fee.
      const res = await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } });
      const rows = (await res.text())
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as HistoryRow);
      const cells = new Map<string, number[]>();
      for (const r of rows) {
        if (r.lean === null || r.return_6 === null) continue;
        const cell = `${r.exchange === 'BINANCE_SPOT' ? 'spot' : 'perp'}:${r.timeframe}`;
        const net = (r.lean === 'BUY' ? 1 : -1) * r.return_6 * 10_000 - 10;
        cells.set(cell, [...(cells.get(cell) ?? []), net]);
      }
      const expected = [...cells.entries()]
        .sort((a, b) => a[0].localeCompare(b[0]))
        .map(([cell, nets]) => [cell, nets.length, nets.reduce((a, b) => a + b, 0) / nets.length]);
      expect(expected.map(([cell]) => cell)).toEqual(['perp:1h', 'spot:5m']);
      expect(wouldBe.map((l) => l.cell)).toEqual(expected.map(([cell]) => cell));
      wouldBe.forEach((l, i) => {
        const [, n, mean] = expected[i]!;
        expect(Number(l.would_be_calls)).toBe(n);
        expect(Math.abs(Number(l.mean_net_bps) - (mean as number))).toBeLessThanOrEqual(0.005 + 1e-9);
      });
      // The README's clause for the evaluation's set: its would-be calls leave out the leans
      // inside the HOLD band (|score| below it), which the one-liner counts.
      const clause = `AND abs(score) >= ${DEFAULT_HOLD_BAND}`;
      expect(readmeText).toContain(`\`${clause}\``);
      const outsideBand = (
        await connection.runAndReadAll(
          printed
            .replace("read_parquet('exports/verdicts/*.parquet')", files)
            .replace(
              'WHERE lean_net_centi_bps IS NOT NULL',
              `WHERE lean_net_centi_bps IS NOT NULL ${clause}`,
            ),
        )
      ).getRowObjectsJson();
      const kept = rows.filter(
        (r) => r.lean !== null && r.return_6 !== null && Math.abs(r.score ?? 0) >= DEFAULT_HOLD_BAND,
      );
      expect(outsideBand.reduce((n, l) => n + Number(l.would_be_calls), 0)).toBe(kept.length);
      // The fixture's history has leans on both sides of the band, so the clause is seen to act.
      expect(kept.length).toBeGreaterThan(0);
      expect(kept.length).toBeLessThan(expected.reduce((n, [, c]) => n + (c as number), 0));
      // The perp cell answers HOLD only: without the lean its would-be figure could not be had.
      expect(live.lines.find((l) => l.exchange === 'BINANCE')!.calls).toBe(0);

      // The README's risk record, as printed, on this export: each line's `risk` in the public
      // track record, the counts exactly and the ratios to the rounding the query prints.
      const printedRisk = /duckdb -c "(SELECT [^"]+AS sigma_ratio[^"]+)"/.exec(readmeText)![1]!;
      expect(printedRisk).toContain("read_parquet('exports/verdicts/*.parquet')");
      const risk = (
        await connection.runAndReadAll(
          printedRisk.replace("read_parquet('exports/verdicts/*.parquet')", files),
        )
      ).getRowObjectsJson();
      const scored = live.lines.filter((l) => l.risk.points > 0);
      expect(scored.length).toBeGreaterThan(0);
      expect(risk.map((l) => [l.exchange, l.timeframe, Number(l.points), Number(l.covered)])).toEqual(
        scored
          .map((l) => [l.exchange, l.timeframe, l.risk.points, l.risk.covered])
          .sort(([e1, t1], [e2, t2]) => (e1 === e2 ? (t1! < t2! ? -1 : 1) : e1! < e2! ? -1 : 1)),
      );
      for (const l of risk) {
        const line = scored.find((x) => x.exchange === l.exchange && x.timeframe === l.timeframe)!;
        expect(Math.abs(Number(l.coverage) - line.risk.coverage!)).toBeLessThanOrEqual(0.00005 + 1e-9);
        expect(Math.abs(Number(l.sigma_ratio) - line.risk.sigmaRatio!)).toBeLessThanOrEqual(0.0005 + 1e-6);
      }

      // The NDJSON file exactly as served over HTTP (the README's curl), read by DuckDB: every
      // line a row (no trailer, no row of nulls), times as timestamps, the README's query as printed.
      const served = join(dir, 'verdicts.ndjson');
      const body = Buffer.from(
        await (
          await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } })
        ).arrayBuffer(),
      );
      writeFileSync(served, body);
      // The README's curl line as printed, run where no exports/ exists yet (a reader starting at
      // that block): it writes the same file, not a silent curl error 23 and no file.
      const curlLine = /^\s*(curl -s [^\n]*localhost:8080\/api\/verdicts [^\n]+)$/m.exec(readmeText)![1]!;
      const fresh = mkdtempSync(join(dir, 'curl-'));
      await exec('sh', ['-c', curlLine.replace('localhost:8080', new URL(server.url).host)], {
        cwd: fresh,
        env: { ...process.env, KEY: key },
      });
      expect(readFileSync(join(fresh, 'exports', 'verdicts.ndjson'))).toEqual(body);
      const json = `read_json('${served}')`;
      const [counted] = (
        await connection.runAndReadAll(
          `SELECT count(*) AS rows, count(*) FILTER (WHERE verdict_id IS NULL) AS empty,
             count(DISTINCT cursor) AS cursors FROM ${json}`,
        )
      ).getRowObjectsJson();
      expect(counted).toEqual({ rows: '120', empty: '0', cursors: '120' });
      const jsonTypes = Object.fromEntries(
        (await connection.runAndReadAll(`DESCRIBE SELECT * FROM ${json}`))
          .getRowObjectsJson()
          .map((c) => [c.column_name, c.column_type]),
      );
      expect(jsonTypes).toMatchObject({
        recorded_at: 'TIMESTAMP',
        reveal_at: 'TIMESTAMP',
        cursor: 'VARCHAR',
      });
      const printedJson = /duckdb -c "(SELECT [^"]+read_json[^"]+)"/.exec(readmeText)![1]!;
      expect(printedJson).toContain("read_json('exports/verdicts.ndjson')");
      const fromServed = (
        await connection.runAndReadAll(printedJson.replace("read_json('exports/verdicts.ndjson')", json))
      ).getRowObjectsJson();
      expect(fromServed).toEqual(wouldBe);
      // Columns null in every row (the perp cell answers HOLD only: no net_centi_bps, no mae_bps)
      // come out untyped, and avg() refuses them; the README's typed read answers.
      const holds = join(dir, 'holds.ndjson');
      writeFileSync(
        holds,
        body
          .toString()
          .split('\n')
          .filter((l) => l.includes('"exchange":"BINANCE"'))
          .join('\n'),
      );
      await expect(
        connection.runAndReadAll(`SELECT avg(net_centi_bps) FROM read_json('${holds}')`),
      ).rejects.toThrow('avg(JSON)');
      const typed = /duckdb -c "(SELECT [^"]+read_json\('exports\/verdicts\.ndjson', columns[^"]+)"/.exec(
        readmeText,
      )![1]!;
      const perCell = (
        await connection.runAndReadAll(
          typed.replace("read_json('exports/verdicts.ndjson'", `read_json('${holds}'`),
        )
      ).getRowObjectsJson();
      expect(perCell).toEqual([{ timeframe: '1h', calls: '0', mean_net_bps: null, mean_mae_bps: null }]);
      // Asked for, the trailer is the last line (the documented way for clients that rely on it).
      const withTrailer = await fetch(`${server.url}/api/verdicts`, {
        headers: { authorization: `Bearer ${key}`, accept: 'application/x-ndjson; profile="trailer"' },
      });
      const lines = (await withTrailer.text()).trim().split('\n');
      expect(lines).toHaveLength(121);
      // Its cursor is where the scan stopped, past the log's other events after the last row.
      expect(JSON.parse(lines.at(-1)!)).toMatchObject({ rows: 120, cursor: expect.any(String) });
      expect(lines.slice(0, -1).map((l) => JSON.parse(l).cursor)).toEqual(rows.map((r) => r.cursor));

      // Parquet as served over HTTP: the times are TIMESTAMP WITH TIME ZONE, equal to the rows' times.
      const parquetFile = join(dir, 'served.parquet');
      writeFileSync(
        parquetFile,
        Buffer.from(
          await (
            await fetch(`${server.url}/api/verdicts?format=parquet`, {
              headers: { authorization: `Bearer ${key}` },
            })
          ).arrayBuffer(),
        ),
      );
      const times = (
        await connection.runAndReadAll(
          `SELECT epoch_ms(recorded_at) AS recorded, epoch_ms(reveal_at) AS reveal,
             epoch_ms(candle_close_time) AS close, cursor FROM read_parquet('${parquetFile}') ORDER BY position`,
        )
      ).getRowObjectsJson();
      expect(times).toEqual(
        rows.map((r) => ({
          recorded: String(Date.parse(r.recorded_at)),
          reveal: String(Date.parse(r.reveal_at)),
          close: r.candle_close_time === null ? null : String(r.candle_close_time),
          cursor: r.cursor,
        })),
      );
    } finally {
      connection.closeSync();
      db.closeSync();
    }
  });
});
