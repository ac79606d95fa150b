import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { startKeyedServer } from './keyed-harness.ts';
import { MCP_ACCEPT, mcpInitialize } from './mcp-wire.ts';

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

/** POST /mcp with a Host of our choosing (fetch will not send one); the status and body. */
function postMcp(
  port: number,
  host: string,
  key: string,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const body = JSON.stringify(mcpInitialize());
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/mcp',
        headers: {
          host,
          authorization: `Bearer ${key}`,
          'content-type': 'application/json',
          accept: MCP_ACCEPT,
          'content-length': Buffer.byteLength(body),
        },
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * The DNS-rebinding guard (ALLOWED_HOSTS) answers a foreign Host on /mcp before the rate limit: the
 * request is refused 403 whatever its key's budget, and takes nothing from that budget (it was
 * counted, then answered 429 by the limit once the budget ran out, before the guard ever ran).
 */
describe('/mcp: a foreign Host meets the Host guard before the rate limit', () => {
  let server: Server;
  let key: string;

  beforeAll(async () => {
    server = await startKeyedServer({
      cache: createMemoryCache(),
      rateLimited: true,
      env: { RATE_LIMIT_WINDOW_MS: '3600000', RATE_LIMIT_PRO: '2', RATE_LIMIT_TOOL_SHARE: '1' },
    });
    key = (await server.issue('pro')).key;
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is 403 past any budget, and the key keeps its whole budget for its own Host', async () => {
    const foreign = [];
    for (let i = 0; i < 4; i++) foreign.push(await postMcp(server.port, 'rebound.example.com', key));
    expect(foreign.map((r) => r.status)).toEqual([403, 403, 403, 403]);
    for (const r of foreign) {
      expect(r.body).toContain('Host not allowed');
      expect(r.headers['ratelimit-limit']).toBeUndefined();
    }
    const own = [];
    for (let i = 0; i < 3; i++)
      own.push((await postMcp(server.port, `127.0.0.1:${server.port}`, key)).status);
    // The whole budget of 2, then the limit.
    expect(own).toEqual([200, 200, 429]);
  });
});
