import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPrivateRedis } from '../../test/redis-private.ts';
import { startTestService, type TestService } from '../../test/service-harness.ts';
import type { KnowledgeModule } from './module.ts';

/**
 * chat_knowledge takes a unit of the chat quota before it answers. When Redis (the quota store of
 * CACHE=redis) reads but refuses writes (a replica, as after a failover), the call quota's check
 * passes and the chat quota's debit fails: over MCP that is the refusal every tool gives when the
 * quota cannot be counted, JSON-RPC -32004 quota_unavailable (retryable), as POST /api/chat
 * answers 503 QUOTA_UNAVAILABLE, not a tool error saying the call failed on our side.
 */
describe('chat_knowledge when the chat quota cannot be debited', () => {
  let redis: Awaited<ReturnType<typeof startPrivateRedis>>;
  let running: TestService;
  let key: string;
  let client: Client;
  beforeAll(async () => {
    redis = await startPrivateRedis();
    running = await startTestService(['api'], {
      CACHE: 'redis',
      REDIS_URL: redis.url,
      REDIS_PREFIX: `chat-quota-down-${randomUUID()}:`,
    });
    await (running.service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    key = await running.issue('pro');
    client = new Client({ name: 'chat-quota-down', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${running.service.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
  }, 120_000);
  afterAll(async () => {
    await client?.close();
    await running?.stop();
    await redis?.stop().catch(() => {});
  });

  const chat = { name: 'chat_knowledge', arguments: { question: 'what does squeeze mean?' } };

  it('answers -32004 quota_unavailable over MCP, as /api/chat answers 503 QUOTA_UNAVAILABLE', async () => {
    const served = await client.callTool(chat);
    expect(served.isError).toBeFalsy();
    expect(served.structuredContent).toMatchObject({ _service: { chat_quota: { used: 1 } } });

    await redis.readOnly();
    const refused = await client.callTool(chat).then(
      (result) => result,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(-32004);
    expect((refused as McpError).data).toMatchObject({
      code: 'quota_unavailable',
      retryable: true,
      _service: { auth: { outcome: 'OK', tier: 'pro' } },
    });

    const http = await fetch(`${running.service.url}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(chat.arguments),
    });
    expect(http.status).toBe(503);
    expect(await http.json()).toMatchObject({ code: 'QUOTA_UNAVAILABLE', retryable: true });
  }, 60_000);
});
