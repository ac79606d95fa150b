/**
 * PostgreSQL event store against the same driver (`pg`) doing bare SQL on a table of the same
 * shape (`CREATE TABLE ... (LIKE events INCLUDING ALL)`, so the same indexes), in one run:
 *   (a) single-event appends with an expected revision vs a bare INSERT loop, one row each
 *   (b) batches of 100 vs a bare multi-row INSERT of the same 100 rows
 *   (c) catch-up read of N events in pages of 1000 vs one bare SELECT scan of the same rows
 *   (d) rebuild of a counting projection from PostgreSQL beside the same rebuild from LMDB
 *   (e) 16 concurrent writers, each appending single events to its own streams with expected
 *       revisions, over a pool of 16, vs 16 concurrent bare single-row INSERT loops over 16
 *       connections (each INSERT its own fsync'd commit, as an append is)
 *   (f) (e) with appends answered once committed, the flush following (the lever for quota
 *       debits and delivery bookkeeping), against the same bare baseline
 *   (g) the id index's bytes per entry: appends of time-ordered ids (UUID version 7, what the
 *       service chooses) into a store whose index already holds random ones, against more random
 *       ids into the same start; no target (from schema version 4 the unique index is keyed first
 *       by the id's version digit, as LMDB's is by a prefix; before it, 106 against 79 bytes)
 * Targets: (a), (b) and (c) at least 0.5 of the bare rate, (e) at least 0.7. (d) has no target;
 * it shows what choosing PostgreSQL over LMDB costs a rebuild.
 *
 *   npx tsx bench/postgres.bench.ts [--read-events=100000] [--index-events=200000]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { openPostgresEventStore, type PostgresEventStore } from '../adapters/event-store/postgres.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import { newEventId } from '../contracts/event-id.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import {
  atLeast,
  countingProjection,
  printColumns,
  recordTarget,
  SINGLE_APPEND_STREAMS,
  sampleEvent,
  timedReadAll,
  timedSingleAppends,
  whenMain,
} from './harness.ts';

const URL = process.env.POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

interface Row {
  case: string;
  store: number;
  baseline: number;
  baselineName: string;
  unit: string;
  ratio: number;
  target?: number;
}

export async function run(
  options: {
    singles?: number;
    batches?: number;
    readEvents?: number;
    writerAppends?: number;
    indexEvents?: number;
  } = {},
) {
  const singles = options.singles ?? 500;
  const batches = options.batches ?? 100;
  const readEvents = options.readEvents ?? 100_000;
  const schema = `bench_${Date.now().toString(36)}_${randomUUID().slice(0, 8)}`;
  const store = await openPostgresEventStore({ url: URL, schema, poolSize: 2 });
  const dir = mkdtempSync(join(tmpdir(), 'bench-pg-'));
  try {
    await store.pool.query(`CREATE TABLE "${schema}".bare (LIKE "${schema}".events INCLUDING ALL)`);
    const rows: Row[] = [];
    rows.push(await singleAppends(store, schema, singles));
    rows.push(await batchAppends(store, schema, batches, 100));
    rows.push(await concurrentWriters(schema, options.writerAppends ?? 300, 16, 'flushed'));
    rows.push(await concurrentWriters(schema, options.writerAppends ?? 300, 16, 'committed'));
    rows.push(...(await readAndRebuild(store, schema, readEvents, dir)));
    rows.push(await idIndexBytes(options.indexEvents ?? 200_000));
    printTable(rows);
    return rows;
  } finally {
    await store.pool.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => undefined);
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const BARE_INSERT = (schema: string) =>
  `INSERT INTO "${schema}".bare (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
   SELECT u.position, u.id, u.stream, u.revision, u.type, now(), u.id, NULL, u.data
   FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::json[])
     AS u(position, id, stream, revision, type, data)`;

async function singleAppends(store: PostgresEventStore, schema: string, count: number): Promise<Row> {
  const storeMs = await timedSingleAppends(store, count, 'single');

  const bareStart = performance.now();
  for (let i = 0; i < count; i++) {
    const e = sampleEvent(i);
    await store.pool.query({
      name: 'bare_single',
      text: `INSERT INTO "${schema}".bare (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
             VALUES ($1, $2, $3, $4, $5, now(), $2, NULL, $6::json)`,
      values: [
        1_000_000_000 + i,
        e.id,
        `single-${i % SINGLE_APPEND_STREAMS}`,
        Math.floor(i / SINGLE_APPEND_STREAMS),
        e.type,
        JSON.stringify(e.data),
      ],
    });
  }
  const bareMs = performance.now() - bareStart;
  return {
    ...row(`(a) single appends, expected revision (${count})`, count, storeMs, bareMs, 'appends/s'),
    target: 0.5,
  };
}

async function batchAppends(
  store: PostgresEventStore,
  schema: string,
  count: number,
  size: number,
): Promise<Row> {
  let revision: number | null = null;
  const start = performance.now();
  for (let b = 0; b < count; b++) {
    const events = Array.from({ length: size }, (_, i) => sampleEvent(b * size + i));
    const result = await store.append('batches', events, { expectedRevision: revision ?? 'no_stream' });
    revision = result.nextRevision;
  }
  const storeMs = performance.now() - start;

  const bareStart = performance.now();
  for (let b = 0; b < count; b++) {
    const events = Array.from({ length: size }, (_, i) => sampleEvent(b * size + i));
    await store.pool.query({
      name: 'bare_batch',
      text: BARE_INSERT(schema),
      values: [
        events.map((_, i) => 2_000_000_000 + b * size + i),
        events.map((e) => e.id),
        events.map(() => 'batches'),
        events.map((_, i) => b * size + i),
        events.map((e) => e.type),
        events.map((e) => JSON.stringify(e.data)),
      ],
    });
  }
  const bareMs = performance.now() - bareStart;
  return {
    ...row(`(b) batches of ${size} (${count} batches)`, count * size, storeMs, bareMs, 'events/s'),
    target: 0.5,
  };
}

/**
 * Writers in parallel: the store's appends and the bare INSERTs run in alternating rounds (three
 * each) so drift on a shared machine hits both; the figure is the median round of each.
 */
async function concurrentWriters(
  schema: string,
  perWriter: number,
  writers: number,
  durability: 'flushed' | 'committed',
): Promise<Row> {
  const store = await openPostgresEventStore({ url: URL, schema, poolSize: writers });
  const bare = new pg.Pool({ connectionString: URL, max: writers });
  const storeRates: number[] = [];
  const bareRates: number[] = [];
  try {
    // Both open their connections before the clock starts.
    await Promise.all(Array.from({ length: writers }, () => bare.query('SELECT 1')));
    for (let round = 0; round < 3; round++) {
      const start = performance.now();
      await Promise.all(
        Array.from({ length: writers }, async (_, w) => {
          let revision: number | null = null;
          const stream = `writer-${durability}-${round}-${w}`;
          for (let i = 0; i < perWriter; i++) {
            const result = await store.append(stream, [sampleEvent(i)], {
              expectedRevision: revision ?? 'no_stream',
              durability,
            });
            revision = result.nextRevision;
          }
        }),
      );
      storeRates.push((writers * perWriter * 1000) / (performance.now() - start));

      const bareStart = performance.now();
      await Promise.all(
        Array.from({ length: writers }, async (_, w) => {
          for (let i = 0; i < perWriter; i++) {
            const e = sampleEvent(i);
            await bare.query({
              name: 'bare_writer',
              text: `INSERT INTO "${schema}".bare (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
                     VALUES ($1, $2, $3, $4, $5, now(), $2, NULL, $6::json)`,
              values: [
                (durability === 'flushed' ? 3e9 : 4e9) + round * 1_000_000 + w * perWriter + i,
                e.id,
                `bare-writer-${durability}-${round}-${w}`,
                i,
                e.type,
                JSON.stringify(e.data),
              ],
            });
          }
        }),
      );
      bareRates.push((writers * perWriter * 1000) / (performance.now() - bareStart));
    }
  } finally {
    await store.close();
    await bare.end();
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const storeRate = median(storeRates);
  const bareRate = median(bareRates);
  return {
    case:
      durability === 'flushed'
        ? `(e) ${writers} concurrent writers, single appends (${writers} x ${perWriter}, 3 rounds)`
        : '(f) the same, answered once committed (durability: committed)',
    store: storeRate,
    baseline: bareRate,
    baselineName: `bare pg, ${writers} connections`,
    unit: 'appends/s',
    ratio: storeRate / bareRate,
    ...(durability === 'flushed' ? { target: 0.7 } : {}),
  };
}

async function readAndRebuild(
  store: PostgresEventStore,
  schema: string,
  total: number,
  dir: string,
): Promise<Row[]> {
  // The read case gets a log of its own: the bare table is refilled with exactly its rows.
  await store.pool.query(`TRUNCATE "${schema}".events, "${schema}".bare`);
  const lmdb = await openLmdbEventStore({ path: join(dir, 'lmdb') });
  const chunk = 1_000;
  for (let written = 0; written < total; written += chunk) {
    const events = Array.from({ length: Math.min(chunk, total - written) }, (_, i) =>
      sampleEvent(written + i),
    );
    await store.append(`read-${written % 97}`, events);
    await lmdb.append(`read-${written % 97}`, events);
  }
  await store.pool.query(`INSERT INTO "${schema}".bare SELECT * FROM "${schema}".events`);
  await store.pool.query(`VACUUM ANALYZE "${schema}".events`);
  await store.pool.query(`VACUUM ANALYZE "${schema}".bare`);

  const page = 1_000;
  const storeMs = await timedReadAll(store, total, page);

  const bareStart = performance.now();
  const { rows } = await store.pool.query(`SELECT * FROM "${schema}".bare ORDER BY position`);
  const bareMs = performance.now() - bareStart;
  if (rows.length !== total) throw new Error(`bare scan read ${rows.length} of ${total} rows`);

  const pgRebuild = await rebuild(store, store.projectionStore(), total);
  const lmdbRebuild = await rebuild(lmdb, lmdb.projectionStore(), total);
  await lmdb.close();
  return [
    {
      ...row(
        `(c) catch-up read ${total.toLocaleString('en')} events, pages of ${page}`,
        total,
        storeMs,
        bareMs,
        'events/s',
      ),
      target: 0.5,
    },
    {
      ...row(
        `(d) projection rebuild over ${total.toLocaleString('en')}`,
        total,
        pgRebuild,
        lmdbRebuild,
        'events/s',
      ),
      baselineName: 'lmdb rebuild',
    },
  ];
}

async function rebuild(store: EventStore, snapshots: ProjectionStore, total: number): Promise<number> {
  const runner = new ProjectionRunner(store, snapshots, countingProjection, { snapshotEvery: 100_000 });
  const start = performance.now();
  const head = await store.headPosition();
  await runner.start();
  await runner.waitFor(head, 600_000);
  const ms = performance.now() - start;
  await runner.stop();
  if (runner.state !== total) throw new Error(`rebuild counted ${runner.state} of ${total} events`);
  return ms;
}

/**
 * (g): in two fresh schemas, `count` events with random ids each, then `count / 2` more: with
 * time-ordered ids in one, random ids in the other; the growth of the unique index on `id` per id
 * of that second stretch. The service's index is mostly random ids (verdicts, outcomes and
 * deliveries take ids derived from their content) with its own time-ordered ones (debit records,
 * delivery attempts) arriving among them.
 */
async function idIndexBytes(count: number): Promise<Row> {
  const perEntry = async (ordered: boolean): Promise<number> => {
    const schema = `bench_ids_${Date.now().toString(36)}_${randomUUID().slice(0, 8)}`;
    const store = await openPostgresEventStore({ url: URL, schema, poolSize: 2 });
    const indexBytes = async () => {
      const { rows } = await store.pool.query<{ bytes: string }>(
        `SELECT pg_relation_size(i.indexrelid)::text AS bytes FROM pg_index i
         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
         WHERE i.indrelid = $1::regclass AND i.indisunique AND a.attname = 'id'`,
        [`"${schema}".events`],
      );
      if (rows.length !== 1) throw new Error(`no single unique index over ${schema}.events (id)`);
      return Number(rows[0]!.bytes);
    };
    const append = async (n: number, from: number, id: () => string) => {
      for (let done = 0; done < n; done += 100) {
        const events = Array.from({ length: Math.min(100, n - done) }, (_, i) => ({
          ...sampleEvent(from + done + i),
          id: id(),
        }));
        await store.append(`ids-${(from + done) % 97}`, events);
      }
    };
    try {
      await append(count, 0, () => randomUUID());
      const before = await indexBytes();
      const tail = Math.floor(count / 2);
      await append(tail, count, ordered ? newEventId : () => randomUUID());
      return ((await indexBytes()) - before) / tail;
    } finally {
      await store.pool.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => undefined);
      await store.close();
    }
  };
  const ordered = await perEntry(true);
  const random = await perEntry(false);
  return {
    case: `(g) id index, ${Math.floor(count / 2).toLocaleString('en')} ids after ${count.toLocaleString('en')} random: time-ordered`,
    store: ordered,
    baseline: random,
    baselineName: 'random ids',
    unit: 'index bytes per id',
    ratio: ordered / random,
  };
}

function row(name: string, count: number, storeMs: number, baselineMs: number, unit: string): Row {
  const store = (count / storeMs) * 1000;
  const baseline = (count / baselineMs) * 1000;
  return { case: name, store, baseline, baselineName: 'bare pg', unit, ratio: store / baseline };
}

function printTable(rows: Row[]): void {
  const fmt = (n: number) => Math.round(n).toLocaleString('en');
  const lines = rows.map((r) => [
    r.case,
    fmt(r.store),
    `${fmt(r.baseline)} (${r.baselineName})`,
    r.unit,
    r.ratio.toFixed(2),
    r.target !== undefined ? `ratio >= ${r.target} ${r.ratio >= r.target ? 'ok' : 'MISSED'}` : '',
  ]);
  printColumns(['case', 'postgres store', 'baseline', 'unit', 'store/baseline', 'target'], lines);
  for (const r of rows) {
    if (r.target === undefined) continue;
    console.log(
      recordTarget({
        bench: 'postgres',
        measure: `${r.case}: store/${r.baselineName}`,
        figure: r.ratio,
        target: atLeast(r.target),
        detail: `${fmt(r.store)} vs ${fmt(r.baseline)} ${r.unit}`,
      }),
    );
  }
}

await whenMain(import.meta.url, { 'read-events': 'number', 'index-events': 'number' }, run);
