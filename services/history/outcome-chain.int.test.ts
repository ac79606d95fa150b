import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent, parseDomainEvent } from '../../contracts/events.ts';
import {
  HISTORY_FORMATS,
  type HistoryFormat,
  type HistoryRow,
  OUTCOME_AFTER_CANDLES,
  outcomeStream,
} from '../../contracts/history.ts';
import { outcomeHash } from '../../contracts/verdict-hash.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { rowOutcome } from './audit.ts';
import { type CliDeps, runHistoryCommand, verifyExitCode } from './cli-commands.ts';
import { writeExport } from './export-fixture.ts';
import { NO_OUTCOME } from './export-rows.ts';
import { readExport } from './files.ts';
import { outcomeDueAt, resolveOutcome } from './outcome.ts';
import type { UncoveredSeries } from './recompute.ts';

/** Verdicts per stream whose outcome is recorded as before outcomes were chained (no hash). */
const LEGACY = 3;

let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Awaited<ReturnType<typeof startHistoryServer>>;
let dir: string;
let rows: HistoryRow[];

function deps(): CliDeps {
  return { openStore: async () => fx.store, progress: null };
}

/** An existing log: the first LEGACY verdicts of each stream labelled by the resolver before outcomes were chained. */
async function recordLegacyOutcomes(): Promise<void> {
  const seen = new Map<string, number>();
  for (const event of await fx.store.readAll()) {
    const verdict = parseDomainEvent(event);
    if (verdict?.type !== 'VerdictRecorded') continue;
    const n = seen.get(verdict.stream) ?? 0;
    if (n >= LEGACY) continue;
    seen.set(verdict.stream, n + 1);
    const d = verdict.data;
    const candles = await fx.feed.candles(d.exchange, d.coin, d.timeframe, {
      limit: OUTCOME_AFTER_CANDLES,
      until: outcomeDueAt(d),
      min: OUTCOME_AFTER_CANDLES,
    });
    const {
      hash: _h,
      prevHash: _p,
      ...unchained
    } = resolveOutcome(
      { verdictId: verdict.id, stream: verdict.stream, revision: verdict.revision },
      d,
      candles,
    );
    await fx.store.append(outcomeStream(verdict.id), [
      newEvent('VerdictOutcomeResolved', unchained, { id: deterministicId('verdict-outcome', verdict.id) }),
    ]);
  }
}

beforeAll(async () => {
  fx = await recordHistory({ steps: 40, settleHours: 30 });
  await recordLegacyOutcomes();
  server = await startHistoryServer({ store: fx.store, feed: fx.feed });
  await server.settle();
  dir = mkdtempSync(join(tmpdir(), 'outcome-chain-'));
  const out = join(dir, 'all.ndjson');
  await runHistoryCommand(['export', '--store', '--out', out], deps());
  rows = [];
  for await (const row of readExport(out)) rows.push(row);
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const write = (name: string, format: HistoryFormat, written: HistoryRow[]) =>
  writeExport(dir, name, format, written);

async function verify(path: string, ...extra: string[]) {
  return JSON.parse(await runHistoryCommand(['verify', path, ...extra], deps()));
}

const chained = () => rows.filter((r) => r.outcome_hash !== null);
/** A chained outcome with a later chained outcome in its stream (so a link names it). */
function middle(pick: (r: HistoryRow) => boolean = () => true): HistoryRow {
  const lastOf = new Map<string, number>();
  for (const r of chained()) lastOf.set(r.stream, r.position);
  const found = chained().find(
    (r) => r.outcome_prev_hash !== null && r.position < lastOf.get(r.stream)! && pick(r),
  );
  if (!found) throw new Error('no such row in the fixture');
  return found;
}

describe('outcomes in the chain', () => {
  it('chains every outcome the resolver records, each tied to its verdict, after the unchained ones of an existing log', async () => {
    const streams = new Set(rows.map((r) => r.stream));
    expect(streams.size).toBe(3);
    for (const stream of streams) {
      const labelled = rows.filter((r) => r.stream === stream && r.result !== null);
      // The existing outcomes stay as recorded (no link); the chain starts at the first one after.
      expect(labelled.slice(0, LEGACY).every((r) => r.outcome_hash === null)).toBe(true);
      const links = labelled.slice(LEGACY);
      expect(links.length).toBeGreaterThan(3);
      expect(links[0]!.outcome_prev_hash).toBeNull();
      for (const [i, r] of links.entries()) {
        expect(outcomeHash(rowOutcome(r)!)).toBe(r.outcome_hash);
        if (i > 0) expect(r.outcome_prev_hash).toBe(links[i - 1]!.outcome_hash);
        if (i > 0) expect(r.outcome_position!).toBeGreaterThan(links[i - 1]!.outcome_position!);
      }
    }
    for (const format of HISTORY_FORMATS) {
      const report = await verify(await write(`clean-${format}`, format, rows));
      expect(report).toMatchObject({
        ok: true,
        rows: rows.length,
        outcomes: chained().length,
        unchainedOutcomes: 3 * LEGACY,
        firstBroken: null,
      });
    }
  });

  const hold = () => middle((r) => r.call === 'HOLD' && r.net_centi_bps === null);
  const cases: [string, () => HistoryRow, (r: HistoryRow) => HistoryRow, string][] = [
    [
      'return_6 raised by 0.01',
      () => middle(),
      (r) => ({ ...r, return_6: r.return_6! + 0.01 }),
      'outcome_hash does not match the outcome columns',
    ],
    [
      'result changed',
      () => middle((r) => r.result === 'no-call'),
      (r) => ({ ...r, result: 'hit' }),
      'outcome_hash does not match the outcome columns',
    ],
    [
      'net_centi_bps null set to 12345',
      hold,
      (r) => ({ ...r, net_centi_bps: 12345 }),
      'outcome_hash does not match the outcome columns',
    ],
    ['the outcome dropped', () => middle(), (r) => ({ ...r, ...NO_OUTCOME }), 'outcome missing: the stream'],
    [
      'the outcome passed off as one recorded before chaining',
      () => middle(),
      (r) => ({ ...r, outcome_hash: null, outcome_prev_hash: null, outcome_position: null }),
      'outcome without outcome_hash after the outcome chain of this stream began',
    ],
    // The stamps outside the hashes, against what determines them.
    [
      'recorded_at moved back to 2020',
      () => middle(),
      (r) => ({ ...r, recorded_at: '2020-01-01T00:00:00.000Z' }),
      "recorded_at is earlier than the previous verdict's of this stream",
    ],
    [
      'recorded_at moved an hour later',
      () => middle(),
      (r) => ({ ...r, recorded_at: new Date(Date.parse(r.recorded_at) + 3_600_000).toISOString() }),
      "recorded_at is later than the next verdict's of this stream",
    ],
    [
      'reveal_at moved a day earlier',
      () => middle(),
      (r) => ({ ...r, reveal_at: new Date(Date.parse(r.reveal_at) - 86_400_000).toISOString() }),
      'reveal_at is not the candle close plus the reveal delay',
    ],
    [
      'outcome_id replaced',
      () => middle(),
      (r) => ({ ...r, outcome_id: '00000000-0000-4000-8000-000000000000' }),
      'outcome_id is not the one its verdict id gives',
    ],
    [
      'outcome_position set before its verdict',
      () => middle(),
      (r) => ({ ...r, outcome_position: r.position - 1 }),
      'outcome_position is not after the verdict',
    ],
    [
      'outcome_position removed',
      () => middle(),
      (r) => ({ ...r, outcome_position: null }),
      'outcome_hash without the outcome_position it was recorded at',
    ],
    [
      'outcome_position set before the previous outcome of its stream',
      () => middle(),
      (r) => ({ ...r, outcome_position: r.position + 1 }),
      'outcome_position is not after the previous outcome of this stream',
    ],
    // revealed says whether the hash covers the content: a revealed row without its call was
    // walked as a commitment (not rehashed) and left the scored calls; a commitment showing
    // content showed columns no hash covers.
    [
      'the call of a revealed row emptied',
      () => middle((r) => r.call !== 'HOLD'),
      (r) => ({ ...r, call: null }),
      'revealed without its call',
    ],
    [
      'a revealed row passed off as a commitment, its call turned and its outcome left out',
      () => middle((r) => r.call !== 'HOLD'),
      (r) => ({ ...r, ...NO_OUTCOME, revealed: false, call: r.call === 'BUY' ? 'SELL' : 'BUY' }),
      // Every content column by name: the audit and the Parquet writer read them from one list.
      'a commitment (revealed false) showing call, confidence, score, regime, price, candle_close_time, feed, engine_version, trigger, inputs_json:',
    ],
  ];
  for (const [name, pick, change, reason] of cases) {
    it(`fails verify and names the row: ${name} (NDJSON, CSV, Parquet)`, async () => {
      const victim = pick();
      const forged = rows.map((r) => (r === victim ? change(r) : r));
      for (const format of HISTORY_FORMATS) {
        const report = await verify(await write(`${name.replaceAll(' ', '-')}-${format}`, format, forged));
        expect(report.ok, format).toBe(false);
        expect(report.firstBroken, format).toMatchObject({
          position: victim.position,
          verdictId: victim.verdict_id,
        });
        expect(report.firstBroken.reason, format).toContain(reason);
      }
    });
  }

  // The stream is outside the hashes: renamed in every row of it, no link breaks, and the rows'
  // /verify links would name a stream the log does not hold.
  it('fails verify on a stream renamed in every row of it, naming its first row (NDJSON, CSV, Parquet)', async () => {
    const victim = middle();
    const renamed = `${victim.stream}x`;
    const forged = rows.map((r) => (r.stream === victim.stream ? { ...r, stream: renamed } : r));
    const first = rows.find((r) => r.stream === victim.stream)!;
    for (const format of HISTORY_FORMATS) {
      const report = await verify(await write(`stream-renamed-${format}`, format, forged));
      expect(report.firstBroken, format).toMatchObject({
        stream: renamed,
        position: first.position,
        reason: 'stream is not the one its exchange, coin and timeframe name',
      });
    }
  });

  it('walks every row when the break is a link found open only at the end of the file (an outcome dropped)', async () => {
    const victim = middle();
    const forged = rows.map((r) => (r === victim ? { ...r, ...NO_OUTCOME } : r));
    const report = await verify(await write('dropped-outcome-counts', 'ndjson', forged));
    expect(report.firstBroken).toMatchObject({ verdictId: victim.verdict_id });
    expect(report.firstBroken.reason).toContain('outcome missing');
    // No row the walk read broke a link: it read them all, those after the row it names too.
    expect(report).toMatchObject({ ok: false, rows: forged.length, rowsWalked: forged.length });
    expect(rows.indexOf(victim)).toBeLessThan(rows.length - 1);
  });

  // The fixture's verdicts are a backfill's, recorded within milliseconds of each other; a live
  // stream's are recorded a few seconds after each close, an hour apart on 1h candles.
  it('names the moved row of a live stream, whether its stamp moved later or back', async () => {
    const victim = middle();
    const live = rows.map((r) =>
      r.stream === victim.stream && r.candle_close_time !== null
        ? { ...r, recorded_at: new Date(r.candle_close_time + 5_000).toISOString() }
        : r,
    );
    const stream = live.filter((r) => r.stream === victim.stream);
    const at = stream.findIndex((r) => r.verdict_id === victim.verdict_id);
    const hour = 3_600_000;
    const moves: [string, number, number, string][] = [
      // Later by 1.5 candles: the next row is still after the previous one's stamp minus the skew.
      ['later', at, 1.5 * hour, "recorded_at is later than the next verdict's of this stream"],
      // Back to the stamp of the row before the previous one: still not before that row.
      ['back', at + 1, -2 * hour, "recorded_at is earlier than the previous verdict's of this stream"],
    ];
    for (const [name, index, by, reason] of moves) {
      const moved = stream[index]!;
      const forged = live.map((r) =>
        r === moved ? { ...r, recorded_at: new Date(Date.parse(r.recorded_at) + by).toISOString() } : r,
      );
      const report = await verify(await write(`live-${name}`, 'ndjson', forged));
      expect(report.ok, name).toBe(false);
      expect(report.firstBroken, name).toMatchObject({ position: moved.position, reason });
      // The rows walked end at the one out of order (the row after the moved one, or the moved one):
      // those after it, read to find its stream's next row, are not counted as walked. The file's
      // rows are every row it holds.
      const outOfOrder = stream[at + 1]!;
      expect(report.rowsWalked, name).toBe(
        forged.findIndex((r) => r.verdict_id === outOfOrder.verdict_id) + 1,
      );
      expect(report.rows, name).toBe(forged.length);
    }
  });

  it('names the first of two verdicts whose outcomes were swapped', async () => {
    const a = middle();
    const b = chained().find((r) => r.stream === a.stream && r.position > a.position)!;
    const swapped = rows.map((r) =>
      r === a ? { ...a, ...outcomeOf(b) } : r === b ? { ...b, ...outcomeOf(a) } : r,
    );
    const report = await verify(await write('swapped', 'ndjson', swapped));
    expect(report.ok).toBe(false);
    // The outcome ids came along with the outcomes: each names another verdict.
    expect(report.firstBroken).toMatchObject({
      position: a.position,
      reason: 'outcome_id is not the one its verdict id gives',
    });
    // Swapped with their ids left in place, the hashes tell.
    const columnsOnly = rows.map((r) =>
      r === a
        ? { ...a, ...outcomeOf(b), outcome_id: a.outcome_id }
        : r === b
          ? { ...b, ...outcomeOf(a), outcome_id: b.outcome_id }
          : r,
    );
    const columns = await verify(await write('swapped-columns', 'ndjson', columnsOnly));
    expect(columns.firstBroken).toMatchObject({
      position: a.position,
      reason: 'outcome_hash does not match the outcome columns',
    });
  });

  it('names a forked outcome chain and a second chain start, rehashed or not', async () => {
    const a = middle();
    const b = chained().find((r) => r.stream === a.stream && r.outcome_prev_hash === a.outcome_hash)!;
    const c = chained().find((r) => r.stream === a.stream && r.outcome_prev_hash === b.outcome_hash)!;
    // c links to what b links to: two outcomes follow a.
    const forkedC = { ...c, outcome_prev_hash: a.outcome_hash };
    forkedC.outcome_hash = outcomeHash(rowOutcome(forkedC)!);
    const forked = await verify(
      await write(
        'forked',
        'ndjson',
        rows.map((r) => (r === c ? forkedC : r)),
      ),
    );
    expect(forked.ok).toBe(false);
    expect(forked.firstBroken).toMatchObject({
      position: c.position,
      reason: 'two outcomes link to the same previous outcome (a forked outcome chain)',
    });
    // b starts a chain of its own.
    const restarted = { ...b, outcome_prev_hash: null };
    restarted.outcome_hash = outcomeHash(rowOutcome(restarted)!);
    const again = await verify(
      await write(
        'restarted',
        'ndjson',
        rows.map((r) => (r === b ? restarted : r)),
      ),
    );
    expect(again.ok).toBe(false);
    expect(again.firstBroken).toMatchObject({
      position: b.position,
      reason: 'a second outcome chain start (outcome_prev_hash null) in this stream',
    });
  });

  it('recomputes every outcome from a market-data folder, and reports one that differs with its hash made again', async () => {
    const path = await write('for-data', 'ndjson', rows);
    const clean = await verify(path, '--data', 'sample-data/market');
    expect(clean.ok).toBe(true);
    const labelled = rows.filter((r) => r.result !== null).length;
    expect(clean.recomputed).toMatchObject({
      checked: labelled,
      notInData: 0,
      mismatched: 0,
      mismatches: [],
    });

    // The last outcome of a stream is linked by none: rehashed, it passes the chain check alone.
    const last = chained().at(-1)!;
    const edited = { ...last, return_24: last.return_24! * 2 };
    edited.outcome_hash = outcomeHash(rowOutcome(edited)!);
    const forged = await write(
      'head-rehashed',
      'ndjson',
      rows.map((r) => (r === last ? edited : r)),
    );
    expect((await verify(forged)).ok).toBe(true);
    const checked = await verify(forged, '--data', 'sample-data/market');
    expect(checked.ok).toBe(false);
    expect(checked.recomputed.mismatched).toBe(1);
    expect(checked.recomputed.mismatches).toEqual([
      {
        position: last.position,
        verdictId: last.verdict_id,
        stream: last.stream,
        column: 'return_24',
        exported: edited.return_24,
        recomputed: last.return_24,
      },
    ]);
    await expect(runHistoryCommand(['verify', path, '--data', join(dir, 'nowhere')], deps())).rejects.toThrow(
      'no market-data folder at',
    );
  });

  it('verifies nothing with a --data folder that holds none of the outcomes, and counts those a folder covering some cannot recompute', async () => {
    const path = await write('for-other-data', 'ndjson', rows);
    const labelled = rows.filter((r) => r.result !== null);
    // A market-data folder of a coin the file holds no verdict of: every outcome is notInData.
    const other = join(dir, 'market-other');
    mkdirSync(join(other, 'candles', 'binance-spot'), { recursive: true });
    copyFileSync(
      'sample-data/market/candles/binance-spot/XRPUSDT-1h.csv.gz',
      join(other, 'candles', 'binance-spot', 'XRPUSDT-1h.csv.gz'),
    );
    const none = await verify(path, '--data', other);
    expect(none.firstBroken).toBeNull();
    expect(none.recomputed).toMatchObject({ checked: 0, notInData: labelled.length, mismatched: 0 });
    const needs = [...new Set(labelled.map((r) => `${r.exchange} ${r.coin} ${r.timeframe}`))];
    expect(
      none.recomputed.uncovered.map((s: UncoveredSeries) => `${s.exchange} ${s.coin} ${s.timeframe}`),
    ).toEqual(needs);
    const named = none.recomputed.uncovered
      .map((s: UncoveredSeries) => `${s.exchange} ${s.coin} ${s.timeframe} from ${s.from} to ${s.to}`)
      .join('; ');
    expect(none).toMatchObject({
      ok: false,
      incomplete: `${path} holds ${labelled.length} outcomes, none in ${other}: no outcome could be recomputed from that folder (checked: 0, notInData: ${labelled.length}), so no outcome is verified (they need the candles of ${named}: give --data a market-data folder that holds them)`,
    });
    expect(verifyExitCode(none)).toBe(1);

    // A folder of one of the file's series: its outcomes are checked, the others counted and named.
    const some = join(dir, 'market-some');
    mkdirSync(join(some, 'candles', 'binance-usdm'), { recursive: true });
    copyFileSync(
      'sample-data/market/candles/binance-usdm/BTCUSDT-1h.csv.gz',
      join(some, 'candles', 'binance-usdm', 'BTCUSDT-1h.csv.gz'),
    );
    const btc = labelled.filter((r) => r.coin === 'BTC').length;
    expect(btc).toBeGreaterThan(0);
    const partial = await verify(path, '--data', some);
    expect(partial.ok).toBe(true);
    expect(partial.incomplete).toBeUndefined();
    expect(partial.recomputed).toMatchObject({
      checked: btc,
      notInData: labelled.length - btc,
      mismatched: 0,
    });
    expect(partial.recomputed.uncovered.map((s: UncoveredSeries) => s.coin)).not.toContain('BTC');
  });

  it('recomputes the whole file past the first broken link: an outcome edited in place breaks the chain at its row, and --data names its column', async () => {
    // Early in the file, with rows after it: the chain walk stops there, the recompute does not.
    const a = middle();
    const edited = { ...a, return_6: a.return_6! + 0.001 };
    const path = await write(
      'edited-in-place',
      'ndjson',
      rows.map((r) => (r === a ? edited : r)),
    );
    const checked = await verify(path, '--data', 'sample-data/market');
    expect(checked.ok).toBe(false);
    expect(checked.firstBroken).toMatchObject({
      position: a.position,
      reason: 'outcome_hash does not match the outcome columns',
    });
    expect(checked.recomputed).toMatchObject({
      checked: rows.filter((r) => r.result !== null).length,
      notInData: 0,
      mismatched: 1,
    });
    expect(checked.recomputed.mismatches).toEqual([
      {
        position: a.position,
        verdictId: a.verdict_id,
        stream: a.stream,
        column: 'return_6',
        exported: edited.return_6,
        recomputed: a.return_6,
      },
    ]);
  });

  it('reads past a malformed row for --data: the walk stops at it, every other outcome is still recomputed', async () => {
    const a = middle();
    const at = rows.indexOf(a);
    const malformed = { ...a, result: 'maybe' } as unknown as HistoryRow;
    for (const format of HISTORY_FORMATS) {
      const path = await write(
        `malformed-mid-${format}`,
        format,
        rows.map((r) => (r === a ? malformed : r)),
      );
      const checked = await verify(path, '--data', 'sample-data/market');
      expect(checked.ok, format).toBe(false);
      expect(checked.firstBroken.at, format).toBe(
        format === 'parquet'
          ? `row ${at + 1} of part-000001.parquet`
          : `line ${at + (format === 'csv' ? 2 : 1)}`,
      );
      expect(checked.firstBroken.reason, format).toContain('malformed result "maybe"');
      // Every labelled row but the one that is no row.
      expect(checked.recomputed, format).toMatchObject({
        checked: rows.filter((r) => r.result !== null).length - 1,
        mismatched: 0,
      });
    }
  });
});

function outcomeOf(r: HistoryRow): Partial<HistoryRow> {
  return Object.fromEntries(Object.keys(NO_OUTCOME).map((k) => [k, r[k as keyof HistoryRow]]));
}
