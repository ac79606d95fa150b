/**
 * Log growth: bytes on disk per event of the realistic mix (bench/rebuild-event-mix.ts) in the
 * LMDB store as it encodes events now (msgpack records with shared structures), against the same
 * events and indexes written as plain msgpack maps (the encoding before), in the same run; then
 * the one-year projection for the full schedule (100 markets x 11 timeframes, a verdict and its
 * outcome per close) plus 10 keyed calls a second (one QuotaDebited each, or coalesced).
 * Bytes are LMDB's high-water mark (pages in use x page size), measured over >= 3 runs.
 *
 *   npx tsx bench/growth.bench.ts [--events=100000] [--rounds=3]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { open, type RootDatabase } from 'lmdb';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { TIMEFRAME_MS, TIMEFRAMES } from '../contracts/market.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

const DAY = 86_400_000;
const YEAR_DAYS = 365;

function usedBytes(root: RootDatabase): number {
  const stats = root.getStats() as { lastPageNumber: number; pageSize: number };
  return (stats.lastPageNumber + 1) * stats.pageSize;
}

interface Round {
  records: number;
  plain: number;
  byType: Map<string, { count: number; bytes: number }>;
}

async function round(events: number): Promise<Round> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-growth-'));
  try {
    const store = await openLmdbEventStore({ path: join(dir, 'store') });
    await appendEventMix(store, events);
    const records = usedBytes(store.root);
    const all = await store.readAll();
    await store.close();

    // The same events and indexes, values as plain msgpack maps, in transactions of the same size.
    const env = open({ path: join(dir, 'plain'), noSubdir: false, maxDbs: 16 });
    const plainEvents = env.openDB<RecordedEvent, number>({ name: 'events' });
    const streams = env.openDB<number, [string, number]>({ name: 'streams' });
    const ids = env.openDB<number, string>({ name: 'ids' });
    for (let i = 0; i < all.length; i += 2_000) {
      await env.transaction(() => {
        for (const e of all.slice(i, i + 2_000)) {
          plainEvents.putSync(e.position, e, { append: true });
          streams.putSync([e.stream, e.revision], e.position);
          ids.putSync(e.id, e.position);
        }
      });
    }
    const plain = usedBytes(env);
    // Bytes of each type's value as the store encodes it (shared structures), for the projection.
    const byType = new Map<string, { count: number; bytes: number }>();
    const reopened = await openLmdbEventStore({ path: join(dir, 'store') });
    const eventsDb = (reopened as unknown as { events: { getBinary(k: number): Buffer | undefined } }).events;
    for (const e of all) {
      const t = byType.get(e.type) ?? { count: 0, bytes: 0 };
      t.count++;
      t.bytes += eventsDb.getBinary(e.position)?.length ?? 0;
      byType.set(e.type, t);
    }
    await reopened.close();
    await env.close();
    return { records, plain, byType };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export async function run(options: { events?: number; rounds?: number } = {}) {
  const events = options.events ?? 100_000;
  const rounds = options.rounds ?? 3;
  const results: Round[] = [];
  for (let i = 0; i < rounds; i++) results.push(await round(events));
  const per = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b);
    return { min: v[0]!, median: v[Math.floor(v.length / 2)]!, max: v[v.length - 1]! };
  };
  const rec = per(results.map((r) => r.records / events));
  const pla = per(results.map((r) => r.plain / events));
  const ratio = per(results.map((r) => r.records / r.plain));
  const f = (x: { min: number; median: number; max: number }, d = 0) =>
    `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;
  console.log(`${events.toLocaleString('en')} events of the mix; rounds: ${rounds} (min / median / max)`);
  console.log(`  bytes/event on disk, store (msgpack records)     ${f(rec)}`);
  console.log(`  bytes/event on disk, plain msgpack (before)      ${f(pla)}`);
  console.log(`  records / plain                                  ${f(ratio, 2)}`);

  // One year: the value bytes of each type plus its share of the index and page overhead.
  const last = results[results.length - 1]!;
  const valueBytes = [...last.byType.values()].reduce((a, t) => a + t.bytes, 0);
  const overhead = (rec.median * events - valueBytes) / events;
  const avg = (type: string) => {
    const t = last.byType.get(type)!;
    return t.bytes / t.count + overhead;
  };
  const closesPerDay = TIMEFRAMES.reduce((a, tf) => a + DAY / TIMEFRAME_MS[tf], 0);
  const verdictsPerYear = 100 * closesPerDay * YEAR_DAYS;
  const schedule = verdictsPerYear * (avg('VerdictRecorded') + avg('VerdictOutcomeResolved'));
  const debitsPerYear = 10 * 86_400 * YEAR_DAYS;
  const debits = debitsPerYear * avg('QuotaDebited');
  const gb = (b: number) => `${(b / 1e9).toFixed(0)} GB`;
  console.log(
    `  per event incl. indexes: verdict ${avg('VerdictRecorded').toFixed(0)} B, outcome ${avg('VerdictOutcomeResolved').toFixed(0)} B, debit ${avg('QuotaDebited').toFixed(0)} B`,
  );
  console.log(
    `  one year, full schedule (${(verdictsPerYear / 1e6).toFixed(1)} M verdicts + as many outcomes): ${gb(schedule)}`,
  );
  console.log(
    `  + 10 keyed calls/s, one debit event per call (${(debitsPerYear / 1e6).toFixed(0)} M): ${gb(debits)}  total ${gb(schedule + debits)}`,
  );
  for (const k of [10, 100]) {
    console.log(
      `  + 10 keyed calls/s, debits coalesced ${k} calls per event: ${gb(debits / k)}  total ${gb(schedule + debits / k)}`,
    );
  }
  console.log(
    `  target: <= 100 GB a year ${schedule + debits <= 100e9 ? 'ok' : 'MISSED without coalescing'}`,
  );
  return { rec, pla, ratio: ratio.median, schedule, debits };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { events: { type: 'string' }, rounds: { type: 'string' } } });
  await run({
    ...(values.events ? { events: Number(values.events) } : {}),
    ...(values.rounds ? { rounds: Number(values.rounds) } : {}),
  });
}
