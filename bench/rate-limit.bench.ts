/**
 * Keyed call rate with request-rate limiting on against off (issue 13, target ≥ 0.9): MCP
 * `tools/call get_trade_call` with a pro key on one session per worker, over plain fetch, for a
 * cached verdict, through two keyed channels that differ only in RATE_LIMIT_ENABLED (the limits
 * set far above the load, so every call is served: the limiter's cost, not its refusals). Both
 * share one engine and one cache: real Redis at REDIS_URL by default, where the limiter keeps
 * its budgets as deployed (the credential's and the tool's, per tool call), or
 * `--cache=memory`.
 *
 * Each run measures off and on in short alternating rounds (ABBA, so drift on a shared machine
 * hits both sides alike) and takes the ratio within the run. On Redis the limiter takes both
 * budgets in one script, and the takes of one event-loop turn in one script call
 * (services/metering/rate-limit.ts); the bench also prints the limiter's CPU per take with
 * `concurrency` callers taking at once, where that batching shows, beside one take at a time.
 *
 *   npx tsx bench/rate-limit.bench.ts [--cache=redis|memory] [--seconds=2] [--runs=3] [--rounds=4]
 */
import { randomUUID } from 'node:crypto';
import { RateLimiter } from '../services/metering/rate-limit.ts';
import { startKeyedServer } from '../test/keyed-harness.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { atLeast, openBenchCache, recordTarget, whenMain } from './harness.ts';
import { openMcpSession } from './load-http.ts';
import { closedLoop, fmtRate, fmtUs, type LoopResult, latencies, verdict } from './load-loop.ts';

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;
const ACCEPT = 'application/json, text/event-stream';
const TARGET = 0.9;

export interface RateLimitBenchOptions {
  cache?: 'redis' | 'memory';
  redisUrl?: string;
  concurrency?: number;
  seconds?: number;
  runs?: number;
  /** Alternating rounds per side within a run. */
  rounds?: number;
  print?: boolean;
}

type Keyed = Awaited<ReturnType<typeof startKeyedServer>>;

/** A closed loop's worth of keyed tool calls, one MCP session per worker. */
async function keyedCaller(server: Keyed, key: string, concurrency: number) {
  const auth = { authorization: `Bearer ${key}` };
  const sessions: string[] = [];
  for (let i = 0; i < concurrency; i++) {
    sessions.push(await openMcpSession(server.url, auth));
  }
  let id = 1;
  return async (worker: number) => {
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: ACCEPT,
        'mcp-session-id': sessions[worker]!,
        'mcp-protocol-version': '2025-06-18',
        ...auth,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: id++,
        method: 'tools/call',
        params: { name: 'get_trade_call', arguments: ARGS },
      }),
      signal: AbortSignal.timeout(10_000),
    });
    // A 429 here would measure refusals, not the limiter's cost: the bench is wrong then.
    if (res.status !== 200) throw new Error(`keyed call answered ${res.status}`);
    const reply = (await res.json()) as { error?: unknown; result?: { isError?: boolean } };
    if (reply.error || reply.result?.isError) throw new Error(`keyed call failed: ${JSON.stringify(reply)}`);
  };
}

/** `callers` closed loops of limiter takes for `ms`: takes per second and this process's CPU per take. */
async function takesAtOnce(limiter: RateLimiter, callers: number, ms: number) {
  let takes = 0;
  const end = Date.now() + ms;
  const started = Date.now();
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: callers }, async (_, i) => {
      while (Date.now() < end) {
        await limiter.decide('pro', `bench-together-${i}`, 'get_trade_call');
        takes++;
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  return { perSec: takes / ((Date.now() - started) / 1000), cpuUsPerTake: (used.user + used.system) / takes };
}

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};

export async function run(options: RateLimitBenchOptions = {}) {
  const cacheKind = options.cache ?? 'redis';
  const redisUrl = options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const concurrency = options.concurrency ?? 16;
  const ms = (options.seconds ?? 2) * 1000;
  const runs = Math.max(3, options.runs ?? 3);
  const log = (line: string) => {
    if (options.print ?? true) console.log(line);
  };
  const prefix = `bench:rl:${randomUUID()}:`;
  const cache = await openBenchCache(cacheKind, redisUrl, prefix);
  const env = {
    PLAN_PRO_MONTHLY_CALLS: String(1e12),
    RATE_LIMIT_PRO: String(1e9),
    RATE_LIMIT_TOOL_SHARE: '1',
    MCP_SESSION_IDLE_MS: String(600_000),
  };
  const off = await startKeyedServer({ cache, env: { ...env, RATE_LIMIT_ENABLED: 'false' } });
  const on = await startKeyedServer({
    cache,
    engine: off.engine,
    rateLimited: true,
    env: { ...env, RATE_LIMIT_ENABLED: 'true' },
  });
  try {
    if (on.channel.rateLimit === null) throw new Error('the limiter is not on');
    // The first call computes and records the verdict; the replay clock is paused, so the rest are cached.
    await off.engine.getTradeCall(ARGS);
    const callOff = await keyedCaller(off, (await off.issue('pro', 'bench')).key, concurrency);
    const callOn = await keyedCaller(on, (await on.issue('pro', 'bench')).key, concurrency);
    await closedLoop(concurrency, 500, callOff);
    await closedLoop(concurrency, 500, callOn);

    // Each run interleaves short rounds in ABBA order (off, on, on, off, ...) and sums each side:
    // on a shared machine the load drifts within seconds, and one long round per side measured
    // the drift as much as the limiter.
    const rounds = Math.max(2, options.rounds ?? 4);
    const results: { off: LoopResult; on: LoopResult; ratio: number; cpuRatio: number }[] = [];
    for (let i = 0; i < runs; i++) {
      const sum = { off: { ops: 0, seconds: 0, cpuUs: 0 }, on: { ops: 0, seconds: 0, cpuUs: 0 } };
      for (let r = 0; r < rounds; r++) {
        const order: ('off' | 'on')[] = (r + i) % 2 === 0 ? ['off', 'on'] : ['on', 'off'];
        for (const side of order) {
          const cpu = process.cpuUsage();
          const round = await closedLoop(concurrency, ms / rounds, side === 'off' ? callOff : callOn);
          const used = process.cpuUsage(cpu);
          sum[side].ops += round.ops;
          sum[side].seconds += round.seconds;
          sum[side].cpuUs += used.user + used.system;
        }
      }
      const offRun = { ...sum.off, perSec: sum.off.ops / sum.off.seconds };
      const onRun = { ...sum.on, perSec: sum.on.ops / sum.on.seconds };
      // This process's CPU per call (clients and both servers; Redis's own time is not in it): the
      // rate a CPU-bound replica could reach, less sensitive to what else the machine runs.
      const cpuRatio = sum.off.cpuUs / sum.off.ops / (sum.on.cpuUs / sum.on.ops);
      results.push({ off: offRun, on: onRun, ratio: onRun.perSec / offRun.perSec, cpuRatio });
    }
    // The limiter's own cost per call, one at a time: what the ratio above should reflect.
    const limiter = new RateLimiter(on.config, cache);
    const take = await latencies(1000, async (i) =>
      limiter.decide('pro', `bench-${i % 16}`, 'get_trade_call'),
    );
    const offCall = await latencies(300, () => callOff(0));
    const together = await takesAtOnce(limiter, concurrency, 1_000);
    const offRates = stats(results.map((r) => r.off.perSec));
    const onRates = stats(results.map((r) => r.on.perSec));
    const ratio = stats(results.map((r) => r.ratio));
    const cpuRatio = stats(results.map((r) => r.cpuRatio));
    const fmt = (s: { min: number; median: number; max: number }) =>
      `${fmtRate(s.min)} / ${fmtRate(s.median)} / ${fmtRate(s.max)}`;
    log(
      `rate-limit bench: cache ${cacheKind}${cacheKind === 'redis' ? ` (${redisUrl})` : ''}, ` +
        `${concurrency} concurrent sessions, pro key, ${runs} runs × ${ms} ms per side in ${Math.max(2, options.rounds ?? 4)} alternating rounds (min / median / max)`,
    );
    log(`  keyed tools/call, rate limiting off: ${fmt(offRates)}`);
    log(`  keyed tools/call, rate limiting on:  ${fmt(onRates)}`);
    log(
      `  ratio on / off: ${ratio.min.toFixed(2)} / ${ratio.median.toFixed(2)} / ${ratio.max.toFixed(2)}` +
        `  median ${verdict(ratio.median, TARGET, 'min')}`,
    );
    log(
      recordTarget({
        bench: 'rate-limit',
        measure: `keyed calls, limiter on / off (${cacheKind})`,
        figure: ratio.median,
        target: atLeast(TARGET),
      }),
    );
    log(
      `  CPU per call off / on (this process): ${cpuRatio.min.toFixed(2)} / ${cpuRatio.median.toFixed(2)} / ${cpuRatio.max.toFixed(2)}`,
    );
    log(
      `  per call, one at a time (p50): limiter take (credential + tool budgets) ${fmtUs(take.p50Us)}` +
        ` against a whole keyed call with it off ${fmtUs(offCall.p50Us)}`,
    );
    log(
      `  limiter takes with ${concurrency} callers at once: ${fmtRate(together.perSec)}, ` +
        `${together.cpuUsPerTake.toFixed(1)} µs CPU per take (this process)`,
    );
    return {
      cache: cacheKind,
      takesAtOnce: together,
      runs: results,
      ratio,
      cpuRatio,
      takeP50Us: take.p50Us,
      callP50Us: offCall.p50Us,
    };
  } finally {
    await on.close();
    await off.close();
    await cache.close();
    if (cacheKind === 'redis') await wipePrefix(prefix, redisUrl).catch(() => undefined);
  }
}

await whenMain(
  import.meta.url,
  { cache: ['redis', 'memory'], seconds: 'number', runs: 'number', rounds: 'number', concurrency: 'number' },
  run,
);
