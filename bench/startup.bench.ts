/**
 * Start-up at scale: the service (every role, LMDB, in-process bus and cache) booted in its own
 * process on a log of `--events` events of the realistic mix (bench/rebuild-event-mix.ts), timed
 * from spawn to the first 200 of /readyz (which waits for every projection to be within
 * PROJECTION_READY_MAX_LAG of the head), with its resident memory (VmRSS) then.
 *
 * Two ways of running it, alternating in each round:
 *   - compiled: `node <out>/services/main.js`, what the image runs (deploy/Dockerfile). The bench
 *     builds it once per run with scripts/build.ts into a folder of its own, so dist/ is left alone;
 *   - tsx: `node --import tsx services/main.ts`, what `npm start` runs in development (it compiles
 *     every module at load, so it is slower to start; for comparison only, `--tsx=false` skips it).
 *
 * The first boot on the log builds the snapshots (projections and the quota checkpoint); the next
 * ones start from them, as every restart does. Baseline: the same boot on an empty log, in the
 * same round. The targets, judged on the compiled entry: <= 5 s and <= 400 MB at
 * 1,000,000 events.
 *
 *   npx tsx bench/startup.bench.ts [--events=1000000] [--rounds=3] [--tsx=false] [--compiled=dist]
 *
 * `--compiled=<dir>` boots an existing build (e.g. dist/ after `npm run build`) instead of building.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { atMost, recordTarget, whenMain } from './harness.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

interface Boot {
  ms: number;
  rssMb: number;
  /** The anonymous part of the RSS (heap and native allocations), without LMDB's mapped file pages. */
  anonMb: number;
}

type Entry = 'compiled' | 'tsx';

const ROOT = join(import.meta.dirname, '..');
let nextPort = 18_400 + (process.pid % 500);

/**
 * Compiles the service once for this run. Inside node_modules/ so that the compiled files find
 * their dependencies by walking up, as dist/ does, and no tool of the repository looks at them.
 */
function buildCompiled(): string {
  const out = join(ROOT, 'node_modules', '.cache', 'startup-bench', `dist-${process.pid}`);
  const build = spawnSync(
    process.execPath,
    ['--import', 'tsx', join(ROOT, 'scripts', 'build.ts'), `--out-dir=${out}`],
    { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  if (build.status !== 0) {
    rmSync(out, { recursive: true, force: true });
    throw new Error(`build failed (exit ${build.status ?? build.signal}): the sources must type-check`);
  }
  return out;
}

async function boot(entryArgs: string[], dataDir: string, timeoutMs = 600_000): Promise<Boot> {
  const port = nextPort++;
  const started = performance.now();
  const child = spawn(process.execPath, entryArgs, {
    cwd: ROOT,
    env: {
      ...process.env,
      NODE_ENV: 'development',
      LOG_LEVEL: 'warn',
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      EVENT_STORE: 'lmdb',
      BUS: 'memory',
      CACHE: 'memory',
      FEED: 'replay',
      METRICS_ENABLED: 'true',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} before ready`);
      if (performance.now() - started > timeoutMs) throw new Error('service not ready in time');
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`)
        .then((r) => r.status === 200)
        .catch(() => false);
      if (ready) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    const ms = performance.now() - started;
    return { ms, ...rssOf(child) };
  } finally {
    await stop(child);
  }
}

function rssOf(child: ChildProcess): { rssMb: number; anonMb: number } {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  const mb = (field: string) =>
    Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN) / 1024;
  return { rssMb: mb('VmRSS'), anonMb: mb('RssAnon') };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
}

export async function run(
  options: { events?: number; rounds?: number; tsx?: boolean; compiledDir?: string } = {},
) {
  const events = options.events ?? 1_000_000;
  const rounds = options.rounds ?? 3;
  const entries: Entry[] = options.tsx === false ? ['compiled'] : ['compiled', 'tsx'];
  const root = mkdtempSync(join(tmpdir(), 'bench-startup-'));
  let built: string | null = null;
  try {
    let out = options.compiledDir;
    if (out === undefined) {
      const building = performance.now();
      out = built = buildCompiled();
      console.log(`compiled service built in ${((performance.now() - building) / 1000).toFixed(1)} s`);
    }
    const args: Record<Entry, string[]> = {
      compiled: [join(out, 'services', 'main.js')],
      tsx: ['--import', 'tsx', join(ROOT, 'services', 'main.ts')],
    };
    const full = join(root, 'full');
    const filling = performance.now();
    // Where the service opens its log (services/adapters.ts): DATA_DIR/events.
    const store = await openLmdbEventStore({ path: join(full, 'events') });
    await appendEventMix(store, events);
    await store.close();
    console.log(
      `${events.toLocaleString('en')} events written in ${((performance.now() - filling) / 1000).toFixed(1)} s`,
    );
    const first = await boot(args.compiled, full);
    console.log(
      `first boot, compiled (builds every snapshot): ${(first.ms / 1000).toFixed(1)} s, RSS ${first.rssMb.toFixed(0)} MB (anonymous ${first.anonMb.toFixed(0)} MB; the rest is LMDB's mapped file pages)`,
    );
    const warm: Record<Entry, Boot[]> = { compiled: [], tsx: [] };
    const empty: Record<Entry, Boot[]> = { compiled: [], tsx: [] };
    let emptyDirs = 0;
    for (let round = 0; round < rounds; round++) {
      for (const entry of entries) {
        empty[entry].push(await boot(args[entry], join(root, `empty-${emptyDirs++}`)));
        warm[entry].push(await boot(args[entry], full));
      }
    }
    console.log(`rounds: ${rounds} (min / median / max)`);
    for (const entry of entries) print(entry, events, warm[entry], empty[entry]);
    const w = stats(warm.compiled.map((b) => b.ms / 1000));
    const wr = stats(warm.compiled.map((b) => b.rssMb));
    console.log(
      `  targets (compiled, median): <= 5 s ${w.median <= 5 ? 'ok' : 'MISSED'}; <= 400 MB ${wr.median <= 400 ? 'ok' : 'MISSED'}`,
    );
    const restart = `compiled restart at ${events.toLocaleString('en')} events to /readyz 200`;
    console.log(
      recordTarget({
        bench: 'startup',
        measure: `${restart}: s`,
        figure: w.median,
        unit: ' s',
        target: atMost(5),
      }),
    );
    console.log(
      recordTarget({
        bench: 'startup',
        measure: `${restart}: RSS`,
        figure: Math.round(wr.median),
        unit: ' MB',
        target: atMost(400),
      }),
    );
    return { events, first, warm, empty };
  } finally {
    rmSync(root, { recursive: true, force: true });
    if (built) rmSync(built, { recursive: true, force: true });
  }
}

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0]!, median: s[Math.floor(s.length / 2)]!, max: s[s.length - 1]! };
};

function print(entry: Entry, events: number, warm: Boot[], empty: Boot[]): void {
  const w = stats(warm.map((b) => b.ms / 1000));
  const e = stats(empty.map((b) => b.ms / 1000));
  const wr = stats(warm.map((b) => b.rssMb));
  const er = stats(empty.map((b) => b.rssMb));
  const ratio = stats(warm.map((b, i) => b.ms / empty[i]!.ms));
  const f = (x: { min: number; median: number; max: number }, d = 1) =>
    `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;
  const label = entry.padEnd(8);
  const wa = stats(warm.map((b) => b.anonMb));
  console.log(
    `  ${label} boot to ready, ${events.toLocaleString('en')} events, from snapshots  ${f(w)} s   RSS ${f(wr, 0)} MB (anonymous ${f(wa, 0)} MB)`,
  );
  console.log(`  ${label} boot to ready, empty log (baseline)            ${f(e)} s   RSS ${f(er, 0)} MB`);
  console.log(`  ${label} full / empty                                   ${f(ratio, 2)}`);
}

await whenMain(
  import.meta.url,
  { events: 'number', rounds: 'number', tsx: ['true', 'false'], compiled: 'string' },
  ({ tsx, compiled, ...rest }: { events?: number; rounds?: number; tsx?: string; compiled?: string }) =>
    run({
      ...rest,
      ...(tsx === 'false' ? { tsx: false } : {}),
      ...(compiled ? { compiledDir: compiled } : {}),
    }),
);
