/**
 * Idle memory of `npm start`: the service (every role, embedded defaults: LMDB, in-process bus and
 * cache, FEED=auto, the full replay data of ../shared/data/market when it sits beside the checkout)
 * on an empty log, run as `npm start` runs it (node, its flags and allocator settings, --import tsx services/main.ts). Its resident
 * memory (VmRSS, and the anonymous part without mapped file pages) is read at the first 200 of
 * /readyz and again once it has settled: after ready the replay reads its candle files and the
 * engine computes the schedule's first verdicts, and memory taken then is kept. Settled is
 * `--settle` seconds after ready (default 60; the growth ends within 20 s on this machine), and
 * the figure judged is the larger of that reading and one `--settle` / 2 earlier.
 * The target: <= 400 MB settled.
 *
 *   npx tsx bench/idle.bench.ts [--rounds=1] [--settle=60]
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import {
  atMost,
  f0,
  freePort,
  ROOT,
  recordTarget,
  SERVICE_ENV,
  SERVICE_NODE_FLAGS,
  stopChild,
  TSX,
  tempDir,
  whenMain,
} from './harness.ts';

const TARGET_MB = 400;

function rssMb(pid: number): { rss: number; anon: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const mb = (field: string) =>
    Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? Number.NaN) / 1024;
  return { rss: mb('VmRSS'), anon: mb('RssAnon') };
}

async function once(settleS: number) {
  const data = tempDir('bench-idle-');
  const port = await freePort();
  const child = spawn(process.execPath, [...SERVICE_NODE_FLAGS, ...TSX, 'services/main.ts'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      ...SERVICE_ENV,
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: data.path,
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4_000);
  });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  try {
    const started = performance.now();
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) {
        throw new Error(`service exited with ${child.exitCode ?? child.signalCode} before ready: ${stderr}`);
      }
      if (performance.now() - started > 120_000) throw new Error(`service not ready within 120 s: ${stderr}`);
      const ready = await fetch(`http://127.0.0.1:${port}/readyz`)
        .then((r) => r.status === 200)
        .catch(() => false);
      if (ready) break;
      await sleep(100);
    }
    const readyS = (performance.now() - started) / 1000;
    const atReady = rssMb(child.pid!);
    await sleep((settleS * 1000) / 2);
    const half = rssMb(child.pid!);
    await sleep((settleS * 1000) / 2);
    const settled = rssMb(child.pid!);
    return { readyS, atReady, half, settled };
  } finally {
    await stopChild(child);
    data.remove();
  }
}

export async function run(options: { rounds?: number; settle?: number } = {}) {
  const rounds = options.rounds ?? 1;
  const settleS = options.settle ?? 60;
  console.log(
    `idle bench: npm start's service on an empty log, embedded defaults, ${rounds} round(s), settled ${settleS} s after ready`,
  );
  const figures: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const r = await once(settleS);
    const peak = Math.max(r.half.rss, r.settled.rss);
    figures.push(peak);
    console.log(
      `  ready in ${r.readyS.toFixed(1)} s: RSS ${f0(r.atReady.rss)} MB (anonymous ${f0(r.atReady.anon)}); ` +
        `+${settleS / 2} s ${f0(r.half.rss)} MB; +${settleS} s ${f0(r.settled.rss)} MB (anonymous ${f0(r.settled.anon)})`,
    );
  }
  const worst = Math.max(...figures);
  console.log(
    recordTarget({
      bench: 'idle',
      measure: `npm start RSS settled ${settleS} s after ready, empty log, full replay data (worst of ${rounds})`,
      figure: Math.round(worst),
      unit: ' MB',
      target: atMost(TARGET_MB),
    }),
  );
  return figures;
}

await whenMain(import.meta.url, { rounds: 'number', settle: 'number' }, run);
