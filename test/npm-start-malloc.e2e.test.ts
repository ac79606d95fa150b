import { execFileSync, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

/**
 * `npm start` gives node glibc's MALLOC_ARENA_MAX=2, MALLOC_TRIM_THRESHOLD_=131072 and
 * MALLOC_TOP_PAD_=0 (bench/README.md, "RSS after load"): glibc reads them once, when the process
 * starts, so they are set where node is started, not in ./.env. An operator's own value, exported
 * before `npm start`, is left as it is.
 */

const ROOT = new URL('..', import.meta.url).pathname;

/** The node process running services/main.ts in a process group. */
function serviceIn(pgid: number): number | undefined {
  let out = '';
  try {
    out = execFileSync('ps', ['-o', 'pid=,args=', '-g', String(pgid)], { encoding: 'utf8' });
  } catch {
    return undefined;
  }
  const line = out.split('\n').find((l) => l.includes('services/main.ts') && /^\s*\d+\s+\S*node\s/.test(l));
  return line ? Number(line.trim().split(/\s+/)[0]) : undefined;
}

/** The environment node was started with, as the kernel keeps it. */
function environ(pid: number): Record<string, string> {
  const entries = readFileSync(`/proc/${pid}/environ`, 'utf8')
    .split('\0')
    .filter(Boolean)
    .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]);
  return Object.fromEntries(entries);
}

describe("npm start's allocator setting", () => {
  const dirs: string[] = [];
  const groups: number[] = [];
  afterAll(async () => {
    for (const pgid of groups) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  async function startedWith(extra: Record<string, string>): Promise<Record<string, string>> {
    const dir = await mkdtemp(join(tmpdir(), 'npm-start-malloc-'));
    dirs.push(dir);
    const npm = spawn('npm', ['start'], {
      cwd: ROOT,
      detached: true,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        HOST: '127.0.0.1',
        PORT: '0',
        DATA_DIR: dir,
        FEED: 'replay',
        MARKET_DATA_DIR: 'sample-data/market',
        ...extra,
      },
      stdio: 'ignore',
    });
    groups.push(npm.pid!);
    let pid: number | undefined;
    await expect.poll(() => (pid = serviceIn(npm.pid!)), { timeout: 60_000, interval: 100 }).toBeDefined();
    const env = environ(pid!);
    process.kill(-npm.pid!, 'SIGKILL');
    return env;
  }

  it('gives node the three settings when the environment has none of them', async () => {
    const env = await startedWith({});
    expect([env.MALLOC_ARENA_MAX, env.MALLOC_TRIM_THRESHOLD_, env.MALLOC_TOP_PAD_]).toEqual([
      '2',
      '131072',
      '0',
    ]);
  }, 90_000);

  it("leaves an operator's own value as it is, and sets the others", async () => {
    const env = await startedWith({ MALLOC_ARENA_MAX: '4' });
    expect([env.MALLOC_ARENA_MAX, env.MALLOC_TRIM_THRESHOLD_, env.MALLOC_TOP_PAD_]).toEqual([
      '4',
      '131072',
      '0',
    ]);
  }, 90_000);
});
