import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { MemoryCache } from '../adapters/cache/memory.ts';
import type { Cache } from '../adapters/cache/port.ts';
import { connectRedisCache } from '../adapters/cache/redis.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { NewEvent } from '../contracts/envelope.ts';
import type { Projection } from '../projections/projection.ts';

/**
 * What every bench shares: spreads over rounds, CPU time from /proc, child processes, and the
 * rows of the closing table (each target with its figure and whether it was met). A bench records
 * its targets with `recordTarget`; `npm run bench` prints every recorded row at the end.
 */

export const ROOT = new URL('..', import.meta.url).pathname;
export const TSX = ['--import', 'tsx'];
/**
 * The V8 flags `npm start` gives node (package.json's start script; the image's ENTRYPOINT has the
 * same): every bench that starts the service (idle, startup, and load-http.ts's startService)
 * starts it with them, as deployed; the young generation's size they set is most of what the
 * memory benches measure, and it moves the CPU per call too.
 */
export const SERVICE_NODE_FLAGS: string[] = (() => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    scripts: { start: string };
  };
  const words = pkg.scripts.start.split(/\s+/);
  return words.slice(words.indexOf('node') + 1, words.indexOf('--import')).filter((w) => w.startsWith('--'));
})();
/**
 * The glibc allocator settings `npm start` gives node unless the environment has its own
 * (`NAME=${NAME:-value}` before its `exec node`; the image sets the same): the benches that start
 * the service give it these too, the bench's own environment's values first, as npm start does.
 */
export const SERVICE_ENV: Record<string, string> = (() => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
    scripts: { start: string };
  };
  const out: Record<string, string> = {};
  for (const [, name, value] of pkg.scripts.start.matchAll(/(\w+)=\$\{\1:-([^}]*)\}/g)) {
    out[name!] = process.env[name!] || value!;
  }
  return out;
})();

// ---- figures ---------------------------------------------------------------------------------

export interface Spread {
  min: number;
  median: number;
  max: number;
}

export function spread(values: number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
  return { min: sorted[0]!, median, max: sorted[sorted.length - 1]! };
}

export const median = (values: number[]): number => spread(values).median;

export const f0 = (n: number) => Math.round(n).toLocaleString('en-US');
export const f2 = (n: number) => n.toFixed(2);
export const fmtSpread = (s: Spread, fmt: (n: number) => string = f2) =>
  `${fmt(s.min)} / ${fmt(s.median)} / ${fmt(s.max)}`;

// ---- CPU from /proc --------------------------------------------------------------------------

/** utime and stime of a /proc stat line, ms (fields 14 and 15 of stat(5), in 10 ms clock ticks). */
function statSplitMs(path: string): { user: number; system: number } | null {
  try {
    const stat = readFileSync(path, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return {
      user: (Number(fields[11]) * 1000) / CLOCK_TICKS,
      system: (Number(fields[12]) * 1000) / CLOCK_TICKS,
    };
  } catch {
    return null;
  }
}

/** utime + stime of a /proc stat line, ms. */
function statCpuMs(path: string): number | null {
  const split = statSplitMs(path);
  return split === null ? null : split.user + split.system;
}

/** CPU time of a whole process (every thread), ms; null where /proc has none. */
export const processCpuMs = (pid: number): number | null => statCpuMs(`/proc/${pid}/stat`);

/**
 * CPU time of a process's main thread (the event loop), ms; null where /proc has none. Per request
 * it tells whether a server is short of CPU or waiting (on a disk flush, say).
 */
export const mainThreadCpuMs = (pid: number): number | null => statCpuMs(`/proc/${pid}/task/${pid}/stat`);

/** The same, split into user and kernel (system) time. */
export const mainThreadSplitMs = (pid: number): { user: number; system: number } | null =>
  statSplitMs(`/proc/${pid}/task/${pid}/stat`);

/** This process's own CPU time (every thread), ms. */
export function ownCpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

// ---- processes -------------------------------------------------------------------------------

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export function exitOf(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
}

/** Ends a child (a signal, or closing its IPC channel), SIGKILL after `graceMs`. */
export async function stopChild(
  child: ChildProcess,
  how: NodeJS.Signals | 'disconnect' = 'SIGTERM',
  graceMs = 15_000,
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = exitOf(child);
  if (how === 'disconnect') child.disconnect();
  else child.kill(how);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Runs a bench helper script under tsx to its end; its last stdout line, parsed as JSON. */
export async function runScript<T>(
  args: string[],
  env: Record<string, string> = {},
  root = ROOT,
): Promise<T> {
  const child = spawn(process.execPath, [...TSX, ...args], {
    cwd: root,
    env: { PATH: process.env.PATH, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => {
    err = (err + c.toString()).slice(-4_000);
  });
  const code = await exitOf(child);
  if (code !== 0) throw new Error(`${args.join(' ')} exited ${code}: ${err}`);
  return JSON.parse(out.trim().split('\n').pop()!) as T;
}

/** A temporary directory tree (DATA_DIRs, profile directories). */
export function tempDir(prefix: string): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

// ---- host conditions: the load a bench ran with -----------------------------------------------

/**
 * The background load `BENCH_LOAD=N` asks for: N processes that each spin one core at normal
 * priority, started before a bench and stopped after it (`npm run bench -- --loaded` is
 * BENCH_LOAD=1, half of a 2-core machine). 0 or unset: none.
 */
export function requestedHogs(): number {
  const raw = process.env.BENCH_LOAD ?? '0';
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0)
    throw new Error(`BENCH_LOAD takes a whole number of CPU hogs (got ${raw})`);
  return n;
}

/**
 * A hog spins one core; every ten million turns (a few ms) it checks that the bench that started
 * it is still its parent, so that a bench killed before it could stop its hogs leaves none behind.
 */
const HOG =
  'const parent = process.ppid; for (;;) { for (let i = 0; i < 1e7; i++); if (process.ppid !== parent) process.exit(0); }';

/** What the rows recorded now were measured under: `quiet`, or `loaded (N CPU hogs)`. */
let condition = 'quiet';

/** Starts `n` CPU hogs (see requestedHogs) for the rows recorded until the returned stop is called. */
export function startCpuHogs(n: number): () => Promise<void> {
  if (n === 0) return async () => {};
  const hogs = Array.from({ length: n }, () => spawn(process.execPath, ['-e', HOG], { stdio: 'ignore' }));
  condition = `loaded (${n} CPU hog${n === 1 ? '' : 's'})`;
  return async () => {
    condition = 'quiet';
    await Promise.all(hogs.map((hog) => stopChild(hog, 'SIGKILL')));
  };
}

/** Busy and total jiffies of the whole machine, from the first line of /proc/stat. */
function machineJiffies(): { busy: number; total: number } | null {
  try {
    const fields = readFileSync('/proc/stat', 'utf8')
      .split('\n')[0]!
      .trim()
      .split(/\s+/)
      .slice(1, 9)
      .map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already inside user).
    const total = fields.reduce((a, b) => a + b, 0);
    // idle and iowait are the machine's idle time.
    return { busy: total - fields[3]! - (fields[4] ?? 0), total };
  } catch {
    return null;
  }
}

/**
 * CPU time of this process and of the children it has waited for (the services, load generators
 * and helper scripts a bench starts and stops), ms; null where /proc has none.
 */
function ownTreeCpuMs(): number | null {
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime, stime, cutime, cstime are fields 14–17, counted from the state (field 3) at index 0.
    const ticks = Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
    return (ticks * 1000) / CLOCK_TICKS;
  } catch {
    return null;
  }
}

/**
 * Starts watching the host for a bench; the returned function describes what the bench ran with:
 * the 1-minute load average at its start and end, the share of the machine's cores that were busy,
 * how much of that was the bench's own processes (itself and the children it stopped) and how much
 * everything else (other jobs and, when loaded, the hogs), and the background load asked for.
 */
export function watchHost(): () => string {
  const under = condition;
  const load = loadavg()[0]!;
  const machine = machineJiffies();
  const own = ownTreeCpuMs();
  const started = performance.now();
  return () => {
    const wallMs = performance.now() - started;
    const cores = availableParallelism();
    const after = machineJiffies();
    const ownAfter = ownTreeCpuMs();
    const pct = (x: number) => `${Math.round(x * 100)} %`;
    let shares = 'CPU shares unknown (no /proc)';
    if (machine !== null && after !== null && own !== null && ownAfter !== null) {
      const busy = (after.busy - machine.busy) / Math.max(1, after.total - machine.total);
      const ownShare = (ownAfter - own) / (wallMs * cores);
      shares = `${cores} cores busy ${pct(busy)}: this bench's processes ${pct(ownShare)}, everything else (the servers it talks to, other jobs, the hogs) ${pct(Math.max(0, busy - ownShare))}`;
    }
    return `host: ${under}; load average (1 min) ${f2(load)} at start, ${f2(loadavg()[0]!)} at end; ${shares}`;
  };
}

/** Clock ticks per second of /proc/<pid>/stat (USER_HZ: 100 on Linux). */
const CLOCK_TICKS = 100;

// ---- targets and the closing table -----------------------------------------------------------

export interface Target {
  /** `min`: the figure must be at least `value`; `max`: at most. */
  dir: 'min' | 'max';
  value: number;
}

export const atLeast = (value: number): Target => ({ dir: 'min', value });
export const atMost = (value: number): Target => ({ dir: 'max', value });

export function met(figure: number, target: Target): boolean {
  return target.dir === 'min' ? figure >= target.value : figure <= target.value;
}

export function targetText(target: Target, unit = ''): string {
  const value = Number.isInteger(target.value) ? f0(target.value) : String(target.value);
  return `${target.dir === 'min' ? '≥' : '≤'} ${value}${unit}`;
}

export interface TargetRow {
  bench: string;
  /** What is measured against what. */
  measure: string;
  /** The figure judged (a median over rounds, usually a ratio). */
  figure: number;
  unit?: string;
  target: Target;
  /** CPU per request or delivery, µs, of the service and its baseline in the same run. */
  cpuUs?: { service: number; baseline: number };
  /** Anything else worth a glance beside the figure (rates, spread). */
  detail?: string;
}

/** A recorded row: the target, and the host it was measured on (see watchHost). */
type Recorded = TargetRow & { condition: string; load: number };

const recorded: Recorded[] = [];
/** Benches that threw, with their error, for the closing table. */
const failures: { bench: string; condition: string; error: string }[] = [];

function rowText(row: Recorded): string {
  const unit = row.unit ?? '';
  const figure = `${Number.isInteger(row.figure) ? f0(row.figure) : f2(row.figure)}${unit}`;
  const cpu = row.cpuUs
    ? ` | CPU µs per request ${f0(row.cpuUs.service)} vs ${f0(row.cpuUs.baseline)} (${f2(row.cpuUs.service / Math.max(1e-9, row.cpuUs.baseline))}×)`
    : '';
  return (
    `${row.bench} | ${row.measure} | ${figure} | target ${targetText(row.target, unit)} | ` +
    `${met(row.figure, row.target) ? 'met' : 'MISSED'}${cpu}${row.detail ? ` | ${row.detail}` : ''}` +
    ` | ${row.condition}, load ${f2(row.load)}`
  );
}

/** Keeps a target's row for the closing table; its line, for the bench to print in its place. */
export function recordTarget(row: TargetRow): string {
  const kept = { ...row, condition, load: loadavg()[0]! };
  recorded.push(kept);
  return `  => ${rowText(kept)}`;
}

/** Keeps a bench that threw (its service never got ready, say) for the closing table. */
export function recordFailure(bench: string, error: unknown): void {
  const text = error instanceof Error ? error.message : String(error);
  failures.push({ bench, condition, error: text.split('\n')[0]!.slice(0, 300) });
}

/** Every row recorded so far, as the closing table of `npm run bench`. */
export function printTargets(): void {
  if (recorded.length === 0 && failures.length === 0) return;
  const conditions = [...new Set([...recorded.map((r) => r.condition), ...failures.map((f) => f.condition)])];
  const counts = conditions.map((c) => {
    const rows = recorded.filter((r) => r.condition === c);
    const missed = rows.filter((r) => !met(r.figure, r.target)).length;
    const failed = failures.filter((f) => f.condition === c).length;
    return `${c === 'quiet' && conditions.length === 1 ? '' : `${c}: `}${rows.length - missed} met, ${missed} missed${failed > 0 ? `, ${failed} benches FAILED` : ''}`;
  });
  console.log(`\n=== targets: ${counts.join('; ')} ===`);
  // A target's quiet and loaded rows side by side.
  const order = (r: Recorded) => conditions.indexOf(r.condition);
  const keyed = recorded.map((r, i) => ({ r, i, key: `${r.bench}|${r.measure}` }));
  const firstOf = new Map<string, number>();
  for (const { key, i } of keyed) if (!firstOf.has(key)) firstOf.set(key, i);
  keyed.sort((a, b) => firstOf.get(a.key)! - firstOf.get(b.key)! || order(a.r) - order(b.r) || a.i - b.i);
  for (const { r } of keyed) console.log(`  ${rowText(r)}`);
  for (const f of failures) console.log(`  ${f.bench} | FAILED | ${f.condition} | ${f.error}`);
}

// ---- command line ----------------------------------------------------------------------------

type FlagKind = 'number' | 'string' | 'boolean' | 'numbers' | 'strings' | readonly string[];

/**
 * When `moduleUrl` is the file node was started with: parses `--flag=value` options of the given
 * kinds (a list of strings: the values allowed), names them in camelCase (`--cpu-prof` is
 * `cpuProf`) and runs the bench with them; unset flags are left out, so its defaults hold. The
 * host line (watchHost) follows the bench's output.
 */
export async function whenMain(
  moduleUrl: string,
  flags: Record<string, FlagKind>,
  run: (options: never) => Promise<unknown>,
): Promise<void> {
  if (moduleUrl !== pathToFileURL(process.argv[1] ?? '').href) return;
  const { values } = parseArgs({
    options: Object.fromEntries(
      Object.entries(flags).map(([name, kind]) => [
        name,
        { type: kind === 'boolean' ? 'boolean' : 'string' },
      ]),
    ) as Record<string, { type: 'string' | 'boolean' }>,
  });
  const options: Record<string, unknown> = {};
  for (const [name, kind] of Object.entries(flags)) {
    const raw = values[name];
    if (raw === undefined) continue;
    const key = name.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    if (typeof kind !== 'string') {
      if (!kind.includes(raw as string)) throw new Error(`--${name} takes ${kind.join(' or ')} (got ${raw})`);
      options[key] = raw;
    } else if (kind === 'number') options[key] = Number(raw);
    else if (kind === 'numbers') options[key] = (raw as string).split(',').map(Number);
    else if (kind === 'strings') options[key] = (raw as string).split(',');
    else options[key] = raw;
  }
  // Run alone, a bench says what it ran with too, and BENCH_LOAD=N runs it beside N CPU hogs.
  const stopHogs = startCpuHogs(requestedHogs());
  const host = watchHost();
  try {
    await run(options as never);
  } finally {
    await stopHogs();
    console.log(host());
  }
}

// ---- tables and store benches ----------------------------------------------------------------

/** Prints rows of cells under a header, the first column left-aligned and the rest right-aligned. */
export function printColumns(header: string[], lines: string[][]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const format = (cells: string[]) =>
    cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
  console.log(format(header));
  console.log(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const line of lines) console.log(format(line));
}

/** A small verdict-shaped event, numbered: what the store benches append. */
export function sampleEvent(i: number): NewEvent {
  return {
    id: crypto.randomUUID(),
    type: 'VerdictRecorded',
    data: {
      symbol: 'BTC/USDT',
      timeframe: '1h',
      verdict: i % 3 === 0 ? 'BUY' : 'HOLD',
      score: i % 100,
      at: i,
    },
  };
}

/** Counts every event: a rebuild measures the store's feed and the runner, not a fold. */
export const countingProjection: Projection<number> = {
  name: 'bench-count',
  version: 1,
  initial: () => 0,
  evolve: (n) => n + 1,
};

/** The cache a keyed in-process bench runs on: Redis under `prefix` (checked reachable), or memory. */
export async function openBenchCache(
  kind: 'redis' | 'memory',
  redisUrl: string,
  prefix: string,
): Promise<Cache> {
  if (kind === 'memory') return new MemoryCache();
  const cache = await connectRedisCache({ url: redisUrl, prefix, commandTimeoutMs: 10_000 });
  const health = await cache.health();
  if (!health.ok) throw new Error(`Redis at ${redisUrl} is not reachable: ${health.detail}`);
  return cache;
}

/**
 * Reads the whole log through `readAll` in pages the size a catch-up subscription reads, so few
 * events are alive at once; throws unless it saw `total` events. Returns the wall time in ms.
 */
export async function timedReadAll(
  store: Pick<EventStore, 'readAll'>,
  total: number,
  page = 1_000,
): Promise<number> {
  let seen = 0;
  let after = 0;
  const start = performance.now();
  for (;;) {
    const events = await store.readAll({ after, maxCount: page });
    if (events.length === 0) break;
    seen += events.length;
    after = events[events.length - 1]!.position;
  }
  const ms = performance.now() - start;
  if (seen !== total) throw new Error(`read ${seen} of ${total} events`);
  return ms;
}

export const SINGLE_APPEND_STREAMS = 10;

/**
 * Appends `count` single events round-robin over SINGLE_APPEND_STREAMS streams, each with its
 * expected revision (the command path's optimistic check). Returns the wall time in ms.
 */
export async function timedSingleAppends(
  store: Pick<EventStore, 'append'>,
  count: number,
  streamPrefix: string,
): Promise<number> {
  const streams = SINGLE_APPEND_STREAMS;
  const revisions = new Array<number | null>(streams).fill(null);
  const start = performance.now();
  for (let i = 0; i < count; i++) {
    const s = i % streams;
    const result = await store.append(`${streamPrefix}-${s}`, [sampleEvent(i)], {
      expectedRevision: revisions[s] ?? 'no_stream',
    });
    revisions[s] = result.nextRevision;
  }
  return performance.now() - start;
}
