import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * A used-up call quota over MCP says the truth of its window: not retryable (the day or month
 * window serves again only at its reset, hours or days away), with retry_after_ms and resets_at.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' };

function sdkClient(url: string, key: string, name = 'host-audit'): [Client, StreamableHTTPClientTransport] {
  const client = new Client({ name, version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  return [client, transport];
}

describe('a used-up quota over MCP', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({
      cache: new MemoryCache(),
      payPerCall: false,
      env: { PLAN_FREE_DAILY_CALLS: '1', PLAN_FREE_MONTHLY_CALLS: '5', PLAN_STARTER_MONTHLY_CALLS: '1' },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  const refusedCall = async (plan: 'free' | 'starter') => {
    const { key } = await server.issue(plan, `quota-${plan}`);
    const [client, transport] = sdkClient(server.url, key);
    await client.connect(transport);
    expect((await client.callTool({ name: 'get_trade_call', arguments: ARGS })).isError).toBeUndefined();
    const refused = await client.callTool({ name: 'get_trade_call', arguments: ARGS });
    await client.close();
    expect(refused.isError).toBe(true);
    return refused.structuredContent as Record<string, unknown>;
  };

  it.each([
    ['free', 'daily'],
    ['starter', 'monthly'],
  ] as const)(
    'a %s key whose %s window is used up is not retryable and says when the window resets',
    async (plan, window) => {
      const before = Date.now();
      const refused = await refusedCall(plan);
      expect(refused).toMatchObject({ code: 'quota_exhausted', window, retryable: false });
      const resets = Date.parse(refused.resets_at as string);
      const wait = refused.retry_after_ms as number;
      expect(Number.isSafeInteger(wait)).toBe(true);
      // The wait is until the window's reset, as measured around the call.
      expect(before + wait).toBeLessThanOrEqual(resets);
      expect(Date.now() + wait).toBeGreaterThanOrEqual(resets - 1);
      const now = new Date(before);
      const expected =
        window === 'daily'
          ? Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)
          : Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1);
      expect(resets).toBe(expected);
    },
  );
});
