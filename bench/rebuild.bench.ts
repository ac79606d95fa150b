/**
 * Rebuild with every real projection the service keeps (not a counter) over a realistic event
 * mix (bench/rebuild-event-mix.ts) in an LMDB store, against the baseline of reading the same
 * log with readAll in pages (decoding every event, folding nothing), alternating, in one run.
 * The issue's floor: 100,000 events/s for the rebuild.
 *
 *   npx tsx bench/rebuild.bench.ts [--events=300000] [--rounds=3] [--profile]
 *
 * With --profile, one more rebuild (not counted) runs under the CPU profiler and its breakdown
 * is printed. Each round also prints events per CPU second of the rebuild: on a shared machine
 * the wall-clock rate moves with the neighbours' load, the CPU cost much less.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import type { Projection } from '../projections/projection.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import {
  labelledVerdictsProjection,
  pendingOutcomesProjection,
  trackRecordProjection,
} from '../services/history/projections.ts';
import { keyRegistryProjection } from '../services/keys/key-registry.ts';
import { chatQuotaProjection } from '../services/knowledge/chat-quota.ts';
import { knowledgeFactsProjection } from '../services/knowledge/facts.ts';
import { quotaBalancesProjection } from '../services/metering/quota-projection.ts';
import { openPaymentsProjection } from '../services/payments/reconcile.ts';
import { PROJECTIONS } from '../services/projections/component.ts';
import { webhookProjection } from '../services/webhooks/webhook-projection.ts';
import { printProfile, profile } from './cpu-profile.ts';
import { atLeast, recordTarget, whenMain } from './harness.ts';
import { appendEventMix, MIX } from './rebuild-event-mix.ts';

/** Every projection a process running all roles folds (one runner per name). */
export const REAL_PROJECTIONS: Projection<unknown>[] = [
  ...PROJECTIONS,
  keyRegistryProjection,
  webhookProjection,
  trackRecordProjection,
  pendingOutcomesProjection,
  labelledVerdictsProjection,
  knowledgeFactsProjection,
  openPaymentsProjection,
  quotaBalancesProjection,
  chatQuotaProjection,
] as Projection<unknown>[];

export interface RebuildBenchResult {
  events: number;
  projections: number;
  rebuild: number[];
  /** Events folded per CPU second of the process during the rebuild. */
  rebuildCpu: number[];
  readAll: number[];
  ratio: number[];
}

export async function run(
  options: { events?: number; rounds?: number; print?: boolean; profile?: boolean } = {},
) {
  const events = options.events ?? 300_000;
  const rounds = options.rounds ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'bench-rebuild-'));
  const store = await openLmdbEventStore({ path: dir });
  try {
    const filling = performance.now();
    await appendEventMix(store, events);
    if (options.print ?? true) {
      console.log(
        `${events.toLocaleString('en')} events written in ${((performance.now() - filling) / 1000).toFixed(1)} s; ` +
          `mix: ${MIX.map(([k, s]) => `${k} ${s}%`).join(', ')}; ${REAL_PROJECTIONS.length} projections: ` +
          REAL_PROJECTIONS.map((p) => p.name).join(', '),
      );
    }
    const result: RebuildBenchResult = {
      events,
      projections: REAL_PROJECTIONS.length,
      rebuild: [],
      rebuildCpu: [],
      readAll: [],
      ratio: [],
    };
    const snapshots = store.projectionStore();
    for (let round = 0; round < rounds; round++) {
      const read = await readAllRate(store);
      const rebuild = await rebuildRate(store, snapshots, events);
      result.readAll.push(read);
      result.rebuild.push(rebuild.wall);
      result.rebuildCpu.push(rebuild.cpu);
      result.ratio.push(rebuild.wall / read);
      if (options.print ?? true) {
        console.log(
          `  round ${round + 1}: rebuild ${fmt(rebuild.wall)} events/s (${fmt(rebuild.cpu)} per CPU s), ` +
            `readAll ${fmt(read)} events/s`,
        );
      }
    }
    if (options.print ?? true) print(result);
    if (options.profile) {
      const { summary } = await profile(() => rebuildRate(store, snapshots, events));
      printProfile(summary, 25);
    }
    return result;
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function readAllRate(store: LmdbEventStore): Promise<number> {
  const started = performance.now();
  let after = 0;
  let seen = 0;
  for (;;) {
    const page = await store.readAll({ after, maxCount: 2_000 });
    if (page.length === 0) break;
    seen += page.length;
    after = page[page.length - 1]!.position;
  }
  return (seen / (performance.now() - started)) * 1000;
}

async function rebuildRate(
  store: LmdbEventStore,
  snapshots: ProjectionStore,
  events: number,
): Promise<{ wall: number; cpu: number }> {
  for (const p of REAL_PROJECTIONS) await snapshots.delete(p.name);
  const head = await store.headPosition();
  const runners = REAL_PROJECTIONS.map(
    (p) => new ProjectionRunner(store, snapshots, p, { snapshotEvery: 1_000 }),
  );
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  for (const runner of runners) await runner.start();
  await Promise.all(runners.map((r) => r.waitFor(head, 600_000)));
  const ms = performance.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  const cpuMs = (cpu.user + cpu.system) / 1000;
  for (const runner of runners) {
    if (runner.error) throw runner.error;
    await runner.stop();
  }
  return { wall: (events / ms) * 1000, cpu: (events / cpuMs) * 1000 };
}

const fmt = (n: number) => Math.round(n).toLocaleString('en');
const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0]!, median: s[Math.floor(s.length / 2)]!, max: s[s.length - 1]! };
};

function print(r: RebuildBenchResult): void {
  const rb = stats(r.rebuild);
  const ra = stats(r.readAll);
  const q = stats(r.ratio);
  const c = stats(r.rebuildCpu);
  console.log(`rounds: ${r.rebuild.length} (min / median / max)`);
  console.log(
    `  rebuild, ${r.projections} real projections  ${fmt(rb.min)} / ${fmt(rb.median)} / ${fmt(rb.max)} events/s`,
  );
  console.log(
    `  rebuild, per CPU second of the process  ${fmt(c.min)} / ${fmt(c.median)} / ${fmt(c.max)} events/s`,
  );
  console.log(
    `  readAll in pages (baseline)       ${fmt(ra.min)} / ${fmt(ra.median)} / ${fmt(ra.max)} events/s`,
  );
  console.log(
    `  rebuild / readAll                 ${q.min.toFixed(2)} / ${q.median.toFixed(2)} / ${q.max.toFixed(2)}`,
  );
  console.log(`  floor >= 100,000 events/s (median): ${rb.median >= 100_000 ? 'ok' : 'MISSED'}`);
  console.log(
    recordTarget({
      bench: 'rebuild',
      measure: '12 projections over the realistic mix: events/s (median)',
      figure: Math.round(rb.median),
      target: atLeast(100_000),
      detail: `${q.median.toFixed(2)} of readAll`,
    }),
  );
}

await whenMain(import.meta.url, { events: 'number', rounds: 'number', profile: 'boolean' }, run);
