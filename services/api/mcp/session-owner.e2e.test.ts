import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';

/**
 * A session asked for with another credential than the one it was opened with is 404 -32001, as an
 * unknown one is, saying why and what to do (initialize without Mcp-Session-Id).
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe('a session asked for with another key', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is 404 -32001 saying the session belongs to another credential, and what to do', async () => {
    const a = await server.issue('pro', 'owner-a');
    const b = await server.issue('pro', 'owner-b');
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${a.key}` },
      body: JSON.stringify(mcpInitialize('a', 0)),
    });
    await init.text();
    const session = init.headers.get('mcp-session-id')!;
    const asB = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${b.key}`, 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    });
    expect(asB.status).toBe(404);
    const body = (await asB.json()) as {
      id: unknown;
      error: { code: number; message: string; data: Record<string, unknown> };
    };
    expect(body.id).toBe(9);
    expect(body.error.code).toBe(-32001);
    expect(body.error.message).toMatch(/another/);
    expect(body.error.message).toMatch(/initialize/);
    expect(body.error.data).toMatchObject({
      code: 'SESSION_NOT_FOUND',
      _service: { auth: { outcome: 'OK' } },
    });
    // An id no session has says only that it is not found.
    const unknown = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${b.key}`, 'mcp-session-id': 'nope' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 10, method: 'tools/list' }),
    });
    expect(unknown.status).toBe(404);
    const unknownBody = (await unknown.json()) as { error: { message: string; data: unknown } };
    expect(unknownBody.error.message).not.toMatch(/another/);
    expect(unknownBody.error.data).toMatchObject({ code: 'SESSION_NOT_FOUND' });
    // The owner is served on it as ever.
    const asA = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${a.key}`, 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: 11, method: 'tools/list' }),
    });
    expect(asA.status).toBe(200);
  });
});
