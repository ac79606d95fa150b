import { execFileSync, spawn } from 'node:child_process';

// `npm start` under test: started in its own process group and found in it, as a supervisor does.

/** The processes of a process group: pid, parent pid and command line. */
export function groupMembers(pgid: number): { pid: number; ppid: number; cmd: string }[] {
  let out = '';
  try {
    out = execFileSync('ps', ['-o', 'pid=,ppid=,args=', '-g', String(pgid)], { encoding: 'utf8' });
  } catch {
    return []; // ps exits 1 when no process is left
  }
  return out
    .split('\n')
    .map((line) => line.trim().match(/^(\d+)\s+(\d+)\s+(.*)$/))
    .filter((m) => m !== null)
    .map((m) => ({ pid: Number(m[1]), ppid: Number(m[2]), cmd: m[3]! }));
}

/** `npm start` in its own process group, as a supervisor starts it, with its JSON log lines as they come. */
export function startNpm(cwd: string, env: Record<string, string>) {
  const npm = spawn('npm', ['start'], {
    cwd,
    detached: true,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      FEED: 'replay',
      MARKET_DATA_DIR: 'sample-data/market',
      REPLAY_SPEED: '0',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  let buffer = '';
  npm.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    const parts = buffer.split('\n');
    buffer = parts.pop()!;
    for (const line of parts) {
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // npm's own banner lines
      }
    }
  });
  const exit = new Promise<number | null>((resolve) => npm.once('exit', (code) => resolve(code)));
  // Every line read: npm's output (the service writes to it too) has closed. A check made as soon
  // as the service is gone can run before the read of the lines it wrote last, on a loaded host.
  const closed = new Promise<void>((resolve) => npm.once('close', () => resolve()));
  return { npm, pgid: npm.pid!, lines, exit, closed, messages: () => lines.map((l) => l.msg) };
}

/** The Node process running services/main.ts in a group (not a shell npm runs it with). */
export function serviceIn(pgid: number) {
  return groupMembers(pgid).find((p) => p.cmd.includes('services/main.ts') && /^\S*node\s/.test(p.cmd));
}
