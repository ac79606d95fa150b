import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { cpuSeconds, managed } from './procs.js';

// Real child processes: a start is judged stalled only when nothing about the process moves.
const dir = mkdtempSync(join(tmpdir(), 'drill-procs-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const never = async () => ({ ready: false, detail: 'not yet' });
/** The drill's stall rule scaled down (the drill's is 60 s and 0.5 CPU s): a few seconds show it. */
const STALL_MS = 3_000;

function node(
  name: string,
  script: string,
  options: Partial<Pick<Parameters<typeof managed>[0], 'probe' | 'cpuProgressS'>> = {},
) {
  return managed({
    name,
    argv: () => [process.execPath, ['-e', script]],
    logFile: join(dir, `${name}.log`),
    probe: options.probe ?? never,
    stallMs: STALL_MS,
    ...(options.cpuProgressS === undefined ? {} : { cpuProgressS: options.cpuProgressS }),
  });
}

describe('drill process starts', () => {
  it('reads a live process CPU time from /proc, and 0 for a pid that is gone', () => {
    const start = cpuSeconds(process.pid);
    const until = Date.now() + 300;
    while (Date.now() < until) {
      // burn CPU in this process so its counter moves
    }
    expect(cpuSeconds(process.pid)).toBeGreaterThan(start);
    expect(cpuSeconds(2 ** 22 + 1)).toBe(0);
  });

  // The two starts below wait out stall windows of their own children: side by side, not one after the other.
  it.concurrent('fails a start whose process is silent and idle, naming what did not move', async ({
    expect,
  }) => {
    const p = node('idle', 'setInterval(() => {}, 1000)');
    try {
      await expect(p.start()).rejects.toThrow(
        /idle not ready, and neither its log, its readiness nor its CPU time moved for 3 s/,
      );
    } finally {
      await p.kill();
    }
  });

  it.concurrent('keeps waiting on a silent process that is busy, like one loading its modules', async ({
    expect,
  }) => {
    // Silent for well past the stall window while it burns CPU, then a probe that says ready.
    // It burns 50 ms of CPU time, sleeps 100 ms, and so on: a third of a core when it gets one,
    // 1 CPU s per 3 s window, ten times the 0.1 CPU s this start counts as progress. Burning a
    // whole core cost the suite's two cores a CPU s per second of the wait; and under load, where
    // a process gets less than a third of a core, the 50 ms are CPU time, taken as the scheduler
    // gives it, so the loop earns close to a full burner's share (at load 30, a 1/15 share of two
    // cores: 50 ms of CPU per 0.85 s, 0.18 CPU s per window, still past 0.1).
    const SILENT_MS = 7_000;
    let ready = false;
    const burn = `const end = Date.now() + ${SILENT_MS};
      const burn = () => {
        const from = process.cpuUsage();
        for (let used = 0; used < 50000; ) { const c = process.cpuUsage(from); used = c.user + c.system; }
        if (Date.now() < end) setTimeout(burn, 100);
      };
      burn(); setInterval(() => {}, 1000)`;
    const p = node('busy', burn, { probe: async () => ({ ready, detail: 'loading' }), cpuProgressS: 0.1 });
    // Settled at once so that a start failing during the wait below is this test's failure, not an unhandled one.
    const started = p.start().then(
      () => 'ready',
      (err: Error) => err.message,
    );
    // Silent for over twice the stall window: only its CPU time says it is moving.
    await new Promise((resolve) => setTimeout(resolve, SILENT_MS));
    ready = true;
    try {
      expect(await started).toBe('ready');
      expect(p.starts).toHaveLength(1);
    } finally {
      await p.kill();
    }
  });
});
