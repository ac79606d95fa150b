import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * A plain tools/call without a session (2025 one-shot, or the 2026-07-28 revision as the 2.x
 * client sends it) is answered by session-call.ts; the same call in a shape only the SDKs take
 * (a `_meta` key of its own, client capabilities to check) is answered by the SDKs. Both must
 * give the same status, content type and bytes, but for the quota figures of the call itself.
 */
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' };
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const MODERN = {
  'mcp-protocol-version': '2026-07-28',
  'mcp-method': 'tools/call',
};
const envelope = (capabilities: Record<string, unknown>) => ({
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': capabilities,
});

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

/** The answer with each `used`/`remaining` figure replaced, so two calls' answers compare. */
function withoutFigures(text: string): string {
  return text.replace(/(\\?"(?:used|remaining)\\?":)\d+/g, (_, name: string) => `${name}0`);
}

describe('tools/call without a session', () => {
  let server: Server;
  let key: string;
  const post = async (body: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, authorization: `Bearer ${key}`, ...headers },
      body: JSON.stringify(body),
    });
    return {
      status: res.status,
      type: res.headers.get('content-type'),
      session: res.headers.get('mcp-session-id'),
      text: await res.text(),
    };
  };
  const call = (name: string, args: unknown, meta?: Record<string, unknown>) => ({
    jsonrpc: '2.0',
    id: 'c-1',
    method: 'tools/call',
    params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) },
  });

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    key = (await server.issue('pro')).key;
  });
  afterAll(async () => {
    await server?.close();
  });

  const TOOLS: [string, Record<string, unknown>][] = [
    ['get_trade_call', ARGS],
    ['get_market_regime', { coin: 'ETH', timeframe: '4h' }],
    ['get_risk_forecast', { coin: 'SOL', timeframe: '1h' }],
  ];

  it('one-shot (2025): the same bytes as the SDK transport, no session header', async () => {
    for (const [name, args] of TOOLS) {
      const fast = await post(call(name, args));
      // progressToken: a shape only the SDK transport takes; it sends no progress for these tools.
      const sdk = await post(call(name, args, { progressToken: 'p' }));
      expect(fast.status).toBe(200);
      expect(fast.session).toBeNull();
      expect(fast.type).toBe(sdk.type);
      expect(JSON.parse(fast.text).result.structuredContent._service.quota.used).toBeGreaterThan(0);
      expect(withoutFigures(fast.text)).toBe(withoutFigures(sdk.text));
    }
  });

  it('2026-07-28: the same bytes as the 2.x SDK handler', async () => {
    for (const [name, args] of TOOLS) {
      const headers = { ...MODERN, 'mcp-name': name };
      const fast = await post(call(name, args, envelope({})), headers);
      // Declared capabilities are checked by the SDK alone: this one goes through it.
      const sdk = await post(call(name, args, envelope({ experimental: {} })), headers);
      expect(fast.status).toBe(200);
      expect(fast.session).toBeNull();
      expect(fast.type).toBe(sdk.type);
      expect(withoutFigures(fast.text)).toBe(withoutFigures(sdk.text));
    }
  });

  it('2026-07-28: an unknown key is the same JSON-RPC error either way; bad arguments the same tool error', async () => {
    const unknown = `sk_live_${'z'.repeat(43)}`;
    const headers = { ...MODERN, 'mcp-name': 'get_market_regime', authorization: `Bearer ${unknown}` };
    const fast = await post(call('get_market_regime', { coin: 'BTC' }, envelope({})), headers);
    const sdk = await post(
      call('get_market_regime', { coin: 'BTC' }, envelope({ experimental: {} })),
      headers,
    );
    expect(JSON.parse(fast.text).error.code).toBe(-32003);
    expect(fast.text).toBe(sdk.text);
    const bad = { ...MODERN, 'mcp-name': 'get_market_regime' };
    const fastBad = await post(call('get_market_regime', { coin: 5 }, envelope({})), bad);
    const sdkBad = await post(call('get_market_regime', { coin: 5 }, envelope({ experimental: {} })), bad);
    expect(JSON.parse(fastBad.text).result.isError).toBe(true);
    expect(JSON.parse(withoutFigures(fastBad.text))).toEqual(JSON.parse(withoutFigures(sdkBad.text)));
  });

  it('2026-07-28 refusals stay the SDK’s: a name header that disagrees, a missing envelope', async () => {
    const wrongName = await post(call('get_market_regime', { coin: 'BTC' }, envelope({})), {
      ...MODERN,
      'mcp-name': 'get_trade_call',
    });
    expect(wrongName.status).toBe(400);
    const noEnvelope = await post(call('get_market_regime', { coin: 'BTC' }), {
      ...MODERN,
      'mcp-name': 'get_market_regime',
    });
    expect(noEnvelope.status).toBe(400);
    expect(JSON.parse(noEnvelope.text).error.code).toBe(-32602);
  });
});
