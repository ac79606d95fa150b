import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const ROOT = new URL('..', import.meta.url).pathname;

/** The service process (`services/main.ts`) a test started: its JSON log lines as they come, its stderr, its exit. */
export interface ServiceProcess {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  stderr: string;
  exit: Promise<number | null>;
}

/** Starts `services/main.ts` on loopback with `env` over the defaults below, and collects its output. */
export function runServiceProcess(env: Record<string, string>, args: string[] = []): ServiceProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts', ...args], {
    cwd: ROOT,
    // The shipped slice rather than the default full data set beside the checkout: these tests are
    // about the process (start, stop, a stalled writer), and the full set's 20 scheduled markets
    // (6 in the slice) only add work to a process whose start is awaited on a loaded machine.
    env: {
      PATH: process.env.PATH,
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      FEED: 'replay',
      MARKET_DATA_DIR: 'sample-data/market',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const result: ServiceProcess = {
    child,
    lines: [],
    stderr: '',
    exit: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
  };
  let buffer = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let nl = buffer.indexOf('\n');
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      try {
        result.lines.push(JSON.parse(line));
      } catch {
        result.lines.push({ raw: line });
      }
      nl = buffer.indexOf('\n');
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    result.stderr += chunk.toString();
  });
  return result;
}

/**
 * The service processes one test file starts, each on a data dir of its own (made under the OS's
 * temp dir, named from `prefix`): `stopAll`, for the file's afterAll, stops the ones still running
 * (SIGTERM), waits for every exit and removes the dirs.
 */
export function serviceProcesses(prefix: string): {
  start(env: Record<string, string>, args?: string[]): Promise<ServiceProcess>;
  stopAll(): Promise<void>;
} {
  const running: ServiceProcess[] = [];
  const dirs: string[] = [];
  return {
    async start(env, args = []) {
      const dataDir = await mkdtemp(join(tmpdir(), prefix));
      dirs.push(dataDir);
      const r = runServiceProcess({ DATA_DIR: dataDir, ...env }, args);
      running.push(r);
      return r;
    },
    async stopAll() {
      for (const r of running) if (r.child.exitCode === null) r.child.kill('SIGTERM');
      await Promise.all(running.map((r) => r.exit));
      await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
    },
  };
}
