/**
 * Keyed calls under a memory limit, and where the page-cache churn comes from. The service
 * (`npm start`'s node flags and allocator settings, embedded defaults, FEED=replay) restarts from
 * the snapshots of one 1M-event log of the bench's mix (bench/rebuild-event-mix.ts; the first boot
 * that writes them runs without a limit) in a cgroup v1 memory controller of its own, with and
 * without a limit, variant after variant in turn. Each boot, once ready and settled: `--idle`
 * seconds without requests, then `--seconds` of keyed calls (autocannon from its own process,
 * outside the cgroup: `POST /x402/get_trade_call` with a pro key's Bearer, 16 connections, rate limit
 * and quota raised so every call is served). Over each stretch it reads the process's major faults
 * and CPU (/proc/<pid>/stat), its `read_bytes` (/proc/<pid>/io), the cgroup's `memory.stat`, and
 * how much of `data.mdb` is in the page cache (fincore) and mapped by the process (smaps).
 *
 *   npx tsx bench/memory-limit.ts [--events=1000000] [--limits=0,1024] [--rounds=2] [--seconds=30]
 *                                 [--idle=20] [--settle=20] [--variants=a,b] [--data=<dir>] [--keep=true]
 *
 * A variant is a name and environment given to the service: `--variants=base,nra` with
 * `--variant-nra=LMDB_NO_READ_AHEAD=true` (comma-separated NAME=VALUE; none for a name without one).
 * `--data=<dir>` reuses a data directory a previous run kept (`--keep=true`), key included.
 * Needs root and the cgroup v1 memory controller at /sys/fs/cgroup/memory.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { f0, f2, freePort, ROOT, SERVICE_ENV, SERVICE_NODE_FLAGS } from './harness.ts';
import { cannon, issueKey } from './load-http.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

const CGROUP = '/sys/fs/cgroup/memory';
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;

interface Reading {
  at: number;
  majflt: number;
  cpuMs: number;
  readBytes: number;
  stat: Record<string, number>;
  cachedMb: number;
  mappedMb: number;
}

function read(pid: number, cg: string, dataMdb: string): Reading {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const tick = 1000 / 100;
  const io = readFileSync(`/proc/${pid}/io`, 'utf8');
  const memStat: Record<string, number> = {};
  for (const line of readFileSync(join(cg, 'memory.stat'), 'utf8').split('\n')) {
    const [k, v] = line.split(' ');
    if (k && v) memStat[k] = Number(v);
  }
  const fin = spawnSync('fincore', ['--bytes', '--noheadings', '--output', 'RES', dataMdb], {
    encoding: 'utf8',
  });
  let mapped = 0;
  let inFile = false;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inFile = line.endsWith(dataMdb);
    else if (inFile && line.startsWith('Rss:')) mapped += Number(line.split(/\s+/)[1]) * 1024;
  }
  return {
    at: performance.now(),
    majflt: Number(fields[9]),
    cpuMs: (Number(fields[11]) + Number(fields[12])) * tick,
    readBytes: Number(/read_bytes: (\d+)/.exec(io)?.[1] ?? 0),
    stat: memStat,
    cachedMb: Number(fin.stdout.trim()) / 2 ** 20,
    mappedMb: mapped / 2 ** 20,
  };
}

interface Stretch {
  seconds: number;
  calls: number;
  perSec: number;
  p99Ms: number;
  majflt: number;
  readMb: number;
  cpuMs: number;
  pgmajfault: number;
  pgpgin: number;
  before: Reading;
  after: Reading;
}

function stretch(a: Reading, b: Reading, calls: number, p99Ms: number): Stretch {
  const seconds = (b.at - a.at) / 1000;
  return {
    seconds,
    calls,
    perSec: calls / seconds,
    p99Ms,
    majflt: b.majflt - a.majflt,
    readMb: (b.readBytes - a.readBytes) / 2 ** 20,
    cpuMs: b.cpuMs - a.cpuMs,
    pgmajfault: (b.stat.pgmajfault ?? 0) - (a.stat.pgmajfault ?? 0),
    pgpgin: (b.stat.pgpgin ?? 0) - (a.stat.pgpgin ?? 0),
    before: a,
    after: b,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null) return child.exitCode;
  const exited = new Promise<number | null>((r) =>
    child.once('exit', (code, signal) => r(code ?? (signal ? 128 : null))),
  );
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await exited;
  clearTimeout(timer);
  return code;
}

async function boot(
  dataDir: string,
  limitMb: number,
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ child: ChildProcess; url: string; cg: string; readyMs: number }> {
  const cg = join(CGROUP, `bench-memory-limit-${process.pid}-${Math.round(performance.now())}`);
  mkdirSync(cg);
  const bytes = limitMb > 0 ? String(limitMb * 2 ** 20) : '-1';
  writeFileSync(join(cg, 'memory.limit_in_bytes'), bytes);
  if (limitMb > 0) writeFileSync(join(cg, 'memory.memsw.limit_in_bytes'), bytes);
  const port = await freePort();
  const started = performance.now();
  // The shell moves itself into the cgroup, then becomes node: every page the service reads is charged there.
  const node = [
    process.execPath,
    ...SERVICE_NODE_FLAGS,
    '--import',
    'tsx',
    join(ROOT, 'services', 'main.ts'),
  ];
  const child = spawn('sh', ['-c', `echo $$ > ${cg}/cgroup.procs && exec "$@"`, 'sh', ...node], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...SERVICE_ENV,
      NODE_ENV: 'development',
      LOG_LEVEL: 'warn',
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      FEED: 'replay',
      RATE_LIMIT_PRO: String(1e9),
      PLAN_PRO_MONTHLY_CALLS: String(1e9),
      ...env,
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} before ready`);
    if (performance.now() - started > timeoutMs) {
      await stop(child);
      throw new Error('service not ready in time');
    }
    const ready = await fetch(`${url}/readyz`)
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ready) break;
    await sleep(100);
  }
  return { child, url, cg, readyMs: performance.now() - started };
}

function removeCgroup(cg: string): void {
  for (let i = 0; i < 50; i++) {
    try {
      rmdirSync(cg);
      return;
    } catch {
      spawnSync('sleep', ['0.1']);
    }
  }
}

export async function run(options: {
  events?: number;
  limits?: number[];
  rounds?: number;
  seconds?: number;
  idle?: number;
  settle?: number;
  variants?: Record<string, Record<string, string>>;
  data?: string;
  keep?: boolean;
}) {
  const events = options.events ?? 1_000_000;
  const limits = options.limits ?? [0, 1024];
  const rounds = options.rounds ?? 2;
  const seconds = options.seconds ?? 30;
  const idleS = options.idle ?? 20;
  const settleS = options.settle ?? 20;
  const variants = options.variants ?? { base: {} };
  let dataDir = options.data;
  if (dataDir === undefined || !existsSync(join(dataDir, 'key'))) {
    dataDir ??= mkdtempSync(join(tmpdir(), 'bench-memory-limit-'));
    const key = await issueKey({ EVENT_STORE: 'lmdb', BUS: 'memory', CACHE: 'memory' }, dataDir);
    const store = await openLmdbEventStore({ path: join(dataDir, 'events') });
    await appendEventMix(store, events);
    await store.close();
    const first = await boot(dataDir, 0, {}, 900_000);
    console.log(`first boot (no limit, writes the snapshots): ready in ${f2(first.readyMs / 1000)} s`);
    await sleep(30_000);
    await stop(first.child);
    removeCgroup(first.cg);
    writeFileSync(join(dataDir, 'key'), key);
    console.log(`data directory ${dataDir}`);
  }
  const key = readFileSync(join(dataDir, 'key'), 'utf8');
  const dataMdb = join(dataDir, 'events', 'data.mdb');
  console.log(`data.mdb ${f0(statSync(dataMdb).size / 2 ** 20)} MB`);
  const rows: string[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      for (const limitMb of limits) {
        for (const [name, env] of Object.entries(variants)) {
          // The log's pages out of the page cache first: a page is charged to the cgroup that read it
          // in, so pages another process left cached would be served to this one free of its limit.
          spawnSync('dd', [`if=${dataMdb}`, 'iflag=nocache', 'count=0', 'status=none']);
          const load0 = loadavg()[0]!;
          const { child, url, cg, readyMs } = await boot(dataDir, limitMb, env, 600_000);
          const pid = Number(readFileSync(join(cg, 'cgroup.procs'), 'utf8').trim().split('\n')[0]);
          try {
            await sleep(settleS * 1000);
            const r0 = read(pid, cg, dataMdb);
            await sleep(idleS * 1000);
            const r1 = read(pid, cg, dataMdb);
            const res = await cannon({
              url: `${url}/x402/get_trade_call`,
              method: 'POST',
              headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
              body: JSON.stringify(ARGS),
              connections: 16,
              durationSeconds: seconds,
            });
            const r2 = read(pid, cg, dataMdb);
            const non200 = Object.entries(res.statusCounts).filter(([s]) => s !== '200');
            const idle = stretch(r0, r1, 0, 0);
            const calls = stretch(r1, r2, res.requests, res.p99Ms);
            const load1 = loadavg()[0]!;
            const per = (n: number) => (calls.calls > 0 ? n / calls.calls : Number.NaN);
            const row =
              `round ${round + 1} ${limitMb ? `${limitMb} MiB` : 'no limit'} ${name}: ready ${f2(readyMs / 1000)} s; ` +
              `idle ${idleS} s: majflt ${f0(idle.majflt / idle.seconds)}/s, read ${f2(idle.readMb / idle.seconds)} MB/s, CPU ${f0(idle.cpuMs / idle.seconds / 10)} %; ` +
              `calls: ${f0(calls.perSec)}/s (p99 ${f0(calls.p99Ms)} ms, ${non200.length ? `non-200 ${JSON.stringify(non200)}` : 'all 200'}), ` +
              `per call majflt ${f2(per(calls.majflt))}, read ${f2(per(calls.readMb) * 1024)} KB, CPU ${f0(per(calls.cpuMs) * 1000)} us, cgroup pgmajfault ${f2(per(calls.pgmajfault))} pgpgin ${f2(per(calls.pgpgin))}; ` +
              `memory.stat after: cache ${f0(r2.stat.cache! / 2 ** 20)} rss ${f0(r2.stat.rss! / 2 ** 20)} mapped_file ${f0(r2.stat.mapped_file! / 2 ** 20)} MB; ` +
              `data.mdb cached ${f0(r1.cachedMb)} -> ${f0(r2.cachedMb)} MB, mapped ${f0(r1.mappedMb)} -> ${f0(r2.mappedMb)} MB; load ${f2(load0)}-${f2(load1)}`;
            console.log(row);
            rows.push(row);
          } finally {
            const code = await stop(child);
            const oom = readFileSync(join(cg, 'memory.oom_control'), 'utf8').match(/oom_kill (\d+)/)?.[1];
            console.log(`  stopped: exit ${code}, oom_kill ${oom ?? '?'}`);
            removeCgroup(cg);
          }
        }
      }
    }
  } finally {
    if (!options.keep && options.data === undefined) rmSync(dataDir, { recursive: true, force: true });
  }
  return rows;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values: flags } = parseArgs({ strict: false });
  const variants: Record<string, Record<string, string>> = {};
  for (const name of String(flags.variants ?? 'base').split(',')) {
    const spec = flags[`variant-${name}`];
    variants[name] = Object.fromEntries(
      typeof spec === 'string' ? spec.split(',').map((kv) => kv.split('=', 2) as [string, string]) : [],
    );
  }
  await run({
    ...(flags.events ? { events: Number(flags.events) } : {}),
    ...(flags.limits !== undefined ? { limits: String(flags.limits).split(',').map(Number) } : {}),
    ...(flags.rounds ? { rounds: Number(flags.rounds) } : {}),
    ...(flags.seconds ? { seconds: Number(flags.seconds) } : {}),
    ...(flags.idle !== undefined ? { idle: Number(flags.idle) } : {}),
    ...(flags.settle !== undefined ? { settle: Number(flags.settle) } : {}),
    ...(flags.data ? { data: String(flags.data) } : {}),
    keep: flags.keep === 'true',
    variants,
  });
}
