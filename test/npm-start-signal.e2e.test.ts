import { mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { groupMembers, serviceIn, startNpm } from './npm-start.ts';

const ROOT = new URL('..', import.meta.url).pathname;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('npm start under a supervisor', () => {
  const dirs: string[] = [];
  const groups: number[] = [];
  let servicePid = 0;
  afterAll(async () => {
    if (servicePid && alive(servicePid)) process.kill(servicePid, 'SIGKILL');
    for (const pgid of groups) if (groupMembers(pgid).length > 0) process.kill(-pgid, 'SIGKILL');
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  async function tempDir(prefix: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), prefix));
    dirs.push(dir);
    return dir;
  }

  /** `npm start` in `cwd` once it has logged `service started`, and its node process. */
  async function started(cwd: string, env: Record<string, string>) {
    const run = startNpm(cwd, env);
    groups.push(run.pgid);
    await expect
      .poll(() => run.messages().includes('service started'), { timeout: 120_000, interval: 200 })
      .toBe(true);
    const service = serviceIn(run.pgid);
    expect(service, JSON.stringify(groupMembers(run.pgid))).toBeDefined();
    servicePid = service!.pid;
    return { run, service: service! };
  }

  it('drains on the SIGTERM a supervisor sends the whole process group, though the service is busy when it comes', async () => {
    const { run } = await started(ROOT, { DATA_DIR: await tempDir('npm-start-') });
    const { pgid } = run;

    // Stopped, the service stands for one whose event loop is busy when the signal comes: it cannot
    // take the signal until it runs again, however long a parent waits for it to.
    process.kill(servicePid, 'SIGSTOP');
    process.kill(-pgid, 'SIGTERM');
    // npm passes the signal on to its child (node itself: no shell in between) and waits for it to
    // end; nothing ends the service while it is busy, or leaves it behind without npm.
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(alive(servicePid), 'the service was not killed while busy').toBe(true);
    expect(serviceIn(pgid)?.ppid, 'npm still waits for the service').toBe(pgid);
    process.kill(servicePid, 'SIGCONT');
    expect(await run.exit).toBe(0);
    await expect.poll(() => alive(servicePid), { timeout: 30_000, interval: 200 }).toBe(false);
    await run.closed;
    expect(run.messages()).toContain('shutting down');
    expect(run.messages()).toContain('service stopped');
    expect(run.messages()).not.toContain('second signal: exiting at once');
  }, 240_000);

  it('drains on a Ctrl-C (SIGINT to the whole process group), though npm passes it on as well', async () => {
    const { run } = await started(ROOT, { DATA_DIR: await tempDir('npm-start-int-') });

    // A terminal's Ctrl-C signals the foreground group: node gets the SIGINT, and npm passes its
    // own copy on, so one key press reaches the service twice.
    process.kill(-run.pgid, 'SIGINT');
    await expect.poll(() => alive(servicePid), { timeout: 30_000, interval: 200 }).toBe(false);
    await run.closed;
    expect(run.messages()).toContain('shutting down');
    expect(run.messages()).toContain('service stopped');
    expect(run.messages()).not.toContain('second signal: exiting at once');
  }, 240_000);

  it('takes one copy of the signal as the same signal, and exits at once on a further one', async () => {
    // A drain long enough that the stop is still under way when the further signal comes.
    const { run } = await started(ROOT, {
      DATA_DIR: await tempDir('npm-start-again-'),
      SHUTDOWN_DRAIN_MS: '60000',
    });

    // The first signal, then its copy as late as a loaded host delivers one (npm's copy of a group's
    // signal may also merge with the first while that is pending: sent one by one, each is taken).
    process.kill(servicePid, 'SIGTERM');
    await expect
      .poll(() => run.messages().includes('shutting down'), { timeout: 30_000, interval: 100 })
      .toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    process.kill(servicePid, 'SIGTERM');
    await expect
      .poll(() => run.messages().some((m) => String(m).startsWith('the same signal again')), {
        timeout: 30_000,
        interval: 100,
      })
      .toBe(true);
    expect(alive(servicePid), 'the copy did not end the drain').toBe(true);
    process.kill(servicePid, 'SIGTERM');
    await expect.poll(() => alive(servicePid), { timeout: 30_000, interval: 200 }).toBe(false);
    await run.closed;
    expect(run.messages()).toContain('second signal: exiting at once');
    expect(run.messages()).not.toContain('service stopped');
  }, 240_000);

  it("drains and exits 0 on a SIGTERM to npm's own pid, node being npm's child, and reads ./.env under exported variables", async () => {
    // A checkout of its own (every entry of this one linked) so that it can hold a .env.
    const checkout = await tempDir('npm-start-env-');
    for (const entry of await readdir(ROOT)) {
      if (['.env', '.git', 'data', 'test-results'].includes(entry)) continue;
      await symlink(join(ROOT, entry), join(checkout, entry));
    }
    const fromFile = join(checkout, 'data-from-env-file');
    await writeFile(join(checkout, '.env'), `DATA_DIR=${fromFile}\nHOST=127.0.0.2\n`);
    const { run, service } = await started(checkout, { HOST: '127.0.0.1' });
    // DATA_DIR came from .env; HOST from the environment, which wins over the file.
    expect(run.lines.find((l) => l.msg === 'event store: LMDB')?.path).toBe(join(fromFile, 'events'));
    expect(run.lines.find((l) => l.msg === 'service started')?.url).toMatch(/^http:\/\/127\.0\.0\.1:/);
    // No shell between npm and the service: the signal npm passes on reaches node itself.
    expect(service.ppid).toBe(run.pgid);

    process.kill(run.pgid, 'SIGTERM');
    expect(await run.exit).toBe(0);
    await expect.poll(() => alive(servicePid), { timeout: 30_000, interval: 200 }).toBe(false);
    await run.closed;
    // Nothing of npm or the service is left (the exit's short-lived watchdog may still be).
    expect(groupMembers(run.pgid).filter((p) => /services\/main\.ts|^npm/.test(p.cmd))).toEqual([]);
    expect(run.messages()).toContain('shutting down');
    expect(run.messages()).toContain('service stopped');
  }, 240_000);
});
