/**
 * The deployment for several hosts against the box it should outgrow (issue 33): the same
 * service process (`services/main.ts`, every role) on PostgreSQL + Redis + NATS JetStream, and on
 * its embedded defaults (LMDB, in-process cache and bus), on the same machine, driven in
 * alternating rounds by autocannon from its own process. The load is what many customers make:
 * keyed MCP `tools/call get_trade_call` in sessions spread over 128 pro keys (one session per
 * key), so per-key debit coalescing cannot hide the shared log's writer. Every call is debited
 * before it is answered on both sides.
 * Target: the PostgreSQL deployment at ≥ 0.8 of the embedded box (median of the paired rounds).
 * Both servers' main-thread CPU per call is printed beside the rates.
 *
 *   npx tsx bench/scale-out.bench.ts [--keys=128] [--seconds=4] [--rounds=3] [--connections=32]
 *     [--cpu-prof=<dir>] (profile the PostgreSQL-side service)
 *     [--base=<checkout>] (a third side: the PostgreSQL deployment run from another checkout's code,
 *     e.g. a worktree of main, in the same rounds; the order of the three sides turns each round)
 */
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import pg from 'pg';
import { deleteStream } from '../test/nats-server.ts';
import { dropSchemas, POSTGRES_URL } from '../test/postgres-probe.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { f0, f2, fmtSpread, mainThreadCpuMs, processCpuMs, spread, whenMain } from './harness.ts';
import {
  alternate,
  cannon,
  issueKeys,
  MCP_HEADERS,
  openMcpSession,
  type Proc,
  report,
  startService,
  tempDir,
} from './load-http.ts';

const TARGET = 0.8;
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;
const PARAMS = { name: 'get_trade_call', arguments: ARGS };
const BASE_ENV: Record<string, string> = {
  RATE_LIMIT_ANONYMOUS: String(1e9),
  RATE_LIMIT_PRO: String(1e9),
  PLAN_PRO_MONTHLY_CALLS: String(1e12),
  MCP_SESSION_IDLE_MS: String(600_000),
};

export interface ScaleOutOptions {
  keys?: number;
  seconds?: number;
  rounds?: number;
  connections?: number;
  /** Directory for a CPU profile of the PostgreSQL-side service (node --cpu-prof). */
  cpuProf?: string;
  /** Another checkout whose PostgreSQL deployment runs as a third side of the same rounds. */
  base?: string;
}

function deployment(id: string): Record<string, string> {
  return {
    ...BASE_ENV,
    EVENT_STORE: 'postgres',
    POSTGRES_URL,
    POSTGRES_SCHEMA: `bench_scale_${id}`,
    POSTGRES_POOL_SIZE: '16',
    CACHE: 'redis',
    REDIS_PREFIX: `bench:scale:${id}:`,
    BUS: 'nats',
    NATS_STREAM: `BENCH_SCALE_${id}`,
    NATS_SUBJECT_PREFIX: `benchscale${id}`,
  };
}

export async function run(options: ScaleOutOptions = {}) {
  const keys = options.keys ?? 128;
  const seconds = options.seconds ?? 4;
  const rounds = options.rounds ?? 3;
  const connections = options.connections ?? 32;
  if (options.base)
    return runWithBase({ ...options, base: options.base }, keys, seconds, rounds, connections);
  const id = randomUUID().replaceAll('-', '').slice(0, 12);
  const shared = deployment(id);
  const schema = shared.POSTGRES_SCHEMA!;
  const prefix = shared.REDIS_PREFIX!;
  const stream = shared.NATS_STREAM!;
  const sharedData = tempDir('bench-scale-pg-');
  const boxData = tempDir('bench-scale-box-');
  let pg: Proc | undefined;
  let box: Proc | undefined;
  console.log(
    `scale-out bench: PostgreSQL + Redis + NATS deployment vs the embedded box, ${keys} pro keys (one MCP session each), ` +
      `${connections} connections, ${rounds} alternating rounds of ${seconds} s`,
  );
  try {
    const pgKeys = await issueKeys(shared, sharedData.path, keys);
    const boxKeys = await issueKeys(BASE_ENV, boxData.path, keys);
    pg = await startService(shared, {
      dataDir: sharedData.path,
      ...(options.cpuProf ? { cpuProf: options.cpuProf } : {}),
    });
    box = await startService(BASE_ENV, { dataDir: boxData.path });
    const pgSessions = await sessionsOf(pg.url, pgKeys);
    const boxSessions = await sessionsOf(box.url, boxKeys);
    const drive = driver(seconds, connections);
    // Not counted: the first calls compute the verdict and compile both hot paths.
    await drive(pg.url, pgSessions, 1)();
    await drive(box.url, boxSessions, 1)();
    const comparison = await alternate(
      rounds,
      drive(pg.url, pgSessions),
      drive(box.url, boxSessions),
      (r, side) => {
        if (r.errors > 0 || Object.keys(r.statusCounts).some((code) => code !== '200')) {
          throw new Error(
            `${side === 'service' ? 'postgres' : 'box'}: ${r.errors} errors, ${JSON.stringify(r.statusCounts)}`,
          );
        }
      },
      { service: pg.pid, bare: box.pid },
    );
    const lines = report(
      'scale-out',
      'postgres/box',
      `keyed MCP tools/call in sessions over ${keys} keys: PostgreSQL deployment ("service") vs embedded box ("bare")`,
      comparison,
      { rate: TARGET },
    );
    for (const line of lines) console.log(line);
    return comparison;
  } finally {
    await pg?.stop();
    await box?.stop();
    sharedData.remove();
    boxData.remove();
    await dropSchemas([schema]).catch(() => undefined);
    await wipePrefix(prefix).catch(() => undefined);
    await deleteStream(stream).catch(() => undefined);
  }
}

interface Sessions {
  sessions: string[];
  authorizations: string[];
}

async function sessionsOf(url: string, list: string[]): Promise<Sessions> {
  const sessions: string[] = [];
  for (const key of list) sessions.push(await openMcpSession(url, { authorization: `Bearer ${key}` }));
  return { sessions, authorizations: list.map((k) => `Bearer ${k}`) };
}

function driver(seconds: number, connections: number) {
  return (url: string, s: Sessions, secs = seconds) =>
    () =>
      cannon({
        url: `${url}/mcp`,
        method: 'POST',
        headers: { ...MCP_HEADERS, authorization: s.authorizations[0]! },
        connections,
        durationSeconds: secs,
        mcp: { ...s, method: 'tools/call', params: PARAMS },
      });
}

/**
 * This checkout's PostgreSQL deployment, another checkout's (`base`) and the box, in the same
 * rounds, the order of the three turning each round. Each deployment's ratio pairs it with the
 * box's run of its round.
 */
async function runWithBase(
  options: ScaleOutOptions & { base: string },
  keys: number,
  seconds: number,
  rounds: number,
  connections: number,
) {
  const sides = ['service', 'base', 'box'] as const;
  type Side = (typeof sides)[number];
  const envs: Record<Side, Record<string, string>> = {
    service: deployment(randomUUID().replaceAll('-', '').slice(0, 12)),
    base: deployment(randomUUID().replaceAll('-', '').slice(0, 12)),
    box: BASE_ENV,
  };
  const roots: Record<Side, string | undefined> = { service: undefined, base: options.base, box: undefined };
  const dirs = {
    service: tempDir('bench-scale-pg-'),
    base: tempDir('bench-scale-base-'),
    box: tempDir('bench-scale-box-'),
  };
  const procs: Partial<Record<Side, Proc>> = {};
  console.log(
    `scale-out bench: this checkout's PostgreSQL deployment, ${options.base}'s, and the embedded box; ${keys} pro keys, ` +
      `${connections} connections, ${rounds} rounds of ${seconds} s (order turning)`,
  );
  try {
    const drive = driver(seconds, connections);
    const sessions: Partial<Record<Side, Sessions>> = {};
    for (const side of sides) {
      const root = roots[side];
      const list = await issueKeys(envs[side], dirs[side].path, keys, 'pro', ...(root ? [root] : []));
      procs[side] = await startService(envs[side], {
        dataDir: dirs[side].path,
        ...(root ? { root } : {}),
        ...(side === 'service' && options.cpuProf ? { cpuProf: options.cpuProf } : {}),
      });
      sessions[side] = await sessionsOf(procs[side].url, list);
      await drive(procs[side].url, sessions[side], 1)();
    }
    type Row = {
      perSec: number[];
      cpuUs: number[];
      processUs: number[];
      pgUs: number[];
      busy: number[];
      p50: number[];
    };
    const row = (): Row => ({ perSec: [], cpuUs: [], processUs: [], pgUs: [], busy: [], p50: [] });
    const rows: Record<Side, Row> = { service: row(), base: row(), box: row() };
    // The PostgreSQL server's share: the backends of a deployment's connections (by application_name).
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    const backendsOf = async (side: Side): Promise<number[]> => {
      if (side === 'box') return [];
      const { rows: found } = await admin.query<{ pid: number }>(
        'SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1',
        [`%${envs[side].POSTGRES_SCHEMA}%`],
      );
      return found.map((r) => r.pid);
    };
    const sumCpu = (pids: number[]) => pids.reduce((sum, pid) => sum + (processCpuMs(pid) ?? 0), 0);
    const loads: number[] = [];
    for (let round = 0; round < rounds; round++) {
      for (let k = 0; k < sides.length; k++) {
        const side = sides[(round + k) % sides.length]!;
        const pid = procs[side]!.pid;
        const backends = await backendsOf(side);
        const before = mainThreadCpuMs(pid);
        const processBefore = processCpuMs(pid) ?? Number.NaN;
        const pgBefore = sumCpu(backends);
        const r = await drive(procs[side]!.url, sessions[side]!)();
        const after = mainThreadCpuMs(pid);
        rows[side].processUs.push((((processCpuMs(pid) ?? Number.NaN) - processBefore) * 1000) / r.requests);
        rows[side].pgUs.push(((sumCpu(backends) - pgBefore) * 1000) / r.requests);
        if (r.errors > 0 || Object.keys(r.statusCounts).some((code) => code !== '200')) {
          throw new Error(`${side}: ${r.errors} errors, ${JSON.stringify(r.statusCounts)}`);
        }
        const cpuMs = before === null || after === null ? Number.NaN : after - before;
        rows[side].perSec.push(r.perSec);
        rows[side].p50.push(r.p50Ms);
        rows[side].cpuUs.push((cpuMs * 1000) / Math.max(1, r.requests));
        rows[side].busy.push(cpuMs / ((r.requests / r.perSec) * 1000));
      }
      loads.push(loadavg()[0]!);
    }
    await admin.end();
    for (const side of sides) {
      const row = rows[side];
      console.log(
        `  ${side.padEnd(7)} req/s ${fmtSpread(spread(row.perSec), f0)}   CPU µs/call ${fmtSpread(spread(row.cpuUs), f0)}` +
          `   busy ${fmtSpread(spread(row.busy), f2)}   p50 ${fmtSpread(spread(row.p50), String)} ms` +
          `   whole process µs/call ${fmtSpread(spread(row.processUs), f0)}   PostgreSQL backends µs/call ${fmtSpread(spread(row.pgUs), f0)}`,
      );
    }
    for (const side of ['service', 'base'] as const) {
      const ratios = rows[side].perSec.map((v, i) => v / rows.box.perSec[i]!);
      console.log(
        `  ${side}/box (min/median/max): ${fmtSpread(spread(ratios))}   per round ${ratios.map(f2).join(' ')}`,
      );
    }
    console.log(`  load average (1 min) after each round: ${loads.map(f2).join(' ')}`);
    for (const side of sides) {
      const r = rows[side];
      console.log(
        `  ${side.padEnd(7)} per round: req/s ${r.perSec.map(f0).join(' ')}; main-thread µs/call ${r.cpuUs.map(f0).join(' ')}; p50 ms ${r.p50.join(' ')}`,
      );
    }
    return rows;
  } finally {
    for (const side of sides) await procs[side]?.stop();
    for (const side of sides) dirs[side].remove();
    for (const side of ['service', 'base'] as const) {
      await dropSchemas([envs[side].POSTGRES_SCHEMA!]).catch(() => undefined);
      await wipePrefix(envs[side].REDIS_PREFIX!).catch(() => undefined);
      await deleteStream(envs[side].NATS_STREAM!).catch(() => undefined);
    }
  }
}

await whenMain(
  import.meta.url,
  {
    keys: 'number',
    seconds: 'number',
    rounds: 'number',
    connections: 'number',
    'cpu-prof': 'string',
    base: 'string',
  },
  run,
);
