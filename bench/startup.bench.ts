/**
 * Start-up at scale: the service (every role, LMDB) booted in its own process on a log of
 * `--events` events of the realistic mix (bench/rebuild-event-mix.ts), timed from spawn to the
 * first 200 of /readyz (which waits for every projection to be within PROJECTION_READY_MAX_LAG
 * of the head), with its resident memory (VmRSS) then. The first boot on the log builds the
 * snapshots; the next ones start from them, as every restart does. Baseline: the same boot on
 * an empty log, alternating, in the same run. The targets: <= 5 s and <= 400 MB at
 * 1,000,000 events.
 *
 *   npx tsx bench/startup.bench.ts [--events=1000000] [--rounds=3]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { appendEventMix } from './rebuild-event-mix.ts';

interface Boot {
  ms: number;
  rssMb: number;
}

let nextPort = 18_400 + (process.pid % 500);

async function boot(dataDir: string, timeoutMs = 600_000): Promise<Boot> {
  const port = nextPort++;
  const started = performance.now();
  const child = spawn(process.execPath, ['--import', 'tsx', join(import.meta.dirname, 'startup-child.ts')], {
    env: {
      ...process.env,
      NODE_ENV: 'development',
      LOG_LEVEL: 'warn',
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      EVENT_STORE: 'lmdb',
      BUS: 'memory',
      CACHE: 'memory',
      FEED: 'replay',
      METRICS_ENABLED: 'true',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  try {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode} before ready`);
      if (performance.now() - started > timeoutMs) throw new Error('service not ready in time');
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`)
        .then((r) => r.status === 200)
        .catch(() => false);
      if (ready) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const ms = performance.now() - started;
    return { ms, rssMb: rssOf(child) };
  } finally {
    await stop(child);
  }
}

function rssOf(child: ChildProcess): number {
  const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
  const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? Number.NaN);
  return kb / 1024;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
}

export async function run(options: { events?: number; rounds?: number } = {}) {
  const events = options.events ?? 1_000_000;
  const rounds = options.rounds ?? 3;
  const root = mkdtempSync(join(tmpdir(), 'bench-startup-'));
  try {
    const full = join(root, 'full');
    const filling = performance.now();
    const store = await openLmdbEventStore({ path: full });
    await appendEventMix(store, events);
    await store.close();
    console.log(
      `${events.toLocaleString('en')} events written in ${((performance.now() - filling) / 1000).toFixed(1)} s`,
    );
    const first = await boot(full);
    console.log(
      `first boot (builds every snapshot): ${(first.ms / 1000).toFixed(1)} s, RSS ${first.rssMb.toFixed(0)} MB`,
    );
    const warm: Boot[] = [];
    const empty: Boot[] = [];
    for (let round = 0; round < rounds; round++) {
      const emptyDir = join(root, `empty-${round}`);
      empty.push(await boot(emptyDir));
      warm.push(await boot(full));
    }
    print(events, warm, empty);
    return { events, first, warm, empty };
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

const stats = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return { min: s[0]!, median: s[Math.floor(s.length / 2)]!, max: s[s.length - 1]! };
};

function print(events: number, warm: Boot[], empty: Boot[]): void {
  const w = stats(warm.map((b) => b.ms / 1000));
  const e = stats(empty.map((b) => b.ms / 1000));
  const wr = stats(warm.map((b) => b.rssMb));
  const er = stats(empty.map((b) => b.rssMb));
  const ratio = stats(warm.map((b, i) => b.ms / empty[i]!.ms));
  const f = (x: { min: number; median: number; max: number }, d = 1) =>
    `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;
  console.log(`rounds: ${warm.length} (min / median / max)`);
  console.log(
    `  boot to ready, ${events.toLocaleString('en')} events, from snapshots  ${f(w)} s   RSS ${f(wr, 0)} MB`,
  );
  console.log(`  boot to ready, empty log (baseline)            ${f(e)} s   RSS ${f(er, 0)} MB`);
  console.log(`  full / empty                                   ${f(ratio, 2)}`);
  console.log(
    `  targets (median): <= 5 s ${w.median <= 5 ? 'ok' : 'MISSED'}; <= 400 MB ${wr.median <= 400 ? 'ok' : 'MISSED'}`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const { values } = parseArgs({ options: { events: { type: 'string' }, rounds: { type: 'string' } } });
  await run({
    ...(values.events ? { events: Number(values.events) } : {}),
    ...(values.rounds ? { rounds: Number(values.rounds) } : {}),
  });
}
