import { request as httpRequest } from 'node:http';
import {
  Client as ModernClient,
  StreamableHTTPClientTransport as ModernTransport,
  ProtocolError,
} from '@modelcontextprotocol/client';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError, ReadResourceResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import { startKeyedServer } from './keyed-harness.ts';

/**
 * Both MCP client generations against one /mcp over real sockets: the 1.x SDK with its
 * initialize/session handshake, the 2.x SDK on the 2026-07-28 revision (server/discover, no
 * session), and a bare one-shot tools/call as the peer's documentation writes it.
 */

type Server = Awaited<ReturnType<typeof startKeyedServer>>;
let server: Server;
let unknownKey: string;

const CALLS: [string, Record<string, unknown>][] = [
  ['get_trade_call', { coin: 'BTC', timeframe: '1h' }],
  ['get_market_regime', { coin: 'ETH', timeframe: '4h' }],
  ['get_risk_forecast', { coin: 'SOL', timeframe: '1h' }],
  ['scan_trade_calls', { timeframe: '1h', topN: 3 }],
  ['scan_funding_arb', { minSpreadBps: 0, limit: 3 }],
  ['get_track_record', { window: '30d' }],
];
const TOOL_NAMES = CALLS.map(([name]) => name).sort();

beforeAll(async () => {
  server = await startKeyedServer({ cache: createMemoryCache(), env: { PLAN_FREE_DAILY_CALLS: '100000' } });
  unknownKey = `sk_live_${'z'.repeat(43)}`;
});
afterAll(async () => {
  await server?.close();
});

function rpc(body: unknown, headers: Record<string, string> = {}) {
  return fetch(`${server.url}/mcp`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      ...headers,
    },
    body: JSON.stringify(body),
  });
}

describe('a one-shot tools/call with no initialize and no session (the peer documentation’s client)', () => {
  it('is answered statelessly with the result and _service', async () => {
    const res = await rpc({
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('mcp-session-id')).toBeNull();
    const body = (await res.json()) as { id: number; result: { structuredContent: Record<string, unknown> } };
    expect(body.id).toBe(7);
    expect(body.result.structuredContent).toMatchObject({ coin: 'BTC' });
    expect(ServiceMeta.parse(body.result.structuredContent._service).auth.outcome).toBe('ABSENT');
  });

  it('keeps the channel rules: -32003 as a JSON-RPC error read once, -32602 as result.isError', async () => {
    const unknown = await rpc(
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
      },
      { authorization: `Bearer ${unknownKey}` },
    );
    const error = ((await unknown.json()) as { error: { code: number; message: string; data: unknown } })
      .error;
    expect(error.code).toBe(-32003);
    expect(error.message).not.toMatch(/MCP error/);
    expect(error.data).toMatchObject({ retryable: false, _service: { auth: { outcome: 'UNKNOWN' } } });

    const invalid = await rpc({
      jsonrpc: '2.0',
      id: 2,
      method: 'tools/call',
      params: { name: 'get_market_regime', arguments: { coin: 5 } },
    });
    const result = ((await invalid.json()) as { result: { isError: boolean; content: { text: string }[] } })
      .result;
    expect(result.isError).toBe(true);
    expect(result.content[0]!.text).toMatch(/^-32602 invalid arguments/);
  });

  it('resources/read: an unknown URI is -32002 and a missing uri -32602, each message said once and in words', async () => {
    const unknown = (await (
      await rpc({ jsonrpc: '2.0', id: 8, method: 'resources/read', params: { uri: 'track-record://8d' } })
    ).json()) as { error: { code: number; message: string; data?: unknown } };
    expect(unknown.error).toEqual({
      code: -32002,
      message: expect.stringMatching(/^no resource track-record:\/\/8d; resources: track-record:\/\/7d, /),
      data: { uri: 'track-record://8d' },
    });
    // What an SDK client shows for it: the code once.
    expect(new McpError(unknown.error.code, unknown.error.message).message.match(/MCP error/g)).toHaveLength(
      1,
    );
    const bare = (await (
      await rpc({ jsonrpc: '2.0', id: 9, method: 'resources/read', params: {} })
    ).json()) as {
      error: { code: number; message: string };
    };
    expect(bare.error.code).toBe(-32602);
    expect(bare.error.message).toMatch(
      /^resources\/read needs params\.uri, a string: one of track-record:\/\/7d, /,
    );
  });

  it('a GET without a session is still refused', async () => {
    const res = await fetch(`${server.url}/mcp`, { headers: { accept: 'text/event-stream' } });
    expect(res.status).toBe(400);
  });
});

describe('the 1.x SDK client (2025 handshake, session)', () => {
  let client: Client;
  beforeAll(async () => {
    client = new Client({ name: 'legacy', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)));
  });
  afterAll(async () => {
    await client?.close();
  });

  it('lists every tool with outputSchema, title and readOnlyHint', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(TOOL_NAMES);
    for (const tool of tools) {
      expect(tool.outputSchema).toMatchObject({ type: 'object' });
      expect(tool.annotations).toMatchObject({ readOnlyHint: true, title: tool.title });
    }
  });

  it('calls every tool; the SDK checks each structuredContent against its outputSchema', async () => {
    for (const [name, args] of CALLS) {
      const result = await client.callTool({ name, arguments: args });
      expect(result.isError, `${name}: ${JSON.stringify(result.content)}`).toBeFalsy();
      expect(ServiceMeta.parse((result.structuredContent as { _service: unknown })._service)).toBeTruthy();
    }
  });

  it('an error result stays valid against the outputSchema (no -32602 from the client)', async () => {
    const result = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'NOPECOIN' } });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ code: expect.any(String) });
  });

  it('resources/read: an unknown URI is -32002 read once; a missing uri is -32602 in words, not a zod dump', async () => {
    const missing = await client.readResource({ uri: 'track-record://8d' }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(missing).toBeInstanceOf(McpError);
    expect((missing as McpError).code).toBe(-32002);
    expect((missing as McpError).message).toMatch(
      /^MCP error -32002: no resource track-record:\/\/8d; resources: /,
    );
    expect((missing as McpError).message.match(/MCP error/g)).toHaveLength(1);
    const bare = await client
      .request({ method: 'resources/read', params: {} } as never, ReadResourceResultSchema)
      .then(
        () => null,
        (err: unknown) => err,
      );
    expect(bare).toBeInstanceOf(McpError);
    expect((bare as McpError).code).toBe(-32602);
    expect((bare as McpError).message).toMatch(
      /^MCP error -32602: resources\/read needs params\.uri, a string: one of track-record:\/\/7d, /,
    );
  });

  it('-32003 reads once in the SDK client', async () => {
    const keyed = new Client({ name: 'legacy', version: '1.0.0' });
    try {
      // Refused at initialize, as a call is.
      const error = await keyed
        .connect(
          new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), {
            requestInit: { headers: { authorization: `Bearer ${unknownKey}` } },
          }),
        )
        .then(
          () => null,
          (err: unknown) => err,
        );
      expect(error).toBeInstanceOf(McpError);
      expect((error as McpError).code).toBe(-32003);
      expect((error as McpError).message.match(/MCP error/g)).toHaveLength(1);
    } finally {
      await keyed.close();
    }
  });
});

describe('the 2.x SDK client on the 2026-07-28 revision (stateless, server/discover)', () => {
  const seen: { method: string | null; name: string | null; version: string | null; body: string }[] = [];
  const recordingFetch = async (input: string | URL | Request, init?: RequestInit) => {
    const headers = new Headers(init?.headers);
    const res = await fetch(input, init);
    seen.push({
      method: headers.get('mcp-method'),
      name: headers.get('mcp-name'),
      version: headers.get('mcp-protocol-version'),
      body: await res.clone().text(),
    });
    return res;
  };
  const open = async (headers: Record<string, string> = {}) => {
    const client = new ModernClient(
      { name: 'modern', version: '2.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' } } },
    );
    await client.connect(
      new ModernTransport(new URL(`${server.url}/mcp`), { fetch: recordingFetch, requestInit: { headers } }),
    );
    return client;
  };

  it('discovers, lists (with ttlMs/cacheScope) and calls every tool without a session', async () => {
    const client = await open();
    try {
      expect(seen.some((s) => s.method === 'server/discover')).toBe(true);
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual(TOOL_NAMES);
      const listed = seen.find((s) => s.method === 'tools/list')!;
      expect(listed.version).toBe('2026-07-28');
      expect(JSON.parse(listed.body).result).toMatchObject({ ttlMs: 300_000, cacheScope: 'public' });
      for (const [name, args] of CALLS) {
        const result = await client.callTool({ name, arguments: args });
        expect(result.isError, `${name}: ${JSON.stringify(result.content)}`).toBeFalsy();
        expect(ServiceMeta.parse((result.structuredContent as { _service: unknown })._service)).toBeTruthy();
        expect(seen.at(-1)).toMatchObject({ method: 'tools/call', name });
      }
      const invalid = await client.callTool({ name: 'get_market_regime', arguments: { coin: 5 } });
      expect(invalid.isError).toBe(true);
      expect((invalid.content as { text: string }[])[0]!.text).toMatch(/^-32602/);
    } finally {
      await client.close();
    }
  });

  it('lists and reads the track-record resources without a session; an unknown URI is -32602', async () => {
    const client = await open();
    try {
      const { resources } = await client.listResources();
      expect(resources.map((r) => r.uri)).toContain('track-record://all');
      expect(seen.at(-1)).toMatchObject({ method: 'resources/list', version: '2026-07-28' });
      const read = await client.readResource({ uri: 'track-record://30d' });
      const [content] = read.contents as { text: string }[];
      expect(JSON.parse(content!.text)).toMatchObject({ window: '30d', series: [] });
      const missing = await client.readResource({ uri: 'track-record://forever' }).then(
        () => null,
        (err: unknown) => err,
      );
      // The 2026-07-28 revision's code for a resource not found (the 2025 ones' -32002, mapped by the SDK).
      expect(missing).toBeInstanceOf(ProtocolError);
      expect((missing as ProtocolError).code).toBe(-32602);
      const said = (missing as ProtocolError).message;
      expect((said.match(/MCP error/g) ?? []).length, said).toBeLessThanOrEqual(1);
      expect(said.replace(/^MCP error -?\d+: /, ''), said).toMatch(/^no resource track-record:\/\/forever; /);
      const bare = await client.readResource({} as never).then(
        () => null,
        (err: unknown) => err,
      );
      expect(bare).toBeInstanceOf(ProtocolError);
      expect((bare as ProtocolError).code).toBe(-32602);
      expect((bare as ProtocolError).message.replace(/^MCP error -?\d+: /, '')).toMatch(
        /^resources\/read needs params\.uri, a string: one of track-record:\/\/7d, /,
      );
    } finally {
      await client.close();
    }
  });

  it('-32003 is a JSON-RPC error that reads once', async () => {
    const client = await open({ authorization: `Bearer ${unknownKey}` });
    try {
      const error = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } }).then(
        () => null,
        (err: unknown) => err,
      );
      expect(error).toBeInstanceOf(ProtocolError);
      expect((error as ProtocolError).code).toBe(-32003);
      // The 2.x client may or may not prefix the code; either way the server's text reads once.
      const message = (error as ProtocolError).message;
      expect((message.match(/MCP error/g) ?? []).length).toBeLessThanOrEqual(1);
      expect(message.replace(/^MCP error -32003: /, '')).not.toMatch(/MCP error|-32003/);
    } finally {
      await client.close();
    }
  });

  it('a request whose Mcp-Method header disagrees with its body is refused', async () => {
    const res = await rpc(
      {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/list',
        params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } },
      },
      { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' },
    );
    expect(res.status).toBe(400);
  });
});

describe('browser MCP clients on the embedded defaults', () => {
  const preflight = (origin: string) =>
    fetch(`${server.url}/mcp`, {
      method: 'OPTIONS',
      headers: {
        origin,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'content-type, mcp-protocol-version, mcp-method',
      },
    });

  it('a page on a local development origin passes the /mcp preflight and reads the answer', async () => {
    for (const origin of ['http://localhost:6274', 'http://127.0.0.1:5173', 'http://[::1]:3000']) {
      const res = await preflight(origin);
      expect(res.status, origin).toBe(204);
      expect(res.headers.get('access-control-allow-origin')).toBe(origin);
      expect(res.headers.get('access-control-allow-headers')).toMatch(/Mcp-Method/);
    }
    const call = await rpc(
      { jsonrpc: '2.0', id: 1, method: 'tools/list' },
      { origin: 'http://localhost:6274' },
    );
    expect(call.status).toBe(200);
    expect(call.headers.get('access-control-allow-origin')).toBe('http://localhost:6274');
  });

  it('keeps refusing other origins and a rebinding Host', async () => {
    expect((await preflight('http://evil.example')).status).toBe(403);
    expect((await preflight('http://localhost.evil.example:80')).status).toBe(403);
    // A rebinding page sends its own name as Host: refused even with a local-looking Origin.
    const status = await new Promise<number>((resolve, reject) => {
      const url = new URL(`${server.url}/mcp`);
      const req = httpRequest(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: 'OPTIONS',
          headers: {
            host: 'evil.example',
            origin: 'http://localhost:6274',
            'access-control-request-method': 'POST',
          },
        },
        (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        },
      );
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(403);
  });

  it('in production, local origins are not allowed unless listed', async () => {
    const { guardConfig, originAllowed } = await import('../services/api/mcp/request-guard.ts');
    const production = guardConfig({
      ALLOWED_HOSTS: 'localhost',
      ALLOWED_ORIGINS: '',
      NODE_ENV: 'production',
    });
    expect(originAllowed(production, 'http://localhost:6274')).toBe(false);
    const listed = guardConfig({
      ALLOWED_HOSTS: 'x',
      ALLOWED_ORIGINS: 'https://app.example',
      NODE_ENV: 'test',
    });
    expect(originAllowed(listed, 'http://localhost:6274')).toBe(false);
    expect(originAllowed(listed, 'https://app.example')).toBe(true);
  });
});
