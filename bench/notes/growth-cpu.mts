import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const sides = {
  old: await import(`${process.env.OLD_ROOT}/adapters/event-store/lmdb.ts`),
  new: await import('../../adapters/event-store/lmdb.ts'),
};
const cpu = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};
for (let round = 0; round < 3; round++)
  for (const [name, mod] of Object.entries(sides)) {
    const dir = mkdtempSync(join(tmpdir(), 'cpu-'));
    const store = await mod.openLmdbEventStore({ path: join(dir, 's') });
    const streams = Array.from({ length: 50 }, (_, i) => `quota-${String(i).padStart(64, 'a')}`);
    const revs = new Map<string, number>();
    // Warm: 200 appends.
    const N = 4000;
    let t = cpu();
    for (let i = 0; i < N; i++) {
      const s = streams[i % 50]!;
      const r = revs.get(s) ?? -1;
      await store.append(s, [{ type: 'QuotaDebitsRecorded', data: { subject: s.slice(6), units: 1 } }], {
        expectedRevision: r < 0 ? 'no_stream' : r,
      });
      revs.set(s, r + 1);
    }
    const append = (cpu() - t) / N;
    t = cpu();
    let n = 0;
    for (let i = 0; i < 2000; i++) {
      const s = streams[i % 50]!;
      const last = revs.get(s)!;
      n += (await store.readStream(s, { fromRevision: Math.max(0, last - 63), maxCount: 64 })).length;
    }
    const page = (cpu() - t) / 2000;
    t = cpu();
    for (let i = 0; i < 20000; i++) await store.streamRevision(streams[i % 50]!);
    const rev = (cpu() - t) / 20000;
    console.log(
      `${name} round ${round}: append ${append.toFixed(1)} µs CPU, readStream page of 64 ${page.toFixed(1)} µs (${(page / 64).toFixed(2)} µs/event), streamRevision ${rev.toFixed(2)} µs`,
    );
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
