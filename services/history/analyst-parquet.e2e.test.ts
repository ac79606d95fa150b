import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HISTORY_COLUMNS, TrackRecordResponse } from '../../contracts/history.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { KINDS } from './writers.ts';

const exec = promisify(execFile);

/** The Parquet physical types as DuckDB names them. */
const DUCKDB_TYPES = {
  utf8: 'VARCHAR',
  int64: 'BIGINT',
  int32: 'INTEGER',
  float64: 'DOUBLE',
  bool: 'BOOLEAN',
};

/**
 * The issue's "done when", as an analyst does it: `npm run history -- export` pulls the labelled
 * history of every market from a running service as Parquet, `verify` checks its chains, `score`
 * reproduces the public /api/track-record from the file alone, and DuckDB, a reader we do not
 * write, reads the export (the README's one-liner).
 */
describe('an analyst with a key, through npm run history and DuckDB', () => {
  let fx: Awaited<ReturnType<typeof recordHistory>>;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;
  let key: string;
  let dir: string;

  beforeAll(async () => {
    fx = await recordHistory({ steps: 40 });
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
    key = await server.issue();
    dir = mkdtempSync(join(tmpdir(), 'history-analyst-'));
  });
  afterAll(async () => {
    await server?.close();
    await fx?.engine.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
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

      // The README's one-liner, as printed there.
      const readme = (
        await connection.runAndReadAll(
          `SELECT exchange, timeframe, count(*) AS calls, round(avg((result = 'hit')::INT), 3) AS hit_rate, round(avg(net_centi_bps) / 100, 1) AS mean_net_bps FROM ${files} WHERE call IN ('BUY', 'SELL') AND result IS NOT NULL GROUP BY ALL ORDER BY ALL`,
        )
      ).getRowObjectsJson();
      expect(readme.map((l) => [l.exchange, l.timeframe, Number(l.calls), Number(l.hit_rate)])).toEqual(
        live.lines
          .filter((l) => l.calls > 0 && l.exchange !== 'ALL' && l.timeframe !== 'ALL')
          .sort((a, b) => `${a.exchange} ${a.timeframe}`.localeCompare(`${b.exchange} ${b.timeframe}`))
          .map((l) => [l.exchange, l.timeframe, l.calls, Number(l.following.hitRate!.toFixed(3))]),
      );
    } finally {
      connection.closeSync();
      db.closeSync();
    }
  });
});
