/**
 * Memory per MCP session (issue 13): N sessions opened over HTTP (`initialize`, then
 * `notifications/initialized`, as a client does) against the api's keyed channel on a real port,
 * heap and RSS measured after a forced GC before and after. The baseline, in the same run and
 * the same way: a bare Fastify route holding one MCP SDK `Server` + `StreamableHTTPServerTransport`
 * per session with no tools, i.e. what the SDK itself costs. Then one caller opening N sessions
 * under the default per-caller cap (MCP_MAX_SESSIONS_PER_CALLER), to show the cap bounds it.
 *
 * The keyed channel (not the whole service) so that nothing else allocates while it measures:
 * no replay clock, scheduler or projections. Memory cache and event store: sessions touch neither.
 *
 *   npx tsx bench/mcp-sessions.bench.ts [--sessions=1000] [--runs=3]
 */
import { randomUUID } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import Fastify from 'fastify';
import { MemoryCache } from '../adapters/cache/memory.ts';
import { startKeyedServer } from '../test/keyed-harness.ts';
import { MCP_ACCEPT, mcpInitialize } from '../test/mcp-wire.ts';
import { whenMain } from './harness.ts';

const ACCEPT = MCP_ACCEPT;
const INIT = mcpInitialize('bench');

// A forced collection before each reading, so the deltas are live objects, not garbage not yet
// collected; without --expose-gc on the command line (npm run bench), switched on here.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

interface Reading {
  heap: number;
  rss: number;
}

async function settle(): Promise<Reading> {
  for (let i = 0; i < 3; i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  const { heapUsed, rss } = process.memoryUsage();
  return { heap: heapUsed, rss };
}

/** Opens `n` sessions on `url`, `concurrency` at a time; returns their ids. */
async function openSessions(url: string, n: number, concurrency = 8): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        next++;
        const init = await fetch(`${url}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: ACCEPT },
          body: JSON.stringify(INIT),
        });
        await init.arrayBuffer();
        const id = init.headers.get('mcp-session-id');
        if (init.status !== 200 || !id) throw new Error(`initialize answered ${init.status}`);
        const ready = await fetch(`${url}/mcp`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: ACCEPT,
            'mcp-session-id': id,
            'mcp-protocol-version': '2025-06-18',
          },
          body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
        });
        await ready.arrayBuffer();
        ids.push(id);
      }
    }),
  );
  return ids;
}

async function closeSessions(url: string, ids: string[]): Promise<void> {
  for (const id of ids) {
    const res = await fetch(`${url}/mcp`, {
      method: 'DELETE',
      headers: { 'mcp-session-id': id, 'mcp-protocol-version': '2025-06-18' },
    });
    await res.arrayBuffer();
  }
}

/** The SDK alone: one Server + transport per session, no tools, no caps, no keys. */
async function startBareMcp() {
  const sessions = new Map<string, { server: Server; transport: StreamableHTTPServerTransport }>();
  const app = Fastify({ logger: false });
  app.all('/mcp', async (request, reply) => {
    const header = request.headers['mcp-session-id'];
    const id = Array.isArray(header) ? header[0] : header;
    let transport = id === undefined ? undefined : sessions.get(id)?.transport;
    if (transport === undefined) {
      if (!(request.method === 'POST' && isInitializeRequest(request.body))) {
        return reply.code(404).send({ jsonrpc: '2.0', error: { code: -32001, message: 'no session' } });
      }
      const server = new Server({ name: 'bare', version: '0' }, { capabilities: { tools: {} } });
      const created: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: true,
        onsessioninitialized: (sid) => void sessions.set(sid, { server, transport: created }),
        onsessionclosed: (sid) => void sessions.delete(sid),
      });
      await server.connect(created);
      transport = created;
    }
    reply.hijack();
    await transport.handleRequest(request.raw, reply.raw, request.body);
    return reply;
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, sessions, close: () => app.close() };
}

export interface SessionMemoryRun {
  heapPerSession: number;
  rssPerSession: number;
}

export interface McpSessionsBenchOptions {
  sessions?: number;
  runs?: number;
  print?: boolean;
}

const stats = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  return { min: sorted[0]!, median: sorted[Math.floor(sorted.length / 2)]!, max: sorted.at(-1)! };
};
const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;

export async function run(options: McpSessionsBenchOptions = {}) {
  const n = options.sessions ?? 1000;
  const runs = Math.max(3, options.runs ?? 3);
  const log = (line: string) => {
    if (options.print ?? true) console.log(line);
  };
  const uncapped = {
    MCP_MAX_SESSIONS: String(n * 2),
    MCP_MAX_SESSIONS_PER_CALLER: String(n * 2),
    MCP_SESSION_IDLE_MS: String(3_600_000),
    RATE_LIMIT_ENABLED: 'false',
  };
  const service = await startKeyedServer({ cache: new MemoryCache(), env: uncapped });
  const capped = await startKeyedServer({
    cache: new MemoryCache(),
    engine: service.engine,
    env: { MCP_SESSION_IDLE_MS: String(3_600_000), RATE_LIMIT_ENABLED: 'false' },
  });
  const bare = await startBareMcp();
  try {
    const measure = async (url: string): Promise<SessionMemoryRun> => {
      // A few sessions first: code paths compiled and pools grown before the reading.
      await closeSessions(url, await openSessions(url, 20));
      const before = await settle();
      const ids = await openSessions(url, n);
      const after = await settle();
      await closeSessions(url, ids);
      return { heapPerSession: (after.heap - before.heap) / n, rssPerSession: (after.rss - before.rss) / n };
    };
    const serviceRuns: SessionMemoryRun[] = [];
    const bareRuns: SessionMemoryRun[] = [];
    for (let i = 0; i < runs; i++) {
      serviceRuns.push(await measure(service.url));
      bareRuns.push(await measure(bare.url));
    }
    const ratios = serviceRuns.map((r, i) => r.heapPerSession / bareRuns[i]!.heapPerSession);

    // One caller, the default cap: the table evicts its oldest, so memory stays flat.
    const cap = capped.config.MCP_MAX_SESSIONS_PER_CALLER;
    const before = await settle();
    await openSessions(capped.url, n);
    const after = await settle();

    const heap = stats(serviceRuns.map((r) => r.heapPerSession));
    const rss = stats(serviceRuns.map((r) => r.rssPerSession));
    const bareHeap = stats(bareRuns.map((r) => r.heapPerSession));
    const ratio = stats(ratios);
    log(`mcp-sessions bench: ${n} sessions per run, ${runs} runs (min / median / max)`);
    log(
      `  service, heap per session:   ${kb(heap.min)} / ${kb(heap.median)} / ${kb(heap.max)}` +
        `   (RSS ${kb(rss.min)} / ${kb(rss.median)} / ${kb(rss.max)})`,
    );
    log(
      `  bare MCP SDK, heap per session: ${kb(bareHeap.min)} / ${kb(bareHeap.median)} / ${kb(bareHeap.max)}`,
    );
    log(
      `  ratio service / bare SDK: ${ratio.min.toFixed(2)} / ${ratio.median.toFixed(2)} / ${ratio.max.toFixed(2)}`,
    );
    log(
      `  one caller opening ${n} sessions under the default cap of ${cap}: ` +
        `heap +${kb(after.heap - before.heap)} in all (${kb((after.heap - before.heap) / n)} per session opened)`,
    );
    return { sessions: n, runs: serviceRuns, bare: bareRuns, ratio, capped: after.heap - before.heap };
  } finally {
    await bare.close();
    await capped.close();
    await service.close();
  }
}

await whenMain(import.meta.url, { sessions: 'number', runs: 'number' }, run);
