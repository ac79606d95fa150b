/**
 * Log growth, in two parts, each over >= 3 rounds (min / median / max).
 *
 * 1. Encoding: bytes on disk per event of the realistic mix (bench/rebuild-event-mix.ts) in the
 *    LMDB store as it writes events now (format 2: msgpack records, identifiers as bytes), against
 *    the same events and indexes written as format 1 records (identifiers as text: the store
 *    before) and as plain msgpack maps (before records), in the same run. Bytes are LMDB's
 *    high-water mark (pages in use x page size) after the whole mix.
 *
 * 2. One year: the real writers' events in one LMDB log, over simulated seconds of the full
 *    schedule (100 markets x 11 timeframes: a verdict and its outcome per close, 2.78 of each a
 *    second) plus 10 keyed calls a second debited through the real QuotaMeter (no lease: an event
 *    per call, the events it really writes). The calls come in "bursts of C": each key's calls C
 *    at once (an agent asking for C coins in parallel), one burst after the other, keys
 *    independent; C does not change the events written, one per call either way.
 *    The growth is of the pages the log's trees hold (a compacting copy, less the export rows;
 *    not the free pages kept for reuse), measured between the middle and the end of the run (the log's marginal growth, without the
 *    fixed share of its first pages), and scaled to a year. The schedule's rounds also fold the
 *    export-rows projection (services/history/export-row-store.ts) over the same log, as the
 *    service does in the same data directory, and print its year beside the log's: it is not
 *    the log, but it is disk the schedule fills.
 *
 *   npx tsx bench/growth.bench.ts [--events=100000] [--rounds=3] [--seconds=4000] [--bursts=1,4,16,64]
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { MemoryCache } from '../adapters/cache/memory.ts';
import { EVENT_ENCODING, type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { NewEvent, RecordedEvent } from '../contracts/envelope.ts';
import { TIMEFRAME_MS, TIMEFRAMES } from '../contracts/market.ts';
import { ExportRowStore, OUTCOMES_DB, VERDICTS_DB } from '../services/history/export-row-store.ts';
import { QuotaMeter } from '../services/metering/quota-meter.ts';
import { debitedUnits } from '../services/metering/quota-projection.ts';
import type { QuotaSubject } from '../services/metering/windows.ts';
import { atMost, recordTarget, whenMain } from './harness.ts';
import { appendEventMix, eventMix } from './rebuild-event-mix.ts';

const DAY = 86_400_000;
const YEAR_S = 365 * 86_400;
const MARKETS = 100;
const CALLS_PER_S = 10;
/** Keys the keyed calls are spread over. */
const KEYS = 50;
/** Simulated seconds appended per step: the schedule's events in one turn, the calls' bursts after. */
const STEP_S = 100;
const TARGET_GB = 100;

function usedBytes(root: RootDatabase): number {
  const stats = root.getStats() as { lastPageNumber: number; pageSize: number };
  return (stats.lastPageNumber + 1) * stats.pageSize;
}

interface TreeStats {
  treeBranchPageCount: number;
  treeLeafPageCount: number;
  overflowPages: number;
  pageSize: number;
}
/** Pages the trees `names` hold (their entries' pages; a database of duplicates leaves out its lists' pages). */
function treeBytes(store: LmdbEventStore, names: string[]): number {
  return names.reduce((sum, name) => {
    const s = store.root.openDB({ name }).getStats() as TreeStats;
    return sum + (s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages) * s.pageSize;
  }, 0);
}

/**
 * Bytes of the log: of a compacting copy of the environment (every page some tree holds, the
 * lists of the stream index's duplicates included, which LMDB's per-database counts leave out;
 * without the free pages LMDB keeps for reuse: at a small size those, the copies of the last
 * commits' pages, are a large fixed share of the file that a year of small commits does not
 * grow), less the export-rows projection's trees when it shares the environment.
 */
async function logBytes(store: LmdbEventStore, dir: string, withRows: boolean): Promise<number> {
  // A directory, as the store's environment is (noSubdir false): the copy is its data.mdb.
  const copy = join(dir, `copy-${Date.now()}`);
  mkdirSync(copy);
  await store.root.backup(copy, true);
  const bytes = statSync(join(copy, 'data.mdb')).size;
  rmSync(copy, { recursive: true, force: true });
  return bytes - (withRows ? treeBytes(store, [VERDICTS_DB, OUTCOMES_DB]) : 0);
}

interface Spread {
  min: number;
  median: number;
  max: number;
}
function spread(xs: number[]): Spread {
  const v = [...xs].sort((a, b) => a - b);
  return { min: v[0]!, median: v[Math.floor(v.length / 2)]!, max: v[v.length - 1]! };
}
const fmt = (x: Spread, d = 0) => `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;

/** Part 1: the same events in the three encodings. */
async function encodingRound(events: number) {
  const dir = mkdtempSync(join(tmpdir(), 'bench-growth-'));
  try {
    const store = await openLmdbEventStore({ path: join(dir, 'store') });
    await appendEventMix(store, events);
    const current = usedBytes(store.root);
    const all = await store.readAll();
    await store.close();
    const rewrite = async (name: string, encoding: object) => {
      const env = open({ path: join(dir, name), noSubdir: false, maxDbs: 16 });
      const db = env.openDB<RecordedEvent, number>({ name: 'events', ...encoding });
      const streams = env.openDB<number, [string, number]>({ name: 'streams' });
      const ids = env.openDB<number, string>({ name: 'ids' });
      // In transactions of the size the mix was appended in.
      for (let i = 0; i < all.length; i += 2_000) {
        await env.transaction(() => {
          for (const e of all.slice(i, i + 2_000)) {
            db.putSync(e.position, e, { append: true });
            streams.putSync([e.stream, e.revision], e.position);
            ids.putSync(e.id, e.position);
          }
        });
      }
      const bytes = usedBytes(env);
      await env.close();
      return bytes;
    };
    const format1 = await rewrite('format1', EVENT_ENCODING);
    const plain = await rewrite('plain', {});
    return { current: current / events, format1: format1 / events, plain: plain / events };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The schedule's events in the order the mix makes them, verdicts and outcomes drawn apart. */
async function scheduleSource() {
  const mix = await eventMix({ markets: MARKETS });
  const queues = new Map<string, [string, NewEvent][]>([
    ['VerdictRecorded', []],
    ['VerdictOutcomeResolved', []],
  ]);
  return (type: 'VerdictRecorded' | 'VerdictOutcomeResolved'): [string, NewEvent] => {
    const queue = queues.get(type)!;
    while (queue.length === 0) {
      const next = mix.next();
      queues.get(next[1].type)?.push(next);
    }
    return queue.shift()!;
  };
}

interface YearRound {
  /** Bytes the log grew by per simulated second, between the middle and the end of the run. */
  perSecond: number;
  /** The same for the export-rows projection (schedule-only rounds): verdict and outcome records. */
  exportRowsPerSecond: { verdicts: number; outcomes: number } | null;
  events: number;
  calls: number;
  debitEvents: number;
}

/**
 * Part 2: `seconds` simulated seconds of the schedule plus, when `burst` is set, 10 keyed calls a
 * second through QuotaMeter, each key's calls `burst` at once.
 */
async function yearRound(seconds: number, burst: number | null): Promise<YearRound> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-growth-year-'));
  const store: LmdbEventStore = await openLmdbEventStore({ path: join(dir, 'store') });
  const meter = new QuotaMeter({
    cache: new MemoryCache(),
    store,
    plans: {
      free: { monthly: 1e12, daily: null },
      starter: { monthly: 1e12, daily: null },
      pro: { monthly: 1e12, daily: null },
    },
  });
  // As the service names them: a key's subject is the sha256 of the key.
  const keys: QuotaSubject[] = Array.from({ length: KEYS }, (_, i) => ({
    id: createHash('sha256').update(`bench key ${i}`).digest('hex'),
    kind: 'key',
    plan: 'pro',
  }));
  // Folded only with the schedule alone: the calls add nothing to it.
  const rows = burst === null ? new ExportRowStore(store, store.root) : null;
  await rows?.start();
  const rowBytes = async () => {
    await rows!.waitFor(await store.headPosition(), 600_000);
    return { verdicts: treeBytes(store, [VERDICTS_DB]), outcomes: treeBytes(store, [OUTCOMES_DB]) };
  };
  let rowsMiddle = { verdicts: 0, outcomes: 0 };
  const next = await scheduleSource();
  const schedulePerS = (MARKETS * TIMEFRAMES.reduce((a, tf) => a + DAY / TIMEFRAME_MS[tf], 0)) / 86_400;
  let scheduleDue = 0;
  let middle = 0;
  try {
    for (let t = 0; t < seconds; t += STEP_S) {
      if (t === Math.floor(seconds / 2 / STEP_S) * STEP_S) {
        if (rows) await rows.waitFor(await store.headPosition(), 600_000);
        middle = await logBytes(store, dir, rows !== null);
        if (rows) rowsMiddle = await rowBytes();
      }
      scheduleDue += schedulePerS * STEP_S;
      const batch = new Map<string, NewEvent[]>();
      for (; scheduleDue >= 1; scheduleDue--) {
        for (const type of ['VerdictRecorded', 'VerdictOutcomeResolved'] as const) {
          const [stream, event] = next(type);
          const list = batch.get(stream);
          if (list) list.push(event);
          else batch.set(stream, [event]);
        }
      }
      await Promise.all([...batch].map(([stream, events]) => store.append(stream, events)));
      if (burst === null) continue;
      // The step's calls as bursts, dealt round the keys; a key's bursts one after the other.
      const bursts = Math.round((CALLS_PER_S * STEP_S) / burst);
      const perKey = Array.from({ length: KEYS }, () => 0);
      for (let b = 0; b < bursts; b++) perKey[b % KEYS]!++;
      await Promise.all(
        keys.map(async (key, k) => {
          for (let b = 0; b < perKey[k]!; b++) {
            await Promise.all(Array.from({ length: burst }, () => meter.debit(key, 'get_trade_call')));
          }
        }),
      );
    }
    if (rows) await rows.waitFor(await store.headPosition(), 600_000);
    const end = await logBytes(store, dir, rows !== null);
    const rowsEnd = rows ? await rowBytes() : null;
    const all = await store.readAll();
    const span = seconds - Math.floor(seconds / 2 / STEP_S) * STEP_S;
    return {
      perSecond: (end - middle) / span,
      exportRowsPerSecond: rowsEnd
        ? {
            verdicts: (rowsEnd.verdicts - rowsMiddle.verdicts) / span,
            outcomes: (rowsEnd.outcomes - rowsMiddle.outcomes) / span,
          }
        : null,
      events: all.length,
      calls: all.reduce((sum, e) => sum + debitedUnits(e), 0),
      debitEvents: all.filter((e) => debitedUnits(e) > 0).length,
    };
  } finally {
    await rows?.stop();
    await meter.counters.stop();
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run(
  options: { events?: number; rounds?: number; seconds?: number; bursts?: number[] } = {},
) {
  const events = options.events ?? 100_000;
  const rounds = options.rounds ?? 3;
  const seconds = options.seconds ?? 4_000;
  const bursts = options.bursts ?? [1, 4, 16, 64];

  const enc = [];
  for (let i = 0; i < rounds; i++) enc.push(await encodingRound(events));
  console.log(
    `1. encoding: ${events.toLocaleString('en')} events of the mix; rounds: ${rounds} (min / median / max)`,
  );
  console.log(
    `  bytes/event on disk, format 2 (records, identifiers as bytes)  ${fmt(spread(enc.map((r) => r.current)))}`,
  );
  console.log(
    `  bytes/event on disk, format 1 (records, text: before)          ${fmt(spread(enc.map((r) => r.format1)))}`,
  );
  console.log(
    `  bytes/event on disk, plain msgpack maps                         ${fmt(spread(enc.map((r) => r.plain)))}`,
  );
  console.log(
    `  format 2 / format 1                                             ${fmt(spread(enc.map((r) => r.current / r.format1)), 2)}`,
  );
  console.log(
    `  format 2 / plain                                                ${fmt(spread(enc.map((r) => r.current / r.plain)), 2)}`,
  );

  const gb = (perSecond: number) => (perSecond * YEAR_S) / 1e9;
  console.log(
    `2. one year (log growth per simulated second x ${YEAR_S.toLocaleString('en')}), over ${seconds.toLocaleString('en')} simulated s per round; rounds: ${rounds}`,
  );
  const schedule: YearRound[] = [];
  for (let i = 0; i < rounds; i++) schedule.push(await yearRound(seconds, null));
  const scheduleGb = spread(schedule.map((r) => gb(r.perSecond)));
  console.log(`  full schedule alone (verdicts + outcomes, 5.6 events/s): ${fmt(scheduleGb)} GB`);
  const rowsOf = (r: YearRound) => r.exportRowsPerSecond!.verdicts + r.exportRowsPerSecond!.outcomes;
  const exportRowsGb = spread(schedule.map((r) => gb(rowsOf(r))));
  console.log(
    `  its export-rows projection (same data directory, not the log): ${fmt(exportRowsGb)} GB (verdict records ${fmt(spread(schedule.map((r) => gb(r.exportRowsPerSecond!.verdicts))))}, outcome records ${fmt(spread(schedule.map((r) => gb(r.exportRowsPerSecond!.outcomes))))}); log + projection ${fmt(spread(schedule.map((r) => gb(r.perSecond + rowsOf(r)))))} GB`,
  );
  // What the target leaves the keyed calls once the schedule has taken its share: a bound on the
  // log each call may add, to read beside the bytes per call measured for each burst size.
  const leftGb = TARGET_GB - scheduleGb.median;
  console.log(
    leftGb > 0
      ? `  the ${TARGET_GB} GB target leaves ${CALLS_PER_S} keyed calls/s ${leftGb.toFixed(1)} GB a year: ${((leftGb * 1e9) / (CALLS_PER_S * YEAR_S)).toFixed(1)} B of log per call`
      : `  the schedule alone takes the ${TARGET_GB} GB target: nothing is left for keyed calls`,
  );
  const results: { burst: number; total: Spread; callsPerEvent: Spread; bytesPerCall: Spread }[] = [];
  for (const burst of bursts) {
    const runs: YearRound[] = [];
    for (let i = 0; i < rounds; i++) runs.push(await yearRound(seconds, burst));
    const total = spread(runs.map((r) => gb(r.perSecond)));
    const callsPerEvent = spread(runs.map((r) => r.calls / r.debitEvents));
    const bytesPerCall = spread(runs.map((r, i) => (r.perSecond - schedule[i]!.perSecond) / CALLS_PER_S));
    results.push({ burst, total, callsPerEvent, bytesPerCall });
    const met = total.max <= TARGET_GB ? 'MET' : total.median <= TARGET_GB ? 'met on the median' : 'MISSED';
    console.log(
      recordTarget({
        bench: 'growth',
        measure: `log per year, the schedule + 10 keyed calls/s in bursts of ${burst} (median)`,
        figure: Math.round(total.median),
        unit: ' GB',
        target: atMost(TARGET_GB),
      }),
    );
    console.log(
      `  + 10 keyed calls/s in bursts of ${String(burst).padStart(2)}: ${fmt(total)} GB  (calls per debit event ${fmt(callsPerEvent, 1)}, ~${bytesPerCall.median.toFixed(0)} B of log per call)  target <= ${TARGET_GB} GB: ${met}`,
    );
  }
  return { encoding: enc, scheduleGb, exportRowsGb, results };
}

await whenMain(
  import.meta.url,
  { events: 'number', rounds: 'number', seconds: 'number', bursts: 'numbers' },
  run,
);
