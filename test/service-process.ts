import { type ChildProcess, spawn } from 'node:child_process';

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
