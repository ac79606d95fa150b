import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open } from 'lmdb';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { EVENT_ENCODING, openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { encodeStoredEvent } from '../../adapters/event-store/lmdb-codec.ts';
import { eventMix } from '../../bench/rebuild-event-mix.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { QuotaMeter } from '../../services/metering/quota-meter.ts';

const N = Number(process.env.N ?? 20000);
const dir = mkdtempSync(join(tmpdir(), 'levers-'));
const store = await openLmdbEventStore({ path: join(dir, 's') });
const meter = new QuotaMeter({
  cache: new MemoryCache(),
  store,
  plans: {
    free: { monthly: 1e12, daily: null },
    starter: { monthly: 1e12, daily: null },
    pro: { monthly: 1e12, daily: null },
  },
});
const keys = Array.from({ length: 50 }, (_, i) => ({
  id: createHash('sha256').update(`bench key ${i}`).digest('hex'),
  kind: 'key' as const,
  plan: 'pro' as const,
}));
const mix = await eventMix({ markets: 100 });
let v = 0,
  o = 0;
while (v < N || o < N) {
  const batch: Promise<unknown>[] = [];
  for (let i = 0; i < 50; i++) {
    const [s, e] = mix.next();
    if (e.type === 'VerdictRecorded' && v < N) {
      v++;
      batch.push(store.append(s, [e]));
    }
    if (e.type === 'VerdictOutcomeResolved' && o < N) {
      o++;
      batch.push(store.append(s, [e]));
    }
  }
  await Promise.all(batch);
}
for (let i = 0; i < N / 50; i++) await Promise.all(keys.map((k) => meter.debit(k, 'get_trade_call')));
const all = await store.readAll();
await meter.counters.stop();
await store.close();
const byType = new Map<string, RecordedEvent[]>();
for (const e of all) {
  const l = byType.get(e.type) ?? [];
  l.push(e);
  byType.set(e.type, l);
}

type Variant = { name: string; dbOpts?: object; encode?: (e: RecordedEvent) => unknown };
const variants: Variant[] = [
  { name: 'current' },
  { name: 'lz4 default dict, threshold 0', dbOpts: { compression: { threshold: 0 } } },
  {
    name: 'lz4 no dict, threshold 0',
    dbOpts: { compression: { threshold: 0, dictionary: Buffer.alloc(0) } },
  },
];
function treeBytes(env: any, name: string) {
  const s = env.openDB({ name }).getStats();
  return (s.treeBranchPageCount + s.treeLeafPageCount + s.overflowPages) * s.pageSize;
}
if (!process.env.SKIPV)
  for (let round = 0; round < 2; round++)
    for (const variant of variants) {
      const line: string[] = [];
      for (const [type, events] of byType) {
        const d = join(dir, `v${round}-${variant.name.replace(/\W/g, '')}-${type}`);
        const env = open({ path: d, noSubdir: false, maxDbs: 16 });
        const db = env.openDB<any, number>({ name: 'events', ...EVENT_ENCODING, ...(variant.dbOpts ?? {}) });
        const t0 = process.cpuUsage();
        for (let i = 0; i < events.length; i += 50) {
          await env.transaction(() => {
            for (const e of events.slice(i, i + 50))
              db.putSync(e.position, (variant.encode ?? encodeStoredEvent)(e), { append: true });
          });
        }
        const t1 = process.cpuUsage(t0);
        const env2 = open({ path: d, noSubdir: false, maxDbs: 16 });
        const db2 = env2.openDB<any, number>({
          name: 'events',
          ...EVENT_ENCODING,
          ...(variant.dbOpts ?? {}),
        });
        const t2 = process.cpuUsage();
        let n = 0;
        for (const { value } of db2.getRange({ start: 1 })) n += value ? 1 : 0;
        const t3 = process.cpuUsage(t2);
        line.push(
          `${type} ${(treeBytes(env, 'events') / events.length).toFixed(1)} B put ${((t1.user + t1.system) / events.length).toFixed(1)}us read ${((t3.user + t3.system) / n).toFixed(2)}us`,
        );
        await env.close();
        await env2.close();
      }
      console.log(variant.name.padEnd(34), line.join(' | '));
    }
// ---- index variants ----
const hexTail = (s: string): Buffer => {
  const m = /^(.*?)([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32,})$/.exec(s);
  if (!m) return Buffer.concat([Buffer.from([0]), Buffer.from(s, 'latin1')]);
  return Buffer.concat([
    Buffer.from([m[1]!.length]),
    Buffer.from(m[1]!, 'latin1'),
    Buffer.from(m[2]!.replace(/-/g, ''), 'hex'),
  ]);
};
const rev6 = (r: number) => {
  const b = Buffer.alloc(6);
  b.writeUIntBE(r, 0, 6);
  return b;
};
type IdxVariant = { name: string; dbOpts: object; put: (db: any, e: RecordedEvent) => void };
const idxVariants: IdxVariant[] = [
  { name: 'text [stream, rev]', dbOpts: {}, put: (db, e) => db.putSync([e.stream, e.revision], e.position) },
  {
    name: 'compact bytes+rev6',
    dbOpts: { keyEncoding: 'binary' },
    put: (db, e) => {
      const c = hexTail(e.stream);
      db.putSync(Buffer.concat([Buffer.from([c.length]), c, rev6(e.revision)]), e.position);
    },
  },
  {
    name: 'dupfixed text',
    dbOpts: { dupSort: true, encoding: 'binary' },
    put: (db, e) => db.putSync(e.stream, Buffer.concat([rev6(e.revision), rev6(e.position)])),
  },
  {
    name: 'dup ordered-binary [rev,pos]',
    dbOpts: { dupSort: true, encoding: 'ordered-binary' },
    put: (db, e) => db.putSync(e.stream, [e.revision, e.position]),
  },
  {
    name: 'dupfixed compact',
    dbOpts: { dupSort: true, encoding: 'binary', keyEncoding: 'binary' },
    put: (db, e) => db.putSync(hexTail(e.stream), Buffer.concat([rev6(e.revision), rev6(e.position)])),
  },
];
for (let round = 0; round < Number(process.env.IROUNDS ?? 2); round++)
  for (const variant of idxVariants) {
    const line: string[] = [];
    for (const [type, events] of byType) {
      const d = join(dir, `i${round}-${variant.name.replace(/\W/g, '')}-${type}`);
      const env = open({ path: d, noSubdir: false, maxDbs: 16 });
      const db = env.openDB<any, any>({ name: 'streams', ...variant.dbOpts });
      const ids = env.openDB<any, any>({ name: 'ids' });
      for (let i = 0; i < events.length; i += 50) {
        await env.transaction(() => {
          for (const e of events.slice(i, i + 50)) {
            variant.put(db, e);
            if (round === 0 && variant === idxVariants[0]) {
              const b = Buffer.from(e.id.replace(/-/g, ''), 'hex');
              ids.putSync(
                b[6]! >> 4 === 7 ? Buffer.concat([Buffer.from([255, 255, 255, 255]), b]) : b,
                e.position,
              );
            }
          }
        });
      }
      const st = env.getStats() as any;
      line.push(
        `${type} ${(treeBytes(env, 'streams') / events.length).toFixed(1)} B file ${(((st.lastPageNumber + 1) * st.pageSize) / events.length).toFixed(1)}` +
          (round === 0 && variant === idxVariants[0]
            ? ` (ids ${(treeBytes(env, 'ids') / events.length).toFixed(1)})`
            : ''),
      );
      await env.close();
    }
    console.log(variant.name.padEnd(34), line.join(' | '));
  }
rmSync(dir, { recursive: true, force: true });
