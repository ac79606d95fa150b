import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('..', import.meta.url).pathname;

/** The processes of a process group: pid, parent pid and command line. */
function groupMembers(pgid: number): { pid: number; ppid: number; cmd: string }[] {
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

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('npm start under a supervisor', () => {
  let dir: string;
  let npm: ChildProcess | undefined;
  let servicePid = 0;
  afterAll(async () => {
    if (servicePid && alive(servicePid)) process.kill(servicePid, 'SIGKILL');
    if (npm?.pid && alive(npm.pid)) process.kill(-npm.pid, 'SIGKILL');
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('drains on the SIGTERM a supervisor sends the whole process group, though the service is busy when it comes', async () => {
    dir = await mkdtemp(join(tmpdir(), 'npm-start-'));
    // Its own process group, as a supervisor starts it.
    npm = spawn('npm', ['start'], {
      cwd: ROOT,
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
        DATA_DIR: dir,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const pgid = npm.pid!;
    const messages: string[] = [];
    let buffer = '';
    npm.stdout!.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      const lines = buffer.split('\n');
      buffer = lines.pop()!;
      for (const line of lines) {
        try {
          messages.push((JSON.parse(line) as { msg: string }).msg);
        } catch {
          // npm's own banner lines
        }
      }
    });
    await expect
      .poll(() => messages.includes('service started'), { timeout: 120_000, interval: 200 })
      .toBe(true);
    // The Node process running services/main.ts (not the shell npm runs it with).
    const service = groupMembers(pgid).find(
      (p) => p.cmd.includes('services/main.ts') && /^\S*node\s/.test(p.cmd),
    );
    expect(service, JSON.stringify(groupMembers(pgid))).toBeDefined();
    servicePid = service!.pid;

    // Stopped, the service stands for one whose event loop is busy when the signal comes: it cannot
    // take the signal until it runs again, however long a parent waits for it to.
    process.kill(servicePid, 'SIGSTOP');
    process.kill(-pgid, 'SIGTERM');
    // Every process between npm and the service has acted on the signal (ended, or ended the service).
    await expect
      .poll(
        () => {
          const members = groupMembers(pgid);
          const me = members.find((p) => p.pid === servicePid);
          return me === undefined || !members.some((p) => p.pid === me.ppid);
        },
        { timeout: 30_000 },
      )
      .toBe(true);
    expect(alive(servicePid), 'the service was not killed while busy').toBe(true);
    process.kill(servicePid, 'SIGCONT');
    await expect.poll(() => alive(servicePid), { timeout: 60_000, interval: 200 }).toBe(false);
    expect(messages).toContain('shutting down');
    expect(messages).toContain('service stopped');
    expect(messages).not.toContain('second signal: exiting at once');
  }, 240_000);
});
