import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SearchAnswer } from '../contracts/knowledge.ts';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * A long-running bot on an MCP session: once its session is gone (idle, closed to make room, or a
 * restarted api), every call it makes answers 404 -32001 and the SDK client throws, call after call;
 * a new connection serves it again. The README says so, and the knowledge search finds where.
 */
describe('an MCP session that is gone', () => {
  let running: TestService;
  let url: string;
  let key: string;

  beforeAll(async () => {
    // One session per caller: opening a second closes the first, as idling out would.
    running = await startTestService(['api'], { MCP_MAX_SESSIONS_PER_CALLER: '1' });
    url = running.service.url;
    key = await running.issue('pro');
  });
  afterAll(async () => {
    await running?.stop();
  });

  const connect = async () => {
    const client = new Client({ name: 'bot', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    return client;
  };
  const regime = (client: Client) =>
    client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } });

  it('answers 404 -32001 to every later call of the SDK client until it connects anew', async () => {
    const bot = await connect();
    expect((await regime(bot)).isError).toBeFalsy();
    const other = await connect(); // the same caller's second session closes the bot's
    for (let i = 0; i < 2; i++) await expect(regime(bot)).rejects.toThrow(/404|-32001.*Session not found/s);
    await other.close();
    const again = await connect();
    expect((await regime(again)).isError).toBeFalsy();
    await again.close();
    await bot.close().catch(() => {});
  });

  it('the documentation says what to do, and search finds it', async () => {
    await (running.service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    const res = await fetch(`${url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({
        query: 'MCP session gone 404 -32001, does the SDK client reconnect?',
        limit: 5,
      }),
    });
    expect(res.status).toBe(200);
    const excerpts = SearchAnswer.parse(await res.json()).results.map((r) => r.excerpt.replaceAll('**', ''));
    expect(excerpts.some((e) => e.includes('A session gone (idle for MCP_SESSION_IDLE_MS'))).toBe(true);
  });
});
