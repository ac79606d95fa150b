import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mcpInitialize } from '../test/mcp-wire.ts';
import {
  atLeast,
  atMost,
  f0,
  f2,
  fmtSpread,
  freePort,
  mainThreadCpuMs,
  mainThreadSplitMs,
  processCpuMs,
  ROOT,
  recordTarget,
  runScript,
  SERVICE_ENV,
  SERVICE_NODE_FLAGS,
  type Spread,
  spread,
  stopChild,
  TSX,
  tempDir,
} from './harness.ts';
import type { CapturedRoute } from './load-bare.ts';
import type { CannonOptions, CannonResult } from './load-cannon.ts';

/**
 * Out-of-process HTTP benchmarking: the service under test, the bare Fastify baseline and the
 * load generator (autocannon) each run in their own process, as an outside caller would see them.
 * Rounds alternate between the two servers, so drift on a shared machine hits both alike, and
 * every ratio is printed as min/median/max over the rounds.
 */

export { freePort, type Spread, spread, tempDir };

/** Headers a server sets per response or per connection; everything else is copied to the bare route. */
const PER_RESPONSE = new Set(['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding']);

export interface Proc {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

async function waitReady(url: string, child: ChildProcess, stderr: () => string, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    // A service killed by a signal (the OOM killer, say) has no exit code, only the signal.
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`server exited with ${child.exitCode ?? child.signalCode}: ${stderr()}`);
    }
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`server at ${url} not ready within ${timeoutMs} ms: ${stderr()}`);
}

/**
 * node flags for `perfMap`: V8 writes a jitdump of every function it compiles, moves or frees
 * (`jit-<pid>.dump` in PERF_JIT_DIR) for `perf record -k 1` and `perf inject --jit`. The older
 * `--perf-basic-prof` map only ever appends: once V8 reuses a freed code address, perf names the
 * function that lived there first, and on the quote path it charged half the samples to an
 * indicator's `update` and a verdict hash that no request runs (2026-11-25; the jitdump of the
 * same path names Fastify's hooks and the socket write). V8's own log, which the flag turns on,
 * goes to one file in the temp dir rather than an isolate-*.log per process in the checkout.
 */
const PERF_JIT_DIR = join(tmpdir(), 'bench-perf-jit');
const PERF_MAP_FLAGS = [
  '--perf-prof',
  `--perf-prof-path=${PERF_JIT_DIR}`,
  '--no-logfile-per-isolate',
  `--logfile=${join(tmpdir(), 'bench-perf-map-v8.log')}`,
];

/** Node's flags for the profiles a run asks of a process it starts (the service or the baseline). */
function profileFlags(options: { cpuProf?: string; perfMap?: boolean }): string[] {
  // V8 writes no jitdump into a directory that does not exist, and says nothing.
  if (options.perfMap) mkdirSync(PERF_JIT_DIR, { recursive: true });
  return [
    ...(options.cpuProf ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProf}`] : []),
    ...(options.perfMap ? PERF_MAP_FLAGS : []),
  ];
}

/**
 * The real service (`services/main.ts`, what `npm start` runs, with its node flags) on a fresh
 * DATA_DIR. The flags set the young generation's size, and without them the figures are another
 * process's: at Node's default size the start-up collection (settle-memory.ts) shrinks the young
 * generation, it regrew to half, and a keyed MCP call scavenged twice as often (one interleaved
 * run, load 8-10: 82 µs per call at the default size, 65 there without the collection, 68 with
 * the flags). `cpuProf`
 * names a directory for `node --cpu-prof` (written when the process exits); `perfMap` starts node
 * writing a jitdump (see PERF_MAP_FLAGS), so that `perf` names the JIT-compiled functions (a CPU profile
 * counts wall time: a thread descheduled inside a syscall is charged to that syscall).
 */
export async function startService(
  env: Record<string, string>,
  options: { cpuProf?: string; perfMap?: boolean; dataDir: string; root?: string },
): Promise<Proc> {
  const port = await freePort();
  const args = [...SERVICE_NODE_FLAGS, ...TSX, ...profileFlags(options), 'services/main.ts'];
  const child = spawn(process.execPath, args, {
    cwd: options.root ?? ROOT,
    env: {
      PATH: process.env.PATH,
      ...SERVICE_ENV,
      HOST: '127.0.0.1',
      PORT: String(port),
      FEED: 'replay',
      DATA_DIR: options.dataDir,
      ...env,
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4_000);
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(`${url}/readyz`, child, () => stderr, 120_000);
  } catch (err) {
    await stopChild(child);
    throw err;
  }
  await settled(child.pid!);
  return { url, pid: child.pid!, stop: () => stopChild(child) };
}

/** A main thread this busy or less over a second is settled (the service's idle tick is ~2 %). */
const SETTLED_SHARE = 0.1;

/**
 * Waits until the process's main thread has been settled for two seconds in a row (at most 60 s).
 * /readyz answers once the service can serve, but for several seconds after it the service still
 * folds and computes what its start left to do (1.5 s of main-thread CPU in the first 5 s, then
 * ~20 ms/s): rounds that overlapped it charged that work to the requests of the path measured
 * first.
 */
async function settled(pid: number): Promise<void> {
  const until = Date.now() + 60_000;
  let quiet = 0;
  let before = mainThreadCpuMs(pid);
  while (quiet < 2 && before !== null) {
    if (Date.now() >= until) {
      process.stderr.write(`service ${pid} still busy 60 s after /readyz: measuring anyway\n`);
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const now = mainThreadCpuMs(pid);
    if (now === null) return;
    quiet = now - before <= SETTLED_SHARE * 1_000 ? quiet + 1 : 0;
    before = now;
  }
}

/** Runs `npm run keys -- create` against the service's DATA_DIR (and cache); returns the key. */
export async function issueKey(env: Record<string, string>, dataDir: string, plan = 'pro'): Promise<string> {
  const [key] = await issueKeys(env, dataDir, 1, plan);
  return key!;
}

/** Issues `count` keys in one child process (bench/issue-keys.ts) on the configured store. */
export function issueKeys(
  env: Record<string, string>,
  dataDir: string,
  count: number,
  plan = 'pro',
  root = ROOT,
): Promise<string[]> {
  return runScript<string[]>(
    ['bench/issue-keys.ts', String(count), plan],
    { DATA_DIR: dataDir, ...env },
    root,
  );
}

/** What a response is, byte for byte, minus the per-connection headers. */
export async function capture(
  url: string,
  init: { method: 'GET' | 'POST'; headers: Record<string, string>; body?: string },
  path: string,
): Promise<CapturedRoute> {
  const res = await fetch(url, init);
  const body = Buffer.from(await res.arrayBuffer());
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (!PER_RESPONSE.has(name)) headers[name] = value;
  });
  return { method: init.method, url: path, status: res.status, headers, body: body.toString('base64') };
}

/**
 * The bare Fastify baseline in its own process; with `durable`, the durability floor (see
 * load-bare.ts): POSTs answer once a group-committed LMDB record of them is flushed. `cpuProf`
 * as for startService: the baseline profiled too, to set the service's functions against it.
 */
export async function startBare(
  routes: CapturedRoute[],
  options: { durable?: boolean; perfMap?: boolean; cpuProf?: string; turnEnd?: boolean } = {},
): Promise<Proc> {
  const tmp = tempDir('bench-bare-');
  const dir = tmp.path;
  const file = join(dir, 'routes.json');
  writeFileSync(file, JSON.stringify(routes));
  const port = await freePort();
  const args = [file, String(port), ...(options.durable ? [join(dir, 'lmdb')] : [])];
  const child = spawn(process.execPath, [...TSX, ...profileFlags(options), 'bench/load-bare.ts', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, ...(options.turnEnd ? { BARE_TURN_END: '1' } : {}) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  try {
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`bare server exited ${code}: ${stderr}`)));
    });
  } catch (err) {
    await stopChild(child);
    tmp.remove();
    throw err;
  }
  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    async stop() {
      await stopChild(child);
      tmp.remove();
    },
  };
}

/** One autocannon run from its own process. */
export function cannon(options: CannonOptions): Promise<CannonResult> {
  return runScript<CannonResult>(['bench/load-cannon.ts', JSON.stringify(options)]);
}

export interface Comparison {
  service: CannonResult[];
  bare: CannonResult[];
  /** service/bare of each round (the service run and the bare run right after it). */
  ratios: number[];
  /**
   * CPU of each server's main thread per request answered, µs, per round (Linux only); beside it
   * the kernel's part of that (system time), and the whole process's (every thread: a database
   * writer, V8's helpers), so that work off the main thread is not lost from sight.
   */
  cpu?: {
    service: number[];
    bare: number[];
    serviceBusy: number[];
    bareBusy: number[];
    serviceKernel: number[];
    bareKernel: number[];
    serviceProcess: number[];
    bareProcess: number[];
  };
}

/**
 * Runs `run` and measures the main-thread CPU `pid` spent meanwhile; null where /proc has none.
 * The window also holds the load generator's start-up (about a second), so the figure per request
 * includes a little of the server's background work; `loadMs` is the generator's own run.
 */
async function withCpu(
  pid: number | undefined,
  run: () => Promise<CannonResult>,
): Promise<{
  result: CannonResult;
  cpuMs: number | null;
  kernelMs: number | null;
  processMs: number | null;
  loadMs: number;
}> {
  const before = pid === undefined ? null : mainThreadSplitMs(pid);
  const processBefore = pid === undefined ? null : processCpuMs(pid);
  const result = await run();
  const after = pid === undefined ? null : mainThreadSplitMs(pid);
  const processAfter = pid === undefined ? null : processCpuMs(pid);
  const loadMs = result.perSec > 0 ? (result.requests / result.perSec) * 1000 : Number.POSITIVE_INFINITY;
  const split =
    before === null || after === null
      ? null
      : { user: after.user - before.user, system: after.system - before.system };
  return {
    result,
    cpuMs: split === null ? null : split.user + split.system,
    kernelMs: split === null ? null : split.system,
    processMs: processBefore === null || processAfter === null ? null : processAfter - processBefore,
    loadMs,
  };
}

/**
 * `rounds` alternating runs: service then bare, each from a fresh load-generator process. Each
 * round's ratio pairs the two runs made back to back. `check` sees every service result (e.g.
 * that no request failed) and throws when a run did not measure what it claims.
 */
export async function alternate(
  rounds: number,
  service: () => Promise<CannonResult>,
  bare: () => Promise<CannonResult>,
  check: (r: CannonResult, side: 'service' | 'bare') => void,
  pids?: { service: number; bare: number },
): Promise<Comparison> {
  const out: Comparison = { service: [], bare: [], ratios: [] };
  const cpu = {
    service: [] as number[],
    bare: [] as number[],
    serviceBusy: [] as number[],
    bareBusy: [] as number[],
    serviceKernel: [] as number[],
    bareKernel: [] as number[],
    serviceProcess: [] as number[],
    bareProcess: [] as number[],
  };
  const perRequest = (ms: number | null, r: CannonResult) =>
    ((ms ?? Number.NaN) * 1000) / Math.max(1, r.requests);
  for (let i = 0; i < rounds; i++) {
    const s = await withCpu(pids?.service, service);
    check(s.result, 'service');
    const b = await withCpu(pids?.bare, bare);
    check(b.result, 'bare');
    out.service.push(s.result);
    out.bare.push(b.result);
    out.ratios.push(s.result.perSec / b.result.perSec);
    if (s.cpuMs !== null && b.cpuMs !== null) {
      cpu.service.push(perRequest(s.cpuMs, s.result));
      cpu.bare.push(perRequest(b.cpuMs, b.result));
      cpu.serviceBusy.push(Math.min(1, s.cpuMs / s.loadMs));
      cpu.bareBusy.push(Math.min(1, b.cpuMs / b.loadMs));
      cpu.serviceKernel.push(perRequest(s.kernelMs, s.result));
      cpu.bareKernel.push(perRequest(b.kernelMs, b.result));
      cpu.serviceProcess.push(perRequest(s.processMs, s.result));
      cpu.bareProcess.push(perRequest(b.processMs, b.result));
    }
  }
  if (cpu.service.length === rounds) out.cpu = cpu;
  return out;
}

/** What a path's figures are judged by: the rate ratio (service/bare), the CPU ratio, or both. */
export interface PathTargets {
  /** service/bare requests per second, median over the rounds. */
  rate?: number;
  /** service/bare main-thread CPU per request, median over the rounds. */
  cpu?: number;
}

/**
 * The lines of one path, and its rows in the closing table: the rate ratio and the CPU per
 * request of both servers, measured in the same interleaved rounds.
 */
export function report(
  bench: string,
  label: string,
  title: string,
  c: Comparison,
  targets: PathTargets,
): string[] {
  const ratio = spread(c.ratios);
  const cpuRatio = c.cpu ? roundRatios(c.cpu.service, c.cpu.bare) : null;
  const cpuUs = c.cpu
    ? { service: spread(c.cpu.service).median, baseline: spread(c.cpu.bare).median }
    : undefined;
  const lines = [
    `  ${label} (${title})`,
    `    service req/s (min/median/max): ${fmtSpread(spread(c.service.map((r) => r.perSec)), f0)}` +
      `   p50 ${fmtSpread(spread(c.service.map((r) => r.p50Ms)), String)} ms` +
      `   p99 ${fmtSpread(spread(c.service.map((r) => r.p99Ms)), String)} ms`,
    `    bare    req/s (min/median/max): ${fmtSpread(spread(c.bare.map((r) => r.perSec)), f0)}` +
      `   p50 ${fmtSpread(spread(c.bare.map((r) => r.p50Ms)), String)} ms`,
    `    ratio service/bare over ${c.ratios.length} rounds (min/median/max): ${fmtSpread(ratio)}`,
    ...(c.cpu
      ? [
          `    main-thread CPU per request, µs (min/median/max): service ${fmtSpread(spread(c.cpu.service), f0)}, bare ${fmtSpread(spread(c.cpu.bare), f0)}, service/bare ${fmtSpread(cpuRatio!)};` +
            ` main thread busy: service ${fmtSpread(spread(c.cpu.serviceBusy), pct)}, bare ${fmtSpread(spread(c.cpu.bareBusy), pct)}`,
          `    of which in the kernel (system time), µs: service ${fmtSpread(spread(c.cpu.serviceKernel), f0)}, bare ${fmtSpread(spread(c.cpu.bareKernel), f0)};` +
            ` whole process (every thread), µs: service ${fmtSpread(spread(c.cpu.serviceProcess), f0)}, bare ${fmtSpread(spread(c.cpu.bareProcess), f0)},` +
            ` service/bare ${fmtSpread(roundRatios(c.cpu.serviceProcess, c.cpu.bareProcess))}`,
        ]
      : []),
  ];
  if (c.cpu && targets.rate !== undefined) {
    // Per round, req/s = busy share ÷ CPU per request on each side, so the rate ratio is the ratio
    // of busy shares over the CPU ratio: what the rate target asks of CPU at the idle this run
    // showed (for a keyed call, mostly waiting out its debit's commit: see the durability floor in bench/README.md).
    const busy = roundRatios(c.cpu.serviceBusy, c.cpu.bareBusy);
    lines.push(
      `    busy share service/bare ${f2(busy.median)}: at that share the ≥ ${targets.rate} rate asks for CPU ≤ ${f2(busy.median / targets.rate)}× bare`,
    );
  }
  const rates = `${f0(spread(c.service.map((r) => r.perSec)).median)} vs ${f0(spread(c.bare.map((r) => r.perSec)).median)} req/s`;
  if (targets.rate !== undefined) {
    lines.push(
      recordTarget({
        bench,
        measure: `${label}: req/s service/bare`,
        figure: ratio.median,
        target: atLeast(targets.rate),
        ...(cpuUs ? { cpuUs } : {}),
        detail: `${rates}, ratio ${fmtSpread(ratio)}`,
      }),
    );
  }
  if (targets.cpu !== undefined) {
    lines.push(
      recordTarget({
        bench,
        measure: `${label}: main-thread CPU per request service/bare`,
        figure: cpuRatio?.median ?? Number.NaN,
        unit: '×',
        target: atMost(targets.cpu),
        ...(cpuUs ? { cpuUs } : {}),
        detail: cpuRatio ? `${rates}, CPU ratio ${fmtSpread(cpuRatio)}` : 'no /proc: CPU not measured',
      }),
    );
  }
  return lines;
}
const pct = (n: number) => `${Math.round(n * 100)} %`;

/** The spread of a/b over the rounds (each side's figure of one round against the other's). */
function roundRatios(a: number[], b: number[]): Spread {
  return spread(a.map((x, i) => x / Math.max(1e-9, b[i]!)));
}

/**
 * The durability floor's lines of a keyed path (`floor`: the floor in the `service` slot against
 * bare): its rate, its ratio to bare, the share of it the target asks of the service and the share
 * the service answers. Both shares come from paired rounds (each side against the bare run right
 * after it), so the machine's drift between the two sets of rounds cancels:
 * service/floor = (service/bare) / (floor/bare). Beside them, the floor's CPU per request
 * against bare's (main thread and whole process).
 */
export function reportFloor(service: Comparison, floor: Comparison, target: number): string[] {
  const ratio = spread(floor.ratios);
  const ofFloor = spread(service.ratios).median / ratio.median;
  const asked = target / ratio.median;
  const two = f2;
  return [
    `    durability floor (bare Fastify + the call's record flushed, group commit; its own ${floor.ratios.length} rounds):` +
      ` ${fmtSpread(spread(floor.service.map((r) => r.perSec)), f0)} req/s, p50 ${spread(floor.service.map((r) => r.p50Ms)).median} ms`,
    `    floor/bare (min/median/max): ${fmtSpread(ratio, two)};` +
      ` the ${target} target asks the service for ${two(asked)} of the floor${asked > 1 ? ' (more than the floor itself: out of reach of any answer that waits for its debit on this disk)' : ''}, it answers ${two(ofFloor)}`,
    // The floor's own CPU per request (one small record written and awaited, nothing else): what
    // durability alone costs a server, to read the service's CPU ratio against. lmdb-js writes
    // and flushes on a thread of its own, so the whole process's figure goes beside the main thread's.
    ...(floor.cpu
      ? [
          `    floor CPU per request, µs (min/median/max): main thread: floor ${fmtSpread(spread(floor.cpu.service), f0)}, bare ${fmtSpread(spread(floor.cpu.bare), f0)},` +
            ` floor/bare ${fmtSpread(roundRatios(floor.cpu.service, floor.cpu.bare))};` +
            ` whole process: floor ${fmtSpread(spread(floor.cpu.serviceProcess), f0)}, bare ${fmtSpread(spread(floor.cpu.bareProcess), f0)},` +
            ` floor/bare ${fmtSpread(roundRatios(floor.cpu.serviceProcess, floor.cpu.bareProcess))}`,
        ]
      : []),
  ];
}

/**
 * The service against bare Fastify writing its answers at the end of the turn as the service does
 * (services/shared/turn-end.ts), in rounds of their own: how much of the ratio against plain bare
 * is the service's work per request, and how much is only when the bytes are written.
 */
export function reportTurnEnd(c: Comparison): string[] {
  return [
    `    against bare Fastify writing at the end of the turn too (its own ${c.ratios.length} rounds): req/s service/bare ${fmtSpread(spread(c.ratios), f2)}` +
      (c.cpu
        ? `; main-thread CPU per request ${f0(spread(c.cpu.service).median)} vs ${f0(spread(c.cpu.bare).median)} µs, service/bare ${fmtSpread(roundRatios(c.cpu.service, c.cpu.bare))}`
        : ''),
  ];
}

/** The headers of a Streamable HTTP MCP request (JSON or SSE accepted). */
export const MCP_HEADERS = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': '2025-06-18',
};

/** Opens an MCP session as a client does (initialize, then notifications/initialized); its id. */
export async function openMcpSession(url: string, auth: Record<string, string>): Promise<string> {
  const res = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...auth },
    body: JSON.stringify(mcpInitialize('bench', 0)),
  });
  const id = res.headers.get('mcp-session-id');
  await res.text();
  if (res.status !== 200 || !id) throw new Error(`initialize answered ${res.status}`);
  const note = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...MCP_HEADERS, ...auth, 'mcp-session-id': id },
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  await note.text();
  return id;
}
