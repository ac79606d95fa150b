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

describe('an anonymous session asked for from another address', () => {
  let server: Server;
  beforeAll(async () => {
    // The address is X-Forwarded-For's, as behind a load balancer: two clients on one loopback.
    server = await startKeyedServer({ cache: new MemoryCache(), env: { TRUST_PROXY: '127.0.0.1' } });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('is 404 -32001 naming the address, not a credential (none was sent either time)', async () => {
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, 'x-forwarded-for': '203.0.113.5' },
      body: JSON.stringify(mcpInitialize('anon', 0)),
    });
    await init.text();
    const session = init.headers.get('mcp-session-id')!;
    const moved = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, 'x-forwarded-for': '198.51.100.7', 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }),
    });
    expect(moved.status).toBe(404);
    const body = (await moved.json()) as { error: { code: number; message: string; data: unknown } };
    expect(body.error.code).toBe(-32001);
    expect(body.error.data).toMatchObject({ code: 'SESSION_NOT_FOUND' });
    expect(body.error.message).toMatch(/another (client )?address/);
    expect(body.error.message).not.toMatch(/credential/);
    expect(body.error.message).toMatch(/initialize/);
    // From the address that opened it, it is served.
    const home = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, 'x-forwarded-for': '203.0.113.5', 'mcp-session-id': session },
      body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tools/list' }),
    });
    expect(home.status).toBe(200);
  });
});
