/**
 * Processes the drill starts on its hosts: each is spawned through `ip netns exec` (which execs,
 * so the child's pid is the process's own and kill -9 reaches it), logs to a file, and is up once
 * its readiness probe says so. There is no fixed start deadline: a start fails when the process
 * exits, or when neither its log, nor its probe's answer, nor its CPU time has moved for `stallMs`
 * (a role rebuilding a projection is slow, not stuck; on a machine at load 15, a role spent over
 * 60 s loading its modules before it wrote its first log line, busy all along).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, readFileSync, statSync } from 'node:fs';

export type Probe = () => Promise<{ ready: boolean; detail: string }>;

export interface Managed {
  name: string;
  logFile: string;
  /** Exits nobody asked for. */
  crashes: string[];
  /** Seconds each start took to be ready. */
  starts: number[];
  pid(): number | undefined;
  running(): boolean;
  start(): Promise<void>;
  /** kill -9; resolves once it has exited. */
  kill(): Promise<void>;
  /** SIGTERM, SIGKILL after `graceMs`; resolves with the exit code or signal. */
  stop(graceMs?: number): Promise<string>;
}

/** Every child of the drill: killed on any way out. */
export const children = new Set<ChildProcess>();

export function killAllChildren(): void {
  for (const c of children) {
    try {
      c.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function managed(options: {
  name: string;
  argv: () => [string, string[]];
  env?: Record<string, string>;
  cwd?: string;
  logFile: string;
  probe: Probe;
  stallMs: number;
  /** CPU seconds that count as progress within `stallMs` (CPU_PROGRESS_S unless a test's shorter window needs less). */
  cpuProgressS?: number;
  /** Called after kill -9, before the restart (e.g. wait for orphaned workers to go). */
  afterKill?: () => Promise<void>;
}): Managed {
  const log = createWriteStream(options.logFile, { flags: 'a' });
  const cpuProgressS = options.cpuProgressS ?? CPU_PROGRESS_S;
  let child: ChildProcess | null = null;
  let expected = false;
  const m: Managed = {
    name: options.name,
    logFile: options.logFile,
    crashes: [],
    starts: [],
    pid: () => child?.pid,
    running: () => child !== null && child.exitCode === null && child.signalCode === null,
    async start() {
      expected = false;
      const t0 = Date.now();
      const [command, args] = options.argv();
      const c = spawn(command, args, {
        cwd: options.cwd,
        env: { PATH: process.env.PATH, ...options.env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.add(c);
      c.once('exit', () => children.delete(c));
      child = c;
      c.stdout!.pipe(log, { end: false });
      c.stderr!.pipe(log, { end: false });
      c.once('exit', (code, signal) => {
        if (!expected) m.crashes.push(`${options.name} exited ${code ?? signal}`);
      });
      let lastDetail = '';
      let lastSize = -1;
      let lastCpu = 0;
      let movedAt = Date.now();
      for (;;) {
        if (c.exitCode !== null || c.signalCode !== null)
          throw new Error(
            `${options.name} exited at start (${c.exitCode ?? c.signalCode}; see ${options.logFile})`,
          );
        const answer = await options.probe().catch((err: unknown) => ({ ready: false, detail: String(err) }));
        if (answer.ready) {
          m.starts.push((Date.now() - t0) / 1000);
          return;
        }
        const size = fileSize(options.logFile);
        const cpu = cpuSeconds(c.pid);
        if (answer.detail !== lastDetail || size !== lastSize || cpu - lastCpu >= cpuProgressS) {
          lastDetail = answer.detail;
          lastSize = size;
          lastCpu = cpu;
          movedAt = Date.now();
        }
        if (Date.now() - movedAt > options.stallMs) {
          throw new Error(
            `${options.name} not ready, and neither its log, its readiness nor its CPU time moved for ${options.stallMs / 1000} s: ${lastDetail.slice(0, 400)} (see ${options.logFile})`,
          );
        }
        await sleep(200);
      }
    },
    async kill() {
      expected = true;
      const c = child;
      if (c && c.exitCode === null && c.signalCode === null) {
        const exited = once(c, 'exit');
        c.kill('SIGKILL');
        await exited;
      }
      await options.afterKill?.();
    },
    async stop(graceMs = 20_000) {
      expected = true;
      const c = child;
      if (!c) return 'never started';
      if (c.exitCode !== null || c.signalCode !== null) return String(c.exitCode ?? c.signalCode);
      const exited = once(c, 'exit') as Promise<[number | null, string | null]>;
      c.kill('SIGTERM');
      const timer = setTimeout(() => c.kill('SIGKILL'), graceMs);
      const [code, signal] = await exited;
      clearTimeout(timer);
      return String(code ?? signal);
    },
  };
  return m;
}

/**
 * CPU time that counts as progress: a process loading modules or rebuilding state burns this much
 * within seconds even on a crowded machine, while a hung one idling on timers takes minutes to.
 */
export const CPU_PROGRESS_S = 0.5;

/** User + system CPU seconds of a live process (Linux /proc), 0 once it is gone. */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

// sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on (the kernel's USER_HZ).
const CLOCK_TICKS = 100;

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
