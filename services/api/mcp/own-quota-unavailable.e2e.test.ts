import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectRedisCache, type RedisCache } from '../../../adapters/cache/redis.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { startPrivateRedis } from '../../../test/redis-private.ts';
import type { ToolDefinition } from './tool-registry.ts';

/**
 * A tool with a quota of its own beside the call quota (chat_knowledge's chat quota) debits it in
 * the quota store while it runs. When Redis (the store of CACHE=redis) reads but refuses writes (a
 * replica, as after a failover), the call quota's check passes and that debit fails: the call is
 * refused as every tool is when its quota cannot be counted, JSON-RPC -32004 quota_unavailable
 * (retryable, `_service`), as POST /api/chat answers 503 QUOTA_UNAVAILABLE; not a tool error
 * saying the call failed on our side (internal_error, not retryable).
 */
describe('a tool whose own quota cannot be debited', () => {
  let redis: Awaited<ReturnType<typeof startPrivateRedis>>;
  let cache: RedisCache;
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  let client: Client;
  beforeAll(async () => {
    redis = await startPrivateRedis();
    cache = await connectRedisCache({ url: redis.url, prefix: `own-quota-${randomUUID()}:` });
    const ownQuota: ToolDefinition = {
      name: 'own_quota',
      title: 'A tool with a quota of its own',
      description: 'Takes a unit of its own quota, then answers how many are used.',
      input: z.object({}).strict(),
      run: async (_args, ctx) => {
        const taken = await cache.debitWindows(
          [{ key: `own:${ctx.caller!.subject.id}`, limit: 10, expiresAt: Date.now() + 3_600_000 }],
          1,
        );
        return { used: taken.counts[0] };
      },
    };
    server = await startKeyedServer({ cache, extraTools: [ownQuota] });
    const { key } = await server.issue('pro', 'own-quota');
    client = new Client({ name: 'own-quota', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
  }, 60_000);
  afterAll(async () => {
    await client?.close();
    await server?.close();
    await cache?.close();
    await redis?.stop().catch(() => {});
  });

  it('is refused -32004 quota_unavailable, retryable, with _service', async () => {
    const served = await client.callTool({ name: 'own_quota', arguments: {} });
    expect(served.isError).toBeFalsy();
    expect(served.structuredContent).toMatchObject({ used: 1, _service: { quota: { used: 1 } } });

    await redis.readOnly();
    const refused = await client.callTool({ name: 'own_quota', arguments: {} }).then(
      (result) => result,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(-32004);
    expect((refused as McpError).data).toMatchObject({
      code: 'quota_unavailable',
      retryable: true,
      // The call quota's figures as read before the run: nothing of this call was counted.
      _service: { auth: { outcome: 'OK', tier: 'pro' }, quota: { used: 1 } },
    });
  }, 60_000);
});
