import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { serviceIn, startNpm } from './npm-start.ts';

/**
 * `npm start` gives node glibc's MALLOC_ARENA_MAX=2, MALLOC_TRIM_THRESHOLD_=131072 and
 * MALLOC_TOP_PAD_=0 (bench/README.md, "RSS after load"): glibc reads them once, when the process
 * starts, so they are set where node is started, not in ./.env. An operator's own value, exported
 * before `npm start`, is left as it is.
 */

const ROOT = new URL('..', import.meta.url).pathname;

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
    const { pgid } = startNpm(ROOT, { DATA_DIR: dir, ...extra });
    groups.push(pgid);
    let pid: number | undefined;
    await expect.poll(() => (pid = serviceIn(pgid)?.pid), { timeout: 60_000, interval: 100 }).toBeDefined();
    const env = environ(pid!);
    process.kill(-pgid, 'SIGKILL');
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
