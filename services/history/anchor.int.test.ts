import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { pino } from 'pino';
import { createPublicClient, createWalletClient, type Hex, http } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { loadConfig } from '../../contracts/config.ts';
import type { EventData } from '../../contracts/events.ts';
import { HISTORY_FORMATS, type HistoryFormat, type HistoryRow } from '../../contracts/history.ts';
import { anchorLeaf, merkleRoot, outcomeHash, verdictHash } from '../../contracts/verdict-hash.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { type Anvil, startAnvil } from '../../test/chain/anvil.ts';
import { HOUR, MARKETS, recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { freePort } from '../../test/ports.ts';
import { readyzApp } from '../../test/readyz-app.ts';
import { CommandFailedError } from '../shared/cli-failure.ts';
import { Readiness } from '../shared/readiness.ts';
import {
  ANCHOR_STREAM,
  type AnchorState,
  anchorDue,
  HistoryAnchorer,
  nextCheckIn,
  readAnchorData,
} from './anchor.ts';
import { rowOutcome } from './audit.ts';
import { type CliDeps, runHistoryCommand, UsageError } from './cli-commands.ts';
import { writeExport } from './export-fixture.ts';
import { readExport } from './files.ts';
import { rowContent } from './rows.ts';

/** anvil's second well-known development account (a public test key, funded at start). */
const ANCHOR_KEY: Hex = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d';
const ADDRESS = privateKeyToAccount(ANCHOR_KEY).address;

const run = promisify(execFile);

let anvil: Anvil;
let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let dir: string;
const anchors: EventData<'HistoryAnchored'>[] = [];
let rows: HistoryRow[];

const deps = (): CliDeps => ({ openStore: async () => fx.store, progress: null });

async function recordedAnchors(): Promise<EventData<'HistoryAnchored'>[]> {
  return (await fx.store.readStream(ANCHOR_STREAM)).map((e) => e.data as EventData<'HistoryAnchored'>);
}

async function until<T>(probe: () => Promise<T | null>, what: string): Promise<T> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const found = await probe();
    if (found !== null) return found;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

beforeAll(async () => {
  anvil = await startAnvil();
  fx = await recordHistory({ steps: 12, settleHours: 30 });
  server = await startHistoryServer({
    store: fx.store,
    feed: fx.feed,
    env: {
      HISTORY_ANCHOR_PRIVATE_KEY: ANCHOR_KEY,
      HISTORY_ANCHOR_RPC_URL: anvil.rpcUrl,
      // Checked every interval: the first anchor goes out at the first check.
      HISTORY_ANCHOR_INTERVAL_MS: '500',
    },
  });
  await server.settle();
  dir = mkdtempSync(join(tmpdir(), 'history-anchor-'));
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
  await anvil?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const write = (name: string, format: HistoryFormat, written: HistoryRow[]) =>
  writeExport(dir, name, format, written);

/** The verify arguments that check a file against the anchors this suite's service sent. */
const anchorArgs = () => ['--anchors', '--rpc', anvil.rpcUrl, '--address', ADDRESS];
const verify = async (path: string, ...extra: string[]) =>
  JSON.parse(await runHistoryCommand(['verify', path, ...extra], deps()));

/**
 * A history server on a log of its own (no anchor in it: the first check finds one due at once)
 * whose anchorer sends to a loopback port nothing listens on (the case's own, in the suite's range).
 */
async function refusingAnchorer(port: number) {
  const own = await recordHistory({ steps: 2 });
  const refused = await startHistoryServer({
    store: own.store,
    feed: own.feed,
    env: {
      HISTORY_ANCHOR_PRIVATE_KEY: ANCHOR_KEY,
      HISTORY_ANCHOR_RPC_URL: `http://127.0.0.1:${port}`,
      HISTORY_ANCHOR_INTERVAL_MS: '500',
    },
  });
  return { own, refused };
}

describe('the history anchor', () => {
  it('publishes the heads on chain by itself, then again only once the interval has passed and the log moved', async () => {
    const anchorer = server.slice.anchorer!;
    expect(anchorer.address).toBe(ADDRESS);
    const [first] = await until(async () => {
      const found = await recordedAnchors();
      return found.length > 0 ? found : null;
    }, 'the first anchor');
    await anchorer.stop();
    anchors.push(...(await recordedAnchors()));
    expect(anchors).toHaveLength(1);
    expect(first).toMatchObject({ chainId: anvil.chainId, address: ADDRESS, streams: MARKETS.length });

    // On chain: a mined transaction from the wallet to itself, value 0, its input the root.
    const client = createPublicClient({ transport: http(anvil.rpcUrl) });
    const tx = await client.getTransaction({ hash: first!.txHash as Hex });
    expect(tx.from.toLowerCase()).toBe(ADDRESS.toLowerCase());
    expect(tx.to?.toLowerCase()).toBe(ADDRESS.toLowerCase());
    expect(tx.value).toBe(0n);
    expect(Buffer.from(tx.input.slice(2), 'hex').toString('utf8')).toBe(
      `history-anchor v1 ${first!.root} ${first!.position}`,
    );
    expect(readAnchorData(tx.input)).toEqual({ root: first!.root, position: first!.position });
    expect(Number(tx.blockNumber)).toBe(first!.blockNumber);

    // Nothing new on the log: not due, however long since.
    expect(await anchorer.anchorIfDue()).toBeNull();
    // New verdicts and outcomes: due once the interval has passed. An export taken part way,
    // before the second anchor is sent and the heads move on.
    for (let step = 0; step < 6; step++) {
      for (const m of MARKETS) await fx.engine.getTradeCall(m);
      fx.feed.clock.advance(HOUR);
      if (step === 2) {
        await server.settle();
        await runHistoryCommand(['export', '--store', '--out', join(dir, 'before-second.ndjson')], deps());
      }
    }
    await server.settle();
    // Due once 500 ms have passed since the first.
    const second = await until(() => anchorer.anchorIfDue(), 'the second anchor');
    expect(second!.position).toBeGreaterThan(first!.position);
    anchors.push(second!);
    expect(await recordedAnchors()).toEqual(anchors);
    const check = await server.slice.checks()['processor:history-anchor']!();
    expect(check).toMatchObject({ ok: true, anchoring: 'on', address: ADDRESS, lastAnchor: second });

    // The next verdicts come after the last anchor: an export shows them uncovered.
    for (const m of MARKETS) await fx.engine.getTradeCall(m);
    const out = join(dir, 'all.ndjson');
    await runHistoryCommand(['export', '--store', '--out', out], deps());
    rows = [];
    for await (const row of readExport(out)) rows.push(row);
  });

  it('verify --anchors finds the anchors and says which rows each covers, in every format', async () => {
    const [a1, a2] = anchors;
    for (const format of HISTORY_FORMATS) {
      const path = await write(`clean-${format}`, format, rows);
      const report = await verify(path, ...anchorArgs());
      expect(report.ok, format).toBe(true);
      const lines = report.anchors.anchors;
      expect(lines.map((l: { txHash: string }) => l.txHash)).toEqual([a1!.txHash, a2!.txHash]);
      expect(lines.every((l: { ok: boolean; recomputedRoot: string; root: string }) => l.ok)).toBe(true);
      const inFirst = rows.filter((r) => r.position <= a1!.position);
      const inSecond = rows.filter((r) => r.position > a1!.position && r.position <= a2!.position);
      expect(lines[0].covers).toEqual({
        rows: inFirst.length,
        firstPosition: inFirst[0]!.position,
        lastPosition: inFirst.at(-1)!.position,
        outcomes: rows.filter((r) => r.outcome_position !== null && r.outcome_position <= a1!.position)
          .length,
      });
      expect(lines[1].covers.rows).toBe(inSecond.length);
      expect(report.anchors.uncovered.rows).toBe(rows.length - inFirst.length - inSecond.length);
      expect(report.anchors.uncovered.rows).toBe(MARKETS.length);
    }
    // One anchor named by its transaction hash, as copied from an explorer.
    const one = await verify(
      await write('one', 'ndjson', rows),
      '--anchors',
      '--rpc',
      anvil.rpcUrl,
      '--tx',
      a1!.txHash,
      '--tx',
      a1!.txHash.toUpperCase().replace('0X', '0x'),
    );
    expect(one.ok).toBe(true);
    // Named twice, it is one anchor: no second line covering nothing.
    expect(one.anchors.anchors).toHaveLength(1);
    expect(one.anchors.uncovered.rows).toBe(rows.filter((r) => r.position > a1!.position).length);
  });

  it('reports an anchor sent after the export was taken as beyond it: not checked, its rows unverified', async () => {
    const [a1, a2] = anchors;
    const early = join(dir, 'before-second.ndjson');
    const earlyRows: HistoryRow[] = [];
    for await (const row of readExport(early)) earlyRows.push(row);
    const last = Math.max(...earlyRows.map((r) => Math.max(r.position, r.outcome_position ?? 0)));
    expect(last).toBeLessThan(a2!.position);
    const afterFirst = earlyRows.filter((r) => r.position > a1!.position);
    expect(afterFirst.length).toBeGreaterThan(0);
    const report = await verify(early, ...anchorArgs());
    // Not a failure of what was checked, but the rows after the first anchor are verified by none.
    expect(report.ok).toBe(false);
    expect(report.partlyVerified).toBe(true);
    expect(report.anchors.ok).toBe(true);
    expect(report.anchors.unverified).toMatchObject({ after: a1!.position, rows: afterFirst.length });
    expect(report.unverified).toContain(`partly verified: the file's rows after position ${a1!.position}`);
    expect(report.anchors.lastPosition).toBe(last);
    const [l1, l2] = report.anchors.anchors;
    expect(l1).toMatchObject({ txHash: a1!.txHash, ok: true, beyond: false, note: null });
    expect(l2).toMatchObject({
      txHash: a2!.txHash,
      ok: null,
      beyond: true,
      recomputedRoot: null,
      covers: { rows: 0, firstPosition: null, lastPosition: null, outcomes: 0 },
    });
    expect(l2.note).toContain(`beyond the export: this anchor is at log position ${a2!.position}`);
    expect(l2.note).toContain(`past the file's last position ${last}`);
    // The file's rows after the first anchor: covered by none the file can be checked against.
    expect(report.anchors.uncovered.rows).toBe(afterFirst.length);
    // The real command line exits 3 (partly verified), 0 with --allow-uncovered and the same note.
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', early];
    const args = anchorArgs();
    const partly = await run(process.execPath, [...cli, ...args]).catch(
      (err: { code: number; stdout: string }) => err,
    );
    expect((partly as { code: number }).code).toBe(3);
    expect(JSON.parse((partly as { stdout: string }).stdout).anchors.anchors[1].beyond).toBe(true);
    const { stdout } = await run(process.execPath, [...cli, ...args, '--allow-uncovered']);
    expect(JSON.parse(stdout)).toMatchObject({
      ok: true,
      partlyVerified: true,
      unverified: report.unverified,
    });
    // A file cut before the second anchor's rows whose heads the anchor still pins (nothing moved
    // between its end and the anchor) is checked, not beyond: the root it gives matches.
    const upToSecond = rows.filter((r) => r.position <= a2!.position);
    const whole = await verify(await write('up-to-second', 'ndjson', upToSecond), ...anchorArgs());
    expect(whole.anchors.anchors.map((l: { ok: boolean; beyond: boolean }) => [l.ok, l.beyond])).toEqual([
      [true, false],
      [true, false],
    ]);
    expect(whole).toMatchObject({ ok: true, partlyVerified: false, unverified: null });
  });

  it('does not pass a file cut before an anchor with its tail rewritten and rehashed', async () => {
    // The attack: cut the export before the second anchor (where the early export ends: the
    // heads moved after it), drop what was recorded after the cut, rewrite a verdict after the
    // first anchor and make its hash again. The chains hold and the first anchor matches.
    const [a1, a2] = anchors;
    const earlyRows: HistoryRow[] = [];
    for await (const row of readExport(join(dir, 'before-second.ndjson'))) earlyRows.push(row);
    const cut = Math.max(...earlyRows.map((r) => r.position));
    const outcomeColumns = Object.keys(rows[0]!).filter(
      (_k, i, keys) => i >= keys.indexOf('outcome_id') && i <= keys.indexOf('outcome_position'),
    );
    const strip = (r: HistoryRow): HistoryRow =>
      r.outcome_position === null || r.outcome_position <= cut
        ? r
        : ({ ...r, ...Object.fromEntries(outcomeColumns.map((k) => [k, null])) } as HistoryRow);
    const kept = rows.filter((r) => r.position <= cut).map(strip);
    // A stream's last verdict in the file, after the first anchor: its call turned, its hash made again.
    const target = kept.findLast(
      (r) =>
        r.position > a1!.position &&
        rowContent(r) !== null &&
        kept.findLast((o) => o.stream === r.stream) === r,
    )!;
    expect(target).toBeDefined();
    const edited = { ...target, call: target.call === 'BUY' ? 'SELL' : 'BUY' } as HistoryRow;
    edited.hash = verdictHash(rowContent(edited)!);
    expect(edited.outcome_hash).toBeNull();
    const forged = kept.map((r) => (r === target ? edited : r));
    const path = await write('cut-rewritten', 'ndjson', forged);
    expect((await verify(path)).ok).toBe(true);
    const args = anchorArgs();
    const report = await verify(path, ...args);
    const [l1, l2] = report.anchors.anchors;
    expect(l1).toMatchObject({ ok: true, beyond: false });
    expect(l2).toMatchObject({ txHash: a2!.txHash, ok: null, beyond: true });
    // Before: ok true, exit 0. Now the rewritten rows are named unverified, and the run is not ok.
    expect(report).toMatchObject({ ok: false, partlyVerified: true });
    expect(report.anchors.unverified.rows).toBe(kept.filter((r) => r.position > a1!.position).length);
    expect(report.unverified).toContain(`rows after position ${a1!.position}`);
    expect(report.unverified).toContain('cannot be told from an export taken before');
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', path, ...args];
    const failed = await run(process.execPath, cli).catch((err: { code: number; stdout: string }) => err);
    expect((failed as { code: number }).code).toBe(3);
    // The analyst accepts it knowingly: exit 0, and the output still says the rows are unverified.
    const { stdout } = await run(process.execPath, [...cli, '--allow-uncovered']);
    expect(JSON.parse(stdout)).toMatchObject({ ok: true, partlyVerified: true });
    expect(JSON.parse(stdout).unverified).toContain(`rows after position ${a1!.position}`);
  });

  it('fails a file with no rows: nothing to check against the anchors', async () => {
    const path = await write('empty', 'ndjson', []);
    const args = anchorArgs();
    const report = await verify(path, ...args);
    expect(report).toMatchObject({
      ok: false,
      partlyVerified: false,
      anchors: { ok: false, unverified: null },
    });
    expect(report.anchors.note).toContain('the file holds no rows: nothing to check');
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', path, ...args, '--allow-uncovered'];
    const failed = await run(process.execPath, cli).catch((err: { code: number; stdout: string }) => err);
    expect((failed as { code: number }).code).toBe(1);
  });

  it('passes an honest export past the last anchor at exit 0: its newest rows uncovered, nothing beyond', async () => {
    const path = join(dir, 'clean-ndjson.ndjson');
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', path];
    const { stdout } = await run(process.execPath, [...cli, ...anchorArgs()]);
    const printed = JSON.parse(stdout);
    expect(printed).toMatchObject({ ok: true, partlyVerified: false, unverified: null });
    expect(printed.anchors.uncovered.rows).toBe(MARKETS.length);
    await expect(runHistoryCommand(['verify', path, '--allow-uncovered'], deps())).rejects.toThrow(
      '--allow-uncovered goes with --anchors',
    );
  });

  it('says why a filtered export fails every anchor: an anchor covers every stream', async () => {
    const out = join(dir, 'btc.ndjson');
    await runHistoryCommand(['export', '--store', '--coin', 'BTC', '--out', out], deps());
    const report = await verify(out, ...anchorArgs());
    expect(report.ok).toBe(false);
    for (const line of report.anchors.anchors) {
      expect(line).toMatchObject({ ok: false, beyond: false, streams: 1 });
      expect(line.note).toContain("the root made from the file's 1 streams");
      expect(line.note).toContain('An anchor covers every stream the service held at its position');
      expect(line.note).toContain('only an export without filters');
      // Another deployment's anchors (a wrong chain or wallet) differ the same way: named too.
      expect(line.note).toContain("the anchors read are another deployment's");
      expect(line.note).toContain('lastAnchor.chainId');
    }
  });

  it('catches a history rewritten with its hashes made again, which the chains alone cannot', async () => {
    // The last chained outcome of a stream: nothing links to it, so rehashed it passes verify.
    const chained = rows.filter((r) => r.outcome_hash !== null);
    const last = chained.at(-1)!;
    const edited = { ...last, return_6: last.return_6! + 0.01 };
    edited.outcome_hash = outcomeHash(rowOutcome(edited)!);
    const forged = rows.map((r) => (r === last ? edited : r));
    const covering = anchors.find((a) => last.outcome_position! <= a.position)!;
    for (const format of HISTORY_FORMATS) {
      const path = await write(`forged-${format}`, format, forged);
      expect((await verify(path)).ok, format).toBe(true);
      const report = await verify(path, ...anchorArgs());
      expect(report.ok, format).toBe(false);
      const broken = report.anchors.anchors.filter((l: { ok: boolean }) => !l.ok);
      expect(broken.map((l: { txHash: string }) => l.txHash)).toEqual([covering.txHash]);
    }
    // The real command line (tsx as node's loader, without npx's and tsx's launcher processes):
    // exit code 1, the anchors' lines on stdout.
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', join(dir, 'forged-ndjson.ndjson')];
    const failed = await run(process.execPath, [...cli, ...anchorArgs()]).catch(
      (err: { code: number; stdout: string }) => err,
    );
    expect((failed as { code: number }).code).toBe(1);
    const printed = JSON.parse((failed as { stdout: string }).stdout);
    expect(printed.anchors.anchors.find((l: { ok: boolean }) => !l.ok).txHash).toBe(covering.txHash);
  });

  it("catches a row moved later than its anchor's block time, which the file alone cannot", async () => {
    // The rows the second anchor closes, the last moved 30 days later: no chain link holds its
    // time (the next row of its stream is past the file's end), the anchor mined before it does.
    const [, a2] = anchors;
    const covered = rows.filter((r) => r.position <= a2!.position);
    const last = covered.at(-1)!;
    const moved = {
      ...last,
      recorded_at: new Date(Date.parse(last.recorded_at) + 30 * 86_400_000).toISOString(),
    };
    const edited = covered.map((r) => (r === last ? moved : r));
    for (const format of HISTORY_FORMATS) {
      const path = await write(`late-${format}`, format, edited);
      expect((await verify(path)).ok, format).toBe(true);
      const report = await verify(path, ...anchorArgs());
      expect(report.ok, format).toBe(false);
      expect(report.anchors.firstLate, format).toMatchObject({
        position: last.position,
        verdictId: last.verdict_id,
        recordedAt: moved.recorded_at,
        txHash: a2!.txHash,
      });
      expect(report.anchors.firstLate.reason).toContain(`position ${last.position}`);
      expect(report.anchors.firstLate.reason).toContain(a2!.txHash);
      const [l1, l2] = report.anchors.anchors;
      expect(l1.ok && l1.late === null).toBe(true);
      expect(l2).toMatchObject({ ok: false, late: { rows: 1 } });
      // Its root still matches: recorded_at is outside the hashes.
      expect(l2.recomputedRoot).toBe(l2.root);
    }
    // The rows as recorded pass: each is before its anchor's block, within the clock tolerance.
    const clean = await verify(await write('late-clean', 'ndjson', covered), ...anchorArgs());
    expect(clean).toMatchObject({ ok: true, anchors: { firstLate: null } });
  });

  it('says of an anchor beyond a file that starts mid-chain that the heads before its first row are not in it', async () => {
    // An after= export taken before the second anchor: every stream starts mid-chain, and the
    // second anchor lies past its end. The note names the file's start, not only its end.
    const [a1, a2] = anchors;
    const early: HistoryRow[] = [];
    for await (const row of readExport(join(dir, 'before-second.ndjson'))) early.push(row);
    const after = early.filter((r) => r.position > a1!.position);
    const report = await verify(await write('after-first', 'ndjson', after), ...anchorArgs());
    expect(report).toMatchObject({ streamsStartingMidChain: MARKETS.length });
    const l2 = report.anchors.anchors.find((l: { txHash: string }) => l.txHash === a2!.txHash);
    expect(l2).toMatchObject({ ok: null, beyond: true });
    expect(l2.note).toContain(`${MARKETS.length} of the file's streams start mid-chain`);
    expect(report.anchors.unverified.note).toContain(`An anchor (from position ${a2!.position}) lies beyond`);
  });

  it("catches a stream's first rows left out of an export, which the chains alone cannot", async () => {
    // An unfiltered export with one stream's first verdict deleted: every head is still in the
    // file, so the root matches, and the stream only looks like one that starts mid-chain.
    const [a1] = anchors;
    const first = rows.find((r) => r.revision === 0 && r.position <= a1!.position)!;
    const second = rows.find((r) => r.stream === first.stream && r.revision === 1)!;
    expect(second.position).toBeLessThanOrEqual(a1!.position);
    const dropped = rows.filter((r) => r !== first);
    for (const format of HISTORY_FORMATS) {
      const path = await write(`dropped-first-${format}`, format, dropped);
      expect(await verify(path), format).toMatchObject({ ok: true, streamsStartingMidChain: 1 });
      const report = await verify(path, ...anchorArgs());
      expect(report.ok, format).toBe(false);
      const [l1, l2] = report.anchors.anchors;
      expect(l1.recomputedRoot).toBe(l1.root);
      expect(l1).toMatchObject({
        ok: false,
        leftOut: { streams: 1, first: { stream: first.stream, revision: 1, position: second.position } },
      });
      expect(l1.note).toContain(`the first row of ${first.stream} in the file (revision 1`);
      expect(l1.note).toContain('left out');
      expect(l2).toMatchObject({ ok: true, leftOut: null });
    }
  });

  it('checks the anchors against the whole file past its first broken link, not the rows before it', async () => {
    // A revealed verdict of the first anchor's range edited in place, its hash left as recorded:
    // the chain walk stops at it, while every hash the roots are made of is still the recorded one.
    const [a1] = anchors;
    const target = rows.find((r) => r.position <= a1!.position && r.revealed && r.confidence !== null)!;
    const edited = rows.map((r) => (r === target ? { ...r, confidence: r.confidence! + 1 } : r));
    const clean = await verify(join(dir, 'clean-ndjson.ndjson'), ...anchorArgs());
    const report = await verify(await write('edited-in-place', 'ndjson', edited), ...anchorArgs());
    expect(report.ok).toBe(false);
    expect(report.firstBroken).toMatchObject({
      position: target.position,
      reason: 'hash does not match the revealed content',
    });
    // Every anchor made again from every row: none fails, none lies beyond the file, the newest
    // rows are uncovered as in the clean file.
    expect(
      report.anchors.anchors.map((l: { ok: boolean | null; beyond: boolean }) => [l.ok, l.beyond]),
    ).toEqual(clean.anchors.anchors.map(() => [true, false]));
    expect(report.anchors.lastPosition).toBe(clean.anchors.lastPosition);
    expect(report.anchors.uncovered).toEqual(clean.anchors.uncovered);
  });

  it('refuses what is no anchor, and says what it needs', async () => {
    const path = await write('args', 'ndjson', rows);
    await expect(runHistoryCommand(['verify', path, '--anchors'], deps())).rejects.toThrow(UsageError);
    await expect(
      runHistoryCommand(['verify', path, '--anchors', '--rpc', anvil.rpcUrl], deps()),
    ).rejects.toThrow('--anchors needs --address ADDR');
    // A plain transfer from the same wallet is not an anchor.
    const wallet = createWalletClient({
      account: privateKeyToAccount(ANCHOR_KEY),
      transport: http(anvil.rpcUrl),
    });
    const plain = await wallet.sendTransaction({ chain: null, to: ADDRESS, value: 1n });
    await createPublicClient({ transport: http(anvil.rpcUrl) }).waitForTransactionReceipt({ hash: plain });
    await expect(
      runHistoryCommand(['verify', path, '--anchors', '--rpc', anvil.rpcUrl, '--tx', plain], deps()),
    ).rejects.toThrow('is not an anchor');
    // No chain at the URL: an expected failure, told in one line (the CLI prints it without a stack).
    const noChain = runHistoryCommand(
      ['verify', path, '--anchors', '--rpc', 'http://127.0.0.1:9', '--address', ADDRESS],
      deps(),
    );
    await expect(noChain).rejects.toThrow(CommandFailedError);
    await expect(noChain).rejects.toThrow(
      /^could not read the anchors at http:\/\/127\.0\.0\.1:9: [^\n]+; check --rpc [^\n]+$/,
    );
    // A wallet that never anchored.
    const nobody = privateKeyToAccount(
      '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a',
    ).address;
    // The chain answered and holds none from it: an expected failure (exit 1, one line), not a
    // usage error (exit 2 and the usage text), saying what to check.
    const none = runHistoryCommand(
      ['verify', path, '--anchors', '--rpc', anvil.rpcUrl, '--address', nobody],
      deps(),
    );
    await expect(none).rejects.toThrow(CommandFailedError);
    await expect(none).rejects.toThrow(
      `no anchor transaction from ${nobody} found at ${anvil.rpcUrl}: check --address is the anchoring wallet`,
    );
    const cli = ['--import', 'tsx', 'services/history/cli.ts', 'verify', path];
    const failed = await run(process.execPath, [
      ...cli,
      '--anchors',
      '--rpc',
      anvil.rpcUrl,
      '--address',
      nobody,
    ]).catch((err: { code: number; stderr: string }) => err);
    expect((failed as { code: number }).code).toBe(1);
    expect((failed as { stderr: string }).stderr.trim().split('\n')).toHaveLength(1);
  });

  it("shows a failed send's reason on a passing check, with no failure's detail; the log has its words", async () => {
    // A chain that refuses: the anchorer's first check fails to send, which never makes the role
    // unready.
    const port = await freePort();
    const { own, refused } = await refusingAnchorer(port);
    const readiness = new Readiness();
    readiness.add('processor:history-anchor', refused.slice.checks()['processor:history-anchor']!);
    const { app, logged } = await readyzApp(readiness);
    try {
      await until(async () => (refused.slice.anchorer!.lastFailure === null ? null : true), 'a failed send');
      const res = await app.inject({ method: 'GET', url: '/readyz' });
      expect(res.statusCode).toBe(200);
      const check = res.json().checks['processor:history-anchor'];
      expect(check).toMatchObject({ ok: true, anchoring: 'on', address: ADDRESS, lastError: 'refused' });
      // A passing check carries no failure's words: the reason is in lastError, as the others show it.
      expect(check).not.toHaveProperty('detail');
      // The RPC's port as its URL names it: a bare number drawn by the system could sit in a time.
      expect(res.body).not.toContain(`:${port}`);
      // The error's words (the RPC's URL) are in the log's full result.
      expect(logged()).toHaveLength(1);
      expect(logged()[0]).toMatchObject({ check: 'processor:history-anchor', result: { ok: true } });
      expect(logged()[0]?.err?.message).toBeTruthy();
    } finally {
      await app.close();
      await refused.close();
      await own.engine.close();
    }
  });

  it('shows a check that threw undefined as failed: a throw of anything is a failure', async () => {
    // A check run before the throw below is refused.
    const { own, refused } = await refusingAnchorer(await freePort());
    const check = refused.slice.checks()['processor:history-anchor']!;
    try {
      // The send throws undefined (a library rejecting with no reason), on every check from now on.
      refused.slice.anchorer!.anchor = async () => {
        throw undefined;
      };
      const failed = await until(async () => {
        const result = (await check()) as { lastError?: string; cause?: unknown };
        return result.lastError === 'failed' && result.cause === undefined ? result : null;
      }, "a check that threw undefined shown as lastError 'failed'");
      expect(failed).toMatchObject({ ok: true, anchoring: 'on', lastError: 'failed' });
      expect(refused.slice.anchorer!.lastFailure).toEqual({ error: undefined });
    } finally {
      await refused.close();
      await own.engine.close();
    }
  });

  it('is off on the embedded defaults, and with only the settlements wallet, and the readiness check says why', async () => {
    expect(loadConfig({}).HISTORY_ANCHOR_PRIVATE_KEY).toBeUndefined();
    // The settlements' wallet is not taken: its nonces belong to the api role's processes.
    const plain = await startHistoryServer({
      store: fx.store,
      feed: fx.feed,
      env: { X402_FACILITATOR_PRIVATE_KEY: ANCHOR_KEY, X402_RPC_URL: anvil.rpcUrl },
    });
    try {
      expect(plain.slice.anchorer).toBeNull();
      expect(await plain.slice.checks()['processor:history-anchor']!()).toEqual({
        ok: true,
        anchoring: 'off: no HISTORY_ANCHOR_PRIVATE_KEY (the wallet that publishes the anchors)',
      });
    } finally {
      await plain.close();
    }
  });
});

/**
 * An anchorer on a stubbed heads view (`state`, caught up at its `moved` position) and log head;
 * its chain is a loopback port nothing listens on, so a case replaces `anchor` itself.
 */
function stubbedAnchorer(state: AnchorState, intervalMs: number, clock?: () => number): HistoryAnchorer {
  const heads = {
    state,
    get checkpoint() {
      return state.moved;
    },
    waitFor: async () => {},
  } as unknown as ProjectionRunner<AnchorState>;
  const store = { headPosition: async () => state.moved } as unknown as EventStore;
  return new HistoryAnchorer({
    store,
    heads,
    chain: { rpcUrl: 'http://127.0.0.1:9', privateKey: ANCHOR_KEY },
    intervalMs,
    logger: pino({ level: 'silent' }),
    ...(clock ? { clock } : {}),
  });
}

describe('anchor rules', () => {
  it('is due at once when none exists, then after the interval and only when the log moved', () => {
    const day = 86_400_000;
    const t = Date.parse('2026-01-02T00:00:00Z');
    const last = { anchoredAt: '2026-01-01T00:00:00.000Z', position: 100 };
    expect(anchorDue(null, 0, t, day)).toBe(false);
    expect(anchorDue(null, 5, t, day)).toBe(true);
    expect(anchorDue(last, 101, t - 1, day)).toBe(false);
    expect(anchorDue(last, 101, t, day)).toBe(true);
    expect(anchorDue(last, 100, t + day, day)).toBe(false);
  });

  it('checks again when the next anchor falls due, at most a check period away', () => {
    const day = 86_400_000;
    const last = { anchoredAt: '2026-01-01T00:00:00.000Z', position: 100 };
    const t = Date.parse(last.anchoredAt);
    expect(nextCheckIn(null, 5, t, day, 60_000)).toBe(60_000);
    expect(nextCheckIn(last, 101, t + day - 1_500, day, 60_000)).toBe(1_500);
    expect(nextCheckIn(last, 101, t + 5_000, 10_000, 60_000)).toBe(5_000);
    // Due already but nothing new on the log: the next look is a check period away.
    expect(nextCheckIn(last, 100, t + day + 1, day, 60_000)).toBe(60_000);
    // Due already and the log moved (the last check came a hair before the due time): at once.
    expect(nextCheckIn(last, 101, t + day, day, 60_000)).toBe(0);
    expect(nextCheckIn(last, 101, t + day + 1, day, 60_000)).toBe(0);
  });

  it('checks again at once when a check found the anchor a hair short of due and the log has moved', async () => {
    // The anchorer's own timers on a fake clock (no figure of wall time): the check reads the time
    // a millisecond before the anchor falls due, and the scheduling after it reads it due. A next
    // check a whole check period (60 s) later is the every-other-interval bug.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
    const interval = 600_000;
    const t0 = Date.parse('2026-01-01T00:00:00.000Z');
    const last = {
      root: '0'.repeat(64),
      position: 1,
      streams: 0,
      chainId: 1,
      address: ADDRESS,
      txHash: `0x${'0'.repeat(64)}`,
      blockNumber: 1,
      anchoredAt: new Date(t0).toISOString(),
    } as EventData<'HistoryAnchored'>;
    const state: AnchorState = { heads: {}, moved: 2, last };
    const reads = [t0 + interval - 1, t0 + interval];
    const anchorer = stubbedAnchorer(state, interval, () => reads.shift() ?? t0 + interval + 1);
    let sent = 0;
    anchorer.anchor = async () => {
      sent++;
      state.last = { ...last, position: state.moved };
      return state.last;
    };
    anchorer.start();
    try {
      // The first check, a check period after the start, found it a hair short of due (both
      // scripted times read); the next one comes at once, not a check period later.
      await vi.advanceTimersByTimeAsync(60_000 + 1);
      expect(reads).toEqual([]);
      expect(sent).toBe(1);
    } finally {
      await anchorer.stop();
      vi.useRealTimers();
    }
  });

  it('sends an anchor every interval, not every other one, when the log keeps moving', async () => {
    // The heads view and the chain stubbed: each anchor is stamped once "mined", 40 ms after its
    // check, as a real one is stamped after its receipt.
    const interval = 600;
    const state: AnchorState = { heads: {}, moved: 1, last: null };
    const sent: number[] = [];
    const anchorer = stubbedAnchorer(state, interval);
    anchorer.anchor = async () => {
      await new Promise((r) => setTimeout(r, 40));
      const anchored = {
        root: '0'.repeat(64),
        position: state.moved,
        streams: 0,
        chainId: 1,
        address: ADDRESS,
        txHash: `0x${'0'.repeat(64)}`,
        blockNumber: sent.length,
        anchoredAt: new Date().toISOString(),
      };
      sent.push(Date.now());
      state.last = anchored;
      state.moved++; // the log moves on
      return anchored;
    };
    anchorer.start();
    try {
      await expect.poll(() => sent.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(4);
    } finally {
      await anchorer.stop();
    }
    // Never sooner than the interval. How much later depends on the host's load, so the upper side
    // (no whole check period lost after a check a hair short of due) is the fake-timer case above.
    const gaps = sent.slice(1).map((at, i) => at - sent[i]!);
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(interval);
  });

  it('makes the root from leaves sorted by stream, pairing level by level, a lone last leaf going up unchanged', () => {
    const sha = (...parts: Buffer[]) => {
      const h = createHash('sha256');
      for (const p of parts) h.update(p);
      return h.digest();
    };
    const leaf = (s: string) => ({
      stream: s,
      leaf: anchorLeaf(s, 'a'.repeat(64), s === 'c' ? null : 'b'.repeat(64)),
    });
    expect(anchorLeaf('c', 'a'.repeat(64), null)).toEqual(sha(Buffer.from(`c\n${'a'.repeat(64)}\n`)));
    const [a, b, c] = [leaf('a'), leaf('b'), leaf('c')];
    expect(merkleRoot([c!, a!, b!])).toBe(sha(sha(a!.leaf, b!.leaf), c!.leaf).toString('hex'));
    expect(merkleRoot([a!])).toBe(a!.leaf.toString('hex'));
    expect(() => merkleRoot([])).toThrow('at least one stream');
  });
});
