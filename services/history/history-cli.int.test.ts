import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HistoryRow, TrackRecordResponse } from '../../contracts/history.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { type CliDeps, runHistoryCommand, UsageError } from './cli-commands.ts';
import { readExport } from './files.ts';

const run = promisify(execFile);

let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let key: string;
let dir: string;

beforeAll(async () => {
  fx = await recordHistory({ steps: 40 });
  server = await startHistoryServer({ store: fx.store, feed: fx.feed });
  await server.settle();
  key = await server.issue();
  dir = mkdtempSync(join(tmpdir(), 'history-cli-'));
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

function deps(extra: Partial<CliDeps> = {}): CliDeps {
  return { openStore: async () => fx.store, progress: null, ...extra };
}

async function collect(path: string): Promise<HistoryRow[]> {
  const rows: HistoryRow[] = [];
  for await (const row of readExport(path)) rows.push(row);
  return rows;
}

async function served(): Promise<HistoryRow[]> {
  const res = await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } });
  return (await res.text())
    .trim()
    .split('\n')
    .slice(0, -1)
    .map((l) => JSON.parse(l) as HistoryRow);
}

describe('npm run history', () => {
  it('exports Parquet parts with a progress bar, verifies the chains and reproduces the track record', async () => {
    const out = join(dir, 'verdicts');
    const bar = new PassThrough();
    let printed = '';
    bar.on('data', (c) => {
      printed += String(c);
    });
    const summary = JSON.parse(
      await runHistoryCommand(
        ['export', '--url', server.url, '--key', key, '--format', 'parquet', '--out', out, '--page', '25'],
        deps({ progress: bar }),
      ),
    );
    expect(summary.rows).toBe(120);
    expect(printed).toContain('export |');
    expect(readdirSync(out).filter((f) => f.endsWith('.parquet'))).toHaveLength(5);
    expect((await collect(out)).map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));

    const report = JSON.parse(await runHistoryCommand(['verify', out], deps()));
    expect(report).toMatchObject({ ok: true, rows: 120, streams: 3, firstBroken: null });

    const live = TrackRecordResponse.parse(
      await (await fetch(`${server.url}/api/track-record?window=30d`)).json(),
    );
    const offline = JSON.parse(
      await runHistoryCommand(['score', out, '--window', '30d', '--as-of', live.asOf], deps()),
    );
    expect(offline).toEqual(live);
    expect(offline.overall.calls).toBeGreaterThan(20);
  });

  it('resumes an interrupted export and writes every row exactly once', async () => {
    for (const format of ['ndjson', 'csv'] as const) {
      const out = join(dir, `resumed.${format}`);
      let calls = 0;
      const flaky: typeof fetch = async (input, init) => {
        calls++;
        if (calls === 3) throw new Error('connection reset');
        return fetch(input, init);
      };
      const args = ['export', '--url', server.url, '--key', key, '--out', out, '--page', '11'];
      await expect(runHistoryCommand(args, deps({ fetch: flaky }))).rejects.toThrow('connection reset');
      // Half a page written after the last complete one is dropped on resume.
      writeFileSync(out, `${readFileSync(out, 'utf8')}{"partial":`);
      await expect(runHistoryCommand(args, deps())).rejects.toThrow(UsageError);
      const summary = JSON.parse(await runHistoryCommand([...args, '--resume'], deps()));
      expect(summary.rows).toBe(120);
      const rows = await collect(out);
      expect(rows.map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));
      expect(new Set(rows.map((r) => r.verdict_id)).size).toBe(120);
    }
  });

  it('resumes an interrupted Parquet export over its parts, a half-written part included', async () => {
    const out = join(dir, 'resumed-parquet');
    let calls = 0;
    const flaky: typeof fetch = async (input, init) => {
      calls++;
      if (calls === 3) throw new Error('connection reset');
      return fetch(input, init);
    };
    const args = [
      'export',
      '--url',
      server.url,
      '--key',
      key,
      '--format',
      'parquet',
      '--out',
      out,
      '--page',
      '11',
    ];
    await expect(runHistoryCommand(args, deps({ fetch: flaky }))).rejects.toThrow('connection reset');
    expect(readdirSync(out).filter((f) => f.endsWith('.parquet'))).toHaveLength(2);
    // A crash while the next part was being written leaves it cut short: resuming rewrites it.
    writeFileSync(join(out, 'part-000003.parquet'), 'PAR1 cut short');
    const summary = JSON.parse(await runHistoryCommand([...args, '--resume'], deps()));
    expect(summary.rows).toBe(120);
    expect(readdirSync(out).filter((f) => f.endsWith('.parquet'))).toHaveLength(11);
    const rows = await collect(out);
    expect(rows.map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));
    expect(new Set(rows.map((r) => r.verdict_id)).size).toBe(120);
    expect((await runHistoryCommand(['verify', out], deps())).includes('"ok": true')).toBe(true);
  });

  it('reads a local store directly, and reports the first broken link of a tampered file', async () => {
    const out = join(dir, 'local.ndjson');
    const summary = JSON.parse(
      await runHistoryCommand(['export', '--store', '--out', out, '--coin', 'ETH'], deps()),
    );
    expect(summary.rows).toBe(40);
    const lines = readFileSync(out, 'utf8').trim().split('\n');
    const rows = lines.map((l) => JSON.parse(l) as HistoryRow);
    expect(new Set(rows.map((r) => r.coin))).toEqual(new Set(['ETH']));

    // Rewrite one revealed verdict's confidence after the fact: its hash no longer matches.
    const victim = rows.findIndex((r, i) => i > 5 && r.revealed);
    const tampered = { ...rows[victim]!, confidence: (rows[victim]!.confidence! + 1) % 100 };
    const forged = join(dir, 'forged.ndjson');
    writeFileSync(
      forged,
      [...lines.slice(0, victim), JSON.stringify(tampered), ...lines.slice(victim + 1)].join('\n'),
    );
    const report = JSON.parse(await runHistoryCommand(['verify', forged], deps()));
    expect(report.ok).toBe(false);
    expect(report.firstBroken).toMatchObject({
      verdictId: rows[victim]!.verdict_id,
      reason: 'hash does not match the revealed content',
    });
    // Dropping a verdict breaks the next link.
    const gap = join(dir, 'gap.ndjson');
    writeFileSync(gap, [...lines.slice(0, 10), ...lines.slice(11)].join('\n'));
    const gapReport = JSON.parse(await runHistoryCommand(['verify', gap], deps()));
    expect(gapReport.firstBroken).toMatchObject({ verdictId: rows[11]!.verdict_id });

    // The real command line: exit code 1 on a broken chain, usage errors exit 2.
    const cli = ['tsx', 'services/history/cli.ts'];
    const failed = await run('npx', [...cli, 'verify', forged]).catch(
      (err: { code: number; stdout: string }) => err,
    );
    expect((failed as { code: number }).code).toBe(1);
    expect(JSON.parse((failed as { stdout: string }).stdout).firstBroken.position).toBe(
      rows[victim]!.position,
    );
    const usage = await run('npx', [...cli, 'score']).catch((err: { code: number; stderr: string }) => err);
    expect((usage as { code: number }).code).toBe(2);
    expect((usage as { stderr: string }).stderr).toContain('score needs the export file');
  });
});
