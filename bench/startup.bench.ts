/**
 * Start-up at scale: the service (every role, LMDB, in-process bus and cache) booted in its own
 * process on a log of `--events` events of the realistic mix (bench/rebuild-event-mix.ts), timed
 * from spawn to the first 200 of /readyz (which waits for every projection to be within
 * PROJECTION_READY_MAX_LAG of the head). Memory is read three ways, because the first reading
 * flatters: VmRSS at that first 200 (and its anonymous part, RssAnon, without LMDB's mapped file
 * pages); VmRSS settled `--settle` seconds after ready (the service keeps folding, computing the
 * schedule's first verdicts and writing snapshots after /readyz answers, and the memory it takes
 * then is kept); and the peak, VmHWM of /proc/<pid>/status, read last, so that it covers the whole
 * life of the process up to then.
 *
 * Two ways of running it, alternating in each round:
 *   - compiled: `node <flags> <out>/services/main.js`, what the image runs (deploy/Dockerfile). The bench
 *     builds it once per run with scripts/build.ts into a folder of its own, so dist/ is left alone;
 *   - tsx: `node <flags> --import tsx services/main.ts`, what `npm start` runs in development (it compiles
 *     every module at load, so it is slower to start; for comparison only, `--tsx=false` skips it).
 *
 * The first boot on the log (compiled) builds the snapshots (projections and the quota
 * checkpoint); the next ones start from them, as every restart does. Baseline: the same boot on an
 * empty log, in the same round. The compiled restarts are settled, and then take `--calls` keyed
 * calls (`POST /x402/get_trade_call` with a pro key's Bearer, 16 in flight, issued from this
 * process; 0 skips them), after which RSS and the peak are read again, and once more after
 * `--idle` seconds without requests (what an operator sees of a service between bursts; 0 skips it).
 *
 * The issue's targets (issue 61), judged on the compiled entry at 1,000,000 events: first boot
 * peak <= 1.2 GB; restart to ready <= 5 s (median of the rounds); RSS <= 600 MB after 10,000 calls
 * (the worst round). The settled RSS of a restart is printed beside them.
 *
 *   npx tsx bench/startup.bench.ts [--events=1000000] [--rounds=3] [--settle=30] [--calls=10000]
 *                                  [--idle=60] [--tsx=false] [--compiled=dist]
 *
 * `--compiled=<dir>` boots an existing build (e.g. dist/ after `npm run build`) instead of building.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { atMost, f0, f2, recordTarget, SERVICE_ENV, SERVICE_NODE_FLAGS, whenMain } from './harness.ts';
import { issueKey } from './load-http.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

interface Memory {
  rssMb: number;
  /** The anonymous part of the RSS (heap and native allocations), without LMDB's mapped file pages. */
  anonMb: number;
  /** VmHWM: the most the RSS has been since the process started. */
  peakMb: number;
}

interface Boot {
  ms: number;
  /** At the first 200 of /readyz. */
  ready: Memory;
  /** `settle` seconds after ready, when asked for. */
  settled?: Memory;
  /** After the keyed calls, when asked for. */
  afterCalls?: Memory & { calls: number; seconds: number; statuses: Record<string, number> };
  /** `idleS` seconds after the calls, when asked for. */
  afterIdle?: Memory & { seconds: number };
  /** The 1-minute load average at spawn and when the process was stopped. */
  load: [number, number];
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface BootPlan {
  /** Seconds to wait after ready before reading the settled memory; 0: none. */
  settleS: number;
  /** Keyed calls to make once settled, with this pro key. */
  calls?: { key: string; count: number };
  /** Seconds to wait after the calls before reading the memory again; 0: none. */
  idleS?: number;
}

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;
const IN_FLIGHT = 16;

async function boot(
  entryArgs: string[],
  dataDir: string,
  plan: BootPlan,
  timeoutMs = 600_000,
): Promise<Boot> {
  const port = nextPort++;
  const loadAtSpawn = loadavg()[0]!;
  const started = performance.now();
  const child = spawn(process.execPath, entryArgs, {
    cwd: ROOT,
    env: {
      ...process.env,
      // The allocator settings of npm start and the image.
      ...SERVICE_ENV,
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
      // The calls measure memory, not the limit: none of them may be answered 429.
      RATE_LIMIT_PRO: String(1e9),
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
      await sleep(25);
    }
    const ms = performance.now() - started;
    const out: Boot = { ms, ready: memoryOf(child), load: [loadAtSpawn, 0] };
    if (plan.settleS > 0) {
      await sleep(plan.settleS * 1000);
      out.settled = memoryOf(child);
    }
    if (plan.calls && plan.calls.count > 0) {
      const t0 = performance.now();
      const statuses = await keyedCalls(`http://127.0.0.1:${port}`, plan.calls.key, plan.calls.count);
      const seconds = (performance.now() - t0) / 1000;
      const refused = Object.entries(statuses).filter(([status]) => status !== '200');
      if (refused.length > 0) throw new Error(`keyed calls not answered 200: ${JSON.stringify(statuses)}`);
      out.afterCalls = { ...memoryOf(child), calls: plan.calls.count, seconds, statuses };
      if (plan.idleS) {
        await sleep(plan.idleS * 1000);
        out.afterIdle = { ...memoryOf(child), seconds: plan.idleS };
      }
    }
    out.load[1] = loadavg()[0]!;
    return out;
  } finally {
    await stop(child);
  }
}

/** `count` keyed `POST /x402/get_trade_call`, IN_FLIGHT at a time; how many of each status. */
async function keyedCalls(url: string, key: string, count: number): Promise<Record<string, number>> {
  const statuses: Record<string, number> = {};
  let next = 0;
  const init = {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify(ARGS),
  };
  const worker = async () => {
    while (next < count) {
      next += 1;
      const res = await fetch(`${url}/x402/get_trade_call`, init);
      await res.arrayBuffer();
      statuses[res.status] = (statuses[res.status] ?? 0) + 1;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, worker));
  return statuses;
}

function memoryOf(child: ChildProcess): Memory {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  const mb = (field: string) =>
    Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN) / 1024;
  return { rssMb: mb('VmRSS'), anonMb: mb('RssAnon'), peakMb: mb('VmHWM') };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
}

const FIRST_BOOT_PEAK_MB = 1200;
const RESTART_S = 5;
const AFTER_CALLS_MB = 600;

export async function run(
  options: {
    events?: number;
    rounds?: number;
    settle?: number;
    calls?: number;
    idle?: number;
    tsx?: boolean;
    compiledDir?: string;
  } = {},
) {
  const events = options.events ?? 1_000_000;
  const rounds = options.rounds ?? 3;
  const settleS = options.settle ?? 30;
  const calls = options.calls ?? 10_000;
  const idleS = options.idle ?? 60;
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
      // With the V8 flags of npm start and the image's ENTRYPOINT.
      compiled: [...SERVICE_NODE_FLAGS, join(out, 'services', 'main.js')],
      tsx: [...SERVICE_NODE_FLAGS, '--import', 'tsx', join(ROOT, 'services', 'main.ts')],
    };
    const full = join(root, 'full');
    // The key is issued on the empty log: issuing it on the full one would open every projection.
    const key =
      calls > 0 ? await issueKey({ EVENT_STORE: 'lmdb', BUS: 'memory', CACHE: 'memory' }, full) : '';
    const filling = performance.now();
    // Where the service opens its log (services/adapters.ts): DATA_DIR/events.
    const store = await openLmdbEventStore({ path: join(full, 'events') });
    await appendEventMix(store, events);
    await store.close();
    console.log(
      `${events.toLocaleString('en')} events written in ${((performance.now() - filling) / 1000).toFixed(1)} s`,
    );
    const first = await boot(args.compiled, full, { settleS });
    console.log(
      `first boot, compiled, no snapshots yet (builds every one): ready in ${(first.ms / 1000).toFixed(1)} s; ` +
        `peak ${mem(first, 'peak')}; RSS at ready ${mem(first, 'ready')}, +${settleS} s ${mem(first, 'settled')}; ${loads(first)}`,
    );
    const warm: Record<Entry, Boot[]> = { compiled: [], tsx: [] };
    const empty: Record<Entry, Boot[]> = { compiled: [], tsx: [] };
    let emptyDirs = 0;
    for (let round = 0; round < rounds; round++) {
      for (const entry of entries) {
        empty[entry].push(await boot(args[entry], join(root, `empty-${emptyDirs++}`), { settleS: 0 }));
        const plan: BootPlan =
          entry === 'compiled'
            ? { settleS, ...(calls > 0 ? { calls: { key, count: calls }, idleS } : {}) }
            : { settleS: 0 };
        const restart = await boot(args[entry], full, plan);
        warm[entry].push(restart);
        if (entry === 'compiled') {
          const c = restart.afterCalls;
          console.log(
            `  restart ${round + 1}, compiled: ready in ${(restart.ms / 1000).toFixed(1)} s; RSS at ready ${mem(restart, 'ready')}, ` +
              `+${settleS} s ${mem(restart, 'settled')}` +
              (c
                ? `, after ${f0(c.calls)} keyed calls (${c.seconds.toFixed(1)} s; status ${JSON.stringify(c.statuses)}) ${mem(restart, 'afterCalls')}`
                : '') +
              (restart.afterIdle
                ? `, +${restart.afterIdle.seconds} s idle ${mem(restart, 'afterIdle')}`
                : '') +
              `; peak ${mem(restart, 'peak')}; ${loads(restart)}`,
          );
        }
      }
    }
    console.log(`rounds: ${rounds} (min / median / max)`);
    for (const entry of entries) print(entry, events, warm[entry], empty[entry]);

    const restarts = warm.compiled;
    const w = stats(restarts.map((b) => b.ms / 1000));
    const settled = stats(restarts.map((b) => b.settled!.rssMb));
    const peaks = stats(restarts.map((b) => peakOf(b)));
    const load = `load ${f2(Math.min(...restarts.map((b) => b.load[0])))}–${f2(Math.max(...restarts.map((b) => b.load[1])))}`;
    console.log(
      `  compiled restart, settled RSS ${settleS} s after ready ${f0(settled.min)} / ${f0(settled.median)} / ${f0(settled.max)} MB; ` +
        `peak ${f0(peaks.min)} / ${f0(peaks.median)} / ${f0(peaks.max)} MB`,
    );
    const n = events.toLocaleString('en');
    console.log(
      recordTarget({
        bench: 'startup',
        measure: `compiled first boot at ${n} events, no snapshots: peak RSS (VmHWM, ${settleS} s after ready)`,
        figure: Math.round(peakOf(first)),
        unit: ' MB',
        target: atMost(FIRST_BOOT_PEAK_MB),
        detail: `ready in ${(first.ms / 1000).toFixed(1)} s; ${loads(first)}`,
      }),
    );
    console.log(
      recordTarget({
        bench: 'startup',
        measure: `compiled restart at ${n} events from snapshots to /readyz 200 (median of ${rounds})`,
        figure: Number(w.median.toFixed(2)),
        unit: ' s',
        target: atMost(RESTART_S),
        detail: `RSS settled ${settleS} s after ready ${f0(settled.median)} MB (${f0(settled.min)}–${f0(settled.max)}), peak ${f0(peaks.max)} MB; ${load}`,
      }),
    );
    if (calls > 0) {
      const after = Math.max(...restarts.map((b) => b.afterCalls!.rssMb));
      console.log(
        recordTarget({
          bench: 'startup',
          measure: `compiled restart at ${n} events: RSS after ${f0(calls)} keyed calls (worst of ${rounds})`,
          figure: Math.round(after),
          unit: ' MB',
          target: atMost(AFTER_CALLS_MB),
          detail:
            idleS > 0
              ? `${f0(Math.max(...restarts.map((b) => b.afterIdle!.rssMb)))} MB ${idleS} s idle after them (worst); ${load}`
              : load,
        }),
      );
    }
    return { events, first, warm, empty };
  } finally {
    rmSync(root, { recursive: true, force: true });
    if (built) rmSync(built, { recursive: true, force: true });
  }
}

/** The peak of a boot: VmHWM read last (after the idle, or the calls, or once settled, or at ready). */
const peakOf = (b: Boot) => (b.afterIdle ?? b.afterCalls ?? b.settled ?? b.ready).peakMb;

function mem(b: Boot, at: 'ready' | 'settled' | 'afterCalls' | 'afterIdle' | 'peak'): string {
  if (at === 'peak') return `${f0(peakOf(b))} MB`;
  const m = b[at];
  return m ? `${f0(m.rssMb)} MB (anonymous ${f0(m.anonMb)})` : '-';
}

const loads = (b: Boot) => `load ${f2(b.load[0])} at spawn, ${f2(b.load[1])} at stop`;

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0]!, median: s[Math.floor(s.length / 2)]!, max: s[s.length - 1]! };
};

function print(entry: Entry, events: number, warm: Boot[], empty: Boot[]): void {
  const w = stats(warm.map((b) => b.ms / 1000));
  const e = stats(empty.map((b) => b.ms / 1000));
  const wr = stats(warm.map((b) => b.ready.rssMb));
  const er = stats(empty.map((b) => b.ready.rssMb));
  const ratio = stats(warm.map((b, i) => b.ms / empty[i]!.ms));
  const f = (x: { min: number; median: number; max: number }, d = 1) =>
    `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;
  const label = entry.padEnd(8);
  const wa = stats(warm.map((b) => b.ready.anonMb));
  console.log(
    `  ${label} boot to ready, ${events.toLocaleString('en')} events, from snapshots  ${f(w)} s   RSS at ready ${f(wr, 0)} MB (anonymous ${f(wa, 0)} MB)`,
  );
  console.log(
    `  ${label} boot to ready, empty log (baseline)            ${f(e)} s   RSS at ready ${f(er, 0)} MB`,
  );
  console.log(`  ${label} full / empty                                   ${f(ratio, 2)}`);
}

await whenMain(
  import.meta.url,
  {
    events: 'number',
    rounds: 'number',
    settle: 'number',
    calls: 'number',
    idle: 'number',
    tsx: ['true', 'false'],
    compiled: 'string',
  },
  ({
    tsx,
    compiled,
    ...rest
  }: {
    events?: number;
    rounds?: number;
    settle?: number;
    calls?: number;
    idle?: number;
    tsx?: string;
    compiled?: string;
  }) =>
    run({
      ...rest,
      ...(tsx === 'false' ? { tsx: false } : {}),
      ...(compiled ? { compiledDir: compiled } : {}),
    }),
);
