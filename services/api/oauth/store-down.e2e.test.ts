import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

/**
 * The OAuth sign-in with its store (Redis) out of reach from the start: the api starts anyway (the
 * operator's log says 'oauth server not started: its store is unreachable'), and what a host meets
 * meanwhile is the catalog's SERVICE_UNAVAILABLE, 503 with Retry-After, on the OAuth endpoints and
 * on /mcp/signin alike; never a message of its own without a code or a time to retry.
 */
describe('OAuth sign-in while its store is unreachable', () => {
  let cache: RedisCache;
  let server: Server;

  beforeAll(async () => {
    cache = await connectRedisCache({
      url: 'redis://127.0.0.1:1',
      prefix: 'oauth-down:',
      connectTimeoutMs: 200,
    });
    server = await startKeyedServer({ cache, env: { OAUTH_ENABLED: 'true' } });
  });
  afterAll(async () => {
    await server?.close();
    await cache?.close();
  });

  it('answers a token on /mcp/signin with SERVICE_UNAVAILABLE (503, Retry-After) in JSON-RPC', async () => {
    const res = await fetch(`${server.url}/mcp/signin`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: 'Bearer some-access-token' },
      body: JSON.stringify(mcpInitialize()),
    });
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await res.json()).toMatchObject({
      jsonrpc: '2.0',
      // Retryable, as the OAuth endpoints' HTTP refusal says it (below).
      error: {
        data: { code: 'SERVICE_UNAVAILABLE', retryable: true },
        message: expect.stringContaining('retry shortly'),
      },
    });
  });

  it('answers the OAuth endpoints with SERVICE_UNAVAILABLE (503, Retry-After)', async () => {
    const res = await fetch(`${server.url}/.well-known/oauth-authorization-server`);
    expect(res.status).toBe(503);
    expect(res.headers.get('retry-after')).toBe('1');
    expect(await res.json()).toMatchObject({ code: 'SERVICE_UNAVAILABLE', retryable: true });
  });
});
