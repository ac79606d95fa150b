/**
 * LMDB event store against raw `lmdb` doing the same I/O, measured in one run:
 *   (a) single-event appends with an expected revision vs one raw put + flush each; rate, and the
 *       process's CPU per append (LMDB's write thread included)
 *   (b) batches of 100 events vs 100 raw puts in one transaction + flush
 *   (c) read-all over N events vs a raw getRange over the same entries
 *   (d) rebuild of a counting projection over the same N events (subscription + fold + snapshots)
 *       vs the same raw getRange; the floor is 200,000 events/s
 *   (e) into the store of (c), whose id index holds N random ids: commits of 30 single-event
 *       appends whose ids the store chooses (time-ordered, newEventId) vs the same with random
 *       caller ids (version 4); events/s and the process's CPU per event (LMDB's write thread
 *       included), in alternated rounds. No target: it shows what the id order costs the indexes.
 * Raw puts store the very records the store wrote (same msgpack bytes), and both sides wait
 * for the disk flush, so the ratio is the cost of the store's checks and indexes.
 *
 *   npx tsx bench/event-store.bench.ts [--read-events=1000000]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { type Database, open } from 'lmdb';
import { EVENT_ENCODING, type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import {
  atLeast,
  countingProjection,
  f0,
  f2,
  fmtSpread,
  ownCpuMs,
  printColumns,
  recordTarget,
  sampleEvent,
  spread,
  timedReadAll,
  timedSingleAppends,
  whenMain,
} from './harness.ts';

export interface EventStoreBenchOptions {
  singles?: number;
  batches?: number;
  batchSize?: number;
  readEvents?: number;
  print?: boolean;
}

export interface BenchRow {
  case: string;
  store: number;
  raw: number;
  unit: string;
  ratio: number;
  target?: number;
  /** Absolute floor for the store's rate, where the issue sets one. */
  minRate?: number;
  /** The process's CPU per unit (LMDB's write thread included), where the row measures it. */
  cpuUs?: { store: number; raw: number };
}

export async function run(options: EventStoreBenchOptions = {}): Promise<BenchRow[]> {
  const singles = options.singles ?? 2_000;
  const batches = options.batches ?? 200;
  const batchSize = options.batchSize ?? 100;
  const readEvents = options.readEvents ?? 1_000_000;
  const dir = mkdtempSync(join(tmpdir(), 'bench-event-store-'));
  try {
    const rows: BenchRow[] = [];
    rows.push(await singleAppends(join(dir, 'single'), singles));
    rows.push(await batchAppends(join(dir, 'batch'), batches, batchSize));
    const { rows: readRows, idOrder } = await readAllAndRebuild(join(dir, 'read'), readEvents);
    rows.push(...readRows);
    if (options.print ?? true) {
      printTable(rows);
      printIdOrder(idOrder, readEvents);
    }
    return rows;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function singleAppends(path: string, count: number): Promise<BenchRow> {
  const store = await openLmdbEventStore({ path: join(path, 'store') });
  const storeCpu = ownCpuMs();
  const storeMs = await timedSingleAppends(store, count, 'bench');
  const storeCpuMs = ownCpuMs() - storeCpu;
  const records = await store.readAll();
  await store.close();

  const raw = openRaw(join(path, 'raw'));
  const rawCpu = ownCpuMs();
  const rawStart = performance.now();
  for (const record of records) {
    await raw.db.put(record.position, record);
    await raw.env.flushed;
  }
  const rawMs = performance.now() - rawStart;
  const rawCpuMs = ownCpuMs() - rawCpu;
  await raw.env.close();
  return {
    ...row(`(a) single appends, expected revision (${count})`, count, storeMs, rawMs, 'appends/s'),
    cpuUs: { store: (storeCpuMs * 1000) / count, raw: (rawCpuMs * 1000) / count },
  };
}

async function batchAppends(path: string, count: number, size: number): Promise<BenchRow> {
  const store = await openLmdbEventStore({ path: join(path, 'store') });
  let revision: number | null = null;
  const storeStart = performance.now();
  for (let b = 0; b < count; b++) {
    const events = Array.from({ length: size }, (_, i) => sampleEvent(b * size + i));
    const result = await store.append('bench-batches', events, { expectedRevision: revision ?? 'no_stream' });
    revision = result.nextRevision;
  }
  const storeMs = performance.now() - storeStart;
  const records = await store.readAll();
  await store.close();

  const raw = openRaw(join(path, 'raw'));
  const rawStart = performance.now();
  for (let b = 0; b < count; b++) {
    // Puts issued in one event turn share one lmdb transaction, like one store append.
    const writes = records.slice(b * size, (b + 1) * size).map((r) => raw.db.put(r.position, r));
    await Promise.all(writes);
    await raw.env.flushed;
  }
  const rawMs = performance.now() - rawStart;
  await raw.env.close();
  return {
    ...row(`(b) batches of ${size} (${count} batches)`, count * size, storeMs, rawMs, 'events/s'),
    target: 0.5,
  };
}

async function readAllAndRebuild(
  path: string,
  total: number,
): Promise<{ rows: BenchRow[]; idOrder: IdOrderRound[] }> {
  const store = await openLmdbEventStore({ path });
  const chunk = 10_000;
  for (let written = 0; written < total; written += chunk) {
    const events = Array.from({ length: Math.min(chunk, total - written) }, (_, i) =>
      sampleEvent(written + i),
    );
    await store.append(`bench-read-${written % 97}`, events);
  }
  // Pages the size a catch-up subscription reads (512) keep few events alive at once.
  const page = 1_000;
  const storeMs = await timedReadAll(store, total, page);

  // A rebuild as the service runs it: catch-up subscription, fold, snapshots into the same env.
  const runner = new ProjectionRunner(store, store.projectionStore(), countingProjection, {
    snapshotEvery: 100_000,
  });
  const rebuildStart = performance.now();
  await runner.start();
  await runner.waitFor(total, 600_000);
  const rebuildMs = performance.now() - rebuildStart;
  await runner.stop();
  if (runner.state !== total) throw new Error(`rebuild counted ${runner.state} of ${total} events`);
  await store.close();

  const raw = openRaw(path);
  let rawSeen = 0;
  const rawStart = performance.now();
  // The position is the entry's key: a format-2 record does not repeat it (lmdb-codec.ts).
  for (const { key, value } of raw.db.getRange({ start: 1 })) {
    if (key > 0 && value !== undefined) rawSeen++;
  }
  const rawMs = performance.now() - rawStart;
  await raw.env.close();
  if (rawSeen !== total) throw new Error(`raw read ${rawSeen} of ${total} events`);
  // Last: its appends would change what (c) and (d) count.
  const again = await openLmdbEventStore({ path });
  let idOrder: IdOrderRound[];
  try {
    idOrder = await idOrderRounds(again);
  } finally {
    await again.close();
  }
  const rows = [
    row(
      `(c) read all ${total.toLocaleString('en')} events, pages of ${page}`,
      total,
      storeMs,
      rawMs,
      'events/s',
    ),
    {
      ...row(
        `(d) rebuild a counting projection over ${total.toLocaleString('en')}`,
        total,
        rebuildMs,
        rawMs,
        'events/s',
      ),
      minRate: 200_000,
    },
  ];
  return { rows, idOrder };
}

/** One side's round of (e): every round appends ID_ORDER_COMMITS × ID_ORDER_GROUP events. */
interface IdOrderRound {
  ids: 'store' | 'random';
  ms: number;
  cpuMs: number;
}

/** Appends made in one turn share one commit, as a turn's keyed calls' debits do (one per subject). */
const ID_ORDER_GROUP = 30;
const ID_ORDER_COMMITS = 100;
const ID_ORDER_ROUNDS = 4;

/** (e): alternated rounds of commits with store-chosen ids and with random caller ids. */
async function idOrderRounds(store: LmdbEventStore): Promise<IdOrderRound[]> {
  const rounds: IdOrderRound[] = [];
  // Round -1 is a warm-up of both sides (the reopened store's first commits and reads), not counted.
  for (let round = -1; round < ID_ORDER_ROUNDS; round++) {
    const order: Array<'store' | 'random'> = round % 2 === 0 ? ['random', 'store'] : ['store', 'random'];
    for (const ids of order) {
      const cpuStart = ownCpuMs();
      const start = performance.now();
      for (let c = 0; c < ID_ORDER_COMMITS; c++) {
        await Promise.all(
          Array.from({ length: ID_ORDER_GROUP }, (_, k) => {
            const { id, ...rest } = sampleEvent(c * ID_ORDER_GROUP + k);
            return store.append(`bench-ids-${k}`, [ids === 'random' ? { ...rest, id } : rest]);
          }),
        );
      }
      const ms = performance.now() - start;
      const cpuMs = ownCpuMs() - cpuStart;
      if (round >= 0) rounds.push({ ids, ms, cpuMs });
    }
  }
  return rounds;
}

function printIdOrder(rounds: IdOrderRound[], total: number): void {
  const side = (ids: 'store' | 'random') => {
    const mine = rounds.filter((r) => r.ids === ids);
    const events = ID_ORDER_COMMITS * ID_ORDER_GROUP;
    return {
      rate: spread(mine.map((r) => (events / r.ms) * 1000)),
      cpuUs: spread(mine.map((r) => (r.cpuMs * 1000) / events)),
    };
  };
  const store = side('store');
  const random = side('random');
  console.log(
    `(e) ${ID_ORDER_COMMITS} commits of ${ID_ORDER_GROUP} single-event appends into the store of (c) (its id index: ${total.toLocaleString('en')} random ids), ${ID_ORDER_ROUNDS} alternated rounds a side:`,
  );
  console.log(
    `    ids the store chooses (time-ordered): ${fmtSpread(store.rate, f0)} events/s, process CPU ${fmtSpread(store.cpuUs, f0)} µs per event`,
  );
  console.log(
    `    random caller ids (version 4):        ${fmtSpread(random.rate, f0)} events/s, process CPU ${fmtSpread(random.cpuUs, f0)} µs per event`,
  );
  console.log(
    `    store ids / random ids: rate ${f2(store.rate.median / random.rate.median)}, CPU per event ${f2(store.cpuUs.median / random.cpuUs.median)} (no target)`,
  );
}

function openRaw(path: string): { env: ReturnType<typeof open>; db: Database<RecordedEvent, number> } {
  const env = open({ path, noSubdir: false, maxDbs: 4 });
  // The store's own encoding (msgpack records with shared structures), so both sides write and
  // read the same bytes.
  return { env, db: env.openDB<RecordedEvent, number>({ name: 'events', ...EVENT_ENCODING }) };
}

function row(name: string, count: number, storeMs: number, rawMs: number, unit: string): BenchRow {
  const store = (count / storeMs) * 1000;
  const raw = (count / rawMs) * 1000;
  return { case: name, store, raw, unit, ratio: store / raw };
}

function printTable(rows: BenchRow[]): void {
  const fmt = (n: number) => Math.round(n).toLocaleString('en');
  const lines = rows.map((r) => [
    r.case,
    fmt(r.store),
    fmt(r.raw),
    r.unit,
    r.ratio.toFixed(2),
    r.target !== undefined
      ? `ratio >= ${r.target} ${r.ratio >= r.target ? 'ok' : 'MISSED'}`
      : r.minRate !== undefined
        ? `>= ${fmt(r.minRate)}/s ${r.store >= r.minRate ? 'ok' : 'MISSED'}`
        : '',
  ]);
  printColumns(['case', 'lmdb store', 'raw lmdb', 'unit', 'store/raw', 'target'], lines);
  for (const r of rows) {
    if (r.cpuUs === undefined) continue;
    console.log(
      `${r.case.slice(0, 3)} process CPU per append (LMDB's write thread included): store ${f0(r.cpuUs.store)} µs, raw ${f0(r.cpuUs.raw)} µs (${f2(r.cpuUs.store / r.cpuUs.raw)}×), load ${f2(loadavg()[0] ?? 0)}`,
    );
  }
  for (const r of rows) {
    const detail = `${fmt(r.store)} vs ${fmt(r.raw)} ${r.unit}`;
    if (r.target !== undefined) {
      console.log(
        recordTarget({
          bench: 'event-store',
          measure: `${r.case}: store/raw lmdb`,
          figure: r.ratio,
          target: atLeast(r.target),
          detail,
        }),
      );
    } else if (r.minRate !== undefined) {
      console.log(
        recordTarget({
          bench: 'event-store',
          measure: `${r.case}: ${r.unit}`,
          figure: Math.round(r.store),
          target: atLeast(r.minRate),
          detail,
        }),
      );
    }
  }
}

await whenMain(import.meta.url, { 'read-events': 'number' }, run);
