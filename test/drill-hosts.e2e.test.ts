import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, it } from 'vitest';
import { leftoversOf, removeLeftovers } from '../scripts/drill/net.ts';
import { preflight } from '../scripts/drill/preflight.ts';

/**
 * The fault drill across hosts, short version (scripts/drill-hosts.ts --short): every role and
 * engine node in a network namespace of its own, kill -9 of each, an api host cut off from
 * PostgreSQL, and every count reconciled. It needs root and the engines' binaries: under
 * CI=true a missing one fails the suite, elsewhere it is skipped with a warning.
 */
const { missing } = preflight();
if (missing.length > 0 && process.env.CI === 'true')
  throw new Error(`the fault drill needs ${missing.join(', ')} and CI=true: failing`);
if (missing.length > 0)
  console.warn(`\n*** fault drill across hosts NOT RUN: missing ${missing.join(', ')} ***\n`);

const ROOT = new URL('..', import.meta.url).pathname;
const scratch = mkdtempSync(join(tmpdir(), 'drill-test-'));
const runs: Run[] = [];

interface Run {
  child: ChildProcess;
  out: string;
  /** The run's name prefix (drl + 4 hex) once it printed it. */
  prefix(): string | null;
  workDir(): string | null;
  /** The bridge's address: anvil listens on it. */
  gateway(): string | null;
  exit: Promise<number | null>;
}

function startDrill(args: string[]): Run {
  const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/drill-hosts.ts', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const run: Run = {
    child,
    out: '',
    prefix: () => /names start with (drl[0-9a-f]{4})/.exec(run.out)?.[1] ?? null,
    workDir: () => /work directory (\S+)/.exec(run.out)?.[1] ?? null,
    gateway: () => /network (\d+\.\d+\.\d+)\.0\/24/.exec(run.out)?.[1]?.concat('.1') ?? null,
    exit: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
  };
  child.stdout!.on('data', (b: Buffer) => {
    run.out += b.toString();
  });
  child.stderr!.on('data', (b: Buffer) => {
    run.out += b.toString();
  });
  runs.push(run);
  return run;
}

/** Processes whose command line names `text` (the run's work directory: PostgreSQL, NATS, Redis). */
function processesNaming(text: string): string[] {
  return execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' })
    .split('\n')
    .filter((line) => line.includes(text) && !line.includes('ps -eo'));
}

afterAll(() => {
  // Whatever a failed or timed-out run left: its namespaces and links must not outlive the suite.
  for (const run of runs) {
    if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL');
    const prefix = run.prefix();
    if (prefix) removeLeftovers(prefix);
  }
  rmSync(scratch, { recursive: true, force: true });
});

// The two runs are apart (each its own prefix, subnet, work directory and anvil) and run side by
// side: the SIGTERM one is over while the full one loads its roles' modules, instead of after it.
describe.runIf(missing.length === 0)('the fault drill across hosts (short)', () => {
  it.concurrent('kills each role and engine node, cuts an api host off PostgreSQL, and every count reconciles', async ({
    expect,
  }) => {
    const report = join(scratch, 'report.json');
    const run = startDrill(['--short', `--report=${report}`]);
    const code = await run.exit;
    expect(code, run.out.slice(-6_000)).toBe(0);
    const r = JSON.parse(readFileSync(report, 'utf8')) as {
      failures: string[];
      calls: { served: number; debited: number };
      payments: { settledOnLog: number; transfersOnChain: number };
      events: {
        relayedOnLog: number;
        streamMessages: number;
        deliveriesSucceeded: number;
        distinctReceived: number;
      };
      faults: { fault: string; recoveredAfter: number | null }[];
    };
    expect(r.failures).toEqual([]);
    expect(r.calls.served).toBeGreaterThan(0);
    expect(r.payments.settledOnLog).toBeGreaterThan(0);
    expect(r.payments.transfersOnChain).toBe(r.payments.settledOnLog);
    expect(r.events.streamMessages).toBe(r.events.relayedOnLog);
    expect(r.events.deliveriesSucceeded).toBeGreaterThan(0);
    expect(r.events.distinctReceived).toBe(r.events.deliveriesSucceeded);
    // Every fault was injected: each role (the back host runs projections and dispatcher, api-1
    // the api and the engine), each NATS node, Redis, PostgreSQL, the cut.
    const injected = r.faults.map((f) => f.fault).join(' + ');
    for (const what of ['back', 'api-1', 'nats-n1', 'nats-n2', 'nats-n3', 'redis', 'postgres', 'cut off'])
      expect(injected).toContain(what);
    // Nothing of the run is left on the machine.
    expect(leftoversOf(run.prefix()!)).toEqual([]);
    expect(existsSync(run.workDir()!)).toBe(false);
    await expect.poll(() => processesNaming(run.workDir()!)).toEqual([]);
    await expect.poll(() => processesNaming(`--host ${run.gateway()} `)).toEqual([]);
    // The short drill runs about a minute alone at load 10 (its phases are timed, see
    // scripts/drill-hosts.ts) and over two beside the whole suite: this limit only ends a hang.
  }, 1_200_000);

  it.concurrent('stopped by SIGTERM half-way, it removes every namespace, link and process it started', async ({
    expect,
  }) => {
    const run = startDrill(['--short']);
    // Half-way: the hosts exist and the engines are starting.
    for (;;) {
      if (run.out.includes('starting PostgreSQL')) break;
      if (run.child.exitCode !== null) throw new Error(`the drill ended early: ${run.out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const prefix = run.prefix()!;
    expect(leftoversOf(prefix).length).toBeGreaterThan(0);
    run.child.kill('SIGTERM');
    expect(await run.exit).toBe(130);
    expect(leftoversOf(prefix)).toEqual([]);
    expect(existsSync(run.workDir()!)).toBe(false);
    // SIGKILLed on the way out: gone once the kernel has reaped them.
    await expect.poll(() => processesNaming(run.workDir()!)).toEqual([]);
    await expect.poll(() => processesNaming(`--host ${run.gateway()} `)).toEqual([]);
    // Its hosts and networks come up before PostgreSQL starts: over a minute under load.
  }, 600_000);
});
