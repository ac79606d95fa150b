/**
 * The load generator's own process: autocannon's programmatic API, started by load-http.ts with
 * its options as one JSON argument, printing one JSON line of results. Running it apart from the
 * server under test keeps the generator's CPU out of the server's profile and event loop.
 *
 * MCP requests need a distinct JSON-RPC id per in-flight request of a session (the service
 * refuses a duplicate with 409), so `mcp` mode rewrites each request: the next session of the
 * pool, a fresh id, the same tool call.
 */
import { randomUUID } from 'node:crypto';
import autocannon from 'autocannon';

export interface CannonOptions {
  url: string;
  method: 'GET' | 'POST';
  headers: Record<string, string>;
  body?: string;
  connections: number;
  durationSeconds: number;
  /**
   * Rewrite each request as a JSON-RPC call on one of these MCP sessions, round robin; with
   * `authorizations`, each session's own Authorization header (sessions of many keys).
   */
  mcp?: { sessions: string[]; authorizations?: string[]; method: string; params: unknown };
}

export interface CannonResult {
  requests: number;
  perSec: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  timeouts: number;
  statusCounts: Record<string, number>;
}

async function main(): Promise<void> {
  const options = JSON.parse(process.argv[2] ?? '{}') as CannonOptions;
  let next = 0;
  const runId = randomUUID();
  const mcp = options.mcp;
  const result = await autocannon({
    url: options.url,
    connections: options.connections,
    duration: options.durationSeconds,
    method: options.method,
    headers: options.headers,
    ...(options.body === undefined ? {} : { body: options.body }),
    ...(mcp
      ? {
          requests: [
            {
              setupRequest: (request: autocannon.Request) => {
                const n = next++;
                const i = n % mcp.sessions.length;
                const authorization = mcp.authorizations?.[i];
                return {
                  ...request,
                  headers: {
                    ...request.headers,
                    'mcp-session-id': mcp.sessions[i]!,
                    ...(authorization ? { authorization } : {}),
                  },
                  // Unique across runs too: a request cut off at the end of the last run may still be in flight.
                  body: JSON.stringify({
                    jsonrpc: '2.0',
                    id: `${runId}-${n}`,
                    method: mcp.method,
                    params: mcp.params,
                  }),
                };
              },
            },
          ],
        }
      : {}),
  });
  const statusCounts: Record<string, number> = {};
  for (const [code, stat] of Object.entries(result.statusCodeStats ?? {})) {
    statusCounts[code] = (stat as { count: number }).count;
  }
  const out: CannonResult = {
    requests: result.requests.total,
    perSec: result.requests.total / (result.duration || options.durationSeconds),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCounts,
  };
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

await main();
