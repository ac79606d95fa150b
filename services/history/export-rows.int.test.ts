import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parquetReadObjects } from 'hyparquet';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { HistoryTrailer } from '../../contracts/history.ts';
import { recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { HANG_MS } from '../../test/waits.ts';
import { ExportRowStore, OLD_DBS, openVerdictsDb, VERDICTS_DB } from './export-row-store.ts';
import {
  F_ID,
  fieldOf,
  forgetTemplates,
  knowsTemplate,
  revealAtOf,
  StoredLine,
  templateIdOf,
} from './export-rows.ts';
import { fillColumns, historyRow, rowRef } from './rows.ts';
import { type HistoryFilter, ScanProgress, type StoredRows, scanHistory } from './scan.ts';
import { parquetStream, storedLines } from './writers.ts';

type Server = Awaited<ReturnType<typeof startHistoryServer>>;

let dir: string;
let store: LmdbEventStore;
let fx: Awaited<ReturnType<typeof recordHistory>>;
let server: Server;
let key: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'history-export-rows-'));
  store = await openLmdbEventStore({ path: dir });
  // 40 hourly verdicts on three markets on an LMDB log; outcomes resolve after the server has
  // stored the verdicts (so their rows are rewritten), the last steps stay unrevealed.
  fx = await recordHistory({ steps: 40, store });
  server = await startHistoryServer({ store, feed: fx.feed, pageSize: 16 });
  await server.settle();
  key = await server.issue();
  await server.slice.exportRows!.waitFor(await store.headPosition());
});
afterAll(async () => {
  await server?.close();
  await fx?.engine.close();
  await store?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The lines the log scan alone makes (no stored rows), as the reference. */
async function fromLog(filter: Record<string, unknown> = {}): Promise<string[]> {
  const lines: string[] = [];
  const progress = new ScanProgress(0, null);
  for await (const rows of scanHistory(
    store,
    { filter, after: 0, limit: 1e9, now: server.slice.now },
    progress,
  ))
    for (const row of rows) lines.push(JSON.stringify(row));
  return lines;
}

async function readParquet(bytes: Buffer) {
  return parquetReadObjects({
    file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer,
  });
}

/** The Parquet rows the log scan alone gives (events taken apart by fillColumns). */
async function parquetFromLog(filter: HistoryFilter = {}) {
  const progress = new ScanProgress(0, null);
  const scan = scanHistory(store, { filter, after: 0, limit: 1e9, now: server.slice.now }, progress, rowRef);
  const chunks: Buffer[] = [];
  for await (const chunk of parquetStream(scan, fillColumns)) chunks.push(chunk as Buffer);
  return readParquet(Buffer.concat(chunks));
}

async function parquetExported(query: string) {
  const res = await request(`${server.url}/api/verdicts${query}${query ? '&' : '?'}format=parquet`, {
    headers: { authorization: `Bearer ${key}` },
  });
  expect(res.statusCode).toBe(200);
  return readParquet(Buffer.from(await res.body.arrayBuffer()));
}

async function exported(query: string) {
  const res = await request(`${server.url}/api/verdicts${query}${query ? '&' : '?'}trailer=true`, {
    headers: { authorization: `Bearer ${key}` },
  });
  expect(res.statusCode).toBe(200);
  const lines = (await res.body.text()).trim().split('\n');
  return { rows: lines.slice(0, -1), trailer: HistoryTrailer.parse(JSON.parse(lines.at(-1)!)) };
}

/**
 * The export equals the rows the log makes, once the projection holds the log's head: the
 * service's outcome recorder may append after a step's head was read (an advanced clock reveals
 * outcomes), so the head is read again until the two agree.
 */
async function exportMatchesLog(rows: ExportRowStore) {
  await vi.waitFor(
    async () => {
      await rows.waitFor(await store.headPosition(), 30_000);
      expect((await exported('')).rows).toEqual(await fromLog());
    },
    { timeout: 30_000, interval: 200 },
  );
}

describe('export rows (stored bytes of each revealed row)', () => {
  it('NDJSON from the stored rows is byte for byte the rows the log makes, commitments included', async () => {
    const reads = vi.spyOn(server.slice.exportRows!, 'verdictsAfter');
    const { rows } = await exported('');
    expect(reads).toHaveBeenCalled();
    reads.mockRestore();
    const expected = await fromLog();
    expect(rows).toEqual(expected);
    const parsed = rows.map((l) => JSON.parse(l));
    // The fixture holds all three kinds: commitments, revealed unlabelled, revealed labelled.
    const commitments = parsed.filter((r) => !r.revealed);
    expect(commitments.length).toBeGreaterThan(0);
    for (const r of commitments) {
      expect(r.call).toBeNull();
      expect(r.inputs_json).toBeNull();
      expect(r.outcome_id).toBeNull();
    }
    expect(parsed.some((r) => r.revealed && r.outcome_id === null)).toBe(true);
    expect(parsed.some((r) => r.revealed && r.outcome_id !== null)).toBe(true);
  });

  it('an NDJSON scan reads each page of stored rows into the same memory, its lines the log rows byte for byte', async () => {
    const lines: string[] = [];
    const places = new Set<string>();
    const buffers: ArrayBufferLike[] = [];
    const scan = scanHistory(
      store,
      {
        filter: {},
        after: 0,
        limit: 1e9,
        now: server.slice.now,
        stored: server.slice.exportRows!,
        pageSize: 16,
      },
      new ScanProgress(0, null),
      historyRow,
      storedLines,
    );
    let batches = 0;
    for await (const rows of scan) {
      batches++;
      const first = rows[0];
      // The first page is read into the shared slabs (a request of a few rows reads no more).
      if (batches > 1 && first instanceof StoredLine) {
        if (!buffers.includes(first.verdict.buffer)) buffers.push(first.verdict.buffer);
        places.add(`${buffers.indexOf(first.verdict.buffer)}:${first.verdict.byteOffset}`);
      }
      // Written before the next page is asked for, as the NDJSON writer does.
      for (const row of rows)
        lines.push(
          row instanceof StoredLine ? row.toBuffer().subarray(0, -1).toString('utf8') : JSON.stringify(row),
        );
    }
    expect(batches).toBeGreaterThan(3);
    expect(lines).toEqual(await fromLog());
    // Every later page's first record at the same place of the same memory: no fresh bytes per page.
    expect([...places]).toEqual(['0:0']);
  });

  it('Parquet from the stored rows holds the values the log gives, commitments and labels included', async () => {
    const reads = vi.spyOn(server.slice.exportRows!, 'verdictsAfter');
    const rows = await parquetExported('');
    expect(reads).toHaveBeenCalled();
    reads.mockRestore();
    const expected = await parquetFromLog();
    expect(rows).toEqual(expected);
    expect(rows.some((r) => r.revealed === false && r.call === null && r.inputs_json === null)).toBe(true);
    expect(rows.some((r) => r.revealed === true && r.outcome_id !== null && r.net_centi_bps !== null)).toBe(
      true,
    );
    expect(rows.some((r) => r.revealed === true && r.call === 'HOLD' && r.outcome_id !== null)).toBe(true);
    for (const q of ['?call=BUY', '?coin=SOL&limit=9']) {
      const filter: HistoryFilter = q.includes('BUY') ? { call: 'BUY' } : { coin: 'SOL' };
      const got = await parquetExported(q);
      const want = (await parquetFromLog(filter)).slice(0, q.includes('limit') ? 9 : undefined);
      expect(got, q).toEqual(want);
    }
  });

  it('a process that knows no template yet reads them from the store: the same NDJSON and Parquet', async () => {
    const ndjson = (await exported('')).rows;
    const parquet = await parquetExported('');
    const ids = new Set(
      server.slice
        .exportRows!.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6)
        .map((e) => templateIdOf(e.value)),
    );
    expect(ids.size).toBeGreaterThan(0);
    // As a process started on this directory: every template it needs comes from the verdicts database.
    forgetTemplates();
    for (const id of ids) expect(knowsTemplate(id)).toBe(false);
    expect((await exported('')).rows).toEqual(ndjson);
    for (const id of ids) expect(knowsTemplate(id)).toBe(true);
    forgetTemplates();
    expect(await parquetExported('')).toEqual(parquet);
    expect(ndjson).toEqual(await fromLog());
  });

  it('rows the store does not hold yet (stopped, or past its checkpoint) come from the log, the same in every format', async () => {
    const rows = server.slice.exportRows!;
    await rows.stop();
    try {
      expect(await parquetExported('')).toEqual(await parquetFromLog());
      expect((await exported('')).rows).toEqual(await fromLog());
    } finally {
      await rows.start();
    }
    await rows.waitFor(await store.headPosition());
  });

  it('waits briefly for stored rows a little behind the head the scan began at, rather than reading the log', async () => {
    const real = server.slice.exportRows!;
    let behind = true;
    const reads = vi.fn((after: number, upTo: number, limit: number) =>
      real.verdictsAfter(after, upTo, limit),
    );
    const lagging: StoredRows = {
      get usable() {
        return real.usable;
      },
      get checkpoint() {
        return behind ? real.checkpoint - 1 : real.checkpoint;
      },
      get checkpointId() {
        return real.checkpointId;
      },
      verdictsAfter: reads,
      outcome: (id) => real.outcome(id),
      waitFor: async (position, timeoutMs) => {
        behind = false;
        await real.waitFor(position, timeoutMs);
      },
    };
    const lines: string[] = [];
    const scan = scanHistory(
      store,
      { filter: {}, after: 0, limit: 1e9, now: server.slice.now, stored: lagging },
      new ScanProgress(0, null),
      historyRow,
      storedLines,
    );
    for await (const rows of scan) {
      for (const row of rows) {
        lines.push(
          row instanceof StoredLine ? row.toBuffer().subarray(0, -1).toString('utf8') : JSON.stringify(row),
        );
      }
    }
    expect(reads).toHaveBeenCalled();
    expect(lines).toEqual(await fromLog());
  });

  it('applies every filter as the log scan does (call only on revealed rows)', async () => {
    const first = JSON.parse((await fromLog())[0]!);
    const cases: [string, Record<string, unknown>][] = [
      ['?call=BUY', { call: 'BUY' }],
      ['?call=HOLD', { call: 'HOLD' }],
      ['?coin=SOL', { coin: 'SOL' }],
      ['?timeframe=1h&exchange=BINANCE', { timeframe: '1h', exchange: 'BINANCE' }],
      [
        `?from=${first.candle_close_time + 10 * 3_600_000}`,
        { from: first.candle_close_time + 10 * 3_600_000 },
      ],
      [`?to=${first.candle_close_time + 5 * 3_600_000}`, { to: first.candle_close_time + 5 * 3_600_000 }],
    ];
    for (const [query, filter] of cases) {
      const { rows } = await exported(query);
      expect(rows, query).toEqual(await fromLog(filter));
    }
  });

  it('a commitment stays a commitment even when its stored row is read: the clock decides, not the store', async () => {
    const stored = server.slice.exportRows!.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6);
    const now = server.slice.now();
    const young = stored.filter((e) => now < revealAtOf(e.value));
    expect(young.length).toBeGreaterThan(0);
    const { rows } = await exported('');
    const byPosition = new Map(rows.map((l) => [JSON.parse(l).position as number, JSON.parse(l)]));
    for (const e of young) {
      const row = byPosition.get(e.key);
      expect(row?.revealed).toBe(false);
      expect(row?.confidence).toBeNull();
      expect(row?.price).toBeNull();
    }
  });

  it('never shows a stored row of an unrevealed verdict, whatever the filter', async () => {
    const all = (await exported('')).rows.map((l) => JSON.parse(l));
    const target = all.find((r) => !r.revealed)!;
    const [event] = await store.readStream(target.stream, { fromRevision: target.revision, maxCount: 1 });
    const secret = event!.data as { call: string; candleCloseTime: number };
    const close = secret.candleCloseTime;
    const queries = [
      `?call=${secret.call}`,
      `?exchange=${target.exchange}&coin=${target.coin}&timeframe=${target.timeframe}&call=${secret.call}`,
      `?from=${close}&to=${close}`,
      `?limit=1&from=${close}`,
    ];
    for (const q of queries) {
      const rows = (await exported(q)).rows.map((l) => JSON.parse(l));
      const hit = rows.find((r) => r.verdict_id === target.verdict_id);
      expect(hit, q).toBeDefined();
      for (const f of ['call', 'confidence', 'score', 'price', 'inputs_json', 'outcome_id', 'return_6'])
        expect(hit[f], `${q} ${f}`).toBeNull();
    }
  });

  it('resumes by cursor across pages of stored rows: every row exactly once', async () => {
    const all = (await exported('')).rows;
    const seen: string[] = [];
    let cursor = '';
    for (let turn = 0; turn < 100; turn++) {
      const { rows, trailer } = await exported(`?limit=7${cursor ? `&after=${cursor}` : ''}`);
      seen.push(...rows);
      cursor = trailer.cursor;
      if (rows.length < 7) break;
    }
    expect(seen).toEqual(all);
  });

  it('is rebuilt from the log to the same bytes', async () => {
    const rows = server.slice.exportRows!;
    const before = rows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6);
    const outcomes = before.map((e) => rows.outcome(fieldOf(e.value, F_ID)) ?? null);
    const exportBefore = (await exported('')).rows;
    // A damaged entry: only a fold from position 0 puts it right again.
    const raw = openVerdictsDb(store.root);
    const damaged = before[before.length - 1]!;
    // Its last text's last digit changed (a number of its inputs or row).
    const wrong = Buffer.from(damaged.value);
    wrong[wrong.length - 1] = wrong[wrong.length - 1] === 49 ? 50 : 49;
    raw.putSync(damaged.key, wrong);
    expect(rows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6)).not.toEqual(before);
    await rows.rebuild();
    await rows.waitFor(await store.headPosition(), HANG_MS);
    const after = rows.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6);
    expect(after).toEqual(before);
    expect(after.map((e) => rows.outcome(fieldOf(e.value, F_ID)) ?? null)).toEqual(outcomes);
    expect((await exported('')).rows).toEqual(exportBefore);
  });

  it('upgrades a directory that holds older stores (versions 1 to 5): the old databases are emptied, the rows rebuilt to the same bytes', async () => {
    const current = server.slice.exportRows!;
    const before = current.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6);
    const outcomes = before.map((e) => current.outcome(fieldOf(e.value, F_ID)) ?? null);
    // What versions 1 to 5 left: each its meta at key 0, a row per verdict and an outcome, and no
    // version 6 store (its meta removed, as on a directory that never ran version 6).
    const old = OLD_DBS.map((name) => store.root.openDB({ name, encoding: 'binary' }));
    expect(OLD_DBS).toEqual([
      'history-export-verdicts',
      'history-export-outcomes',
      'history-export-verdicts-2',
      'history-export-outcomes-2',
      'history-export-verdicts-3',
      'history-export-outcomes-3',
      'history-export-verdicts-4',
      'history-export-outcomes-4',
      'history-export-verdicts-5',
      'history-export-outcomes-5',
    ]);
    const [
      oldVerdicts,
      oldOutcomes,
      v2Verdicts,
      v2Outcomes,
      v3Verdicts,
      v3Outcomes,
      v4Verdicts,
      v4Outcomes,
      v5Verdicts,
      v5Outcomes,
    ] = old;
    oldVerdicts!.putSync(0, Buffer.from(JSON.stringify([1, 'old-generation', 10, null])));
    v2Verdicts!.putSync(0, Buffer.from(JSON.stringify([2, 'v2-generation', 10, null])));
    v3Verdicts!.putSync(0, Buffer.from(JSON.stringify([3, 'v3-generation', 10, null])));
    v4Verdicts!.putSync(0, Buffer.from(JSON.stringify([4, 'v4-generation', 10, null])));
    v5Verdicts!.putSync(0, Buffer.from(JSON.stringify([5, 'v5-generation', 10, null])));
    for (const e of before) {
      oldVerdicts!.putSync(e.key, e.value);
      v2Verdicts!.putSync(e.key, e.value);
      v3Verdicts!.putSync(e.key, e.value);
      v4Verdicts!.putSync(e.key, e.value);
      v5Verdicts!.putSync(e.key, e.value);
    }
    oldOutcomes!.putSync('some-verdict', Buffer.from('{}'));
    v2Outcomes!.putSync('some-verdict', Buffer.from('{}'));
    v3Outcomes!.putSync('some-verdict', Buffer.from('{}'));
    v4Outcomes!.putSync('some-verdict', Buffer.from('{}'));
    v5Outcomes!.putSync('some-verdict', Buffer.from('{}'));
    openVerdictsDb(store.root).removeSync(0);
    const entries = (db: { getStats(): unknown }) => (db.getStats() as { entryCount: number }).entryCount;
    expect(entries(oldVerdicts!)).toBe(before.length + 1);
    expect(entries(v2Verdicts!)).toBe(before.length + 1);
    expect(entries(v3Verdicts!)).toBe(before.length + 1);
    expect(entries(v4Verdicts!)).toBe(before.length + 1);
    expect(entries(v5Verdicts!)).toBe(before.length + 1);

    const upgraded = new ExportRowStore(store, store.root);
    await upgraded.start();
    await upgraded.waitFor(await store.headPosition(), HANG_MS);
    expect(upgraded.verdictsAfter(0, Number.MAX_SAFE_INTEGER, 1e6)).toEqual(before);
    expect(before.map((e) => upgraded.outcome(fieldOf(e.value, F_ID)) ?? null)).toEqual(outcomes);
    for (const db of old) expect(entries(db)).toBe(0);
    // The rows and the meta (the head templates are kept below key 0).
    expect([...openVerdictsDb(store.root).getKeys({ start: 0 })]).toHaveLength(before.length + 1);
    expect(entries(store.root.openDB({ name: VERDICTS_DB }))).toBeGreaterThan(before.length + 1);
    await upgraded.stop();
  });

  it('a process whose checkpoint went stale (the store was rebuilt elsewhere) starts again from the stored one', async () => {
    const ours = server.slice.exportRows!;
    const other = new ExportRowStore(store, store.root);
    await other.start();
    await other.waitFor(await store.headPosition(), 30_000);
    // Another process rebuilds: entries cleared, a new generation, checkpoint 0.
    await other.rebuild();
    await other.stop();
    // Our next write finds the other generation and does not stamp its old checkpoint on it.
    const headBefore = await store.headPosition();
    fx.feed.clock.advance(3_600_000);
    await fx.engine.getTradeCall({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' });
    const head = await store.headPosition();
    expect(head).toBeGreaterThan(headBefore);
    await exportMatchesLog(ours);
  });

  it('a template stored with other bytes under its id stops the fold rather than being used', async () => {
    const ours = server.slice.exportRows!;
    await ours.stop();
    const raw = openVerdictsDb(store.root);
    // Templates are below key 0, the meta.
    const templates = [...raw.getRange({ start: -Number.MAX_SAFE_INTEGER, end: 0 })].map(
      ({ key, value }) => [key, Buffer.from(value)] as const,
    );
    expect(templates.length).toBeGreaterThan(0);
    for (const [k, bytes] of templates) raw.putSync(k, Buffer.concat([bytes, Buffer.from(' ')]));
    // Another process on the directory, which has not met the templates in the store yet.
    const other = new ExportRowStore(store, store.root);
    await other.start();
    fx.feed.clock.advance(3_600_000);
    await fx.engine.getTradeCall({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' });
    const head = await store.headPosition();
    // A bound against a hang, not a figure (vi.waitFor's own default is 1 s).
    await vi.waitFor(() => expect(other.error?.message).toMatch(/two templates share an id/), {
      timeout: 60_000,
    });
    expect(other.checkpoint).toBeLessThan(head);
    await other.stop();
    for (const [k, bytes] of templates) raw.putSync(k, bytes);
    await ours.start();
    await exportMatchesLog(ours);
  });
});
