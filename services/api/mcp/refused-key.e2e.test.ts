import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
  ProtocolError,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize, mcpSessionHeaders } from '../../../test/mcp-wire.ts';
import { revokeKey } from '../../keys/key-commands.ts';

/**
 * A Bearer key presented and refused (unknown, revoked) is refused on every request at /mcp with
 * the JSON-RPC error a tools/call gets (-32003), initialize and tools/list included: a host learns
 * its key is bad at connect, not at its first paid call. A key not applied is served as anonymous.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

function sdkClient(url: string, key: string, name = 'host-audit'): [Client, StreamableHTTPClientTransport] {
  const client = new Client({ name, version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  return [client, transport];
}

/** A key shaped like a live one that was never issued: the issued key with its last character changed. */
function neverIssued(key: string): string {
  const last = key.at(-1)!;
  return `${key.slice(0, -1)}${last === 'A' ? 'B' : 'A'}`;
}

async function rpcCodeOf(promise: Promise<unknown>): Promise<{ code: number; data: unknown } | null> {
  try {
    await promise;
    return null;
  } catch (err) {
    expect(err).toBeInstanceOf(McpError);
    return { code: (err as McpError).code, data: (err as McpError).data };
  }
}

describe('a refused key on /mcp', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('an unknown key is refused at initialize with the JSON-RPC error a call gets (-32003)', async () => {
    const { key } = await server.issue('pro', 'unknown-at-init');
    const [client, transport] = sdkClient(server.url, neverIssued(key));
    const refused = await rpcCodeOf(client.connect(transport));
    await client.close();
    expect(refused).toMatchObject({
      code: -32003,
      data: { code: 'unknown_key', retryable: false, _service: { auth: { outcome: 'UNKNOWN' } } },
    });
    // The key is not applied: tier free (the anonymous quota the refusal counts against), detail says why.
    expect((refused!.data as { _service: { auth: unknown } })._service.auth).toEqual({
      outcome: 'UNKNOWN',
      presented: true,
      tier: 'free',
      detail: 'no such key was issued',
    });
  });

  it('a revoked key is refused at initialize, and on tools/list of a session it opened', async () => {
    const issued = await server.issue('pro', 'revoked');
    const [client, transport] = sdkClient(server.url, issued.key);
    await client.connect(transport);
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    const position = await revokeKey(server.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await server.channel.registry.waitFor(position);
    expect(await rpcCodeOf(client.listTools())).toMatchObject({ code: -32003 });
    await client.close();
    const [again, next] = sdkClient(server.url, issued.key);
    expect(await rpcCodeOf(again.connect(next))).toMatchObject({ code: -32003 });
    await again.close();
  });

  it('a revoked key is refused on GET and DELETE of its session as on POST, and its open event stream ends', async () => {
    const issued = await server.issue('pro', 'revoked-stream');
    const bearer = { authorization: `Bearer ${issued.key}` };
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...bearer },
      body: JSON.stringify(mcpInitialize('stream', 0)),
    });
    await init.text();
    const session = init.headers.get('mcp-session-id')!;
    const onSession = { ...mcpSessionHeaders(session), ...bearer };
    const stream = await fetch(`${server.url}/mcp`, {
      headers: { ...onSession, accept: 'text/event-stream' },
    });
    expect(stream.status).toBe(200);

    const position = await revokeKey(server.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await server.channel.registry.waitFor(position);
    const posted = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: onSession,
      body: JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'tools/list' }),
    });
    expect(posted.status).toBe(200);
    const refusal = ((await posted.json()) as { error: Record<string, unknown> }).error;
    expect(refusal).toMatchObject({
      code: -32003,
      data: { code: 'unknown_key', retryable: false, _service: { auth: { outcome: 'UNKNOWN' } } },
    });
    // The refused request was the key's check on its session: the stream it held is ended.
    const reader = stream.body!.getReader();
    while (!(await reader.read()).done) {}

    for (const method of ['GET', 'DELETE'] as const) {
      const res = await fetch(`${server.url}/mcp`, {
        method,
        headers: method === 'GET' ? { ...onSession, accept: 'text/event-stream' } : onSession,
      });
      // No JSON-RPC request to answer: the catalog's status, with the key's challenge.
      expect(res.status, method).toBe(401);
      expect(res.headers.get('www-authenticate'), method).toMatch(/^Bearer realm=.*error="invalid_token"/);
      expect(res.headers.get('cache-control'), method).toBe('no-store');
      expect(res.headers.get('content-type'), method).toMatch(/^application\/json/);
      expect(await res.json(), method).toEqual({ jsonrpc: '2.0', id: null, error: refusal });
    }
    // The DELETE did not end the session: the key is refused on it, not told it is gone.
    const again = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: onSession,
      body: JSON.stringify({ jsonrpc: '2.0', id: 'q', method: 'ping' }),
    });
    expect(((await again.json()) as { error: { code: number } }).error.code).toBe(-32003);
  });

  it('a key that cannot be checked is refused on GET and DELETE 503 -32004 with Retry-After', async () => {
    const issued = await server.issue('pro', 'unverifiable-stream');
    const bearer = { authorization: `Bearer ${issued.key}` };
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...bearer },
      body: JSON.stringify(mcpInitialize('unverifiable', 0)),
    });
    await init.text();
    const onSession = { ...mcpSessionHeaders(init.headers.get('mcp-session-id')!), ...bearer };
    // The key registry stopped: no key can be checked (KeyUnverifiableError), as while it is behind the log.
    await server.channel.registry.stop();
    try {
      const posted = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: onSession,
        body: JSON.stringify({ jsonrpc: '2.0', id: 'p', method: 'ping' }),
      });
      const refusal = ((await posted.json()) as { error: Record<string, unknown> }).error;
      expect(refusal).toMatchObject({
        code: -32004,
        data: { code: 'key_unverifiable', retryable: true, _service: { auth: { outcome: 'INDETERMINATE' } } },
      });
      expect((refusal.data as { _service: { auth: unknown } })._service.auth).toEqual({
        outcome: 'INDETERMINATE',
        presented: true,
        tier: 'free',
        detail: 'retry shortly',
      });
      for (const method of ['GET', 'DELETE'] as const) {
        const res = await fetch(`${server.url}/mcp`, {
          method,
          headers: method === 'GET' ? { ...onSession, accept: 'text/event-stream' } : onSession,
        });
        expect(res.status, method).toBe(503);
        expect(res.headers.get('retry-after'), method).toBe('1');
        expect(res.headers.get('cache-control'), method).toBe('no-store');
        expect(await res.json(), method).toEqual({ jsonrpc: '2.0', id: null, error: refusal });
      }
    } finally {
      await server.channel.registry.start();
    }
    // Checked again, the key is served on its session: the DELETE refused did not end it.
    const served = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: onSession,
      body: JSON.stringify({ jsonrpc: '2.0', id: 'r', method: 'ping' }),
    });
    expect(await served.json()).toMatchObject({ id: 'r', result: {} });
  });

  it('an SDK client whose key is revoked is refused when it ends its session (401)', async () => {
    const issued = await server.issue('pro', 'revoked-terminate');
    const [client, transport] = sdkClient(server.url, issued.key);
    await client.connect(transport);
    const position = await revokeKey(server.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await server.channel.registry.waitFor(position);
    const ended = await transport.terminateSession().then(
      () => null,
      (err: unknown) => err,
    );
    await client.close();
    expect(ended).toBeInstanceOf(StreamableHTTPError);
    expect((ended as StreamableHTTPError).code).toBe(401);
  });

  it('a one-shot tools/list (no session) with an unknown key is refused -32003 with its id', async () => {
    const { key } = await server.issue('pro', 'one-shot');
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, authorization: `Bearer ${neverIssued(key)}` },
      body: JSON.stringify({ jsonrpc: '2.0', id: 'l', method: 'tools/list' }),
    });
    expect(await res.json()).toMatchObject({ id: 'l', error: { code: -32003 } });
  });

  it('the 2.x client pinned to 2026-07-28 connects (server/discover) and is refused -32003 at tools/list', async () => {
    const { key } = await server.issue('pro', 'modern');
    const client = new ModernClient(
      { name: 'modern', version: '2.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    await client.connect(
      new ModernTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${neverIssued(key)}` } },
      }),
    );
    try {
      const error = await client.listTools().then(
        () => null,
        (err: unknown) => err,
      );
      expect(error).toBeInstanceOf(ProtocolError);
      expect((error as ProtocolError).code).toBe(-32003);
    } finally {
      await client.close();
    }
  });

  it('a key not applied (no Bearer) is served as anonymous, as the contract says (5.3)', async () => {
    const { key } = await server.issue('pro', 'not-applied');
    const client = new Client({ name: 'anon', version: '1' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
        requestInit: { headers: { 'x-api-key': neverIssued(key) } },
      }),
    );
    expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    await client.close();
  });
});
