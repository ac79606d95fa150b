import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type LmdbEventStore, openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import type { NewEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { HistoryTrailer } from '../../contracts/history.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { buildApp } from '../api/app.ts';
import { generateApiKey } from '../keys/key-material.ts';
import { callerPlugin } from '../metering/caller.ts';
import { Readiness } from '../shared/readiness.ts';
import { ExportRowStore } from './export-row-store.ts';
import { trackRecordProjection } from './projections.ts';
import { RecordCache } from './record-cache.ts';
import { type HistoryRoutesDeps, historyRoutes } from './routes.ts';
import type { StoredRows } from './scan.ts';

/**
 * Flat memory at scale: a real LMDB log of EVENTS verdicts, the whole of it exported as NDJSON
 * through real HTTP, the heap measured after a forced collection as the rows go by. An export
 * that held its range (rows, a page list, the response body) would grow with the hundreds of
 * megabytes it sends; a streamed one stays within a few pages. No time is asserted: speed is
 * measured by bench/history.bench.ts (at 1M verdicts).
 *
 * What an export holds per row (or per page of rows) is what this finds, so the bound is per
 * row: 64 B of heap a row, under what a held row costs (about 1 KB of NDJSON; a held Buffer view
 * of it, its bytes outside the heap, still about 100 B). At 1M verdicts and 64 MB the bound was
 * the same 64 B a row and the export sent the same 16.6 bytes per byte of bound, and the peak
 * a streamed export reached was the same there as here (1.4-2.0 MB): a quarter of the rows
 * finds what the million did, for a quarter of the seeding, folding and exporting.
 */
const EVENTS = 250_000;
const STREAMS = 100;
const BATCH = 2_500;
const SAMPLE_EVERY = 12_500;
const HEAP_BOUND = EVENTS * 64;

const MINUTE = 60_000;
/** Long revealed: the verdicts' content leaves, as an analyst's full export would carry. */
const START = Date.parse('2024-01-01T00:00:00Z');

/**
 * A cheap verdict: the content has the stored shape, the hash chain is a counter (this suite
 * measures memory; chains are checked by the API and CLI suites). Validation is skipped on
 * purpose: 250,000 zod parses would be most of the seeding time.
 */
function verdict(stream: number, n: number): NewEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'> {
  const x = Math.sin(stream * 7919 + n);
  const hash = (stream * 1e7 + n).toString(16).padStart(64, '0');
  const prevHash = n === 0 ? null : (stream * 1e7 + n - 1).toString(16).padStart(64, '0');
  return {
    type: 'VerdictRecorded',
    id: `00000000-0000-4000-8000-${(stream * 1e7 + n).toString(16).padStart(12, '0')}`,
    data: {
      exchange: stream % 2 ? 'OKX' : 'BINANCE',
      coin: `C${stream}`,
      timeframe: '5m',
      call: x > 0.2 ? 'BUY' : x < -0.2 ? 'SELL' : 'HOLD',
      confidence: 40 + (n % 30),
      score: x,
      regime: 'ranging',
      price: 100 + 10 * x,
      candleCloseTime: START + n * 5 * MINUTE,
      feed: 'replay',
      engineVersion: 'memory-test',
      inputs: { rsi: 50 + 20 * x, macd: x / 10, adx: 25, cci: 100 * x, stoch: 50, perp_lean: null },
      hash,
      prevHash,
      trigger: 'schedule',
    },
  };
}

/** gc() without starting node with --expose-gc. */
function exposeGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

let dir: string;
let store: LmdbEventStore;
let app: FastifyInstance;
let url: string;
let storedApp: FastifyInstance | null = null;
let exportRows: ExportRowStore | null = null;
const KEY = generateApiKey().key;

/**
 * The history routes alone on a real port. The slice's projections (key registry, track record,
 * outcome index) would each fold the whole 250,000-event log at start, tripling the CPU of this
 * suite without touching what it measures: the key is taken as live, the track record's runner is
 * not started (an empty record), and the outcome index states what is true of this log, that no
 * verdict has an outcome.
 */
async function startRoutes(
  extra: Partial<HistoryRoutesDeps> = {},
): Promise<{ app: FastifyInstance; url: string }> {
  const config = loadConfig({ EVENT_STORE: 'memory', NODE_ENV: 'test', LOG_LEVEL: 'silent' });
  const logger = pino({ level: 'silent' });
  const keys: Parameters<typeof callerPlugin>[0] = {
    resolve: async (key) => {
      if (key !== KEY) return { status: 'unknown' };
      return { status: 'active', record: { keyHash: 'k', plan: 'pro' } as never };
    },
  };
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [
      callerPlugin(keys),
      historyRoutes({
        store,
        records: new RecordCache(
          new ProjectionRunner(store, new MemoryProjectionStore(), trackRecordProjection),
        ),
        outcomes: { checkpoint: Number.POSITIVE_INFINITY, has: () => false },
        now: Date.now,
        logger,
        ...extra,
      }),
    ],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'history-scale-'));
  store = await openLmdbEventStore({ path: dir });
  const perStream = EVENTS / STREAMS;
  // Several streams' batches in flight at once share LMDB's commits and flushes.
  for (let n = 0; n < perStream; n += BATCH) {
    const appends: Promise<unknown>[] = [];
    for (let s = 0; s < STREAMS; s++) {
      const events = [];
      for (let j = n; j < Math.min(n + BATCH, perStream); j++) events.push(verdict(s, j));
      appends.push(store.append(`verdicts-M${s}-5m`, events));
      if (appends.length === 4) await Promise.all(appends.splice(0));
    }
    await Promise.all(appends);
  }
  ({ app, url } = await startRoutes());
}, 300_000);

afterAll(async () => {
  await app?.close();
  await storedApp?.close();
  await exportRows?.stop();
  await store?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/**
 * Exports the whole log as NDJSON from `at`, sampling the heap after a forced collection as rows go
 * by: every row and the trailer arrive, and what stayed on the heap is a small bound of the bytes.
 */
async function exportsFlat(at: string): Promise<void> {
  const gc = exposeGc();
  gc();
  const before = process.memoryUsage().heapUsed;
  // Below zero when the heap ends up smaller than it began (the sample still counts).
  let peak = Number.NEGATIVE_INFINITY;
  let samples = 0;
  let rows = 0;
  let bytes = 0;
  let next = SAMPLE_EVERY;
  let tail = '';
  const res = await request(`${at}/api/verdicts?trailer=true`, {
    headers: { authorization: `Bearer ${KEY}` },
  });
  expect(res.statusCode).toBe(200);
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    bytes += chunk.length;
    for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) rows++;
    // The last line (the trailer) is kept to check the export ended where it should.
    tail = (tail + chunk.toString('utf8', Math.max(0, chunk.length - 4096))).slice(-4096);
    if (rows >= next) {
      next += SAMPLE_EVERY;
      gc();
      samples++;
      peak = Math.max(peak, process.memoryUsage().heapUsed - before);
    }
  }
  const trailer = HistoryTrailer.parse(JSON.parse(tail.trimEnd().split('\n').at(-1)!));
  expect(trailer.rows).toBe(EVENTS);
  expect(rows).toBe(EVENTS + 1);
  // Hundreds of megabytes went through; what stayed on the heap is a small bound of that.
  expect(bytes).toBeGreaterThan(10 * HEAP_BOUND);
  expect(samples).toBeGreaterThanOrEqual(Math.floor(EVENTS / SAMPLE_EVERY) - 1);
  expect(peak).toBeLessThan(HEAP_BOUND);
}

it(`exports ${EVENTS.toLocaleString('en')} verdicts through HTTP with the heap flat`, async () => {
  expect(await store.headPosition()).toBeGreaterThanOrEqual(EVENTS);
  await exportsFlat(url);
}, 600_000);

it(`exports the same ${EVENTS.toLocaleString('en')} rows from the export-rows projection with the heap flat`, async () => {
  // The projection built from the log (a first boot on an existing log), then read by the export.
  exportRows = new ExportRowStore(store, store.root);
  await exportRows.start();
  await exportRows.waitFor(await store.headPosition(), 900_000);
  const rowsStore = exportRows;
  // Counted, not spied on: a spy keeps every page it returned, which is the heap this measures.
  let reads = 0;
  const counted: StoredRows = {
    get usable() {
      return rowsStore.usable;
    },
    get checkpoint() {
      return rowsStore.checkpoint;
    },
    get checkpointId() {
      return rowsStore.checkpointId;
    },
    verdictsAfter(after, upTo, limit) {
      reads++;
      return rowsStore.verdictsAfter(after, upTo, limit);
    },
    outcome: (id) => rowsStore.outcome(id),
    waitFor: (position, timeoutMs) => rowsStore.waitFor(position, timeoutMs),
  };
  let storedUrl: string;
  ({ app: storedApp, url: storedUrl } = await startRoutes({ stored: counted }));
  await exportsFlat(storedUrl);
  expect(reads).toBeGreaterThan(EVENTS / 1_000);
}, 1_200_000);
