/**
 * Verdict history at scale, each figure against a baseline measured in the same run:
 *
 *  - export: the CPU a row of GET /api/verdicts (NDJSON and Parquet, through real HTTP on
 *    loopback) in the server's process against the raw `readAll` of the same LMDB log, page by
 *    page, in the same process (target ≥ 0.5, the median of alternated rounds), with the wall
 *    rates' ratio beside. The body is read, counted (newlines) and discarded by a client in
 *    another process (node's http, EXPORT_READER): the raw read's job is reading the rows, the
 *    export's is reading them and putting them on the wire, and a client in the server's process
 *    would add its own socket reads, buffers and collections (about as much CPU again as the
 *    server's) to the service's figure. Parquet's encoder workers are threads of the server's
 *    process, so their CPU is counted. The old figure (undici reading the body in this process,
 *    client and server together) is printed beside for the first `--in-process-rounds` (1). With
 *    the time to the first row and the peak RSS growth during the export
 *    beside the size of what was streamed (flat memory: the anonymous RSS growth stays far below
 *    the size; the whole RSS also counts the LMDB file pages mapped in while reading, page cache
 *    that grows with the range read the first time it is read). Anonymous growth is printed per
 *    round: the first Parquet round also starts the encoder worker (its isolate, parquet-wasm
 *    and its memory), 170-260 MB at 300,000-1,000,000 rows, which later rounds reuse.
 *  - outcome projection: the track-record fold over N VerdictOutcomeResolved events against the
 *    latest-verdicts fold over N VerdictRecorded events (both validate every event).
 *  - track-record query: GET /api/track-record over the folded state of N outcomes against
 *    GET /healthz on the same server (latency ratio); and the CPU of an answer made fresh
 *    (currentTrackRecord: every cell merged, each line's risk intervals resampled) against the
 *    one handed out again while the record stays at the same position (record-cache.ts), and the
 *    server's CPU per GET /api/track-record over loopback for both (a cached answer's JSON is sent
 *    as kept), over a record of every venue and timeframe for 90 days with risk forecasts
 *    (`--only=track-record`: those figures alone, in seconds; servers on ports the system hands out).
 *  - fairness: another key's p99 on a cheap route (GET /api/verdicts?limit=1) beside 4 export
 *    loops, in alternating phases of the same process: NDJSON with the scan's wait for the end of
 *    the turn between pages and without it (scan.ts pageTurn); Parquet with the exports past the
 *    busy encoder workers waiting for one, and encoded on the event loop in 1,024-row slices
 *    (parquet-encoders.ts whenBusy). The ratio of the p99s.
 *
 * The verdicts carry inputs as many and as long as the engine's (~1 KB of JSON each, as in the
 * deployed log); `--inputs=small` gives the seven short ones earlier runs of this bench used.
 *
 *   npx tsx bench/history.bench.ts [--verdicts=1000000] [--outcomes=100000] [--runs=3]
 *     [--profile=ndjson|parquet] [--inputs=full|small] [--phases=4] [--in-process-rounds=1]
 *     [--only=fairness|track-record|export]
 */

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import Fastify from 'fastify';
import { validatorCompiler } from 'fastify-type-provider-zod';
import { pino } from 'pino';
import { request } from 'undici';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { deterministicId } from '../contracts/deterministic-id.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { type EventData, newEvent } from '../contracts/events.ts';
import { outcomeStream, TRACK_RECORD_WINDOWS } from '../contracts/history.ts';
import { EXCHANGES, TIMEFRAMES } from '../contracts/market.ts';
import { latestVerdictsProjection } from '../projections/latest-verdicts.ts';
import { verdictStream } from '../services/engine/verdict-recorder.ts';
import { OUTCOMES_DB, VERDICTS_DB } from '../services/history/export-row-store.ts';
import { sharedParquetEncoders } from '../services/history/parquet-encoders.ts';
import { trackRecordProjection } from '../services/history/projections.ts';
import { RecordCache } from '../services/history/record-cache.ts';
import { historyRoutes, MAX_EXPORTS_PER_KEY } from '../services/history/routes.ts';
import { pageTurn } from '../services/history/scan.ts';
import { addPoint, currentTrackRecord, type TrackRecordState } from '../services/history/track-record.ts';
import {
  SYNTHETIC_MARKETS,
  startHistoryServer,
  syntheticMarket,
  syntheticOutcome,
  syntheticVerdict,
} from '../test/history-harness.ts';
import { scoredPoint } from '../test/scored-point.ts';
import { profile } from './cpu-profile.ts';
import { atLeast, mainThreadCpuMs, processCpuMs, recordTarget } from './harness.ts';

const MARKETS = SYNTHETIC_MARKETS;
const BATCH = 1_000;

function arg(name: string, fallback: number): number {
  const hit = process.argv.find((a) => a.startsWith(`--${name}=`));
  return hit ? Number(hit.split('=')[1]) : fallback;
}

/** Verdicts with the engine's full inputs unless `--inputs=small`. */
const FULL_INPUTS = !process.argv.includes('--inputs=small');

function recorded<T extends string>(type: T, data: unknown, position: number, stream: string): RecordedEvent {
  return {
    id: deterministicId('bench', position),
    type,
    stream,
    revision: 0,
    position,
    recordedAt: new Date(0).toISOString(),
    correlationId: 'bench',
    causationId: null,
    data,
  };
}

/** A callable gc() without starting node with --expose-gc: for the post-collection heap figure. */
function exposeGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

/**
 * Reads the whole export with a forced collection every `every` rows: the heap that survives a
 * collection mid-stream is what the export really holds (flat means it does not grow with rows).
 */
async function liveHeap(url: string, headers: Record<string, string>, every: number) {
  const gc = exposeGc();
  gc();
  const before = process.memoryUsage().heapUsed;
  let peak = 0;
  let rows = 0;
  let next = every;
  const res = await request(url, { headers, reset: true });
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) rows++;
    if (rows >= next) {
      next += every;
      gc();
      peak = Math.max(peak, process.memoryUsage().heapUsed - before);
    }
  }
  return peak;
}

/**
 * The anonymous part of this process's RSS (heap and native allocations), in bytes: the RSS also
 * counts the LMDB file pages an export maps in as it reads them (page cache, shared and
 * reclaimable), which grow with the range read whatever the export holds.
 */
function anonymousRss(): number {
  try {
    const status = readFileSync('/proc/self/status', 'utf8');
    return Number(/RssAnon:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN) * 1024;
  } catch {
    return Number.NaN; // no /proc (not Linux): the column shows NaN
  }
}

/**
 * This process's memory growth over a stretch: RSS, its anonymous part and the heap, each the peak
 * (sampled every 50 ms) less its value at the start.
 */
function memoryGrowth() {
  const rssBefore = process.memoryUsage().rss;
  let peak = rssBefore;
  const anonBefore = anonymousRss();
  let anonPeak = anonBefore;
  const heapBefore = process.memoryUsage().heapUsed;
  let heapPeak = heapBefore;
  const sample = () => {
    const m = process.memoryUsage();
    peak = Math.max(peak, m.rss);
    anonPeak = Math.max(anonPeak, anonymousRss());
    heapPeak = Math.max(heapPeak, m.heapUsed);
  };
  const sampler = setInterval(sample, 50);
  let growth: { rssGrowth: number; anonGrowth: number; heapGrowth: number } | undefined;
  return {
    /** Stops the sampling (once) and answers the growth. */
    stop() {
      clearInterval(sampler);
      growth ??= {
        rssGrowth: peak - rssBefore,
        anonGrowth: anonPeak - anonBefore,
        heapGrowth: heapPeak - heapBefore,
      };
      return growth;
    },
  };
}

async function drain(url: string, headers: Record<string, string>) {
  const memory = memoryGrowth();
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  let firstByte = 0;
  let bytes = 0;
  let newlines = 0;
  // A connection of its own (reset: closed after the answer): between exports the raw readAll
  // runs for seconds, long enough for the server to close an idle keep-alive connection just as
  // the next request goes out on it (ECONNRESET on a loaded machine).
  const res = await request(url, { headers, reset: true }).catch((err: Error) => {
    throw new Error(`GET ${url} failed: ${err.message}`, { cause: err });
  });
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    if (bytes === 0) firstByte = performance.now() - started;
    bytes += chunk.length;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) newlines++;
  }
  const growth = memory.stop();
  const cpu = process.cpuUsage(cpuBefore);
  return {
    seconds: (performance.now() - started) / 1000,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    firstByteMs: firstByte,
    bytes,
    newlines,
    ...growth,
    status: res.statusCode,
  };
}

/**
 * The export's reader in a process of its own (node's http client, no tsx): on each message
 * {url, authorization} it GETs the URL on a connection of its own, discards the body, counts its
 * bytes and newlines, and replies {status, bytes, newlines, firstByteMs}; an error replies
 * {error}. Reading the body here keeps the client's CPU (its socket reads, its buffers and their
 * collections: about as much again as the server's) out of the server process's figure.
 */
const EXPORT_READER = `
const http = require('node:http');
process.on('message', ({ url, authorization }) => {
  const started = performance.now();
  const req = http.get(url, { headers: { authorization }, agent: false }, (res) => {
    let bytes = 0;
    let newlines = 0;
    let firstByteMs = 0;
    res.on('data', (chunk) => {
      if (bytes === 0) firstByteMs = performance.now() - started;
      bytes += chunk.length;
      for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) newlines++;
    });
    res.on('end', () => process.send({ status: res.statusCode, bytes, newlines, firstByteMs }));
    res.on('error', (err) => process.send({ error: String(err) }));
  });
  req.on('error', (err) => process.send({ error: url + ': ' + String(err) }));
});
process.on('disconnect', () => process.exit(0));
process.send({ ready: true });
`;

type ReaderOk = { status: number; bytes: number; newlines: number; firstByteMs: number };
type ReaderReply = ReaderOk | { error: string };

/** A running EXPORT_READER: `read(url)` resolves with its reply, and throws if it failed or exited. */
async function exportReader(authorization: string) {
  const child = spawn(process.execPath, ['-e', EXPORT_READER], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let pending: { resolve: (r: ReaderReply) => void; reject: (e: Error) => void } | null = null;
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code) => {
      const err = new Error(`export reader exited (${code})`);
      pending?.reject(err);
      reject(err);
    }),
  );
  exited.catch(() => {});
  await Promise.race([new Promise((r) => child.once('message', r)), exited]);
  child.on('message', (m: ReaderReply) => {
    const p = pending;
    pending = null;
    if ('error' in m) p?.reject(new Error(`export reader: ${m.error}`));
    else p?.resolve(m);
  });
  return {
    pid: child.pid!,
    read: (url: string) =>
      new Promise<ReaderOk>((resolve, reject) => {
        pending = { resolve: resolve as (r: ReaderReply) => void, reject };
        child.send({ url, authorization });
      }),
    close: () => {
      child.removeAllListeners('exit');
      child.kill();
    },
  };
}

/**
 * One export read by the reader in another process, with this process's (the server's) CPU
 * seconds over it: its main thread, the Parquet encoder workers, the collector's threads. The
 * memory figures are this process's too: what the server holds while it streams.
 */
async function serverSide(reader: Awaited<ReturnType<typeof exportReader>>, url: string) {
  const memory = memoryGrowth();
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  const readerBefore = processCpuMs(reader.pid) ?? Number.NaN;
  const mainBefore = mainThreadCpuMs(process.pid) ?? Number.NaN;
  const got = await reader.read(url).finally(() => memory.stop());
  const growth = memory.stop();
  const cpu = process.cpuUsage(cpuBefore);
  const readerCpuMs = (processCpuMs(reader.pid) ?? Number.NaN) - readerBefore;
  const mainCpuMs = (mainThreadCpuMs(process.pid) ?? Number.NaN) - mainBefore;
  if (got.status !== 200) throw new Error(`GET ${url} answered ${got.status}`);
  return {
    seconds: (performance.now() - started) / 1000,
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    readerCpuSeconds: readerCpuMs / 1000,
    mainThreadCpuSeconds: mainCpuMs / 1000,
    firstByteMs: got.firstByteMs,
    bytes: got.bytes,
    newlines: got.newlines,
    ...growth,
    status: got.status,
  };
}

/**
 * The export loops of the fairness figure, in a process of their own (its reading of the bodies is
 * not the server's work): `loops` exports per key, each one after another (`query`), the bodies
 * read as they come and discarded; answers the bytes read so far when asked.
 */
const EXPORT_LOOPS = `
const [url, query, loops, ...keys] = process.argv.slice(1);
let read = 0;
process.on('message', () => process.send(read));
const loop = async (key) => {
  for (;;) {
    const res = await fetch(url + '/api/verdicts?' + query, { headers: { authorization: 'Bearer ' + key } });
    if (res.status === 429) { await res.arrayBuffer(); await new Promise((r) => setTimeout(r, 50)); continue; }
    if (res.status !== 200) throw new Error('export answered ' + res.status);
    const reader = res.body.getReader();
    for (let next = await reader.read(); !next.done; next = await reader.read()) {
      read += next.value.length;
    }
  }
};
for (const key of keys) for (let i = 0; i < Number(loops); i++) loop(key);
`;

/** One side of a fairness comparison: its name, and what it sets before its phases. */
type Variant = { name: string; apply: () => void };

/**
 * Another key's latency on a cheap route (GET /api/verdicts?limit=1, one request at a time, 5 ms
 * apart) beside 4 export loops (two keys, as many each as MAX_EXPORTS_PER_KEY lets stream at once,
 * read by another process), in phases that alternate two variants of the server's code, so drift
 * in the machine's load falls on both.
 */
async function fairness(
  url: string,
  exportKeys: string[],
  otherKey: string,
  options: { phases: number; phaseMs: number; query: string; label: string; variants: [Variant, Variant] },
) {
  const percentile = (xs: number[], p: number) =>
    [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
  const results = options.variants.map(() => ({
    latencies: [] as number[],
    bytes: 0,
    seconds: 0,
    p99s: [] as number[],
  }));
  const loads: string[] = [];
  for (let phase = 0; phase < 2 * options.phases; phase++) {
    const v = phase % 2;
    options.variants[v]!.apply();
    const loops = spawn(
      process.execPath,
      ['-e', EXPORT_LOOPS, url, options.query, String(MAX_EXPORTS_PER_KEY), ...exportKeys],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    const exported = () =>
      new Promise<number>((resolve) => {
        loops.once('message', (n) => resolve(Number(n)));
        loops.send('bytes?');
      });
    // The exports under way before the probe starts.
    await new Promise((r) => setTimeout(r, 1_000));
    const bytesBefore = await exported();
    const started = performance.now();
    const latencies: number[] = [];
    while (performance.now() - started < options.phaseMs) {
      const t = performance.now();
      const res = await request(`${url}/api/verdicts?limit=1`, {
        headers: { authorization: `Bearer ${otherKey}` },
      });
      await res.body.text();
      if (res.statusCode !== 200) throw new Error(`probe answered ${res.statusCode}`);
      latencies.push(performance.now() - t);
      await new Promise((r) => setTimeout(r, 5));
    }
    const seconds = (performance.now() - started) / 1000;
    const bytes = (await exported()) - bytesBefore;
    const gone = new Promise((r) => loops.once('exit', r));
    loops.kill();
    await gone;
    const r = results[v]!;
    r.latencies.push(...latencies);
    r.bytes += bytes;
    r.seconds += seconds;
    r.p99s.push(percentile(latencies, 99));
    loads.push(loadavg()[0]!.toFixed(2));
  }
  const row = (r: (typeof results)[number]) => ({
    probes: r.latencies.length,
    'p50 ms': Number(percentile(r.latencies, 50).toFixed(1)),
    'p99 ms': Number(percentile(r.latencies, 99).toFixed(1)),
    'p99 ms per phase': r.p99s.map((x) => x.toFixed(0)).join(' / '),
    'max ms': Number(Math.max(...r.latencies).toFixed(1)),
    'exported MB/s': Number((r.bytes / 1e6 / r.seconds).toFixed(1)),
  });
  const [a, b] = results as [(typeof results)[number], (typeof results)[number]];
  const ratio = percentile(b.latencies, 99) / percentile(a.latencies, 99);
  console.log(
    `fairness: another key's GET /api/verdicts?limit=1 beside ${exportKeys.length * MAX_EXPORTS_PER_KEY} ${options.label} export loops (?${options.query}, read by another process), ${options.phases} phases of each, ${(options.phaseMs / 1000).toFixed(0)} s, alternated; load (1 min) after each phase ${loads.join(' ')}`,
  );
  console.table(Object.fromEntries(options.variants.map((v, i) => [v.name, row(results[i]!)])));
  console.log(`p99 ${options.variants[1].name} / ${options.variants[0].name}: ${ratio.toFixed(1)}`);
  return { ratio, p99: percentile(a.latencies, 99) };
}

/**
 * A record of every venue and timeframe, `days` UTC days of four resolved verdicts a day each, every
 * one with the risk forecast it served (so each line's risk intervals are resampled).
 */
export function wideRecord(days: number): { state: TrackRecordState; now: number } {
  const state: TrackRecordState = {};
  const day0 = Date.parse('2025-06-01T00:00:00Z');
  let position = 0;
  for (const exchange of EXCHANGES)
    for (const timeframe of TIMEFRAMES)
      for (let d = 0; d < days; d++)
        for (let k = 0; k < 4; k++)
          addPoint(
            state,
            scoredPoint(exchange, timeframe, day0 + d * 86_400_000 + k * 6 * 3_600_000, ++position),
            position,
          );
  return { state, now: day0 + (days + 30) * 86_400_000 };
}

/** A client in a process of its own: on each message `n`, GETs its URL n times in turn and replies with the last body's bytes. */
const TRACK_RECORD_CLIENT = `
const url = process.argv[1];
process.on('message', async (n) => {
  let bytes = 0;
  for (let i = 0; i < n; i++) {
    const res = await fetch(url);
    if (res.status !== 200) throw new Error(url + ': ' + res.status);
    bytes = (await res.arrayBuffer()).byteLength;
  }
  process.send(bytes);
});
`;

/**
 * CPU per track-record answer over wideRecord(90), per window: the answer made fresh against
 * handed out again (RecordCache); and this process's CPU per GET /api/track-record over loopback
 * HTTP (the client in a process of its own, so what is counted is the server's: the route, its
 * hooks, the body written), with the record moving at every request against staying at the same
 * position.
 */
async function trackRecordAnswers(): Promise<{ freshMs: number; cachedMs: number; routeCachedMs: number }> {
  const { state, now } = wideRecord(90);
  // A revision as the service's projection runner has: it moves only when an outcome is folded.
  const cache = new RecordCache({ state, revision: 1 });
  const cpuMs = (n: number, f: () => unknown) => {
    for (let i = 0; i < 5; i++) f();
    const before = process.cpuUsage();
    for (let i = 0; i < n; i++) f();
    const used = process.cpuUsage(before);
    return (used.user + used.system) / 1000 / n;
  };
  // One server on a record whose revision moves at every read (each answer made afresh, as after
  // an outcome resolves), one on the record staying where it is (each answer the cached one).
  let moving = 0;
  const moved = {
    state,
    get revision() {
      return ++moving;
    },
  };
  const serve = async (records: RecordCache) => {
    const app = Fastify({ logger: false });
    app.setValidatorCompiler(validatorCompiler);
    await app.register(
      historyRoutes({
        store: new MemoryEventStore(),
        records,
        now: () => now,
        logger: pino({ level: 'silent' }),
      }),
    );
    // A port the system hands out: no other bench or test can hold it.
    await app.listen({ host: '127.0.0.1', port: 0 });
    return app;
  };
  const servers = [await serve(new RecordCache(moved)), await serve(cache)];
  const [freshPort, cachedPort] = servers.map((app) => (app.server.address() as AddressInfo).port);
  /** This process's CPU ms per request of `n` GETs of `window` from the server at `port`, and the body's bytes. */
  const routeMs = async (port: number, window: string, n: number) => {
    const client = spawn(
      process.execPath,
      ['-e', TRACK_RECORD_CLIENT, `http://127.0.0.1:${port}/api/track-record?window=${window}`],
      { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
    );
    const gets = (count: number) =>
      new Promise<number>((resolve, reject) => {
        client.once('message', (bytes) => resolve(Number(bytes)));
        client.once('exit', (code) => reject(new Error(`track-record client exited ${code}`)));
        client.send(count);
      });
    await gets(5);
    const before = process.cpuUsage();
    const bytes = await gets(n);
    const used = process.cpuUsage(before);
    client.removeAllListeners('exit');
    client.kill();
    return { ms: (used.user + used.system) / 1000 / n, bytes };
  };
  const rows: Record<string, Record<string, number>> = {};
  try {
    for (const window of TRACK_RECORD_WINDOWS) {
      const fresh = cpuMs(50, () => currentTrackRecord(state, window, now));
      const cached = cpuMs(2_000, () => cache.current(window, now));
      const json = cpuMs(50, () => JSON.stringify(cache.current(window, now)));
      const routeFresh = await routeMs(freshPort!, window, 50);
      const routeCached = await routeMs(cachedPort!, window, 1_000);
      rows[window] = {
        'fresh CPU ms': Number(fresh.toFixed(3)),
        'cached CPU µs': Number((cached * 1000).toPrecision(2)),
        'cached / fresh': Number((cached / fresh).toPrecision(2)),
        'JSON.stringify ms': Number(json.toFixed(3)),
        'HTTP fresh ms': Number(routeFresh.ms.toFixed(3)),
        'HTTP cached µs': Math.round(routeCached.ms * 1000),
        'body KB': Math.round(routeCached.bytes / 1000),
      };
    }
  } finally {
    for (const app of servers) await app.close();
  }
  console.log(
    `track-record answer per request, ${Object.keys(state).length.toLocaleString()} day cells (${EXCHANGES.length} venues x ${TIMEFRAMES.length} timeframes x 90 days, risk forecasts served): made fresh against handed out again at the same position; and the server's CPU per GET /api/track-record over loopback, the record moving at every request against staying`,
  );
  console.table(rows);
  return {
    freshMs: rows.all!['fresh CPU ms']!,
    cachedMs: rows.all!['cached CPU µs']! / 1000,
    routeCachedMs: rows.all!['HTTP cached µs']! / 1000,
  };
}

export async function run(): Promise<Record<string, number>> {
  if (process.argv.includes('--only=track-record')) {
    const { freshMs, cachedMs, routeCachedMs } = await trackRecordAnswers();
    return {
      trackRecordFreshMs: freshMs,
      trackRecordCachedMs: cachedMs,
      trackRecordRouteCachedMs: routeCachedMs,
    };
  }
  const verdicts = arg('verdicts', 1_000_000);
  const outcomes = Math.min(verdicts, arg('outcomes', 100_000));
  const perMarket = Math.ceil(verdicts / MARKETS);
  const dir = mkdtempSync(join(tmpdir(), 'history-bench-'));
  const store = await openLmdbEventStore({ path: dir });
  try {
    // ---- the log: verdicts in batches per market stream, outcomes for the oldest ones ----
    let t = performance.now();
    const prev = new Array<string | null>(MARKETS).fill(null);
    const firstIds: { id: string; stream: string; revision: number; data: EventData<'VerdictRecorded'> }[] =
      [];
    for (let n = 0; n < perMarket; n += BATCH) {
      for (let m = 0; m < MARKETS; m++) {
        const stream = verdictStream(syntheticMarket(m));
        const events = [];
        for (let j = n; j < Math.min(n + BATCH, perMarket); j++) {
          const data = syntheticVerdict(m, j, perMarket, prev[m]!, FULL_INPUTS);
          prev[m] = data.hash;
          const id = deterministicId('verdict', stream, j);
          events.push(newEvent('VerdictRecorded', data, { id }));
          if (firstIds.length < outcomes && j < Math.ceil(outcomes / MARKETS))
            firstIds.push({ id, stream, revision: j, data });
        }
        await store.append(stream, events);
      }
    }
    const verdictLoadS = (performance.now() - t) / 1000;
    t = performance.now();
    for (let i = 0; i < firstIds.length; i += 500) {
      await Promise.all(
        firstIds.slice(i, i + 500).map(({ id, stream, revision, data }) =>
          store.append(
            outcomeStream(id),
            [newEvent('VerdictOutcomeResolved', syntheticOutcome(data, id, stream, revision))],
            {
              expectedRevision: 'no_stream',
            },
          ),
        ),
      );
    }
    const outcomeLoadS = (performance.now() - t) / 1000;
    const head = await store.headPosition();
    console.log(
      `log: ${verdicts.toLocaleString()} verdicts (${verdictLoadS.toFixed(1)} s), ${firstIds.length.toLocaleString()} outcomes (${outcomeLoadS.toFixed(1)} s), head ${head.toLocaleString()}`,
    );

    const rawCpuS: number[] = [];
    const readRaw = async () => {
      const started = performance.now();
      const cpuBefore = process.cpuUsage();
      let raw = 0;
      for (let after = 0; ; ) {
        const page = await store.readAll({ after, maxCount: 1_000 });
        if (page.length === 0) break;
        for (const e of page) if (e.type === 'VerdictRecorded') raw++;
        after = page[page.length - 1]!.position;
      }
      if (raw !== verdicts) throw new Error(`readAll found ${raw} verdicts, expected ${verdicts}`);
      const cpu = process.cpuUsage(cpuBefore);
      rawCpuS.push((cpu.user + cpu.system) / 1e6);
      return (performance.now() - started) / 1000;
    };

    t = performance.now();
    const server = await startHistoryServer({ store, feed: null }).catch((err: Error) => {
      throw new Error(`history service did not start: ${err.message}`, { cause: err });
    });
    const health = await request(`${server.url}/healthz`, { reset: true }).catch((err: Error) => {
      throw new Error(`history service did not start: GET /healthz failed: ${err.message}`, { cause: err });
    });
    await health.body.text();
    if (health.statusCode !== 200)
      throw new Error(`history service did not start: /healthz ${health.statusCode}`);
    // Exports are measured on a caught-up service: while the projections fold the log at start,
    // they compete with the export for the same cores, and the outcome index is not yet usable.
    await server.slice.trackRecord.waitFor(head, 600_000);
    await server.slice.labelled.waitFor(head, 600_000);
    const catchUpS = (performance.now() - t) / 1000;
    // The export-rows projection (each revealed row's bytes, written once): what it costs to
    // build from the log and on disk, beside the log's own pages.
    if (server.slice.exportRows) {
      await server.slice.exportRows.waitFor(head, 1_800_000);
      const pages = (name: string) => {
        const s = store.root.openDB({ name }).getStats() as {
          treeBranchPageCount: number;
          treeLeafPageCount: number;
          overflowPages: number;
          pageSize: number;
        };
        return (s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages) * s.pageSize;
      };
      const rowBytes = pages(VERDICTS_DB) + pages(OUTCOMES_DB);
      console.log(
        `export-rows projection: caught up in ${((performance.now() - t) / 1000).toFixed(1)} s from the start; ${(rowBytes / 1e6).toFixed(0)} MB on disk (${Math.round(rowBytes / verdicts)} B per verdict) beside the log's ${(pages('events') / 1e6).toFixed(0)} MB`,
      );
    }
    const key = await server.issue();
    const headers = { authorization: `Bearer ${key}` };
    // The first keyed request of a fresh process rebuilds the quota counters from the log (the
    // quota meter's start-up, not the export): done once here, outside the first-row figures.
    await (await request(`${server.url}/api/verdicts?limit=1`, { headers, reset: true })).body.text();
    // ---- fairness: another key beside 4 NDJSON exports, with and without the wait between pages ----
    const exportKeys = [key, await server.issue()];
    const otherKey = await server.issue();
    for (const k of [...exportKeys.slice(1), otherKey])
      await (
        await request(`${server.url}/api/verdicts?limit=1`, {
          headers: { authorization: `Bearer ${k}` },
          reset: true,
        })
      ).body.text();
    const phases = arg('phases', 4);
    const onlyExport = process.argv.includes('--only=export');
    const wait = pageTurn.wait;
    const noFairness = { ratio: Number.NaN, p99: Number.NaN };
    const fair = onlyExport
      ? noFairness
      : await fairness(server.url, exportKeys, otherKey, {
          phases,
          phaseMs: 8_000,
          query: `limit=${Math.min(verdicts, 50_000)}`,
          label: 'NDJSON',
          variants: [
            { name: 'wait between pages', apply: () => (pageTurn.wait = wait) },
            // A resolved promise: the same chain of promise jobs, no turn of the event loop.
            { name: 'no wait', apply: () => (pageTurn.wait = () => Promise.resolve()) },
          ],
        });
    pageTurn.wait = wait;
    // Parquet: 2 exports on the encoder workers; the other 2 wait for one, or are encoded on the
    // event loop (handed to the writer in 1,024-row slices), as the service did before.
    const encoders = sharedParquetEncoders();
    const fairParquet = onlyExport
      ? noFairness
      : await fairness(server.url, exportKeys, otherKey, {
          phases,
          phaseMs: 8_000,
          query: `format=parquet&limit=${Math.min(verdicts, 50_000)}`,
          label: 'Parquet',
          variants: [
            { name: 'wait for a worker', apply: () => (encoders.whenBusy = 'wait') },
            { name: 'on the event loop', apply: () => (encoders.whenBusy = 'here') },
          ],
        });
    encoders.whenBusy = 'wait';
    if (process.argv.includes('--only=fairness')) {
      await server.close();
      return {
        fairnessP99Ratio: fair.ratio,
        fairnessP99Ms: fair.p99,
        parquetFairnessP99Ratio: fairParquet.ratio,
        parquetFairnessP99Ms: fairParquet.p99,
      };
    }
    const profiled = process.argv.find((a) => a.startsWith('--profile'))?.split('=')[1];
    if (profiled !== undefined) {
      const format = profiled === 'parquet' ? 'parquet' : 'ndjson';
      // The body read by another process: the profile is the server's alone.
      const profReader = await exportReader(headers.authorization);
      const { summary } = await profile(() =>
        serverSide(profReader, `${server.url}/api/verdicts?format=${format}`),
      ).finally(() => profReader.close());
      console.log(`${format} export profile (self time)`);
      console.table(summary.byFunction.slice(0, 15));
      console.table(summary.byPackage.slice(0, 8));
    }

    // ---- export vs raw readAll: alternating rounds, so drift in a shared machine's load falls
    // on every contender alike ----
    // The service's job is the raw read's job: the rows read and put on the wire. The body is read
    // by a client in another process, so each round's figure is this (the server's) process's
    // CPU a row, Parquet's encoder workers included, against the raw read's; the old figure, the
    // body read by undici in this process, is printed beside for the first `--in-process-rounds`.
    const runs = arg('runs', 3);
    const inProcessRounds = arg('in-process-rounds', 1);
    const reader = await exportReader(headers.authorization);
    const rawS: number[] = [];
    const nds: Awaited<ReturnType<typeof serverSide>>[] = [];
    const pqs: Awaited<ReturnType<typeof serverSide>>[] = [];
    const inProcess: { nd: Awaited<ReturnType<typeof drain>>[]; pq: Awaited<ReturnType<typeof drain>>[] } = {
      nd: [],
      pq: [],
    };
    const roundLoads: string[] = [];
    try {
      // Warm-up, outside the figures: the first Parquet export starts an encoder worker (its
      // isolate, parquet-wasm compiled), which later exports reuse.
      await reader.read(`${server.url}/api/verdicts?format=parquet&limit=10000`);
      await reader.read(`${server.url}/api/verdicts?limit=10000`);
      for (let r = 0; r < runs; r++) {
        rawS.push(await readRaw());
        const nd = await serverSide(reader, `${server.url}/api/verdicts`);
        // One line per row: the trailer line comes only when asked (trailer=true), and it is not.
        if (nd.newlines !== verdicts)
          throw new Error(`NDJSON export gave ${nd.newlines} rows, expected ${verdicts}`);
        nds.push(nd);
        pqs.push(await serverSide(reader, `${server.url}/api/verdicts?format=parquet`));
        if (r < inProcessRounds) {
          inProcess.nd.push(await drain(`${server.url}/api/verdicts`, headers));
          inProcess.pq.push(await drain(`${server.url}/api/verdicts?format=parquet`, headers));
        }
        roundLoads.push(loadavg()[0]!.toFixed(1));
      }
    } finally {
      reader.close();
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const spread = (rates: number[]) => {
      const sorted = [...rates].sort((a, b) => a - b);
      return `${Math.round(sorted[0]!)} / ${Math.round(median(rates))} / ${Math.round(sorted.at(-1)!)}`;
    };
    const rawRates = rawS.map((s) => verdicts / s);
    const ndRates = nds.map((d) => verdicts / d.seconds);
    const pqRates = pqs.map((d) => verdicts / d.seconds);
    // Each round's ratio against the baseline of the same round, and the ratio of the medians.
    const ratios = (rates: number[]) => rates.map((x, i) => x / rawRates[i]!);
    const ratioSpread = (rates: number[]) => {
      const sorted = ratios(rates).sort((a, b) => a - b);
      return `${sorted[0]!.toFixed(2)} / ${median(ratios(rates)).toFixed(2)} / ${sorted.at(-1)!.toFixed(2)}`;
    };
    // CPU seconds of the process (server and client) per round, against the raw read's: on a
    // shared machine, wall time also counts the time other processes held the cores.
    const cpuRatios = (runs: { cpuSeconds: number }[]) =>
      runs.map((d, i) => (rawCpuS[i]! / d.cpuSeconds).toFixed(2)).join(' / ');
    // The process's CPU a row (µs), per round: less moved by the load than the rates, and
    // comparable between runs where the ratios' baseline moved.
    const cpuPerRow = (seconds: number[]) =>
      seconds.map((s) => ((s * 1e6) / verdicts).toFixed(1)).join(' / ');
    const rawRate = median(rawRates);
    const ndRate = median(ndRates);
    const pqRate = median(pqRates);
    const nd = nds[0]!;
    const pq = pqs[0]!;
    /** One export format's line of the table, from its rounds. */
    const exportRow = (runs: typeof nds) => {
      const rates = runs.map((d) => verdicts / d.seconds);
      return {
        'rows/s min/median/max': spread(rates),
        'ratio per round min/median/max': ratioSpread(rates),
        'ratio of medians': Number((median(rates) / rawRate).toFixed(2)),
        'CPU-time ratio per round': cpuRatios(runs),
        'CPU µs a row per round': cpuPerRow(runs.map((d) => d.cpuSeconds)),
        'main thread µs a row': cpuPerRow(runs.map((d) => d.mainThreadCpuSeconds)),
        'reader CPU µs a row': cpuPerRow(runs.map((d) => d.readerCpuSeconds)),
        'first row ms': Number(median(runs.map((d) => d.firstByteMs)).toFixed(1)),
        'MB streamed': Math.round(runs[0]!.bytes / 1e6),
        'RSS growth MB': Math.round(Math.max(...runs.map((d) => d.rssGrowth)) / 1e6),
        'anonymous RSS growth MB': runs.map((d) => Math.round(d.anonGrowth / 1e6)).join(' / '),
        'heap growth MB': Math.round(Math.max(...runs.map((d) => d.heapGrowth)) / 1e6),
      };
    };
    console.log(
      `export through HTTP (body read by another process) vs raw readAll of the same LMDB log, ${runs} alternating rounds (target: CPU-time ratio >= 0.5, the server process's CPU a row against the raw read's); load (1 min) after each round ${roundLoads.join(' ')}`,
    );
    console.table({
      'raw readAll': {
        'rows/s min/median/max': spread(rawRates),
        'ratio per round min/median/max': '1',
        'ratio of medians': 1,
        'CPU-time ratio per round': '1',
        'CPU µs a row per round': cpuPerRow(rawCpuS),
        'main thread µs a row': '',
        'reader CPU µs a row': '',
        'first row ms': '',
        'MB streamed': '',
        'RSS growth MB': '',
        'anonymous RSS growth MB': '',
      },
      NDJSON: exportRow(nds),
      Parquet: exportRow(pqs),
    });
    // The old figure: the body read by undici in this process (client and server counted together).
    const inProcessRow = (runs: Awaited<ReturnType<typeof drain>>[]) =>
      runs.length === 0
        ? {}
        : {
            'CPU-time ratio per round': runs
              .map((d, i) => (rawCpuS[i]! / d.cpuSeconds).toFixed(2))
              .join(' / '),
            'CPU µs a row per round': cpuPerRow(runs.map((d) => d.cpuSeconds)),
            'rows/s per round': runs.map((d) => Math.round(verdicts / d.seconds)).join(' / '),
          };
    if (inProcess.nd.length > 0) {
      console.log(
        `the same exports read by undici in this process (client and server CPU together), first ${inProcess.nd.length} round(s)`,
      );
      console.table({ NDJSON: inProcessRow(inProcess.nd), Parquet: inProcessRow(inProcess.pq) });
    }
    // The figure: the median over rounds of the raw read's CPU a row / the server's, each round
    // against its own raw read.
    const cpuRatio = (runs: typeof nds) => median(runs.map((d, i) => rawCpuS[i]! / d.cpuSeconds));
    const ndCpuRatio = cpuRatio(nds);
    const pqCpuRatio = cpuRatio(pqs);
    for (const [format, ratio, rate] of [
      ['NDJSON', ndCpuRatio, ndRate],
      ['Parquet', pqCpuRatio, pqRate],
    ] as const) {
      console.log(
        `${format}: server CPU-time ratio (median of rounds) ${ratio.toFixed(2)}; wall rate ratio of medians ${(rate / rawRate).toFixed(2)}`,
      );
      console.log(
        recordTarget({
          bench: 'history',
          measure: `GET /api/verdicts export (${format}), body read by another process / raw readAll: server CPU-time ratio, median of rounds`,
          figure: ratio,
          target: atLeast(0.5),
        }),
      );
    }
    if (onlyExport) {
      await server.close();
      return {
        ndjsonCpuRatio: ndCpuRatio,
        parquetCpuRatio: pqCpuRatio,
        ndjsonRatio: ndRate / rawRate,
        parquetRatio: pqRate / rawRate,
      };
    }
    const every = Math.max(1_000, Math.floor(verdicts / 10));
    const ndLive = await liveHeap(`${server.url}/api/verdicts`, headers, every);
    const pqLive = await liveHeap(`${server.url}/api/verdicts?format=parquet`, headers, every / 10);
    console.log(
      `heap surviving a forced collection mid-export (every ${every.toLocaleString()} rows), above the heap before: NDJSON ${(ndLive / 1e6).toFixed(1)} MB, Parquet ${(pqLive / 1e6).toFixed(1)} MB (of ${Math.round(nd.bytes / 1e6)} / ${Math.round(pq.bytes / 1e6)} MB streamed)`,
    );

    // ---- track-record query latency on the folded state vs /healthz ----
    const latency = async (path: string, n: number) => {
      const started = performance.now();
      for (let i = 0; i < n; i++) {
        const res = await request(`${server.url}${path}`);
        await res.body.text();
      }
      return (performance.now() - started) / n;
    };
    await latency('/healthz', 50);
    await latency('/api/track-record', 5);
    const healthMs = await latency('/healthz', 200);
    const trAll = await latency('/api/track-record?window=all', 20);
    const tr30 = await latency('/api/track-record?window=30d', 20);
    console.log(
      `track-record query over ${firstIds.length.toLocaleString()} outcomes (projection caught up with the log in ${catchUpS.toFixed(1)} s at start)`,
    );
    console.table({
      '/healthz': { ms: Number(healthMs.toFixed(3)), ratio: 1 },
      'track-record all': { ms: Number(trAll.toFixed(3)), ratio: Number((trAll / healthMs).toFixed(1)) },
      'track-record 30d': { ms: Number(tr30.toFixed(3)), ratio: Number((tr30 / healthMs).toFixed(1)) },
    });
    await server.close();
    const answers = await trackRecordAnswers();

    // ---- outcome projection throughput at N events, in memory, folded chunk by chunk ----
    const n = verdicts;
    const chunk = 20_000;
    let verdictState = latestVerdictsProjection.initial();
    let state = trackRecordProjection.initial();
    let baseS = 0;
    let foldS = 0;
    for (let from = 0; from < n; from += chunk) {
      const verdictEvents: RecordedEvent[] = [];
      const outcomeEvents: RecordedEvent[] = [];
      for (let i = from; i < Math.min(n, from + chunk); i++) {
        const v = syntheticVerdict(i % MARKETS, Math.floor(i / MARKETS), perMarket, null, FULL_INPUTS);
        verdictEvents.push(recorded('VerdictRecorded', v, i + 1, 'verdicts-x'));
        const o = syntheticOutcome(v, deterministicId('v', i), 'verdicts-x', i);
        outcomeEvents.push(recorded('VerdictOutcomeResolved', o, i + 1, 'o'));
      }
      t = performance.now();
      for (const e of verdictEvents) verdictState = latestVerdictsProjection.evolve(verdictState, e);
      baseS += (performance.now() - t) / 1000;
      t = performance.now();
      for (const e of outcomeEvents) state = trackRecordProjection.evolve(state, e);
      foldS += (performance.now() - t) / 1000;
    }
    console.log(
      `outcome projection: ${n.toLocaleString()} events, ${Object.keys(state).length.toLocaleString()} day cells`,
    );
    console.table({
      'latest-verdicts fold (baseline)': { 'events/s': Math.round(n / baseS), ratio: 1 },
      'track-record fold': { 'events/s': Math.round(n / foldS), ratio: Number((baseS / foldS).toFixed(2)) },
    });
    return {
      ndjsonCpuRatio: ndCpuRatio,
      parquetCpuRatio: pqCpuRatio,
      ndjsonRatio: ndRate / rawRate,
      parquetRatio: pqRate / rawRate,
      ndjsonFirstRowMs: nd.firstByteMs,
      ndjsonRssGrowthMb: nd.rssGrowth / 1e6,
      ndjsonLiveHeapMb: ndLive / 1e6,
      trackRecordMs: trAll,
      trackRecordFreshMs: answers.freshMs,
      trackRecordCachedMs: answers.cachedMs,
      trackRecordRouteCachedMs: answers.routeCachedMs,
      foldPerSec: n / foldS,
      fairnessP99Ratio: fair.ratio,
      fairnessP99Ms: fair.p99,
      parquetFairnessP99Ratio: fairParquet.ratio,
      parquetFairnessP99Ms: fairParquet.p99,
    };
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === pathToFileURL(process.argv[1]!).href) await run();
