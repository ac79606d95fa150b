/**
 * Keyed MCP tool calls (issue 5): `tools/call get_trade_call` with a pro key, for a cached
 * verdict (one market, replay clock paused, so every call after the first is served from the
 * engine's memory), through the real keyed channel — key resolution, quota peek, Lua debit,
 * QuotaDebitsRecorded append, SDK session transport — against the same verdict served by a bare Fastify
 * route that calls the same engine. Both over real HTTP on loopback with `fetch` (the SDK client
 * transport uses it too), the same closed loop and concurrency. The issue sets no number for this
 * ratio: it asks to find what costs, so a per-call breakdown is printed, and `--profile` adds a
 * CPU profile of the MCP loop.
 *
 * Cache: real Redis at REDIS_URL (unique key prefix, deleted at the end) unless `--cache=memory`.
 * Event store: in memory (the key registry and the debit records).
 *
 *   npx tsx bench/mcp.bench.ts [--cache=redis|memory] [--seconds=2] [--profile]
 */
import { randomUUID } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import Fastify from 'fastify';
import { newEvent } from '../contracts/events.ts';
import { startKeyedServer } from '../test/keyed-harness.ts';
import { wipePrefix } from '../test/redis-probe.ts';
import { printProfile, profile } from './cpu-profile.ts';
import { openBenchCache, whenMain } from './harness.ts';
import {
  bestOfRounds,
  closedLoop,
  fmtRate,
  fmtUs,
  type LatencyResult,
  type LoopResult,
  latencies,
} from './load-loop.ts';

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' } as const;

export interface McpBenchOptions {
  cache?: 'redis' | 'memory';
  redisUrl?: string;
  concurrency?: number;
  seconds?: number;
  rounds?: number;
  profile?: boolean;
  print?: boolean;
}

export interface McpBenchResult {
  cache: 'redis' | 'memory';
  mcp: LoopResult;
  bare: LoopResult;
  ratio: number;
  breakdown: { name: string; latency: LatencyResult }[];
}

export async function run(options: McpBenchOptions = {}): Promise<McpBenchResult> {
  const cacheKind = options.cache ?? 'redis';
  const redisUrl = options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const concurrency = options.concurrency ?? 16;
  const ms = (options.seconds ?? 2) * 1000;
  const rounds = options.rounds ?? 3;
  const print = options.print ?? true;
  const log = (line: string) => {
    if (print) console.log(line);
  };
  const prefix = `bench:mcp:${randomUUID()}:`;
  // The SDK client transport hands one AbortSignal to every fetch of a session; undici drops its
  // listeners only on GC, so past 1,500 calls Node warns on every call and the warning's own
  // bookkeeping shows up in the profile. Client-side noise, not the server's cost.
  setMaxListeners(0);

  const cache = await openBenchCache(cacheKind, redisUrl, prefix);
  const server = await startKeyedServer({
    cache,
    env: { PLAN_PRO_MONTHLY_CALLS: String(1e12), MCP_SESSION_IDLE_MS: String(600_000) },
  });
  const bare = Fastify({ logger: false });
  const clients: Client[] = [];
  try {
    const issued = await server.issue('pro', 'bench');
    const auth = { authorization: `Bearer ${issued.key}` };
    // The first call computes and records the verdict; the clock is paused, so the rest are cached.
    await server.engine.getTradeCall(ARGS);

    bare.post('/get_trade_call', async (request) => server.engine.getTradeCall(request.body as typeof ARGS));
    const bareUrl = await bare.listen({ host: '127.0.0.1', port: 0 });

    for (let i = 0; i < concurrency; i++) {
      const client = new Client({ name: 'bench', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: { headers: auth } }),
      );
      clients.push(client);
    }
    const mcpCall = async (worker: number) => {
      const result = await clients[worker]!.callTool({ name: 'get_trade_call', arguments: ARGS });
      if (result.isError) throw new Error(`tool call failed: ${JSON.stringify(result.content)}`);
    };
    // The same JSON-RPC over plain fetch on client 0's session: the server's cost without the SDK client.
    const sessionId = (clients[0]!.transport as StreamableHTTPClientTransport).sessionId!;
    let rpcId = 1_000_000;
    // Concurrent requests of one session need distinct JSON-RPC ids: the transport routes replies by id.
    const rawRpc = (message: Record<string, unknown>) => async () => {
      const res = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': sessionId,
          ...auth,
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: rpcId++, ...message }),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status !== 200) throw new Error(`raw MCP call answered ${res.status}`);
      const reply = (await res.json()) as { error?: unknown; result?: { isError?: boolean } };
      if (reply.error || reply.result?.isError)
        throw new Error(`raw MCP call failed: ${JSON.stringify(reply)}`);
    };
    const rawCall = rawRpc({ method: 'tools/call', params: { name: 'get_trade_call', arguments: ARGS } });
    const rawPing = rawRpc({ method: 'ping' });
    const bareCall = async () => {
      const res = await fetch(`${bareUrl}/get_trade_call`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...auth },
        body: JSON.stringify(ARGS),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status !== 200) throw new Error(`bare route answered ${res.status}`);
      await res.json();
    };

    await closedLoop(concurrency, 500, mcpCall);
    await closedLoop(concurrency, 500, bareCall);
    const [mcp, bareRun] = (await bestOfRounds(rounds, [
      () => closedLoop(concurrency, ms, mcpCall),
      () => closedLoop(concurrency, ms, bareCall),
    ])) as [LoopResult, LoopResult];
    const ratio = mcp.perSec / bareRun.perSec;

    // Per-call costs, one call at a time, so they add up to the MCP call's latency.
    const resolved = await server.channel.keys.resolve(issued.key);
    if (resolved.status !== 'active') throw new Error('the bench key did not resolve');
    const subject = { id: resolved.record.keyHash, kind: 'key' as const, plan: resolved.record.plan };
    const n = 1000;
    const breakdown = [
      { name: 'MCP tools/call get_trade_call (whole call)', latency: await latencies(n, () => mcpCall(0)) },
      { name: 'bare route, same verdict (whole call)', latency: await latencies(n, bareCall) },
      { name: 'same tools/call over plain fetch (no SDK client)', latency: await latencies(n, rawCall) },
      { name: 'MCP ping over plain fetch (transport, no tool)', latency: await latencies(n, rawPing) },
      { name: 'MCP ping with the SDK client', latency: await latencies(n, () => clients[0]!.ping()) },
      {
        name: 'engine.getTradeCall, cached',
        latency: await latencies(n, () => server.engine.getTradeCall(ARGS)),
      },
      {
        name: 'keys.resolve (hash + registry lookup)',
        latency: await latencies(n, async () => server.channel.keys.resolve(issued.key)),
      },
      {
        name: `quota.peek (${cacheKind} read of 2 windows)`,
        latency: await latencies(n, () => server.channel.quota.peek(subject)),
      },
      {
        name: `quota.debit (${cacheKind} debit + QuotaDebitsRecorded)`,
        latency: await latencies(n, () => server.channel.quota.debit(subject, 'get_trade_call')),
      },
      {
        name: 'event store append alone (QuotaDebitsRecorded)',
        latency: await latencies(n, () =>
          server.store.append(`bench-quota-${subject.id}`, [
            newEvent('QuotaDebitsRecorded', {
              subject: subject.id,
              subjectKind: 'key',
              plan: subject.plan,
              tool: 'get_trade_call',
              units: 1,
              day: '2026-01-01',
              month: '2026-01',
            }),
          ]),
        ),
      },
    ];

    log(
      `mcp bench: cache ${cacheKind}${cacheKind === 'redis' ? ` (${redisUrl})` : ''}, memory event store, ` +
        `${concurrency} concurrent clients (one MCP session each), ${rounds} × ${ms} ms rounds`,
    );
    log(`  bare Fastify route, same cached verdict:  ${fmtRate(bareRun.perSec)}`);
    log(`  MCP keyed tools/call get_trade_call:      ${fmtRate(mcp.perSec)}`);
    log(
      `  ratio MCP / bare: ${ratio.toFixed(2)} (in process: client and server share one CPU; the goal's ` +
        'figure, from another process, is the http bench: bench/http-service.bench.ts)',
    );
    log('  per-call latency, one call at a time (mean / p50):');
    for (const row of breakdown) {
      log(
        `    ${row.name.padEnd(46)} ${fmtUs(row.latency.meanUs).padStart(9)} / ${fmtUs(row.latency.p50Us)}`,
      );
    }
    // Medians: the means carry GC pauses and the neighbours' load on this shared machine.
    const [whole, bareWhole, raw, rawPingUs, , , resolve, peek, debit] = breakdown.map(
      (r) => r.latency.p50Us,
    ) as number[];
    const metering = resolve! + peek! + debit!;
    log(`  where the ${fmtUs(whole! - bareWhole!)} (p50) of MCP over bare goes:`);
    log(`    SDK client (tools/call with the SDK − same over plain fetch): ${fmtUs(whole! - raw!)}`);
    log(
      `    server session transport + JSON-RPC (ping − bare route):      ${fmtUs(rawPingUs! - bareWhole!)}`,
    );
    log(`    keys + quota (resolve + peek + debit, measured alone):         ${fmtUs(metering)}`);
    log(
      `    rest of tools/call (args, result building, larger body):      ${fmtUs(raw! - rawPingUs! - metering)}`,
    );

    if (options.profile) {
      // Plain fetch on both, so the difference between the two profiles is the server's.
      log('\n  profile: keyed tools/call over plain fetch (server side + fetch client)');
      printProfile((await profile(() => closedLoop(concurrency, ms, rawCall))).summary);
      log('\n  profile: bare route, for comparison');
      printProfile((await profile(() => closedLoop(concurrency, ms, bareCall))).summary, 8);
    }
    return { cache: cacheKind, mcp, bare: bareRun, ratio, breakdown };
  } finally {
    for (const client of clients) await client.close().catch(() => undefined);
    await bare.close();
    await server.close();
    await cache.close();
    if (cacheKind === 'redis') await wipePrefix(prefix, redisUrl).catch(() => undefined);
  }
}

await whenMain(
  import.meta.url,
  { cache: ['redis', 'memory'], seconds: 'number', concurrency: 'number', profile: 'boolean' },
  run,
);
