/**
 * PostgreSQL event store against the same driver (`pg`) doing bare SQL on a table of the same
 * shape (`CREATE TABLE ... (LIKE events INCLUDING ALL)`, so the same indexes), in one run:
 *   (a) single-event appends with an expected revision vs a bare INSERT loop, one row each, in
 *       alternating rounds; rate, and CPU per append of this process and of the backends
 *   (b) batches of 100 vs a bare multi-row INSERT of the same 100 rows
 *   (c) catch-up read of N events in pages of 1000 vs one bare SELECT scan of the same rows
 *   (d) rebuild of a counting projection from PostgreSQL beside the same rebuild from LMDB
 *   (e) 16 concurrent writers, each appending single events to its own stream with expected
 *       revisions, over a pool of 16, vs a bare batch writer: the same 16 writers grouped the same
 *       way (the same group writer, the same groups in flight), each group one bare INSERT of the
 *       same rows and one fsync'd commit; rate, and CPU per append of this process (client) and of
 *       the PostgreSQL backends (server) side by side
 *   (f) (e) with appends answered once committed, the flush following (the lever for quota
 *       debits and delivery bookkeeping), against the bare batch writer committing the same way
 *   (g) the id index's bytes per entry: appends of time-ordered ids (UUID version 7, what the
 *       service chooses) into a store whose index already holds random ones, against more random
 *       ids into the same start; no target (from schema version 4 the unique index is keyed first
 *       by the id's version digit, as LMDB's is by a prefix; before it, 106 against 79 bytes)
 * Targets: (a), (b) and (c) at least 0.5 of the bare rate; (e) at least 0.8 of the bare batch
 * writer's rate at no more than 1.5x its CPU per append (client and server together). (d) has no target;
 * it shows what choosing PostgreSQL over LMDB costs a rebuild.
 *
 *   npx tsx bench/postgres.bench.ts [--singles=500] [--single-rounds=6] [--read-events=100000]
 *     [--index-events=200000]
 *     [--writer-appends=600] [--writer-rounds=5] [--only=writers|single]
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { GroupWriter } from '../adapters/event-store/group-writer.ts';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { openPostgresEventStore, type PostgresEventStore } from '../adapters/event-store/postgres.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import { newEventId } from '../contracts/event-id.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import {
  atLeast,
  atMost,
  countingProjection,
  f0,
  f2,
  median,
  printColumns,
  processCpuMs,
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
  /** CPU µs per unit, client and server together, of the store and its baseline. */
  cpuUs?: { service: number; baseline: number };
  /** The same split: [store, baseline] µs per unit of this process and of its PostgreSQL backends. */
  cpuSplit?: { client: [number, number]; server: [number, number] };
  /** Most the store's CPU per unit may be, as a multiple of the baseline's. */
  cpuTarget?: number;
}

/** Group round trips in flight at once, the store's and the bare batch writer's alike. */
const GROUPS_IN_FLIGHT = 4;
/** Positions of the bare batch writer's rows, above every other bare row. */
let nextBarePosition = 3_000_000_000;

export async function run(
  options: {
    singles?: number;
    /** (a)'s rounds per side, after a warm-up round of each. */
    singleRounds?: number;
    batches?: number;
    readEvents?: number;
    writerAppends?: number;
    writerRounds?: number;
    indexEvents?: number;
    /** `writers`: only (e) and (f), the cases the store's write path is tuned against; `single`: only (a). */
    only?: 'writers' | 'single';
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
    if (options.only !== 'writers') {
      rows.push(await singleAppends(store, schema, singles, options.singleRounds ?? 6));
    }
    if (options.only === undefined) rows.push(await batchAppends(store, schema, batches, 100));
    const perWriter = options.writerAppends ?? 600;
    const rounds = options.writerRounds ?? 5;
    if (options.only !== 'single') {
      rows.push(await concurrentWriters(schema, perWriter, 16, rounds, 'flushed'));
      rows.push(await concurrentWriters(schema, perWriter, 16, rounds, 'committed'));
    }
    if (options.only === undefined) {
      rows.push(...(await readAndRebuild(store, schema, readEvents, dir)));
      rows.push(await idIndexBytes(options.indexEvents ?? 200_000));
    }
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

/**
 * (a): rounds of `count` single appends, the store's and the bare INSERTs' alternating (each side's
 * first round a warm-up, not counted: the store's first appends in a process compile its path and
 * its statements, and a bare side run after it found them warm). The rate is the median round of
 * each; CPU per append over all rounds, this process's (client) and the backends' of the store's
 * pool (server), which both sides use.
 */
async function singleAppends(
  store: PostgresEventStore,
  schema: string,
  count: number,
  rounds: number,
): Promise<Row> {
  const sides = {
    store: { rates: [] as number[], clientMs: 0, serverMs: 0, appends: 0 },
    bare: { rates: [] as number[], clientMs: 0, serverMs: 0, appends: 0 },
  };
  let bareAppends = 0;
  const bareRound = async () => {
    for (let i = 0; i < count; i++) {
      const n = bareAppends++;
      const e = sampleEvent(n);
      await store.pool.query({
        name: 'bare_single',
        text: `INSERT INTO "${schema}".bare (position, id, stream, revision, type, recorded_at, correlation_id, causation_id, data)
               VALUES ($1, $2, $3, $4, $5, now(), $2, NULL, $6::json)`,
        values: [
          1_000_000_000 + n,
          e.id,
          `single-${n % SINGLE_APPEND_STREAMS}`,
          Math.floor(n / SINGLE_APPEND_STREAMS),
          e.type,
          JSON.stringify(e.data),
        ],
      });
    }
  };
  const names = [`es:${schema}`, `es-listen:${schema}`];
  for (let round = -1; round < rounds; round++) {
    for (const side of round % 2 === 0 ? (['store', 'bare'] as const) : (['bare', 'store'] as const)) {
      const serverBefore = await backendCpu(store.pool, names);
      const cpuBefore = process.cpuUsage();
      const start = performance.now();
      if (side === 'store') await timedSingleAppends(store, count, `single-${round}`);
      else await bareRound();
      const ms = performance.now() - start;
      const cpu = process.cpuUsage(cpuBefore);
      if (round < 0) continue;
      const s = sides[side];
      s.serverMs += cpuSince(serverBefore, await backendCpu(store.pool, names));
      s.rates.push((count * 1000) / ms);
      s.clientMs += (cpu.user + cpu.system) / 1000;
      s.appends += count;
    }
  }
  const us = (ms: number, appends: number) => (ms * 1000) / appends;
  const [st, bb] = [sides.store, sides.bare];
  const client: [number, number] = [us(st.clientMs, st.appends), us(bb.clientMs, bb.appends)];
  const server: [number, number] = [us(st.serverMs, st.appends), us(bb.serverMs, bb.appends)];
  console.log(
    `  (a): rate ${f0(median(st.rates))} vs ${f0(median(bb.rates))} appends/s (rounds ${st.rates.map(f0).join(' ')} vs ${bb.rates.map(f0).join(' ')}), ` +
      `CPU µs per append client ${f0(client[0])} vs ${f0(client[1])}, server ${f0(server[0])} vs ${f0(server[1])}; load ${f2(loadavg()[0]!)}`,
  );
  return {
    case: `(a) single appends, expected revision (${rounds} rounds of ${count})`,
    store: median(st.rates),
    baseline: median(bb.rates),
    baselineName: 'bare pg',
    unit: 'appends/s',
    ratio: median(st.rates) / median(bb.rates),
    target: 0.5,
    cpuUs: { service: client[0] + server[0], baseline: client[1] + server[1] },
    cpuSplit: { client, server },
  };
}

/** CPU ms of each PostgreSQL backend whose application_name is one of `names`, by pid. */
async function backendCpu(db: pg.Pool | pg.Client, names: string[]): Promise<Map<number, number>> {
  const { rows } = await db.query<{ pid: number }>(
    'SELECT pid FROM pg_stat_activity WHERE application_name = ANY ($1)',
    [names],
  );
  return new Map(rows.map((r) => [r.pid, processCpuMs(r.pid) ?? 0]));
}

/** CPU ms the backends of `after` spent since `before`. */
function cpuSince(before: Map<number, number>, after: Map<number, number>): number {
  let ms = 0;
  for (const [pid, cpu] of after) ms += cpu - (before.get(pid) ?? 0);
  return ms;
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
 * Writers in parallel, each appending single events to its own stream with its expected revision,
 * against a bare batch writer that groups the same way: the same 16 writers submit to the same
 * group writer (group-writer.ts: GROUPS_IN_FLIGHT round trips out, up to 64 appends each), and each
 * group is one bare INSERT ... SELECT FROM unnest of the same rows into a table of the same shape,
 * one commit, at the same durability. What is left between the two is the store's own work: the
 * stream locks, the id and revision checks, the positions, the NOTIFY and the answers. Store and
 * bare run in alternating rounds so drift on a shared machine hits both; the rate is the median
 * round of each, CPU per append is over all rounds: this process's (client) and its PostgreSQL
 * backends' (server, /proc/<pid>/stat of the pids pg_stat_activity names for its connections).
 */
async function concurrentWriters(
  schema: string,
  perWriter: number,
  writers: number,
  rounds: number,
  durability: 'flushed' | 'committed',
): Promise<Row> {
  const store = await openPostgresEventStore({
    url: URL,
    schema,
    poolSize: writers,
    groupsInFlight: GROUPS_IN_FLIGHT,
  });
  // Answered once committed: the bare side's connections commit without waiting for the flush, as
  // the store's groups of such appends do (synchronous_commit = off).
  const bare = new pg.Pool({
    connectionString: URL,
    max: writers,
    application_name: `bare:${schema}`,
    ...(durability === 'committed' ? { options: '-c synchronous_commit=off' } : {}),
  });
  const admin = new pg.Client({ connectionString: URL, application_name: `bench-admin:${schema}` });
  await admin.connect();
  let bareGroups = 0;
  const bareWriter = new GroupWriter(
    async (group) => {
      bareGroups++;
      const base = nextBarePosition;
      nextBarePosition += group.length;
      await bare.query({
        name: 'bare_group',
        text: BARE_INSERT(schema),
        values: [
          group.map((_, i) => base + i),
          group.map((m) => m.ids[0]!),
          group.map((m) => m.stream),
          group.map((m) => Number(m.expected) + 1),
          group.map((m) => m.events[0]!.type),
          group.map((m) => JSON.stringify(m.events[0]!.data)),
        ],
      });
      group.forEach((m, i) => {
        m.resolve({ nextRevision: Number(m.expected) + 1, position: base + i });
      });
    },
    { maxInFlight: GROUPS_IN_FLIGHT },
  );
  const sides = {
    store: { rates: [] as number[], clientMs: 0, serverMs: 0, appends: 0, groups: 0 },
    bare: { rates: [] as number[], clientMs: 0, serverMs: 0, appends: 0, groups: 0 },
  };
  /** CPU ms of each backend of `side`'s connections in this schema. */
  const backends = (side: 'store' | 'bare') =>
    backendCpu(admin, side === 'store' ? [`es:${schema}`, `es-listen:${schema}`] : [`bare:${schema}`]);
  const appendsPerRound = writers * perWriter;
  try {
    // Both open every connection before the clock starts.
    const warm = (pool: pg.Pool) =>
      Promise.all(Array.from({ length: writers }, () => pool.query('SELECT 1')));
    for (let round = -1; round < rounds; round++) {
      for (const side of round % 2 === 0 ? (['store', 'bare'] as const) : (['bare', 'store'] as const)) {
        await warm(side === 'store' ? store.pool : bare);
        const serverBefore = await backends(side);
        const groupsBefore = side === 'store' ? store.groupTotals.groups : bareGroups;
        const cpuBefore = process.cpuUsage();
        const start = performance.now();
        await Promise.all(
          Array.from({ length: writers }, async (_, w) => {
            const stream = `${side}-${durability}-${round}-${w}`;
            for (let i = 0; i < perWriter; i++) {
              const expectedRevision = i === 0 ? 'no_stream' : i - 1;
              const event = sampleEvent(i);
              if (side === 'store') await store.append(stream, [event], { expectedRevision, durability });
              else
                await bareWriter.submit({
                  stream,
                  expected: i - 1,
                  ids: [event.id!],
                  events: [event],
                  flushed: durability === 'flushed',
                });
            }
          }),
        );
        const ms = performance.now() - start;
        const cpu = process.cpuUsage(cpuBefore);
        if (round < 0) continue; // the warm-up round: plans cached, connections opened
        const serverMs = cpuSince(serverBefore, await backends(side));
        const s = sides[side];
        s.rates.push((appendsPerRound * 1000) / ms);
        s.clientMs += (cpu.user + cpu.system) / 1000;
        s.serverMs += serverMs;
        s.appends += appendsPerRound;
        s.groups += (side === 'store' ? store.groupTotals.groups : bareGroups) - groupsBefore;
      }
    }
  } finally {
    await admin.end();
    await store.close();
    await bare.end();
  }
  const figures = (s: (typeof sides)['store']) => ({
    rate: median(s.rates),
    clientUs: (s.clientMs * 1000) / s.appends,
    serverUs: (s.serverMs * 1000) / s.appends,
    perGroup: s.appends / Math.max(1, s.groups),
  });
  const st = figures(sides.store);
  const bb = figures(sides.bare);
  const cpuRatio = (st.clientUs + st.serverUs) / (bb.clientUs + bb.serverUs);
  console.log(
    `  ${durability}: rate ${f0(st.rate)} vs ${f0(bb.rate)} appends/s (${f2(st.rate / bb.rate)}; rounds ${sides.store.rates.map(f0).join(' ')} vs ${sides.bare.rates.map(f0).join(' ')}), ` +
      `CPU µs per append client ${f0(st.clientUs)} vs ${f0(bb.clientUs)} (${f2(st.clientUs / bb.clientUs)}×), ` +
      `server ${f0(st.serverUs)} vs ${f0(bb.serverUs)} (${f2(st.serverUs / bb.serverUs)}×), ` +
      `both ${f2(cpuRatio)}×; appends per group ${st.perGroup.toFixed(1)} vs ${bb.perGroup.toFixed(1)}; load ${f2(loadavg()[0]!)}`,
  );
  return {
    case:
      durability === 'flushed'
        ? `(e) ${writers} concurrent writers, single appends (${writers} x ${perWriter}, ${rounds} rounds)`
        : '(f) the same, answered once committed (durability: committed)',
    store: st.rate,
    baseline: bb.rate,
    baselineName: `bare batch writer, ${writers} writers`,
    unit: 'appends/s',
    ratio: st.rate / bb.rate,
    cpuUs: { service: st.clientUs + st.serverUs, baseline: bb.clientUs + bb.serverUs },
    cpuSplit: {
      client: [st.clientUs, bb.clientUs],
      server: [st.serverUs, bb.serverUs],
    },
    ...(durability === 'flushed' ? { target: 0.8, cpuTarget: 1.5 } : {}),
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
    const split = r.cpuSplit
      ? `; CPU µs per append client ${fmt(r.cpuSplit.client[0])} vs ${fmt(r.cpuSplit.client[1])}, server ${fmt(r.cpuSplit.server[0])} vs ${fmt(r.cpuSplit.server[1])}`
      : '';
    console.log(
      recordTarget({
        bench: 'postgres',
        measure: `${r.case}: store/${r.baselineName}`,
        figure: r.ratio,
        target: atLeast(r.target),
        ...(r.cpuUs ? { cpuUs: r.cpuUs } : {}),
        detail: `${fmt(r.store)} vs ${fmt(r.baseline)} ${r.unit}${split}`,
      }),
    );
    if (r.cpuTarget !== undefined && r.cpuUs) {
      console.log(
        recordTarget({
          bench: 'postgres',
          measure: `${r.case}: CPU per append (client + server), store/${r.baselineName}`,
          figure: r.cpuUs.service / r.cpuUs.baseline,
          unit: '×',
          target: atMost(r.cpuTarget),
          detail: `${f0(r.cpuUs.service)} vs ${f0(r.cpuUs.baseline)} µs${split}`,
        }),
      );
    }
  }
}

await whenMain(
  import.meta.url,
  {
    'read-events': 'number',
    'index-events': 'number',
    'writer-appends': 'number',
    'writer-rounds': 'number',
    singles: 'number',
    'single-rounds': 'number',
    only: ['writers', 'single'],
  },
  run,
);
