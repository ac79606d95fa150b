/**
 * Leases against a round trip per call (issue 60): is prepaying a busy key's quota units worth its
 * mechanism? Two copies of the real service run side by side, the same in every setting but the
 * lease: `leased` with the deployed defaults (QUOTA_LEASE_MS, QUOTA_LEASE_MAX_UNITS), `per-call`
 * with QUOTA_LEASE_MS=0, so each keyed call is debited on the shared counters and recorded on the
 * log by its own append (the store groups a turn's appends). The leased side's grants also prepay the
 * rate limit's requests; the per-call side takes each request in the turn's one script (pipelined). The same keyed MCP `tools/call` load is sent to each in alternating rounds
 * (autocannon in its own process), on the embedded defaults and on Redis, from one key and from
 * 128 keys (a session each). Printed per side: calls/s, the main thread's CPU per call and the
 * whole process's (from /proc), the per-call side's cost over the leased one, and the load
 * average, which on a shared machine says how far to trust the figures.
 *
 * The issue's rule: keep the simpler per-call design when the leases' gain is under 15 %.
 *
 *   npx tsx bench/budget.bench.ts [--seconds=3] [--rounds=3] [--connections=32]
 */
import { randomUUID } from 'node:crypto';
import { loadavg } from 'node:os';
import { deleteStream } from '../test/nats-server.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { fmtSpread, median, spread, whenMain } from './harness.ts';
import type { CannonResult } from './load-cannon.ts';
import {
  alternate,
  type Comparison,
  cannon,
  issueKeys,
  MCP_HEADERS,
  openMcpSession,
  type Proc,
  startService,
  tempDir,
} from './load-http.ts';

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;
const PARAMS = { name: 'get_trade_call', arguments: ARGS };
/** The gain below which the issue keeps the round trip per call. */
const WORTH = 0.15;
/** Limits no run reaches, as in the http bench: every call does the full work. */
const BASE_ENV: Record<string, string> = {
  RATE_LIMIT_ANONYMOUS: String(1e9),
  RATE_LIMIT_PRO: String(1e9),
  PLAN_PRO_MONTHLY_CALLS: String(1e12),
  MCP_SESSION_IDLE_MS: String(600_000),
};
const LEASED = { QUOTA_LEASE_MS: '1000', QUOTA_LEASE_MAX_UNITS: '256' };
const PER_CALL = { QUOTA_LEASE_MS: '0' };

export interface BudgetBenchOptions {
  seconds?: number;
  rounds?: number;
  connections?: number;
  /** Keys of the many-keys case. */
  keys?: number;
  /**
   * `all` (default): leases against none; `max`: leases of at most 256 units (the default)
   * against at most 64 (what a killed api may leave charged per busy key and tool).
   */
  compare?: 'all' | 'max';
  print?: boolean;
}

export interface BudgetRow {
  deployment: 'embedded' | 'redis';
  keys: number;
  comparison: Comparison;
  /** Per-call main-thread CPU per call over the leased one's, less 1 (median of the rounds). */
  cpuGain: number;
  /** Leased calls/s over per-call's, less 1. */
  rateGain: number;
  load: [number, number];
}

interface Side {
  proc: Proc;
  sessions: string[];
  authorizations: string[];
  data: { remove(): void };
}

async function startSide(env: Record<string, string>, keys: number): Promise<Side> {
  const data = tempDir('bench-budget-');
  try {
    const issued = await issueKeys(env, data.path, keys);
    const proc = await startService(env, { dataDir: data.path });
    const authorizations = issued.map((key) => `Bearer ${key}`);
    const sessions: string[] = [];
    for (const authorization of authorizations)
      sessions.push(await openMcpSession(proc.url, { authorization }));
    return { proc, sessions, authorizations, data };
  } catch (err) {
    data.remove();
    throw err;
  }
}

function drive(side: Side, connections: number, seconds: number) {
  return (): Promise<CannonResult> =>
    cannon({
      connections,
      durationSeconds: seconds,
      url: `${side.proc.url}/mcp`,
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: side.authorizations[0]! },
      body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'tools/call', params: PARAMS }),
      mcp: {
        sessions: side.sessions,
        ...(side.authorizations.length > 1 ? { authorizations: side.authorizations } : {}),
        method: 'tools/call',
        params: PARAMS,
      },
    });
}

function onlyOk(r: CannonResult, side: 'service' | 'bare'): void {
  const ok = r.statusCounts['200'] ?? 0;
  if (ok === 0 || ok < r.requests * 0.99)
    throw new Error(`${side === 'service' ? 'leased' : 'per-call'}: ${JSON.stringify(r.statusCounts)}`);
}

export async function run(options: BudgetBenchOptions = {}): Promise<BudgetRow[]> {
  const seconds = options.seconds ?? 3;
  const rounds = options.rounds ?? 3;
  const connections = options.connections ?? 32;
  const many = options.keys ?? 128;
  const print = options.print ?? true;
  const baseline = options.compare === 'max' ? { ...LEASED, QUOTA_LEASE_MAX_UNITS: '64' } : PER_CALL;
  const log = (line: string) => {
    if (print) console.log(line);
  };
  log(
    `budget bench: leased against per-call, keyed MCP tools/call on sessions, ${connections} connections, ` +
      `${rounds} alternating rounds of ${seconds} s per side`,
  );
  const rows: BudgetRow[] = [];
  for (const deployment of ['embedded', 'redis'] as const) {
    for (const keys of [1, many]) {
      const id = randomUUID().replaceAll('-', '').slice(0, 12);
      const shared = (side: string): Record<string, string> =>
        deployment === 'redis'
          ? {
              CACHE: 'redis',
              REDIS_PREFIX: `bench:budget:${id}:${side}:`,
              BUS: 'nats',
              NATS_STREAM: `BENCH_BUDGET_${id}_${side.toUpperCase()}`,
              NATS_SUBJECT_PREFIX: `benchbudget${id}${side}`,
            }
          : {};
      let leased: Side | undefined;
      let perCall: Side | undefined;
      try {
        leased = await startSide({ ...BASE_ENV, ...shared('l'), ...LEASED }, keys);
        perCall = await startSide({ ...BASE_ENV, ...shared('p'), ...baseline }, keys);
        // Not counted: both compile their hot path first.
        await drive(leased, connections, 1)();
        await drive(perCall, connections, 1)();
        const before = loadavg()[0]!;
        const comparison = await alternate(
          rounds,
          drive(leased, connections, seconds),
          drive(perCall, connections, seconds),
          onlyOk,
          { service: leased.proc.pid, bare: perCall.proc.pid },
        );
        const after = loadavg()[0]!;
        const rate = (rs: CannonResult[]) => spread(rs.map((r) => r.perSec));
        const cpu = comparison.cpu;
        const cpuGain = cpu ? median(cpu.bare) / median(cpu.service) - 1 : Number.NaN;
        const row: BudgetRow = {
          deployment,
          keys,
          comparison,
          cpuGain,
          rateGain: median(comparison.ratios) - 1,
          load: [before, after],
        };
        rows.push(row);
        const us = (n: number) => `${n.toFixed(0)} µs`;
        log(
          `  ${deployment}, ${keys} key${keys === 1 ? '' : 's'} (load average ${before.toFixed(2)} → ${after.toFixed(2)}):`,
        );
        log(
          `    calls/s   leased ${fmtSpread(rate(comparison.service), (n) => n.toFixed(0))}   per-call ${fmtSpread(rate(comparison.bare), (n) => n.toFixed(0))}`,
        );
        if (cpu) {
          log(
            `    main-thread CPU per call   leased ${fmtSpread(spread(cpu.service), us)}   per-call ${fmtSpread(spread(cpu.bare), us)}`,
          );
          log(
            `    process CPU per call       leased ${fmtSpread(spread(cpu.serviceProcess), us)}   per-call ${fmtSpread(spread(cpu.bareProcess), us)}`,
          );
        }
        log(
          `    leases' gain: ${(cpuGain * 100).toFixed(1)} % main-thread CPU per call, ${(row.rateGain * 100).toFixed(1)} % calls/s ` +
            `(worth keeping at ${(WORTH * 100).toFixed(0)} %)`,
        );
      } finally {
        await leased?.proc.stop();
        await perCall?.proc.stop();
        leased?.data.remove();
        perCall?.data.remove();
        if (deployment === 'redis') {
          for (const side of ['l', 'p']) {
            await wipePrefix(`bench:budget:${id}:${side}:`).catch(() => undefined);
            await deleteStream(`BENCH_BUDGET_${id}_${side.toUpperCase()}`).catch(() => undefined);
          }
        }
      }
    }
  }
  return rows;
}

await whenMain(
  import.meta.url,
  {
    seconds: 'number',
    rounds: 'number',
    connections: 'number',
    keys: 'number',
    compare: ['all', 'max'],
  },
  run,
);
