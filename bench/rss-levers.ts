/**
 * Memory levers after load (issue 61): what the resident memory of `npm start`'s process is at
 * ready, after a run of keyed calls, and once it has idled after them, for variants of the
 * process's environment and V8 flags, run alternately (A B C … A B C …) on one 1M-event log.
 *
 * The process is the service as `npm start` runs it (node, SERVICE_NODE_FLAGS, --import tsx
 * services/main.ts, embedded LMDB, in-process bus and cache, the replay feed) restarted from the
 * snapshots of one first boot. Each round: ready, settled (`--settle` s), then `--seconds` of load
 * from autocannon in its own process, alternating 15 s of keyed `POST /x402/get_trade_call` (Bearer)
 * and 15 s of keyed MCP `tools/call get_trade_call` on 8 open sessions, 32 connections; then
 * `--idle` s without requests. At each point: VmRSS, RssAnon, the glibc heap's share (`[heap]` in
 * smaps: the main arena) and the rest of the anonymous memory (V8's pages, the other arenas'
 * heaps, large mmap'd blocks), and V8's heap (used / committed) from /metrics. Beside: the whole
 * process's CPU (utime + stime of /proc/<pid>/stat) per request over the load, the requests, and
 * the 1-minute load average.
 *
 *   npx tsx bench/rss-levers.ts [--events=1000000] [--rounds=2] [--seconds=90] [--idle=60]
 *                               [--settle=20] [--variants=default,arena2,...] [--data=<dir>]
 *
 * `--data=<dir>` keeps the log, its snapshots and the key in that folder, and a later run with the
 * same folder starts from them (no writing, no first boot).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import {
  f0,
  f2,
  freePort,
  processCpuMs,
  ROOT,
  SERVICE_NODE_FLAGS,
  stopChild,
  TSX,
  whenMain,
} from './harness.ts';
import { cannon, issueKey, MCP_HEADERS, openMcpSession } from './load-http.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

interface Variant {
  /** Added to the service's environment. */
  env: Record<string, string>;
  /** Replaces SERVICE_NODE_FLAGS when given. */
  flags?: string[];
}

/**
 * `default` is glibc's own (nothing set); `trim` is what `npm start` and the image set since
 * 2026-11-29 (SERVICE_ENV).
 */
const VARIANTS: Record<string, Variant> = {
  default: { env: {} },
  arena2: { env: { MALLOC_ARENA_MAX: '2' } },
  arena1: { env: { MALLOC_ARENA_MAX: '1' } },
  trim: {
    env: { MALLOC_ARENA_MAX: '2', MALLOC_TRIM_THRESHOLD_: String(128 * 1024), MALLOC_TOP_PAD_: '0' },
  },
  mmap: { env: { MALLOC_MMAP_THRESHOLD_: String(128 * 1024) } },
  semi8: { env: {}, flags: ['--max-semi-space-size=8'] },
  semi4: { env: {}, flags: ['--max-semi-space-size=4'] },
};

interface Mem {
  rss: number;
  anon: number;
  /** Rss of the `[heap]` mapping: glibc's main arena (brk). */
  brk: number;
  /** Rss of glibc's other arenas' heaps (anonymous read-write mappings at a 64 MB boundary, at most 64 MB). */
  arenas: number;
  /** Rss of the LMDB files' mappings (`*.mdb`): clean file pages, counted in VmRSS, not in RssAnon. */
  mdb: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  load: number;
}

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function memOf(pid: number, url: string): Promise<Mem> {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN);
  let brk = 0;
  let arenas = 0;
  let mdb = 0;
  let kind: 'brk' | 'arena' | 'mdb' | null = null;
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (head) {
      const [, from, to, perms, inode, name] = head;
      const start = BigInt(`0x${from}`);
      const size = BigInt(`0x${to}`) - start;
      const arenaHeap =
        inode === '0' && name === '' && perms!.startsWith('rw') && start % (64n << 20n) === 0n;
      kind =
        name === '[heap]'
          ? 'brk'
          : name!.endsWith('.mdb')
            ? 'mdb'
            : arenaHeap && size <= 64n << 20n
              ? 'arena'
              : null;
      continue;
    }
    const rss = /^Rss:\s+(\d+)/.exec(line);
    if (rss && kind === 'brk') brk += Number(rss[1]);
    else if (rss && kind === 'arena') arenas += Number(rss[1]);
    else if (rss && kind === 'mdb') mdb += Number(rss[1]);
  }
  const metrics = await fetch(`${url}/metrics`).then((r) => r.text());
  const gauge = (name: string) =>
    Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(metrics)?.[1] ?? Number.NaN);
  return {
    rss: kb('VmRSS') / 1024,
    anon: kb('RssAnon') / 1024,
    brk: brk / 1024,
    arenas: arenas / 1024,
    mdb: mdb / 1024,
    heapUsed: gauge('nodejs_heap_size_used_bytes') / 2 ** 20,
    heapTotal: gauge('nodejs_heap_size_total_bytes') / 2 ** 20,
    external: gauge('nodejs_external_memory_bytes') / 2 ** 20,
    load: loadavg()[0]!,
  };
}

const show = (m: Mem) =>
  `RSS ${f0(m.rss)} (anon ${f0(m.anon)}, [heap] ${f0(m.brk)}, arenas ${f0(m.arenas)}, .mdb ${f0(m.mdb)}) heap ${f0(m.heapUsed)}/${f0(m.heapTotal)} ext ${f0(m.external)} load ${f2(m.load)}`;

async function waitReady(url: string, child: ChildProcess, stderr: () => string): Promise<void> {
  const started = Date.now();
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited ${child.exitCode}: ${stderr()}`);
    if (Date.now() - started > 300_000) throw new Error(`not ready: ${stderr()}`);
    const ok = await fetch(`${url}/readyz`)
      .then((r) => r.status === 200)
      .catch(() => false);
    if (ok) return;
    await sleep(100);
  }
}

function spawnService(dataDir: string, port: number, variant: Variant) {
  const child = spawn(
    process.execPath,
    [...(variant.flags ?? SERVICE_NODE_FLAGS), ...TSX, 'services/main.ts'],
    {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOST: '127.0.0.1',
        PORT: String(port),
        DATA_DIR: dataDir,
        LOG_LEVEL: 'warn',
        EVENT_STORE: 'lmdb',
        BUS: 'memory',
        CACHE: 'memory',
        FEED: 'replay',
        METRICS_ENABLED: 'true',
        RATE_LIMIT_ANONYMOUS: String(1e9),
        RATE_LIMIT_PRO: String(1e9),
        PLAN_PRO_MONTHLY_CALLS: String(1e12),
        MCP_SESSION_IDLE_MS: String(600_000),
        ...variant.env,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-4_000);
  });
  return { child, stderr: () => stderr };
}

interface Round {
  variant: string;
  ready: Mem;
  settled: Mem;
  loaded: Mem;
  idle: Mem;
  requests: number;
  cpuUsPerRequest: number;
  non2xx: number;
}

async function round(
  name: string,
  dataDir: string,
  key: string,
  o: { seconds: number; idle: number; settle: number },
): Promise<Round> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const { child, stderr } = spawnService(dataDir, port, VARIANTS[name]!);
  try {
    await waitReady(url, child, stderr);
    const pid = child.pid!;
    const ready = await memOf(pid, url);
    await sleep(o.settle * 1000);
    const settled = await memOf(pid, url);
    const auth = { authorization: `Bearer ${key}` };
    const sessions: string[] = [];
    for (let i = 0; i < 8; i++) sessions.push(await openMcpSession(url, auth));
    const cpu0 = processCpuMs(pid)!;
    let requests = 0;
    let non2xx = 0;
    const slice = 15;
    for (let t = 0, i = 0; t < o.seconds; t += slice, i++) {
      const mcp = i % 2 === 1;
      const r = await cannon({
        url: mcp ? `${url}/mcp` : `${url}/x402/get_trade_call`,
        method: 'POST',
        headers: mcp ? { ...MCP_HEADERS, ...auth } : { 'content-type': 'application/json', ...auth },
        ...(mcp ? {} : { body: JSON.stringify(ARGS) }),
        connections: 32,
        durationSeconds: Math.min(slice, o.seconds - t),
        ...(mcp
          ? { mcp: { sessions, method: 'tools/call', params: { name: 'get_trade_call', arguments: ARGS } } }
          : {}),
      });
      requests += r.requests;
      non2xx += Object.entries(r.statusCounts)
        .filter(([s]) => !s.startsWith('2'))
        .reduce((a, [, n]) => a + n, 0);
    }
    const cpuUsPerRequest = ((processCpuMs(pid)! - cpu0) * 1000) / requests;
    const loaded = await memOf(pid, url);
    await sleep(o.idle * 1000);
    const idle = await memOf(pid, url);
    return { variant: name, ready, settled, loaded, idle, requests, cpuUsPerRequest, non2xx };
  } finally {
    await stopChild(child, 'SIGTERM', 30_000);
  }
}

export async function run(
  options: {
    events?: number;
    rounds?: number;
    seconds?: number;
    idle?: number;
    settle?: number;
    variants?: string[];
    data?: string;
  } = {},
) {
  const events = options.events ?? 1_000_000;
  const rounds = options.rounds ?? 2;
  const o = { seconds: options.seconds ?? 90, idle: options.idle ?? 60, settle: options.settle ?? 20 };
  const variants = options.variants ?? ['default', 'arena2'];
  for (const v of variants) if (!VARIANTS[v]) throw new Error(`unknown variant ${v}`);
  const root = options.data ?? mkdtempSync(join(tmpdir(), 'bench-rss-'));
  const data = join(root, 'data');
  const keyFile = join(root, 'key');
  try {
    if (existsSync(keyFile)) return await rounds_(readFileSync(keyFile, 'utf8'));
    mkdirSync(root, { recursive: true });
    const key = await issueKey({ EVENT_STORE: 'lmdb', BUS: 'memory', CACHE: 'memory' }, data);
    const store = await openLmdbEventStore({ path: join(data, 'events') });
    await appendEventMix(store, events);
    await store.close();
    console.log(`${f0(events)} events written; first boot (builds the snapshots)…`);
    {
      const port = await freePort();
      const { child, stderr } = spawnService(data, port, VARIANTS.default!);
      await waitReady(`http://127.0.0.1:${port}`, child, stderr);
      await sleep(30_000);
      await stopChild(child, 'SIGTERM', 60_000);
    }
    writeFileSync(keyFile, key);
    return await rounds_(key);
  } finally {
    if (!options.data) rmSync(root, { recursive: true, force: true });
  }

  async function rounds_(key: string): Promise<Round[]> {
    const out: Round[] = [];
    for (let r = 0; r < rounds; r++) {
      for (const v of variants) {
        const x = await round(v, data, key, o);
        out.push(x);
        console.log(
          `${v.padEnd(8)} round ${r + 1}: ${f0(x.requests)} requests (${x.non2xx} not 2xx), ${f0(x.cpuUsPerRequest)} µs CPU/request\n` +
            `   ready   ${show(x.ready)}\n   settled ${show(x.settled)}\n   loaded  ${show(x.loaded)}\n   idle    ${show(x.idle)}`,
        );
      }
    }
    return out;
  }
}

await whenMain(
  import.meta.url,
  {
    events: 'number',
    rounds: 'number',
    seconds: 'number',
    idle: 'number',
    settle: 'number',
    variants: 'strings',
    data: 'string',
  },
  run,
);
