import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';

const MODULE = new URL('./exit-watchdog.ts', import.meta.url).pathname;

/**
 * A process that starts a watchdog over itself with `afterMs` (and the fields of the line it
 * writes before a kill), prints its pid, then runs `then`.
 */
function guarded(
  afterMs: number,
  then: string,
  line?: Record<string, unknown>,
): { child: ChildProcess; watchdog: Promise<number>; out: () => string } {
  const args = line === undefined ? '' : `, ${JSON.stringify(line)}`;
  const code = `import { startExitWatchdog } from ${JSON.stringify(MODULE)}; console.log(startExitWatchdog(process.pid, ${afterMs}${args})); ${then}`;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  const watchdog = new Promise<number>((resolve) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(Number(out.split('\n')[0]));
    });
  });
  return { child, watchdog, out: () => out };
}

/** Still running: present and not a zombie (one whose new parent has not reaped it has ended). */
function running(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('exit watchdog', () => {
  const started: number[] = [];
  afterAll(() => {
    for (const pid of started) if (running(pid)) process.kill(pid, 'SIGKILL');
  });

  it('ends as soon as the process it guards has exited, not at the end of its window', async () => {
    // A window far longer than the test: a watchdog that waited it out would still be running.
    const { child, watchdog } = guarded(600_000, 'process.exit(0);');
    const pid = await watchdog;
    started.push(pid);
    expect(pid).toBeGreaterThan(0);
    await new Promise((resolve) => child.once('exit', resolve));
    expect(child.exitCode).toBe(0);
    await expect.poll(() => running(pid), { timeout: 60_000, interval: 50 }).toBe(false);
  }, 90_000);

  it('kills the process it guards when that is still running at the end of its window', async () => {
    // An exit that hangs, as one on a thread blocked in native code does: here, a process that stays.
    const { child, watchdog } = guarded(500, 'setInterval(() => undefined, 1_000);');
    started.push(await watchdog);
    await new Promise((resolve) => child.once('exit', resolve));
    expect(child.signalCode).toBe('SIGKILL');
  }, 90_000);

  it("says in a fatal line on the process's stdout that it is the one that killed it, and what was open", async () => {
    const line = { service: 'signal-service', timer: 'exit-watchdog', open: { Timeout: 1 }, msg: 'killing' };
    const { child, watchdog, out } = guarded(500, 'setInterval(() => undefined, 1_000);', line);
    started.push(await watchdog);
    const ended = new Promise((resolve) => child.once('close', resolve));
    await new Promise((resolve) => child.once('exit', resolve));
    expect(child.signalCode).toBe('SIGKILL');
    // The watchdog holds the same stdout: its line is read once it has ended too.
    await ended;
    const written = out()
      .split('\n')
      .slice(1)
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l));
    expect(written).toEqual([{ level: 60, time: expect.any(Number), ...line }]);
  }, 90_000);
});
