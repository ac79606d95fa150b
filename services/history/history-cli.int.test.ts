import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { type AddressInfo, createServer } from 'node:net';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { promisify } from 'node:util';
import { DuckDBInstance } from '@duckdb/node-api';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import { loadConfig } from '../../contracts/config.ts';
import { type EventData, newEvent } from '../../contracts/events.ts';
import { type HistoryRow, TrackRecordResponse } from '../../contracts/history.ts';
import {
  HOUR,
  recordHistory,
  type ServedHistory,
  type SettledHistory,
  startHistoryServer,
  startSettledHistory,
} from '../../test/history-harness.ts';
import { recordIntervalHistory } from '../../test/interval-history.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';
import { CommandFailedError } from '../shared/cli-failure.ts';
import {
  type CliDeps,
  deploymentReplay,
  ExportInterruptedError,
  ForeignCursorError,
  runHistoryCommand,
  UsageError,
  verifyExitCode,
} from './cli-commands.ts';
import { readExport } from './files.ts';

const run = promisify(execFile);

let settled: SettledHistory;
let fx: SettledHistory['fx'];
let server: SettledHistory['server'];
let key: string;
let dir: string;

beforeAll(async () => {
  settled = await startSettledHistory({ steps: 40, tmpPrefix: 'history-cli-' });
  ({ fx, server, key, dir } = settled);
});
afterAll(async () => {
  await settled?.close();
});

function deps(extra: Partial<CliDeps> = {}): CliDeps {
  return { openStore: async () => fx.store, progress: null, ...extra };
}

/** `history export` from the test server with its key into `out`, then `more`. */
function urlExport(out: string, ...more: string[]): string[] {
  return ['export', '--url', server.url, '--key', key, '--out', out, ...more];
}

/** A fetch whose third call fails as a dropped connection: an export cut after two pages. */
function cutOnThirdFetch(): typeof fetch {
  let calls = 0;
  return async (input, init) => {
    calls++;
    if (calls === 3) throw new Error('connection reset');
    return fetch(input, init);
  };
}

async function collect(path: string): Promise<HistoryRow[]> {
  const rows: HistoryRow[] = [];
  for await (const row of readExport(path)) rows.push(row);
  return rows;
}

async function served(): Promise<HistoryRow[]> {
  const res = await fetch(`${server.url}/api/verdicts`, { headers: { authorization: `Bearer ${key}` } });
  // Rows only (no trailer asked for): every line is a row.
  return (await res.text())
    .trim()
    .split('\n')
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
      await runHistoryCommand(urlExport(out, '--format', 'parquet', '--page', '25'), deps({ progress: bar })),
    );
    expect(summary.rows).toBe(120);
    // Over HTTP the total is unknown: rows and their rate, never a made-up denominator.
    expect(printed).toMatch(/export \| 120 rows \| [\d,]+ rows\/s/);
    expect(printed).not.toMatch(/\d+\/1\b/);
    expect(readdirSync(out).filter((f) => f.endsWith('.parquet'))).toHaveLength(5);
    expect((await collect(out)).map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));

    const report = JSON.parse(await runHistoryCommand(['verify', out], deps()));
    expect(report).toMatchObject({ ok: true, rows: 120, rowsWalked: 120, streams: 3, firstBroken: null });

    const live = TrackRecordResponse.parse(
      await (await fetch(`${server.url}/api/track-record?window=30d`)).json(),
    );
    const offline = JSON.parse(
      await runHistoryCommand(
        ['score', out, '--window', '30d', '--as-of', live.asOf, '--as-of-position', `${live.asOfPosition}`],
        deps(),
      ),
    );
    expect(offline).toEqual(live);
    expect(offline.overall.calls).toBeGreaterThan(20);
  });

  it('makes the folders an NDJSON or CSV --out names, as it does for Parquet', async () => {
    for (const format of ['ndjson', 'csv'] as const) {
      const out = join(dir, 'not-yet', format, `verdicts.${format}`);
      const summary = JSON.parse(await runHistoryCommand(urlExport(out), deps()));
      expect(summary.rows).toBe(120);
      expect((await collect(out)).map((r) => r.verdict_id)).toEqual(
        (await served()).map((r) => r.verdict_id),
      );
    }
  });

  it('resumes an interrupted export and writes every row exactly once', async () => {
    for (const format of ['ndjson', 'csv'] as const) {
      const out = join(dir, `resumed.${format}`);
      const flaky = cutOnThirdFetch();
      const args = urlExport(out, '--page', '11');
      const stopped = await runHistoryCommand(args, deps({ fetch: flaky })).catch((err: Error) => err);
      expect(stopped).toBeInstanceOf(ExportInterruptedError);
      expect((stopped as Error).message).toBe(
        `export stopped after 22 rows: could not reach ${server.url}/api/verdicts: connection reset\n` +
          `run the same command with --resume to continue from row 23, or remove ${out} and ${out}.checkpoint.json to start over`,
      );
      // Half a page written after the last complete one is dropped on resume.
      writeFileSync(out, `${readFileSync(out, 'utf8')}{"partial":`);
      // A plain re-run does not silently start over or append: it says how to go on.
      await expect(runHistoryCommand(args, deps())).rejects.toThrow(
        new UsageError(
          `${out} holds an interrupted export (22 rows so far): run the same command with --resume to continue it, or remove ${out} and ${out}.checkpoint.json to start over`,
        ),
      );
      const summary = JSON.parse(await runHistoryCommand([...args, '--resume'], deps()));
      expect(summary.rows).toBe(120);
      // Finished by the resume: its checkpoint is gone with nothing left to resume.
      expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
      const rows = await collect(out);
      expect(rows.map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));
      expect(new Set(rows.map((r) => r.verdict_id)).size).toBe(120);
    }
  });

  it('resumes an interrupted export only under the filters it was started with', async () => {
    const out = join(dir, 'filtered.ndjson');
    const started = urlExport(out, '--page', '11', '--coin', 'btc', '--from', '2025-01-01');
    const stopped = await runHistoryCommand(started, deps({ fetch: cutOnThirdFetch() })).catch(
      (err: Error) => err,
    );
    expect(stopped).toBeInstanceOf(ExportInterruptedError);
    // Another coin, or a filter dropped: its rows would be appended after BTC's, and the file
    // would still verify (the other streams counted as starting mid-chain).
    for (const other of [
      urlExport(out, '--page', '11', '--coin', 'ETH', '--from', '2025-01-01', '--resume'),
      urlExport(out, '--page', '11', '--coin', 'BTC', '--resume'),
    ]) {
      await expect(runHistoryCommand(other, deps())).rejects.toThrow(
        new UsageError(
          `${out} was exported with --coin BTC --from 2025-01-01T00:00:00.000Z, not ${other.includes('ETH') ? '--coin ETH --from 2025-01-01T00:00:00.000Z' : '--coin BTC'}: --resume continues it with the same filters (run the command it was started with), or remove ${out} and ${out}.checkpoint.json to start over`,
        ),
      );
    }
    // The same filters, as written or spelled another way the route reads alike, resume it.
    const summary = JSON.parse(
      await runHistoryCommand(
        urlExport(out, '--page', '11', '--from', '2025-01-01T00:00:00Z', '--coin', 'BTC', '--resume'),
        deps(),
      ),
    );
    const rows = await collect(out);
    expect(new Set(rows.map((r) => r.coin))).toEqual(new Set(['BTC']));
    expect(rows.map((r) => r.verdict_id)).toEqual(
      (await served()).filter((r) => r.coin === 'BTC').map((r) => r.verdict_id),
    );
    expect(summary.rows).toBe(rows.length);
  });

  it("reveals from the store on the deployment's clock, decided from the settings and the log as the service's, never by a venue probe", async () => {
    // FEED=auto (.env.example's) and no venue reachable from the test: a probe would replay here
    // whatever the deployment did. The clock is the replay's when REPLAY_ANCHOR sets it or the log
    // records it (every replaying process of the deployment adopts the record), else wall time (a
    // live deployment, FEED=live's whatever the log holds).
    const cases = [
      { clock: 'recorded', feed: 'auto', replayed: true },
      { clock: 'REPLAY_ANCHOR', feed: 'auto', replayed: true },
      { clock: 'none', feed: 'auto', replayed: false },
      { clock: 'recorded', feed: 'live', replayed: false },
    ] as const;
    for (const { clock, feed: mode, replayed } of cases) {
      const name = `${clock} ${mode}`;
      const replay = await recordHistory({ steps: 12, store: new MemoryEventStore() });
      const at = new Date(replay.feed.now()).toISOString();
      // The deployment's replay clock, here stopped at the fixture's feed time (speed 0), which is
      // what the test server reveals on: recorded on the log as every process of it adopts it, or
      // set in every process's settings (REPLAY_ANCHOR), which leaves no record on the log.
      if (clock === 'recorded')
        await replay.store.append('replay-clock', [
          newEvent('ReplayClockAnchored', {
            anchor: Date.now(),
            start: replay.feed.now(),
            speed: 0,
            dir: 'x',
          }),
        ]);
      const config = loadConfig({
        EVENT_STORE: 'memory',
        NODE_ENV: 'test',
        LOG_LEVEL: 'silent',
        FEED: mode,
        FEED_PROBE_TIMEOUT_MS: '200',
        MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
        // A replay's settings a live deployment leaves in place: its clock is still wall time.
        REPLAY_START: at,
        REPLAY_SPEED: '0',
        ...(clock === 'REPLAY_ANCHOR' ? { REPLAY_ANCHOR: new Date().toISOString() } : {}),
      });
      const feed = await deploymentReplay(config, replay.store);
      const replayServer = await startHistoryServer({ store: replay.store, feed: replay.feed });
      try {
        expect(feed === null ? null : new Date(feed.now()).toISOString(), name).toBe(replayed ? at : null);
        await replayServer.settle();
        const res = await fetch(`${replayServer.url}/api/verdicts`, {
          headers: { authorization: `Bearer ${await replayServer.issue()}` },
        });
        const servedRows = (await res.text())
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as HistoryRow);
        // Wall time is past every reveal time of 2025's data: read on it, the last verdicts, whose
        // six candles have not closed on the feed's clock, come out revealed.
        expect(servedRows.filter((r) => !r.revealed).length, name).toBeGreaterThan(0);
        const expected = replayed ? servedRows : servedRows.map((r) => ({ ...r, revealed: true }));
        const out = join(dir, `replay-clock-${clock}-${mode}.ndjson`);
        const cli = { openStore: async () => replay.store, openReplay: async () => feed, progress: null };
        await runHistoryCommand(['export', '--store', '--out', out], cli);
        const exported = await collect(out);
        const shown = (rows: HistoryRow[]) => rows.map((r) => [r.verdict_id, r.revealed]);
        expect(shown(exported), name).toEqual(shown(expected));
        const report = JSON.parse(await runHistoryCommand(['verify', '--store'], cli));
        expect(report.rehashed, name).toBe(expected.filter((r) => r.revealed).length);
        // Read, never written: the CLI records no clock of its own.
        expect(await replay.store.readStream('replay-clock'), name).toHaveLength(
          clock === 'recorded' ? 1 : 0,
        );
      } finally {
        await feed?.close();
        await replayServer.close();
        await replay.engine.close();
      }
    }
  });

  it('refuses to resume against another log (a restored DATA_DIR), and says to start a new export', async () => {
    // Another log: the same verdicts (their ids are deterministic) one position later, so the
    // position the cursor names holds another event, as in a DATA_DIR restored from a backup.
    const store = new MemoryEventStore();
    await store.append('operator-note', [{ type: 'OperatorNote', data: {} }]);
    const other = await recordHistory({ steps: 40, store });
    const otherServer = await startHistoryServer({ store: other.store, feed: other.feed });
    try {
      await otherServer.settle();
      const otherKey = await otherServer.issue();
      for (const via of ['store', 'url'] as const) {
        const out = join(dir, `foreign-${via}.ndjson`);
        const flaky = cutOnThirdFetch();
        const args = urlExport(out, '--page', '11');
        await expect(runHistoryCommand(args, deps({ fetch: flaky }))).rejects.toThrow(ExportInterruptedError);
        const before = readFileSync(out, 'utf8');
        const resume =
          via === 'store'
            ? ['export', '--store', '--out', out, '--page', '11', '--resume']
            : [
                'export',
                '--url',
                otherServer.url,
                '--key',
                otherKey,
                '--out',
                out,
                '--page',
                '11',
                '--resume',
              ];
        const refused = await runHistoryCommand(resume, {
          openStore: async () => other.store,
          progress: null,
        }).catch((err: Error) => err);
        expect(refused).toBeInstanceOf(ForeignCursorError);
        const message = (refused as Error).message;
        expect(message).toContain('export stopped after 22 rows: ');
        expect(message).toContain('a cursor from another log');
        expect(message).toContain(
          `Start a new export: choose another --out, or remove ${out} and ${out}.checkpoint.json to start over, and run the command without --resume`,
        );
        expect(message).not.toContain('with --resume to continue');
        // Not one row of the other log was added.
        expect(readFileSync(out, 'utf8')).toBe(before);
      }
    } finally {
      await otherServer.close();
      await other.engine.close();
    }
  });

  it('refuses to resume from a store whose verdict at the cursor was recorded again (same id, another hash)', async () => {
    for (const format of ['ndjson', 'csv', 'parquet'] as const) {
      const out = join(dir, `recorded-again-${format}`);
      const flaky = cutOnThirdFetch();
      const args = urlExport(out, '--format', format, '--page', '11');
      await expect(runHistoryCommand(args, deps({ fetch: flaky }))).rejects.toThrow(ExportInterruptedError);
      const last = (await collect(out)).at(-1)!;
      // The same log, event for event (ids included, so the cursor's tag matches), but for the
      // last exported verdict, recorded again with another hash, as after a restore.
      const copy = new MemoryEventStore();
      for (const e of await fx.store.readAll()) {
        const data =
          e.id === last.verdict_id ? { ...(e.data as object), hash: 'f'.repeat(64) } : (e.data as object);
        await copy.append(e.stream, [{ id: e.id, type: e.type, data, correlationId: e.correlationId }]);
      }
      expect((await copy.readAll({ after: last.position - 1, maxCount: 1 }))[0]!.id).toBe(last.verdict_id);
      const resume = ['export', '--store', '--format', format, '--out', out, '--page', '11', '--resume'];
      const refused = await runHistoryCommand(resume, { openStore: async () => copy, progress: null }).catch(
        (err: Error) => err,
      );
      expect(refused).toBeInstanceOf(ForeignCursorError);
      expect((refused as Error).message).toContain(
        `the log read does not hold the last exported verdict (${last.verdict_id} at position ${last.position}) as exported: its hash differs, recorded again`,
      );
      // The log it was taken from resumes it, through --store as well as --url.
      const summary = JSON.parse(await runHistoryCommand(resume, deps()));
      expect(summary.rows).toBe(120);
      expect((await collect(out)).map((r) => r.verdict_id)).toEqual(
        (await served()).map((r) => r.verdict_id),
      );
    }
  });

  it('resumes an interrupted Parquet export over its parts, a half-written part included', async () => {
    const out = join(dir, 'resumed-parquet');
    const flaky = cutOnThirdFetch();
    const args = urlExport(out, '--format', 'parquet', '--page', '11');
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

  it("reads the filters by the route's own rules from the store and the service alike: coin, exchange and call in any case, timeframe exactly", async () => {
    const fromStore = join(dir, 'filters-store.ndjson');
    const fromUrl = join(dir, 'filters-url.ndjson');
    const filters = ['--coin', 'eth', '--exchange', 'binance', '--timeframe', '1h', '--call', 'hold'];
    await runHistoryCommand(['export', '--store', '--out', fromStore, ...filters], deps());
    await runHistoryCommand(urlExport(fromUrl, ...filters), deps());
    const rows = await collect(fromStore);
    expect(rows.length).toBeGreaterThan(0);
    expect(new Set(rows.map((r) => `${r.coin} ${r.exchange} ${r.timeframe} ${r.call}`))).toEqual(
      new Set(['ETH BINANCE 1h HOLD']),
    );
    // The same verdicts (the rows' outcome columns follow each source's clock).
    const key_ = (r: HistoryRow) => `${r.position} ${r.hash}`;
    expect((await collect(fromUrl)).map(key_)).toEqual(rows.map(key_));
    // A value the route refuses is refused before either source is read, naming the option.
    for (const source of [['--store'], ['--url', server.url, '--key', key]]) {
      for (const [option, value] of [
        ['--call', 'maybe'],
        ['--exchange', 'nowhere'],
        ['--timeframe', '1H'],
        ['--from', 'yesterday'],
      ] as const) {
        const out = join(dir, `refused-${source.length}-${option.slice(2)}.ndjson`);
        await expect(
          runHistoryCommand(['export', ...source, '--out', out, option, value], deps()),
        ).rejects.toThrow(new RegExp(`^${option}: `));
        expect(existsSync(out), `${option} ${value}`).toBe(false);
      }
    }
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
    // rows: the file's 40, read past the break; rowsWalked: those the chain walk checked, up to
    // and including the tampered row.
    expect(report).toMatchObject({ rows: 40, rowsWalked: victim + 1 });
    // Dropping a verdict breaks the next link.
    const gap = join(dir, 'gap.ndjson');
    writeFileSync(gap, [...lines.slice(0, 10), ...lines.slice(11)].join('\n'));
    const gapReport = JSON.parse(await runHistoryCommand(['verify', gap], deps()));
    expect(gapReport.firstBroken).toMatchObject({ verdictId: rows[11]!.verdict_id });
    expect(gapReport).toMatchObject({ rows: 39, rowsWalked: 11 });

    // The real command line (npm run history's tsx, as node's loader: npx and tsx's launcher would
    // add two Node processes per run): exit code 1 on a broken chain, usage errors exit 2.
    const cli = ['--import', 'tsx', 'services/history/cli.ts'];
    const failed = await run(process.execPath, [...cli, 'verify', forged]).catch(
      (err: { code: number; stdout: string }) => err,
    );
    expect((failed as { code: number }).code).toBe(1);
    expect(JSON.parse((failed as { stdout: string }).stdout).firstBroken.position).toBe(
      rows[victim]!.position,
    );
    const usage = await run(process.execPath, [...cli, 'score']).catch(
      (err: { code: number; stderr: string }) => err,
    );
    expect((usage as { code: number }).code).toBe(2);
    expect((usage as { stderr: string }).stderr).toContain('score needs the export file');
    // --store on a DATA_DIR holding no log: refused naming DATA_DIR, and no empty log created.
    const mistyped = join(dir, 'no-such-data-dir');
    const noStore = await run(process.execPath, [...cli, 'verify', '--store'], {
      env: { ...process.env, EVENT_STORE: 'lmdb', DATA_DIR: mistyped },
    }).catch((err: { code: number; stderr: string }) => err);
    expect((noStore as { code: number }).code).toBe(2);
    expect((noStore as { stderr: string }).stderr).toContain(`DATA_DIR=${mistyped} holds no event log`);
    expect(existsSync(mistyped)).toBe(false);
  });

  it('verify over --url or --store that reads no row fails as a file of no row: nothing is verified', async () => {
    const incomplete = (source: string) =>
      `${source} gave no rows: 0 rows checked, so nothing is verified (a log of no verdict is no evidence)`;
    const empty = new MemoryEventStore();
    const stored = JSON.parse(
      await runHistoryCommand(['verify', '--store'], deps({ openStore: async () => empty })),
    );
    expect(stored).toMatchObject({
      ok: false,
      rows: 0,
      firstBroken: null,
      incomplete: incomplete('the log (--store)'),
    });
    expect(verifyExitCode(stored)).toBe(1);
    const emptyServer = await startHistoryServer({ store: empty, feed: null });
    try {
      const served = JSON.parse(
        await runHistoryCommand(
          ['verify', '--url', `${emptyServer.url}/`, '--key', await emptyServer.issue()],
          deps(),
        ),
      );
      expect(served).toMatchObject({
        ok: false,
        rows: 0,
        incomplete: incomplete(`${emptyServer.url}/api/verdicts`),
      });
      expect(verifyExitCode(served)).toBe(1);
    } finally {
      await emptyServer.close();
    }
    // A log and a service that hold verdicts verify: the count, not the source, fails the empty read.
    for (const source of [['--store'], ['--url', server.url, '--key', key]]) {
      const whole = JSON.parse(await runHistoryCommand(['verify', ...source], deps()));
      expect(whole.ok, source[0]).toBe(true);
      expect(whole, source[0]).not.toHaveProperty('incomplete');
    }
  });

  it('with the service down: says what failed, leaves nothing behind, and a plain re-run works', async () => {
    // A port that was just listening and is closed again: nothing answers there.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise((resolve) => probe.close(resolve));
    const down = `http://127.0.0.1:${port}`;
    const out = join(dir, 'down.ndjson');
    const args = ['export', '--url', down, '--key', key, '--out', out];
    const failed = await runHistoryCommand(args, deps()).catch((err: Error) => err);
    expect(failed).toBeInstanceOf(ExportInterruptedError);
    expect((failed as Error).message).toBe(
      `export stopped after 0 rows: could not reach ${down}/api/verdicts: connection refused: is the service running? (ECONNREFUSED)\n` +
        'run the same command again once that is fixed',
    );
    expect([existsSync(out), existsSync(`${out}.checkpoint.json`)]).toEqual([false, false]);

    // A run killed before its first row (no chance to clean up) does not block the next one.
    writeFileSync(out, '');
    writeFileSync(
      `${out}.checkpoint.json`,
      JSON.stringify({ format: 'ndjson', cursor: null, rows: 0, bytes: 0, parts: 0, done: false }),
    );
    const live = urlExport(out);
    expect(JSON.parse(await runHistoryCommand(live, deps())).rows).toBe(120);
    // A finished export leaves no checkpoint: the README names one only for an export that stopped.
    expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
    // A finished export is never overwritten by a plain re-run, nor resumed.
    await expect(runHistoryCommand(live, deps())).rejects.toThrow(
      new UsageError(`${out} exists: choose another --out, or remove ${out} to start over`),
    );
    await expect(runHistoryCommand([...live, '--resume'], deps())).rejects.toThrow(
      new UsageError(
        `nothing to resume: ${out}.checkpoint.json does not exist (an export keeps it only while it is unfinished)`,
      ),
    );
    // Removed by hand: the same command exports it again, as the README's 'remove the export' reads;
    // so it does beside a finished export's checkpoint (done), left by a run killed before removing it.
    rmSync(out);
    writeFileSync(
      `${out}.checkpoint.json`,
      JSON.stringify({ format: 'ndjson', cursor: null, rows: 120, bytes: 1, parts: 0, done: true }),
    );
    expect(JSON.parse(await runHistoryCommand(live, deps())).rows).toBe(120);
    expect(readFileSync(out, 'utf8').trim().split('\n')).toHaveLength(120);
    expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
    // Nor is anything more than an empty export, whatever its checkpoint says.
    const other = join(dir, 'not-empty.ndjson');
    writeFileSync(other, '{"someone":"else"}\n');
    writeFileSync(
      `${other}.checkpoint.json`,
      JSON.stringify({ format: 'ndjson', cursor: null, rows: 0, bytes: 0, parts: 0, done: false }),
    );
    await expect(runHistoryCommand(urlExport(other), deps())).rejects.toThrow(UsageError);
    expect(readFileSync(other, 'utf8')).toBe('{"someone":"else"}\n');

    // The real command line: the message and exit code 1, no TypeError and no stack trace.
    const cliOut = join(dir, 'down-cli.ndjson');
    const cliArgs = ['export', '--url', down, '--key', key, '--out', cliOut];
    const cli = await run(process.execPath, ['--import', 'tsx', 'services/history/cli.ts', ...cliArgs]).catch(
      (err: { code: number; stderr: string }) => err,
    );
    const { code, stderr } = cli as { code: number; stderr: string };
    expect(code).toBe(1);
    expect(stderr).toContain(`could not reach ${down}/api/verdicts: connection refused`);
    expect(stderr).not.toMatch(/TypeError|\n\s+at /);
  });

  it("keeps a finished export's checkpoint until its summary is out; --resume then prints the summary and removes it", async () => {
    const out = join(dir, 'summary-first.ndjson');
    const checkpoint = `${out}.checkpoint.json`;
    const finishes: (() => void)[] = [];
    const summary = JSON.parse(
      await runHistoryCommand(urlExport(out), deps({ afterOutput: (finish) => finishes.push(finish) })),
    );
    expect(summary).toMatchObject({ out, format: 'ndjson', rows: 120 });
    // Returned, not yet printed: a kill here leaves the checkpoint, done, with what the summary holds.
    expect(finishes).toHaveLength(1);
    expect(JSON.parse(readFileSync(checkpoint, 'utf8'))).toMatchObject({
      done: true,
      rows: 120,
      cursor: summary.cursor,
    });
    // A plain re-run says --resume finishes it, and touches nothing.
    await expect(runHistoryCommand(urlExport(out), deps())).rejects.toThrow(
      new UsageError(
        `${out} holds a finished export (120 rows) whose summary was not printed: run the same command with --resume to finish it, or remove ${out} and ${checkpoint} to start over`,
      ),
    );
    expect(existsSync(checkpoint)).toBe(true);
    // The real command line's --resume: the summary, exit 0, the checkpoint gone, the rows as they were.
    const resumed = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      ...urlExport(out),
      '--resume',
    ]);
    expect(JSON.parse(resumed.stdout)).toEqual(summary);
    expect(existsSync(checkpoint)).toBe(false);
    expect((await collect(out)).map((r) => r.verdict_id)).toEqual((await served()).map((r) => r.verdict_id));
    // Nothing is left to resume now, and a plain re-run says the export exists.
    await expect(runHistoryCommand([...urlExport(out), '--resume'], deps())).rejects.toThrow(
      /^nothing to resume: /,
    );
    await expect(runHistoryCommand(urlExport(out), deps())).rejects.toThrow(
      new UsageError(`${out} exists: choose another --out, or remove ${out} to start over`),
    );
  });

  it("refuses a filter the service refuses as one it refuses itself: the option and the service's words, exit 2, nothing left behind", async () => {
    const out = join(dir, 'refused-coin.ndjson');
    const refused = runHistoryCommand(urlExport(out, '--coin', 'ZZZ'), deps());
    await expect(refused).rejects.toThrow(UsageError);
    await expect(refused).rejects.toThrow(/^--coin: .*ZZZ.* \(unknown_coin, HTTP 404\)$/);
    expect(existsSync(out)).toBe(false);
    expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
    // A key the service refuses too: --key and the service's words, not its JSON body with a
    // "run the same command again" that cannot help.
    const badKey = runHistoryCommand(
      ['export', '--url', server.url, '--key', `sk_live_${'A'.repeat(43)}`, '--out', out],
      deps(),
    );
    await expect(badKey).rejects.toThrow(UsageError);
    await expect(badKey).rejects.toThrow(/^--key: the API key is unknown or revoked \(HTTP 401\)$/);
    expect(existsSync(out)).toBe(false);
    // The real command line: exit 2 as for a filter refused before any request, no JSON body.
    const cli = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      ...urlExport(out, '--coin', 'ZZZ'),
    ]).catch((err: { code: number; stderr: string }) => err);
    const { code, stderr } = cli as { code: number; stderr: string };
    expect(code).toBe(2);
    expect(stderr).toMatch(/^--coin: /);
    expect(stderr).not.toContain('_service');
  });

  it('refuses from the store a coin the log holds no verdict of, naming the coins it holds; a held coin with no row in range exports empty', async () => {
    const out = join(dir, 'store-refused-coin.ndjson');
    const refused = runHistoryCommand(['export', '--store', '--out', out, '--coin', 'btcc'], deps());
    await expect(refused).rejects.toThrow(
      new UsageError('--coin: the log holds no verdict of BTCC; it holds verdicts of BTC, ETH, SOL'),
    );
    expect(existsSync(out)).toBe(false);
    expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
    // Judged on the venue asked: SOL is held on BINANCE_SPOT only.
    await expect(
      runHistoryCommand(
        ['export', '--store', '--out', out, '--coin', 'SOL', '--exchange', 'BINANCE'],
        deps(),
      ),
    ).rejects.toThrow(
      new UsageError(
        '--coin: the log holds no verdict of SOL on BINANCE; it holds verdicts on BINANCE of BTC, ETH',
      ),
    );
    // Held, but nothing in the range asked: a valid empty export, as before.
    const empty = JSON.parse(
      await runHistoryCommand(
        ['export', '--store', '--out', out, '--coin', 'BTC', '--from', '2001-01-01', '--to', '2001-01-02'],
        deps(),
      ),
    );
    expect(empty).toMatchObject({ rows: 0 });
    // The real command line: exit 2, the refusal on stderr's first line, no file.
    const cliOut = join(dir, 'store-refused-coin-cli.ndjson');
    const cli = await run(
      process.execPath,
      ['--import', 'tsx', 'services/history/cli.ts', 'export', '--store', '--out', cliOut, '--coin', 'BTCC'],
      { env: { ...process.env, EVENT_STORE: 'memory' } },
    ).catch((err: { code: number; stderr: string }) => err);
    const { code, stderr } = cli as { code: number; stderr: string };
    expect(code).toBe(2);
    expect(stderr.split('\n')[0]).toMatch(
      /^--coin: the log holds no verdict of BTCC; it holds no verdict at all$/,
    );
    expect(existsSync(cliOut)).toBe(false);
  });

  it('names at most 20 of the coins a log holds when it refuses one', async () => {
    const store = new MemoryEventStore();
    const [verdict] = (await fx.store.readAll({ maxCount: 1_000 })).filter(
      (e) => e.type === 'VerdictRecorded',
    );
    const data = verdict!.data as EventData<'VerdictRecorded'>;
    const coins = Array.from({ length: 22 }, (_, i) => `C${String(i).padStart(2, '0')}`);
    for (const coin of coins)
      await store.append(verdictStream({ ...data, coin }), [newEvent('VerdictRecorded', { ...data, coin })]);
    const out = join(dir, 'many-coins.ndjson');
    await expect(
      runHistoryCommand(
        ['export', '--store', '--out', out, '--coin', 'ZZZ'],
        deps({ openStore: async () => store }),
      ),
    ).rejects.toThrow(
      new UsageError(
        `--coin: the log holds no verdict of ZZZ; it holds verdicts of ${coins.slice(0, 20).join(', ')}, …`,
      ),
    );
    expect(existsSync(out)).toBe(false);
  });

  it("refuses from the store a venue or timeframe the log holds none of and the feed does not serve, in the service's words, exit 2, nothing left behind", async () => {
    const withFeed = deps({ openFeed: async () => fx.feed });
    for (const [option, value, code] of [
      ['--exchange', 'OKX', 'unsupported_exchange'],
      ['--exchange', 'BYBIT', 'unsupported_exchange'],
      ['--timeframe', '1m', 'unsupported_timeframe'],
    ] as const) {
      // What GET /api/verdicts answers the same filter (the same feed behind it).
      const answer = await fetch(`${server.url}/api/verdicts?${option.slice(2)}=${value}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      expect(answer.status).toBe(422);
      const body = (await answer.json()) as { code: string; message: string; field: string };
      expect(body).toMatchObject({ code, field: option.slice(2) });
      const out = join(dir, `store-unserved-${value}.ndjson`);
      for (const format of ['ndjson', 'parquet']) {
        const refused = runHistoryCommand(
          ['export', '--store', '--out', out, '--format', format, option, value],
          withFeed,
        );
        await expect(refused).rejects.toThrow(new UsageError(`${option}: ${body.message} (${code})`));
        expect(existsSync(out), `${option} ${value} ${format}`).toBe(false);
        expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
      }
      // Over HTTP the same words, with the status.
      await expect(runHistoryCommand(urlExport(out, option, value), deps())).rejects.toThrow(
        new UsageError(`${option}: ${body.message} (${code}, HTTP 422)`),
      );
    }
    // A venue with a timeframe it does not serve (BINANCE: 1h held, no 5m candles), as the route.
    await expect(
      runHistoryCommand(
        [
          'export',
          '--store',
          '--out',
          join(dir, 'unserved-pair.ndjson'),
          '--exchange',
          'BINANCE',
          '--timeframe',
          '5m',
        ],
        withFeed,
      ),
    ).rejects.toThrow(
      /^--timeframe: timeframe 5m is not available for BINANCE: .* \(unsupported_timeframe\)$/,
    );
    // Served but not held: exported, no row (BINANCE 4h); held: exported whatever the feed serves.
    const servedOut = join(dir, 'served-not-held.ndjson');
    expect(
      JSON.parse(
        await runHistoryCommand(
          ['export', '--store', '--out', servedOut, '--exchange', 'BINANCE', '--timeframe', '4h'],
          withFeed,
        ),
      ),
    ).toMatchObject({ rows: 0 });
    const store = new MemoryEventStore();
    const [verdict] = (await fx.store.readAll({ maxCount: 1_000 })).filter(
      (e) => e.type === 'VerdictRecorded',
    );
    const bybit = { ...(verdict!.data as EventData<'VerdictRecorded'>), exchange: 'BYBIT' as const };
    await store.append(verdictStream(bybit), [newEvent('VerdictRecorded', bybit)]);
    const heldOut = join(dir, 'held-unserved.ndjson');
    expect(
      JSON.parse(
        await runHistoryCommand(
          ['export', '--store', '--out', heldOut, '--exchange', 'BYBIT'],
          deps({ openFeed: async () => fx.feed, openStore: async () => store }),
        ),
      ),
    ).toMatchObject({ rows: 1 });
    // The real command line, on the configured replay feed: exit 2, the refusal on stderr's
    // first line, no file.
    for (const [option, value, code] of [
      ['--exchange', 'OKX', 'unsupported_exchange'],
      ['--timeframe', '1m', 'unsupported_timeframe'],
    ] as const) {
      const cliOut = join(dir, `store-unserved-cli-${value}.ndjson`);
      const cli = await run(
        process.execPath,
        ['--import', 'tsx', 'services/history/cli.ts', 'export', '--store', '--out', cliOut, option, value],
        { env: { ...process.env, EVENT_STORE: 'memory', FEED: 'replay' } },
      ).catch((err: { code: number; stderr: string }) => err);
      const { code: exit, stderr } = cli as { code: number; stderr: string };
      expect(exit).toBe(2);
      expect(stderr.split('\n')[0]).toMatch(new RegExp(`^${option}: .*${value}.* \\(${code}\\)$`));
      expect(existsSync(cliOut)).toBe(false);
    }
  });

  it("opens the deployment's feed once and asks no venue for a log a replay ran on; a live deployment's log is judged by the venues", async () => {
    // Two LMDB logs of the same verdicts (BINANCE 1h, BINANCE_SPOT 5m): one a replay ran on (its
    // clock recorded, as every replaying process records or adopts it), one no replay ran on.
    const logs = { replayed: join(dir, 'feed-once-replayed'), live: join(dir, 'feed-once-live') };
    for (const [name, dataDir] of Object.entries(logs)) {
      const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
      const made = await recordHistory({ steps: 3, store });
      if (name === 'replayed')
        await store.append('replay-clock', [
          newEvent('ReplayClockAnchored', { anchor: Date.now(), start: made.feed.now(), speed: 0, dir: 'x' }),
        ]);
      await made.engine.close();
      await store.close();
    }
    // Every HTTPS request of the CLI goes through this proxy (NODE_USE_ENV_PROXY), which refuses
    // it: a venue probe shows as a CONNECT to the venue's host.
    const asked: string[] = [];
    const proxy = createHttpServer((_req, res) => res.writeHead(502).end());
    proxy.on('connect', (req, socket) => {
      asked.push(String(req.url));
      socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
    });
    // Where the system puts it: a port found free and then bound can be taken in between.
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const { port } = proxy.address() as AddressInfo;
    // Counts the listings of the replay data's spot candles, one per opening of the replay (its
    // index), printed when the CLI exits.
    const spot = join(SHIPPED_MARKET_DIR, 'candles', 'binance-spot');
    const counter = join(dir, 'count-replay-openings.mjs');
    writeFileSync(
      counter,
      [
        "import fs from 'node:fs';",
        "import { syncBuiltinESMExports } from 'node:module';",
        'let n = 0;',
        'const list = fs.readdirSync;',
        `fs.readdirSync = function (path, ...rest) { if (String(path) === ${JSON.stringify(spot)}) n++; return list.call(this, path, ...rest); };`,
        'syncBuiltinESMExports();',
        "process.on('exit', () => process.stderr.write('replay openings: ' + n + '\\n'));",
      ].join('\n'),
    );
    const cli = async (dataDir: string, ...args: string[]) => {
      const done = await run(
        process.execPath,
        ['--import', counter, '--import', 'tsx', 'services/history/cli.ts', ...args],
        {
          env: {
            ...process.env,
            EVENT_STORE: 'lmdb',
            DATA_DIR: dataDir,
            FEED: 'auto',
            FEED_PROBE_TIMEOUT_MS: '2000',
            MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
            NODE_USE_ENV_PROXY: '1',
            HTTPS_PROXY: `http://127.0.0.1:${port}`,
            HTTP_PROXY: `http://127.0.0.1:${port}`,
            NO_PROXY: '',
          },
        },
      ).catch((err: { code: number; stdout: string; stderr: string }) => err);
      const { code, stdout, stderr } = done as { code?: number; stdout: string; stderr: string };
      return {
        code: code ?? 0,
        stdout,
        stderr,
        openings: Number(/replay openings: (\d+)/.exec(stderr)?.[1]),
      };
    };
    try {
      // A filter the log holds none of (BINANCE_SPOT 1h) that the replay serves: judged by the
      // replay the export reveals on, opened once; no venue asked.
      const served = await cli(
        logs.replayed,
        'export',
        '--store',
        '--out',
        join(dir, 'feed-once-served.ndjson'),
        '--exchange',
        'BINANCE_SPOT',
        '--timeframe',
        '1h',
      );
      expect(served.code, served.stderr).toBe(0);
      expect(JSON.parse(served.stdout)).toMatchObject({ rows: 0 });
      expect(served.openings).toBe(1);
      // One the replay does not serve: refused in its words, exit 2.
      const refused = await cli(
        logs.replayed,
        'export',
        '--store',
        '--out',
        join(dir, 'feed-once-refused.ndjson'),
        '--exchange',
        'OKX',
      );
      expect(refused.code).toBe(2);
      expect(refused.stderr.split('\n')[0]).toMatch(/^--exchange: .*OKX.* \(unsupported_exchange\)$/);
      expect(refused.openings).toBe(1);
      // A read of the log alone: its clock's replay, opened once.
      const verified = await cli(logs.replayed, 'verify', '--store');
      expect(verified.code, verified.stderr).toBe(0);
      expect(verified.openings).toBe(1);
      expect(asked).toEqual([]);
      // No replay ran on this log: the deployment was live, and FEED=auto asks the venues as the
      // service does (here none answers: the configured replay judges, opened once).
      const live = await cli(
        logs.live,
        'export',
        '--store',
        '--out',
        join(dir, 'feed-once-live.ndjson'),
        '--exchange',
        'OKX',
      );
      expect(live.code).toBe(2);
      expect(live.stderr.split('\n')[0]).toMatch(/^--exchange: .*OKX.* \(unsupported_exchange\)$/);
      expect(live.openings).toBe(1);
      expect(asked.length).toBeGreaterThan(0);
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
    }
  });

  it("writes a Parquet export of no row as one part of no row with every column, which the README's DuckDB query reads as an empty table", async () => {
    const full = join(dir, 'parquet-full');
    await runHistoryCommand(['export', '--store', '--out', full, '--format', 'parquet'], deps());
    const empties = {
      store: join(dir, 'parquet-empty-store'),
      url: join(dir, 'parquet-empty-url'),
    };
    const range = ['--coin', 'BTC', '--from', '2001-01-01', '--to', '2001-01-02', '--format', 'parquet'];
    for (const [source, out] of Object.entries(empties)) {
      const argv =
        source === 'store' ? ['export', '--store', '--out', out, ...range] : urlExport(out, ...range);
      expect(JSON.parse(await runHistoryCommand(argv, deps()))).toMatchObject({ rows: 0 });
      expect(readdirSync(out)).toEqual(['part-000001.parquet']);
      // Read back, it is a file of no row: nothing in it is verified.
      expect(JSON.parse(await runHistoryCommand(['verify', out], deps()))).toMatchObject({
        ok: false,
        rows: 0,
        incomplete: `${out} holds no rows: 0 rows checked, so nothing is verified (an export no row matched, or a file emptied or cut, is no evidence)`,
      });
    }
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const printed = /duckdb -c "(SELECT [^"]+)"/.exec(readme)![1]!;
    expect(printed).toContain("read_parquet('exports/verdicts/*.parquet')");
    const db = await DuckDBInstance.create(':memory:');
    const connection = await db.connect();
    try {
      const files = (out: string) => `read_parquet('${join(out, '*.parquet')}')`;
      const schema = async (out: string) =>
        (await connection.runAndReadAll(`DESCRIBE SELECT * FROM ${files(out)}`)).getRowObjectsJson();
      for (const out of Object.values(empties)) {
        expect(await schema(out)).toEqual(await schema(full));
        const rows = await connection.runAndReadAll(
          printed.replace("read_parquet('exports/verdicts/*.parquet')", files(out)),
        );
        expect(rows.getRowObjectsJson()).toEqual([]);
      }
    } finally {
      connection.closeSync();
      db.closeSync();
    }
  });

  it('reports a malformed row as the first broken link, naming its line and field', async () => {
    const out = join(dir, 'malformed-source.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out, '--coin', 'BTC'], deps());
    const lines = readFileSync(out, 'utf8').trim().split('\n');
    const victim = JSON.parse(lines[7]!) as HistoryRow;
    const malformed = join(dir, 'malformed.ndjson');
    writeFileSync(
      malformed,
      [...lines.slice(0, 7), JSON.stringify({ ...victim, position: -926 }), ...lines.slice(8)].join('\n'),
    );
    const report = JSON.parse(await runHistoryCommand(['verify', malformed], deps()));
    // Every line of the file is a row read, the malformed one too; the walk checked the 7 before it.
    expect(report).toMatchObject({
      ok: false,
      rows: lines.length,
      rowsWalked: 7,
      firstBroken: { at: 'line 8', position: -926, verdictId: victim.verdict_id, stream: victim.stream },
    });
    expect(report.firstBroken.reason).toMatch(/^line 8: malformed position -926 \(/);
    // The same as CSV: the line counts the header.
    const csv = join(dir, 'malformed.csv');
    const rows = await collect(out);
    await runHistoryCommand(['export', '--store', '--out', csv, '--coin', 'BTC'], deps());
    const csvLines = readFileSync(csv, 'utf8').trim().split('\n');
    const field = csvLines[0]!.split(',').indexOf('position');
    const cells = csvLines[8]!.split(',');
    cells[field] = '-926';
    csvLines[8] = cells.join(',');
    writeFileSync(csv, csvLines.join('\n'));
    const csvReport = JSON.parse(await runHistoryCommand(['verify', csv], deps()));
    expect(csvReport).toMatchObject({
      ok: false,
      firstBroken: { at: 'line 9', position: -926, verdictId: rows[7]!.verdict_id },
    });
    // The real command line: exit 1 and the report on stdout, not a zod error on stderr.
    const cli = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      'verify',
      malformed,
    ]).catch((err: { code: number; stdout: string }) => err);
    expect((cli as { code: number }).code).toBe(1);
    expect(JSON.parse((cli as { stdout: string }).stdout).firstBroken.at).toBe('line 8');
  });

  it('reports a file cut short (a JSON or CSV line, a Parquet part without its footer) at its line or part, and score says so in one line', async () => {
    const ndjson = join(dir, 'cut-source.ndjson');
    const csv = join(dir, 'cut-source.csv');
    const parquet = join(dir, 'cut-source');
    await runHistoryCommand(['export', '--store', '--out', ndjson], deps());
    await runHistoryCommand(['export', '--store', '--out', csv], deps());
    await runHistoryCommand(['export', '--store', '--out', parquet, '--format', 'parquet'], deps());
    const cutAt = (text: string, line: number, keep: number) => {
      const lines = text.split('\n');
      return [...lines.slice(0, line - 1), lines[line - 1]!.slice(0, keep)].join('\n');
    };
    const cutJson = join(dir, 'cut.ndjson');
    writeFileSync(cutJson, cutAt(readFileSync(ndjson, 'utf8'), 6, 100));
    // Cut between two fields: every field before the cut reads, the rest would come out null.
    const csvText = readFileSync(csv, 'utf8');
    const cutCsv = join(dir, 'cut.csv');
    const line7 = csvText.split('\n')[6]!;
    writeFileSync(cutCsv, cutAt(csvText, 7, line7.indexOf(',', line7.indexOf(',') + 1)));
    // Cut inside its last field, the cursor, or right after the comma before it: every column is
    // there, so only the cursor shows the cut.
    const cutCursor = join(dir, 'cut-cursor.csv');
    writeFileSync(cutCursor, cutAt(csvText, 7, line7.length - 3));
    const cutBeforeCursor = join(dir, 'cut-before-cursor.csv');
    writeFileSync(cutBeforeCursor, cutAt(csvText, 7, line7.lastIndexOf(',') + 1));
    const cutParts = join(dir, 'cut-parts');
    mkdirSync(cutParts);
    const part = readdirSync(parquet).find((f) => f.endsWith('.parquet'))!;
    const bytes = readFileSync(join(parquet, part));
    writeFileSync(join(cutParts, part), bytes.subarray(0, bytes.length - 100));

    for (const [file, at, words] of [
      [cutJson, 'line 6', /^line 6: malformed JSON line \(.+\): a line cut short/],
      [cutCsv, 'line 7', /^line 7: malformed CSV line: 2 fields where the header has \d+; a line cut short/],
      [
        cutCursor,
        'line 7',
        /^line 7: malformed CSV line: its cursor "[\w-]+" is not the one of its row \(position \d+, verdict [\w-]+\); a line cut short/,
      ],
      [
        cutBeforeCursor,
        'line 7',
        /^line 7: malformed CSV line: its cursor "" is not the one of its row .*; a line cut short/,
      ],
      [
        cutParts,
        part,
        new RegExp(`^${part}: malformed Parquet part, not a readable file \\(.+\\): one cut short`),
      ],
    ] as const) {
      const report = JSON.parse(await runHistoryCommand(['verify', file], deps()));
      expect(report).toMatchObject({ ok: false, firstBroken: { at } });
      expect(report.firstBroken.reason).toMatch(words);
    }
    // score has no report to put it in: the place and what to do on stderr, exit 1, no stack trace.
    const cli = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      'score',
      cutParts,
    ]).catch((err: { code: number; stderr: string }) => err);
    const { code, stderr } = cli as { code: number; stderr: string };
    expect(code).toBe(1);
    expect(stderr).toMatch(new RegExp(`^${part}: malformed Parquet part`));
    expect(stderr).not.toMatch(/\n\s+at /);
  });

  it('verifies nothing in a file of no row, in every format, nor in an NDJSON answer with fewer rows than its trailer says: exit 1, the file named', async () => {
    const csvSource = join(dir, 'no-row-source.csv');
    await runHistoryCommand(['export', '--store', '--out', csvSource], deps());
    const answer = async (query: string) =>
      (
        await (
          await fetch(`${server.url}/api/verdicts?trailer=true&${query}`, {
            headers: { authorization: `Bearer ${key}` },
          })
        ).text()
      )
        .trim()
        .split('\n');
    // An answer of no row is its trailer line alone.
    const none = await answer('from=2001-01-01&to=2001-01-02');
    expect(none).toHaveLength(1);
    expect(JSON.parse(none[0]!)).toMatchObject({ rows: 0 });
    const files = {
      zeroBytes: join(dir, 'no-row.ndjson'),
      trailerOnly: join(dir, 'no-row-trailer.ndjson'),
      headerOnly: join(dir, 'no-row.csv'),
      noPart: join(dir, 'no-row-parts'),
    };
    writeFileSync(files.zeroBytes, '');
    writeFileSync(files.trailerOnly, `${none[0]}\n`);
    writeFileSync(files.headerOnly, `${readFileSync(csvSource, 'utf8').split('\n')[0]}\n`);
    mkdirSync(files.noPart);
    for (const file of Object.values(files)) {
      const report = JSON.parse(await runHistoryCommand(['verify', file], deps()));
      expect(report, file).toMatchObject({
        ok: false,
        rows: 0,
        firstBroken: null,
        incomplete: `${file} holds no rows: 0 rows checked, so nothing is verified (an export no row matched, or a file emptied or cut, is no evidence)`,
      });
    }
    // Commitments only: no row revealed, no hash recomputed (rehashed 0), so nothing is verified,
    // where the walk answered ok.
    const commitments = join(dir, 'commitments-only.ndjson');
    const unrevealed = (await served()).filter((r) => !r.revealed);
    expect(unrevealed.length).toBeGreaterThan(0);
    writeFileSync(commitments, unrevealed.map((r) => `${JSON.stringify(r)}\n`).join(''));
    expect(JSON.parse(await runHistoryCommand(['verify', commitments], deps()))).toMatchObject({
      ok: false,
      rows: unrevealed.length,
      rehashed: 0,
      firstBroken: null,
      incomplete: `${commitments} holds ${unrevealed.length} rows, none revealed: no hash could be recomputed from its content (rehashed: 0), so nothing is verified (a verdict is revealed six candles after its close: export again once some are, or check the commitments against the anchors with --anchors)`,
    });
    // Two answers appended as served, each ending with its trailer: each trailer counts its own answer.
    const first = await answer('limit=50');
    const cursor = JSON.parse(first.at(-1)!).cursor as string;
    const second = await answer(`after=${cursor}`);
    expect(first).toHaveLength(51);
    expect(second).toHaveLength(71);
    const whole = join(dir, 'trailers.ndjson');
    writeFileSync(whole, `${[...first, ...second].join('\n')}\n`);
    expect(JSON.parse(await runHistoryCommand(['verify', whole], deps()))).toMatchObject({
      ok: true,
      rows: 120,
    });
    expect(JSON.parse(await runHistoryCommand(['verify', whole], deps()))).not.toHaveProperty('incomplete');
    // The second answer's last three rows left out (its chains still link): its trailer says 70.
    const short = join(dir, 'trailers-short.ndjson');
    writeFileSync(short, `${[...first, ...second.slice(0, 67), second.at(-1)].join('\n')}\n`);
    const shortReport = JSON.parse(await runHistoryCommand(['verify', short], deps()));
    expect(shortReport).toMatchObject({
      ok: false,
      rows: 117,
      firstBroken: null,
      incomplete: `${short}: line 119, the answer's trailer, says it held 70 rows; the file holds 67 before it (3 missing): a file cut or edited is no evidence; fetch the answer again`,
    });
    // A trailer alone that says rows: the count, not "no rows".
    const trailerAlone = join(dir, 'trailer-alone.ndjson');
    writeFileSync(trailerAlone, `${second.at(-1)}\n`);
    expect(JSON.parse(await runHistoryCommand(['verify', trailerAlone], deps())).incomplete).toBe(
      `${trailerAlone}: line 1, the answer's trailer, says it held 70 rows; the file holds 0 before it (70 missing): a file cut or edited is no evidence; fetch the answer again`,
    );
    // The real command line: exit 1 (verification failed, as a broken link), the report on stdout
    // and its words on stderr.
    for (const file of [files.zeroBytes, short]) {
      const cli = await run(process.execPath, [
        '--import',
        'tsx',
        'services/history/cli.ts',
        'verify',
        file,
      ]).catch((err: { code: number; stdout: string; stderr: string }) => err);
      const { code, stdout, stderr } = cli as { code: number; stdout: string; stderr: string };
      expect(code, file).toBe(1);
      expect(JSON.parse(stdout).ok, file).toBe(false);
      expect(stderr, file).toBe(`${JSON.parse(stdout).incomplete}\n`);
      expect(stderr, file).toContain(file);
    }
  });

  it('counts the streams a file starts mid-chain as such, not as anchors', async () => {
    const whole = join(dir, 'mid-chain-source.ndjson');
    await runHistoryCommand(['export', '--store', '--out', whole], deps());
    const lines = readFileSync(whole, 'utf8').trim().split('\n');
    // The first verdicts of every stream left out: each of the three streams starts mid-chain.
    const midChain = join(dir, 'mid-chain.ndjson');
    writeFileSync(midChain, `${lines.slice(9).join('\n')}\n`);
    const report = JSON.parse(await runHistoryCommand(['verify', midChain], deps()));
    expect(report).toMatchObject({ ok: true, streams: 3, streamsStartingMidChain: 3 });
    expect(report).not.toHaveProperty('anchored');
    const full = JSON.parse(await runHistoryCommand(['verify', whole], deps()));
    expect(full).toMatchObject({ ok: true, streams: 3, streamsStartingMidChain: 0 });
  });

  it('refuses an option the command does not take, rather than ignore it', async () => {
    const out = join(dir, 'options.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    await expect(runHistoryCommand(['verify', out, '--coin', 'BTC'], deps())).rejects.toThrow(
      new UsageError('verify does not take --coin'),
    );
    await expect(runHistoryCommand(['score', out, '--store', '--out', 'x'], deps())).rejects.toThrow(
      'score does not take --store, --out',
    );
    await expect(
      runHistoryCommand(['export', '--store', '--out', out, '--window', '7d'], deps()),
    ).rejects.toThrow('export does not take --window');
    // An option no command takes: named the same way, not with node's advice to pass it after '--'.
    await expect(runHistoryCommand(['verify', out, '--bogus'], deps())).rejects.toThrow(
      new UsageError('verify does not take --bogus'),
    );
    await expect(runHistoryCommand(['verify', out, out], deps())).rejects.toThrow('verify takes one path');
    // The anchors' options without --anchors: the chains alone would be verified, ok, as if anchored.
    await expect(
      runHistoryCommand(
        ['verify', out, '--rpc', 'http://127.0.0.1:8545', '--address', `0x${'11'.repeat(20)}`],
        deps(),
      ),
    ).rejects.toThrow(new UsageError('--rpc, --address goes with --anchors'));
    for (const extra of [
      ['--tx', `0x${'22'.repeat(32)}`],
      ['--from-block', '5'],
    ]) {
      await expect(runHistoryCommand(['verify', out, ...extra], deps())).rejects.toThrow(
        `${extra[0]} goes with --anchors`,
      );
    }
    const usage = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      'verify',
      out,
      '--coin',
      'BTC',
    ]).catch((err: { code: number; stderr: string }) => err);
    expect((usage as { code: number }).code).toBe(2);
    expect((usage as { stderr: string }).stderr).toContain('verify does not take --coin');
  });

  it('refuses a single-valued option given twice, naming it, on every command and every such option (--tx is a list)', async () => {
    const out = join(dir, 'twice.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    const twice = (name: string, a: string, b: string) =>
      new UsageError(`--${name} given 2 times ("${a}", "${b}"): it takes one value`);
    const url = ['--url', server.url, '--key', key];
    const exported = join(dir, 'twice-export.ndjson');
    const cases: [string[], UsageError][] = [
      // export --coin BTC --coin ETH exported ETH alone, without a word.
      [
        ['export', '--store', '--out', exported, '--coin', 'BTC', '--coin', 'ETH'],
        twice('coin', 'BTC', 'ETH'),
      ],
      [['export', ...url, '--out', exported, '--coin=BTC', '--coin', 'btc'], twice('coin', 'BTC', 'btc')],
      ...(['exchange', 'timeframe', 'call', 'from', 'to', 'format', 'page'] as const).map(
        (name): [string[], UsageError] => [
          ['export', '--store', '--out', exported, `--${name}`, 'a', `--${name}=b`],
          twice(name, 'a', 'b'),
        ],
      ),
      [
        ['export', '--store', '--out', exported, '--out', join(dir, 'other.ndjson')],
        twice('out', exported, join(dir, 'other.ndjson')),
      ],
      [
        ['export', '--url', server.url, '--url', 'http://127.0.0.1:1', '--key', key, '--out', exported],
        twice('url', server.url, 'http://127.0.0.1:1'),
      ],
      // An API key is a secret: named by count alone.
      [
        ['export', ...url, '--key', 'other', '--out', exported],
        new UsageError('--key given 2 times: it takes one value'),
      ],
      ...(['format', 'data', 'call'] as const).map((name): [string[], UsageError] => [
        ['verify', out, `--${name}`, 'a', `--${name}`, 'b'],
        twice(name, 'a', 'b'),
      ]),
      [['verify', ...url, '--key', key], new UsageError('--key given 2 times: it takes one value')],
      [
        ['verify', '--url', server.url, '--url', server.url, '--key', key],
        twice('url', server.url, server.url),
      ],
      ...(['rpc', 'address', 'from-block'] as const).map((name): [string[], UsageError] => [
        ['verify', out, '--anchors', `--${name}`, 'a', `--${name}`, 'b'],
        twice(name, 'a', 'b'),
      ]),
      ...(['window', 'as-of', 'as-of-position', 'format'] as const).map((name): [string[], UsageError] => [
        ['score', out, `--${name}`, 'a', `--${name}`, 'b'],
        twice(name, 'a', 'b'),
      ]),
      [
        ['score', out, '--window', '7d', '--window', '30d', '--window', 'all'],
        new UsageError('--window given 3 times ("7d", "30d", "all"): it takes one value'),
      ],
    ];
    for (const [argv, told] of cases)
      await expect(runHistoryCommand(argv, deps()), argv.join(' ')).rejects.toThrow(told);
    expect(existsSync(exported)).toBe(false);
    // --tx takes several values (a list of anchoring transactions): given twice it is read past.
    await expect(
      runHistoryCommand(
        ['verify', out, '--tx', `0x${'22'.repeat(32)}`, '--tx', `0x${'33'.repeat(32)}`],
        deps(),
      ),
    ).rejects.toThrow(new UsageError('--tx goes with --anchors'));
    // A flag that takes no value loses nothing when repeated.
    const flagged = join(dir, 'twice-flag.ndjson');
    await runHistoryCommand(['export', '--store', '--store', '--out', flagged], deps());
    expect(await collect(flagged)).toEqual(await collect(out));
    // The real command line: exit 2, the refusal on stderr's first line, then where the usage is; no file.
    const cliOut = join(dir, 'twice-cli.ndjson');
    const cli = await run(process.execPath, [
      '--import',
      'tsx',
      'services/history/cli.ts',
      'export',
      '--url',
      server.url,
      '--key',
      key,
      '--out',
      cliOut,
      '--coin',
      'BTC',
      '--coin',
      'ETH',
    ]).catch((err: { code: number; stderr: string }) => err);
    expect((cli as { code: number }).code).toBe(2);
    expect((cli as { stderr: string }).stderr).toMatch(
      /^--coin given 2 times \("BTC", "ETH"\): it takes one value\nfor the usage: .* --help\n$/,
    );
    expect(existsSync(cliOut)).toBe(false);
  });

  it('refuses two sources, rather than read one and ignore the other', async () => {
    const out = join(dir, 'sources.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    const url = ['--url', server.url, '--key', key];
    await expect(runHistoryCommand(['verify', out, ...url], deps())).rejects.toThrow(
      new UsageError(`verify reads one source, got ${out} and --url: PATH, --url URL --key KEY or --store`),
    );
    await expect(runHistoryCommand(['verify', out, '--store'], deps())).rejects.toThrow(
      `verify reads one source, got ${out} and --store`,
    );
    await expect(runHistoryCommand(['verify', '--store', ...url], deps())).rejects.toThrow(
      'verify reads one source, got --url and --store',
    );
    await expect(
      runHistoryCommand(['export', '--store', ...url, '--out', join(dir, 'both.ndjson')], deps()),
    ).rejects.toThrow(
      new UsageError('export reads one source, got --url and --store: --url URL --key KEY or --store'),
    );
    await expect(runHistoryCommand(['verify', out, '--key', key], deps())).rejects.toThrow(
      new UsageError('--key goes with --url'),
    );
    expect(existsSync(join(dir, 'both.ndjson'))).toBe(false);
  });

  it('refuses an --url that is no http(s) address, or not the service base, as a usage error leaving no file', async () => {
    const out = join(dir, 'bad-url.ndjson');
    for (const url of ['localhost:8080', 'ftp://localhost:8080']) {
      await expect(
        runHistoryCommand(['export', '--url', url, '--key', key, '--out', out], deps()),
      ).rejects.toThrow(
        new UsageError(
          `--url must be the service's http(s) address, such as http://localhost:8080; got ${JSON.stringify(url)}`,
        ),
      );
    }
    const refusal = runHistoryCommand(
      ['export', '--url', `${server.url}/api/verdicts`, '--key', key, '--out', out],
      deps(),
    );
    await expect(refusal).rejects.toThrow(UsageError);
    await expect(refusal).rejects.toThrow(
      `--url: GET ${server.url}/api/verdicts/api/verdicts answered 404 (`,
    );
    expect(existsSync(out)).toBe(false);
    expect(existsSync(`${out}.checkpoint.json`)).toBe(false);
  });

  it('verifies an export made with call= as far as it holds (verify --call): its links across the other calls are not checked, exit 3', async () => {
    for (const call of ['BUY', 'SELL', 'HOLD'] as const) {
      const out = join(dir, `call-${call}.ndjson`);
      await runHistoryCommand(urlExport(out, '--call', call), deps());
      const held = await collect(out);
      expect(held.some((r) => r.revealed && r.call === call)).toBe(true);
      // Read as a whole export, the rows of other calls are missing where its chains skip them:
      // a link not found, whose reason names the filter it may come from and how to check it.
      const whole = JSON.parse(await runHistoryCommand(['verify', out], deps()));
      expect(whole.ok).toBe(false);
      expect(whole.firstBroken.reason).toContain(
        `left out by an export made with call=${call}, as every revealed row so far is ${call}: verify --call ${call} checks such an export`,
      );
      // Told it is one: every row is checked but the links that skip the other calls' rows, which
      // are counted and said (exit 3), where verify failed the first as a broken link (exit 1).
      const report = JSON.parse(await runHistoryCommand(['verify', out, '--call', call], deps()));
      expect(report, call).toMatchObject({
        ok: false,
        rows: held.length,
        rowsWalked: held.length,
        partlyVerified: true,
        skippedLinks: { call },
        firstBroken: null,
      });
      expect(report.skippedLinks.links).toBeGreaterThan(0);
      expect(report.rehashed).toBe(held.filter((r) => r.revealed).length);
      expect(report.unverified).toContain(
        `an export made with call=${call} leaves the other calls' revealed rows out`,
      );
      expect(verifyExitCode(report)).toBe(3);
      // A changed row of it still fails on its own row.
      const changed = held.findIndex((r) => r.revealed && r.call === call);
      const edited = join(dir, `call-${call}-edited.ndjson`);
      const rows = held.map((r, i) => (i === changed ? { ...r, confidence: (r.confidence ?? 0) + 1 } : r));
      writeFileSync(edited, rows.map((r) => `${JSON.stringify(r)}\n`).join(''));
      expect(
        JSON.parse(await runHistoryCommand(['verify', edited, '--call', call], deps())),
        call,
      ).toMatchObject({
        ok: false,
        firstBroken: {
          position: held[changed]!.position,
          reason: 'hash does not match the revealed content',
        },
      });
    }
    // A revealed row of another call is no row of that export.
    const report = JSON.parse(
      await runHistoryCommand(['verify', join(dir, 'call-HOLD.ndjson'), '--call', 'BUY'], deps()),
    );
    expect(report).toMatchObject({
      ok: false,
      firstBroken: { reason: 'call is HOLD: not a row of an export made with call=BUY' },
    });
    expect(verifyExitCode(report)).toBe(1);
    // A read from the service or the log is whole: --call goes with a file only.
    await expect(runHistoryCommand(['verify', '--store', '--call', 'BUY'], deps())).rejects.toThrow(
      new UsageError('--call goes with PATH: an export file made with that call= filter'),
    );
  });

  it('refuses a --data folder that holds no market data as a usage error', async () => {
    const out = join(dir, 'data-none.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    const empty = join(dir, 'data-none');
    mkdirSync(empty);
    const refusal = runHistoryCommand(['verify', out, '--data', empty], deps());
    await expect(refusal).rejects.toThrow(UsageError);
    await expect(refusal).rejects.toThrow(`--data ${empty}: no candle files under ${empty}/candles/`);
  });

  it('fails a --data folder whose candle files cannot be read as a runtime failure, not a usage error', async () => {
    const out = join(dir, 'data-unreadable.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    // A candle file the folder lists but that cannot be read (EISDIR: as a file this user may not
    // read, EACCES, which root never meets), and one that is no gzip (corrupt): the data's fault,
    // not the option's, so exit 1 as the command's other failures (CommandFailedError), not 2.
    const unreadable = join(dir, 'data-unreadable');
    mkdirSync(join(unreadable, 'candles', 'binance-spot', 'BTCUSDT-1h.csv.gz'), { recursive: true });
    const corrupt = join(dir, 'data-corrupt');
    mkdirSync(join(corrupt, 'candles', 'binance-spot'), { recursive: true });
    writeFileSync(join(corrupt, 'candles', 'binance-spot', 'BTCUSDT-1h.csv.gz'), 'not gzip');
    for (const [data, why] of [
      [unreadable, 'EISDIR'],
      [corrupt, 'not a readable gzip file'],
    ] as const) {
      const failed = await runHistoryCommand(['verify', out, '--data', data], deps()).catch(
        (err: Error) => err,
      );
      expect(failed, data).toBeInstanceOf(CommandFailedError);
      expect((failed as Error).message).toContain(`--data ${data}: could not read its market data: `);
      expect((failed as Error).message).toContain(why);
    }
  });

  it('writes all of its output into a pipe read slowly before it exits', async () => {
    // The CLIs' exit (history and operator): 300 kB into a pipe, whose reader waits half a second
    // before it reads. process.exit right after the write left 65,536 bytes of it, exit status 0.
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        "import { exitFlushed } from './services/shared/exit-flushed.ts'; process.stdout.write('y'.repeat(300000) + '\\n'); await exitFlushed(3);",
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    child.stdout.pause();
    await new Promise((r) => setTimeout(r, 500));
    let bytes = 0;
    child.stdout.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
    });
    child.stdout.resume();
    await new Promise((r) => child.stdout.on('end', r));
    expect(bytes).toBe(300_001);
    expect(await exited).toBe(3);
  });

  it('ends quietly, exit 0, when its reader goes away before the output is written (| head)', async () => {
    // score's answer is some 85 kB, past a pipe's 64 KiB: head takes its first bytes and exits.
    const empty = join(dir, 'score-into-head.ndjson');
    await runHistoryCommand(['export', '--store', '--out', empty, '--to', '2001-01-01T00:00:00Z'], deps());
    const err = join(dir, 'score-into-head.err');
    const { stdout } = await run('bash', [
      '-c',
      `"$0" --import tsx services/history/cli.ts score "$1" 2>"$2" | head -c 1 >/dev/null; echo "\${PIPESTATUS[0]}"`,
      process.execPath,
      empty,
      err,
    ]);
    expect(readFileSync(err, 'utf8')).toBe('');
    expect(stdout.trim()).toBe('0');
  });

  it('shows log positions out of the head with --store', async () => {
    const bar = new PassThrough();
    let printed = '';
    bar.on('data', (c) => {
      printed += String(c);
    });
    const out = join(dir, 'store-progress.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out, '--page', '50'], deps({ progress: bar }));
    const head = await fx.store.headPosition();
    expect(printed).toMatch(new RegExp(`log position \\d+/${head} \\| 120 rows \\| [\\d,]+ rows/s`));
  });

  it('verify and score read the format from the content, or from --format', async () => {
    // The CLI's own CSV export under a name that says nothing of its format.
    const out = join(dir, 'verdicts-export');
    await runHistoryCommand(urlExport(out, '--format', 'csv'), deps());
    expect(readFileSync(out, 'utf8').startsWith('position,')).toBe(true);
    expect(JSON.parse(await runHistoryCommand(['verify', out], deps()))).toMatchObject({
      ok: true,
      rows: 120,
    });
    const live = TrackRecordResponse.parse(
      await (await fetch(`${server.url}/api/track-record?window=all`)).json(),
    );
    const scored = JSON.parse(
      await runHistoryCommand(
        ['score', out, '--window', 'all', '--as-of', live.asOf, '--as-of-position', `${live.asOfPosition}`],
        deps(),
      ),
    );
    expect(scored).toEqual(live);
    // A CSV file named .ndjson: --format says what it is.
    const misnamed = join(dir, 'really-csv.ndjson');
    writeFileSync(misnamed, readFileSync(out));
    const named = JSON.parse(await runHistoryCommand(['verify', misnamed, '--format', 'csv'], deps()));
    expect(named).toMatchObject({ ok: true, rows: 120 });
    // The wrong --format is honoured too: it fails on the content rather than guess, and says so.
    const wrong = JSON.parse(await runHistoryCommand(['verify', misnamed, '--format', 'ndjson'], deps()));
    expect(wrong).toMatchObject({ ok: false, rows: 0, firstBroken: { at: 'line 1' } });
    expect(wrong.firstBroken.reason).toMatch(
      /^line 1: malformed JSON line \(.+\): the file's first row is not NDJSON: --format names/,
    );
    // So is an NDJSON file read as CSV or as Parquet: the format is named, not a wall of fields read
    // from a JSON line as a CSV header, nor a Parquet file "cut short".
    const ndjson = join(dir, 'really-ndjson.csv');
    await runHistoryCommand(urlExport(ndjson, '--format', 'ndjson'), deps());
    for (const format of ['csv', 'parquet']) {
      const asIf = JSON.parse(await runHistoryCommand(['verify', ndjson, '--format', format], deps()));
      expect(asIf, format).toMatchObject({ ok: false, rows: 0 });
      expect(asIf.firstBroken.reason, format).toMatch(
        new RegExp(`is not ${format === 'csv' ? 'CSV' : 'Parquet'}: --format names the file's format`),
      );
      expect(asIf.firstBroken.reason, format).not.toContain('cut short');
    }
    await expect(runHistoryCommand(['verify', misnamed, '--format', 'xml'], deps())).rejects.toThrow(
      'unknown format xml',
    );
    await expect(runHistoryCommand(['score', join(dir, 'nothing-here')], deps())).rejects.toThrow(
      'no export at',
    );
    // An empty folder is no export either (an export of no row holds one part of no row): score
    // refuses it as a usage error, where it scored no outcome and exited 0.
    const noParts = join(dir, 'score-no-parts');
    mkdirSync(noParts);
    const refused = runHistoryCommand(['score', noParts], deps());
    await expect(refused).rejects.toThrow(UsageError);
    await expect(refused).rejects.toThrow(
      `no export at ${noParts}: the folder holds no Parquet part (part-*.parquet; an export of no row holds one)`,
    );
  });

  it('refuses a file that holds no export in any format as no export (exit 2, one line), where a broken export fails (exit 1)', async () => {
    const text = join(dir, 'notes.txt');
    writeFileSync(text, 'shopping list\nmilk, eggs\n');
    const json = join(dir, 'config.json');
    writeFileSync(json, '{"name": "app", "version": 1}\n');
    const pretty = join(dir, 'pretty.json');
    writeFileSync(pretty, '{\n  "rows": []\n}\n');
    const binary = join(dir, 'program.bin');
    writeFileSync(binary, Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1, 0, 0xff, 0x0a, 0x00, 0x3e]));
    for (const file of [text, json, pretty, binary]) {
      for (const command of ['score', 'verify']) {
        const refused = runHistoryCommand([command, file], deps());
        await expect(refused, `${command} ${file}`).rejects.toThrow(UsageError);
        await expect(refused, `${command} ${file}`).rejects.toThrow(`no export at ${file}: `);
      }
    }
    // An export whose first row is malformed is an export: verify reports it as the first broken
    // link, score fails on it (exit 1), neither refuses it as no export.
    const badRow = join(dir, 'bad-first-row.ndjson');
    writeFileSync(badRow, '{"position": -1, "verdict_id": "v"}\n');
    expect(JSON.parse(await runHistoryCommand(['verify', badRow], deps()))).toMatchObject({
      ok: false,
      firstBroken: { at: 'line 1' },
    });
    const failed = await runHistoryCommand(['score', badRow], deps()).catch((err: Error) => err);
    expect(failed).toBeInstanceOf(Error);
    expect(failed).not.toBeInstanceOf(UsageError);
    // The real command line: exit 2 and that one line, whatever --format names.
    const cli = ['--import', 'tsx', 'services/history/cli.ts'];
    for (const args of [
      ['score', text],
      ['verify', text],
      ['score', binary, '--format', 'csv'],
      ['verify', json, '--format', 'ndjson'],
    ]) {
      const answer = await run(process.execPath, [...cli, ...args]).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (err: { code: number; stdout: string; stderr: string }) => err,
      );
      expect(answer, args.join(' ')).toMatchObject({ code: 2, stdout: '' });
      expect(answer.stderr, args.join(' ')).toMatch(new RegExp(`^no export at ${args[1]}: [^\\n]+\\n$`));
    }
  });

  it("keeps the README's export example out of git status", async () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const example = /npm run history -- export --url \S+ --key \S+ --format parquet --out (\S+)`/.exec(
      readme,
    );
    expect(example).not.toBeNull();
    const out = example![1]!;
    // Both the export and its checkpoint land in an ignored place of the checkout.
    const { stdout } = await run(
      'git',
      ['check-ignore', '--no-index', out, `${out}/part-000001.parquet`, `${out}.checkpoint.json`],
      {
        cwd: new URL('../..', import.meta.url).pathname,
      },
    );
    expect(stdout.trim().split('\n')).toHaveLength(3);
    // The verify, score and DuckDB lines read what the export wrote.
    expect(readme).toContain(`npm run history -- verify ${out}\``);
    expect(readme).toContain(`npm run history -- score ${out} `);
    expect(readme.split(`read_parquet('${out}/*.parquet')`).length).toBeGreaterThan(1);
  });
});

describe('history score --as-of --as-of-position, on an export taken after outcomes landed', () => {
  it('reproduces /api/track-record at its asOf and position to the last digit; the outcomes labelled since are not counted', async () => {
    const record = async (window: string) =>
      TrackRecordResponse.parse(
        await (await fetch(`${server.url}/api/track-record?window=${window}`)).json(),
      );
    const score = async (out: string, window: string, answer: TrackRecordResponse) =>
      JSON.parse(
        await runHistoryCommand(
          [
            'score',
            out,
            '--window',
            window,
            '--as-of',
            answer.asOf,
            '--as-of-position',
            `${answer.asOfPosition}`,
          ],
          deps(),
        ),
      );
    const windows = ['7d', '30d', 'all'] as const;
    const before = await Promise.all(windows.map(record));
    // The feed moves on: verdicts fall due and the resolver labels them after the answers above.
    fx.feed.clock.advance(3 * HOUR);
    await server.settle();
    const out = join(dir, 'later.ndjson');
    await runHistoryCommand(urlExport(out), deps());
    const rows = await collect(out);
    const at = before[0]!.asOfPosition;
    const landed = rows.filter((r) => r.result !== null && r.outcome_position! > at);
    expect(landed.length, 'outcomes labelled after the answers').toBeGreaterThan(0);
    for (const [i, window] of windows.entries()) {
      const live = before[i]!;
      expect([live.asOf, live.asOfPosition]).toEqual([before[0]!.asOf, at]);
      expect(await score(out, window, live), window).toEqual(live);
    }
    // Asked again, the service counts them, and the same export scored at its new asOf agrees.
    const after = await record('30d');
    expect(after.asOfPosition).toBeGreaterThan(at);
    const overall = (r: TrackRecordResponse) => r.overall.calls + r.overall.holds;
    expect(overall(after)).toBe(overall(before[1]!) + landed.length);
    expect(await score(out, '30d', after)).toEqual(after);
    // No --as-of: as of the file's latest due outcome, as the service's record is, not the wall
    // clock (a replay's feed time is months before it, so 7d and 30d would come out empty).
    expect(JSON.parse(await runHistoryCommand(['score', out, '--window', '30d'], deps()))).toEqual(after);
    expect(
      JSON.parse(
        await runHistoryCommand(['score', out, '--window', '7d', '--as-of-position', `${at}`], deps()),
      ),
    ).toEqual(before[0]);
    // The same log gives the same answer whenever it is asked.
    expect(await record('30d')).toEqual(after);
    // A position that is not a whole number is refused.
    await expect(runHistoryCommand(['score', out, '--as-of-position', 'soon'], deps())).rejects.toThrow(
      /--as-of-position must be a log position/,
    );
  });
});

describe('history score over weeks of verdicts, where a line has risk intervals', () => {
  let weeks: ServedHistory;
  let weeksServer: ServedHistory['server'];
  beforeAll(async () => {
    weeks = await startSettledHistory({ record: recordIntervalHistory });
    weeksServer = weeks.server;
  });
  afterAll(async () => {
    await weeks?.close();
  });

  it('reproduces /api/track-record with its intervals, the ones resampled and the null ones', async () => {
    const weeksKey = await weeksServer.issue();
    const live = TrackRecordResponse.parse(
      await (await fetch(`${weeksServer.url}/api/track-record?window=all`)).json(),
    );
    const spot = live.lines.find((l) => l.exchange === 'BINANCE_SPOT')!.risk;
    const perp = live.lines.find((l) => l.exchange === 'BINANCE')!.risk;
    expect(spot.blocks).toBeGreaterThanOrEqual(20);
    expect(spot.sigmaRatioInterval).not.toBeNull();
    expect(spot.coverageInterval).not.toBeNull();
    expect([perp.sigmaRatioInterval, live.overall.risk.sigmaRatioInterval]).toEqual([null, null]);
    const out = join(dir, 'weeks.ndjson');
    await runHistoryCommand(['export', '--url', weeksServer.url, '--key', weeksKey, '--out', out], deps());
    const offline = JSON.parse(
      await runHistoryCommand(
        ['score', out, '--window', 'all', '--as-of', live.asOf, '--as-of-position', `${live.asOfPosition}`],
        deps(),
      ),
    );
    expect(offline).toEqual(live);
  });
});
