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
 */
import { randomUUID } from 'node:crypto';
import { deleteStream } from '../test/nats-server.ts';
import { dropSchemas, POSTGRES_URL } from '../test/postgres-probe.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { whenMain } from './harness.ts';
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
}

export async function run(options: ScaleOutOptions = {}) {
  const keys = options.keys ?? 128;
  const seconds = options.seconds ?? 4;
  const rounds = options.rounds ?? 3;
  const connections = options.connections ?? 32;
  const id = randomUUID().replaceAll('-', '').slice(0, 12);
  const schema = `bench_scale_${id}`;
  const prefix = `bench:scale:${id}:`;
  const stream = `BENCH_SCALE_${id}`;
  const shared = {
    ...BASE_ENV,
    EVENT_STORE: 'postgres',
    POSTGRES_URL,
    POSTGRES_SCHEMA: schema,
    POSTGRES_POOL_SIZE: '16',
    CACHE: 'redis',
    REDIS_PREFIX: prefix,
    BUS: 'nats',
    NATS_STREAM: stream,
    NATS_SUBJECT_PREFIX: `benchscale${id}`,
  };
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
    const sessionsOf = async (url: string, list: string[]) => {
      const sessions: string[] = [];
      for (const key of list) sessions.push(await openMcpSession(url, { authorization: `Bearer ${key}` }));
      return { sessions, authorizations: list.map((k) => `Bearer ${k}`) };
    };
    const pgSessions = await sessionsOf(pg.url, pgKeys);
    const boxSessions = await sessionsOf(box.url, boxKeys);
    const drive =
      (url: string, s: { sessions: string[]; authorizations: string[] }, secs = seconds) =>
      () =>
        cannon({
          url: `${url}/mcp`,
          method: 'POST',
          headers: { ...MCP_HEADERS, authorization: s.authorizations[0]! },
          connections,
          durationSeconds: secs,
          mcp: { ...s, method: 'tools/call', params: PARAMS },
        });
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

await whenMain(
  import.meta.url,
  { keys: 'number', seconds: 'number', rounds: 'number', connections: 'number', 'cpu-prof': 'string' },
  run,
);
