/**
 * Processes the drill starts on its hosts: each is spawned through `ip netns exec` (which execs,
 * so the child's pid is the process's own and kill -9 reaches it), logs to a file, and is up once
 * its readiness probe says so. There is no fixed start deadline: a start fails when the process
 * exits, or when neither its log nor its probe's answer has changed for `stallMs` (a role
 * rebuilding a projection is slow, not stuck).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, statSync } from 'node:fs';

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
  /** Called after kill -9, before the restart (e.g. wait for orphaned workers to go). */
  afterKill?: () => Promise<void>;
}): Managed {
  const log = createWriteStream(options.logFile, { flags: 'a' });
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
        if (answer.detail !== lastDetail || size !== lastSize) {
          lastDetail = answer.detail;
          lastSize = size;
          movedAt = Date.now();
        }
        if (Date.now() - movedAt > options.stallMs) {
          throw new Error(
            `${options.name} not ready, and neither its log nor its readiness changed for ${options.stallMs / 1000} s: ${lastDetail.slice(0, 400)} (see ${options.logFile})`,
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

function fileSize(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}
