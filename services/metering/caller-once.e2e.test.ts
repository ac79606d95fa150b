import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../test/keyed-harness.ts';

/**
 * One hook resolves the caller of a request (callerPlugin): the rate limit, the MCP channel (a
 * plain call, the SDK transport, the 2026-07-28 generation) and a session's owner read what it
 * found, so a presented key is looked up in the registry at most once per request, refused or not.
 */
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const MODERN = {
  'mcp-protocol-version': '2026-07-28',
  'mcp-method': 'tools/call',
  'mcp-name': 'get_market_regime',
};
const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};
const call = (meta?: Record<string, unknown>) => ({
  jsonrpc: '2.0',
  id: 1,
  method: 'tools/call',
  params: { name: 'get_market_regime', arguments: { coin: 'BTC' }, ...(meta ? { _meta: meta } : {}) },
});
const UNKNOWN = `sk_live_${'z'.repeat(43)}`;

describe('the caller of a request is resolved once', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  /** Registry lookups of the request's key, and those of them that wait (a key the registry does not hold). */
  let lookups = 0;
  let waits = 0;

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache(), rateLimited: true });
    const keys = server.channel.keys;
    const resolve = keys.resolve.bind(keys);
    keys.resolve = (key) => {
      lookups++;
      const found = resolve(key);
      if (found instanceof Promise) waits++;
      return found;
    };
  });
  afterAll(async () => {
    await server?.close();
  });

  const post = async (body: unknown, headers: Record<string, string>) => {
    lookups = 0;
    waits = 0;
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, ...headers },
      body: JSON.stringify(body),
    });
    return { status: res.status, body: JSON.parse(await res.text()) as { error?: { code: number } } };
  };

  it('an unknown key: one lookup, refused in the channel shape on every MCP generation', async () => {
    const bearer = { authorization: `Bearer ${UNKNOWN}` };
    for (const [body, headers] of [
      [call(), bearer], // one-shot 2025, answered by the plain path
      [call({ progressToken: 'p' }), bearer], // the same through the SDK transport
      [call(ENVELOPE), { ...bearer, ...MODERN }], // 2026-07-28
    ] as const) {
      const answer = await post(body, headers);
      expect(answer.body.error?.code).toBe(-32003);
      expect(lookups).toBe(1);
    }
  });

  it('a live key: one lookup per call, none waiting once the registry holds it', async () => {
    const { key } = await server.issue('pro');
    const bearer = { authorization: `Bearer ${key}` };
    expect((await post(call(), bearer)).status).toBe(200);
    expect(lookups).toBe(1);
    expect((await post(call(), bearer)).status).toBe(200);
    expect({ lookups, waits }).toEqual({ lookups: 1, waits: 0 });
  });
});
