import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import type { RunningService } from '../services/service.ts';
import { mcpInitialize } from './mcp-wire.ts';
import { issueServiceKey, startApiOnly } from './service-keys.ts';

const BOTH = 'application/json, text/event-stream';

/**
 * README: every product route, HTTP and MCP alike, takes from the plan's budget, one tool at most half
 * of it. A free key was told RateLimit-Limit 150 on MCP search_knowledge and 300 on POST /api/search:
 * the HTTP routes of the knowledge tools took from the key's whole budget only.
 */
describe('a tool has one rate limit on HTTP and MCP', () => {
  let service: RunningService;
  beforeAll(async () => {
    service = await startApiOnly({
      RATE_LIMIT_ENABLED: 'true',
      // The defaults' free budget (300) and tool share (0.5); an hour's window, so one gives the
      // budget back mid-test only in a run that straddles the full hour.
      RATE_LIMIT_WINDOW_MS: '3600000',
    });
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
  });
  afterAll(async () => {
    await service?.stop();
  });

  const issue = async () => (await issueServiceKey(service, { plan: 'free', owner: 'rate-test' })).key;

  const http = (key: string, path: string, body: unknown) =>
    fetch(`${service.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });

  const mcpSession = async (key: string) => {
    const headers = { 'content-type': 'application/json', accept: BOTH, authorization: `Bearer ${key}` };
    const init = await fetch(`${service.url}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify(mcpInitialize()),
    });
    expect(init.status).toBe(200);
    const session = init.headers.get('mcp-session-id')!;
    let id = 1;
    return (name: string, args: Record<string, unknown>) =>
      fetch(`${service.url}/mcp`, {
        method: 'POST',
        headers: { ...headers, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: ++id,
          method: 'tools/call',
          params: { name, arguments: args },
        }),
      });
  };

  const limits = (res: Response) => ({
    status: res.status,
    limit: res.headers.get('ratelimit-limit'),
    remaining: res.headers.get('ratelimit-remaining'),
  });

  it('search: RateLimit-Limit 150 on both channels, and the two take from one budget', async () => {
    const key = await issue();
    const search = { query: 'webhooks' };
    expect(limits(await http(key, '/api/search', search))).toEqual({
      status: 200,
      limit: '150',
      remaining: '149',
    });
    // The same key's MCP call of the tool takes from the same share: 148 left.
    const mcp = await mcpSession(key);
    expect(limits(await mcp('search_knowledge', search))).toEqual({
      status: 200,
      limit: '150',
      remaining: '148',
    });
    const other = await mcpSession(await issue());
    expect(limits(await other('search_knowledge', search))).toEqual({
      status: 200,
      limit: '150',
      remaining: '149',
    });
  });

  it('a wrong method on the path of a tool (GET /api/search, 405) takes no share of the tool', async () => {
    const key = await issue();
    const wrong = await fetch(`${service.url}/api/search?query=webhooks`, {
      headers: { authorization: `Bearer ${key}` },
    });
    // The key's whole budget only (300), as any request that matches no route.
    expect(limits(wrong)).toEqual({ status: 405, limit: '300', remaining: '299' });
    expect(limits(await http(key, '/api/search', { query: 'webhooks' }))).toEqual({
      status: 200,
      limit: '150',
      remaining: '149',
    });
  });

  it('chat: RateLimit-Limit 150 on both channels', async () => {
    const key = await issue();
    const chat = await http(key, '/api/chat', { question: 'how do webhooks retry?' });
    expect(limits(chat)).toMatchObject({ limit: '150', remaining: '149' });
    const mcp = await mcpSession(await issue());
    const answered = await mcp('chat_knowledge', { question: 'how do webhooks retry?' });
    expect(limits(answered)).toMatchObject({ limit: '150', remaining: '149' });
  });
});
