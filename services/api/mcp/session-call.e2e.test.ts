import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';
import { revokeKey } from '../../keys/key-commands.ts';

/**
 * A session's plain tools/call is answered by session-call.ts; anything else by the SDK
 * transport. Whichever path answers, the bytes a client sees must follow the same rules: the
 * same JSON-RPC shape, the session header, text content equal to structuredContent, errors as
 * JSON-RPC error objects, and the transport's refusals for bad headers.
 */
const ARGS = { coin: 'BTC', timeframe: '1h', exchange: 'BINANCE' };
const HEADERS = MCP_HEADERS;

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

/** Opens an MCP session with the key (initialize); its id. */
async function openSession(url: string, key: string): Promise<string> {
  const init = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...HEADERS, authorization: `Bearer ${key}` },
    body: JSON.stringify(mcpInitialize('t', 0)),
  });
  await init.text();
  return init.headers.get('mcp-session-id')!;
}

describe('tools/call on an MCP session', () => {
  let server: Server;
  let key: string;
  let keyId: string;
  let session: string;
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, authorization: `Bearer ${key}`, 'mcp-session-id': session, ...headers },
      body: JSON.stringify(body),
    });
  const call = (id: number | string, params: Record<string, unknown> = {}) => ({
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'get_trade_call', arguments: ARGS, ...params },
  });

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    const issued = await server.issue('pro');
    key = issued.key;
    keyId = issued.keyId;
    session = await openSession(server.url, key);
  });
  afterAll(async () => {
    await server?.close();
  });

  it('answers with the JSON-RPC result, the session header, and text equal to structuredContent', async () => {
    const res = await post(call('a-1'));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('mcp-session-id')).toBe(session);
    const body = (await res.json()) as {
      jsonrpc: string;
      id: string;
      result: { content: { type: string; text: string }[]; structuredContent: Record<string, unknown> };
    };
    expect(body.jsonrpc).toBe('2.0');
    expect(body.id).toBe('a-1');
    expect(body.result.content).toHaveLength(1);
    expect(JSON.parse(body.result.content[0]!.text)).toEqual(body.result.structuredContent);
    expect(body.result.structuredContent).toMatchObject({
      coin: 'BTC',
      _service: { auth: { outcome: 'OK', tier: 'pro' }, quota: { used: 1 } },
    });
  });

  it('answers the same shape for a call the SDK transport handles (a progress token)', async () => {
    const fast = (await (await post(call(2))).json()) as { result: Record<string, unknown> };
    const viaSdk = (await (await post(call(3, { _meta: { progressToken: 'p' } }))).json()) as {
      id: number;
      result: { structuredContent: { _service: { quota: { used: number } } } };
    };
    expect(viaSdk.id).toBe(3);
    expect(Object.keys(viaSdk.result).sort()).toEqual(Object.keys(fast.result).sort());
    expect(viaSdk.result.structuredContent._service.quota.used).toBe(3);
  });

  it('keeps invalid arguments a tool result with isError, and the transport refusals', async () => {
    const bad = (await (await post(call(4, { arguments: { coin: 'BTC', timeframe: '7h' } }))).json()) as {
      result: { isError: boolean; structuredContent: { code: string; _service: unknown } };
    };
    expect(bad.result.isError).toBe(true);
    expect(bad.result.structuredContent.code).toBe('invalid_arguments');
    expect(bad.result.structuredContent._service).toBeTruthy();

    const notAcceptable = await post(call(5), { accept: 'application/json' });
    expect(notAcceptable.status).toBe(406);
    const badVersion = await post(call(6), { 'mcp-protocol-version': '1999-01-01' });
    expect(badVersion.status).toBe(400);
    expect(((await badVersion.json()) as { error: { code: number } }).error.code).toBe(-32000);
  });

  it('gives concurrent callers of the same verdict their own ids and figures, byte for byte', async () => {
    const other = await server.issue('pro');
    const otherSession = await openSession(server.url, other.key);
    const postAs = (who: 'first' | 'other', id: number | string) =>
      fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: {
          ...HEADERS,
          authorization: `Bearer ${who === 'first' ? key : other.key}`,
          'mcp-session-id': who === 'first' ? session : otherSession,
        },
        body: JSON.stringify(call(id)),
      }).then((res) => res.text());
    const ids: ['first' | 'other', number | string][] = [
      ['first', 'x-1'],
      ['other', 'x-1'],
      ['first', 11],
      ['other', 12],
      ['other', '12'],
    ];
    const texts = await Promise.all(ids.map(([who, id]) => postAs(who, id)));
    const bodies = texts.map(
      (t) =>
        JSON.parse(t) as {
          id: number | string;
          result: {
            content: { text: string }[];
            structuredContent: { verdictId: string; _service: { quota: { used: number } } };
          };
        },
    );
    expect(bodies.map((b) => b.id)).toEqual(ids.map(([, id]) => id));
    for (const [i, text] of texts.entries()) {
      const { result, id } = bodies[i]!;
      // The bytes a serialiser would give: nothing spliced in differs from the object it says.
      expect(text).toBe(JSON.stringify({ result, jsonrpc: '2.0', id }));
      expect(result.content[0]!.text).toBe(JSON.stringify(result.structuredContent));
    }
    const used = (who: 'first' | 'other') =>
      bodies
        .filter((_, i) => ids[i]![0] === who)
        .map((b) => b.result.structuredContent._service.quota.used)
        .sort((a, b) => a - b);
    // The other key's calls are its first three; the first key's follow its earlier ones.
    expect(used('other')).toEqual([1, 2, 3]);
    const mine = used('first');
    expect(mine[1]! - mine[0]!).toBe(1);
    expect(new Set(bodies.map((b) => b.result.structuredContent.verdictId)).size).toBe(1);
  });

  it('turns a key revoked after the session opened into JSON-RPC error -32003 with _service', async () => {
    const position = await revokeKey(server.store, `apikey-${keyId}`, keyId, 'leaked');
    await server.channel.registry.waitFor(position);
    const res = await post(call(7));
    expect(res.status).toBe(200);
    const body = (await res.json()) as {
      id: number;
      error: { code: number; message: string; data: { retryable: boolean; _service: unknown } };
    };
    expect(body.id).toBe(7);
    expect(body.error.code).toBe(-32003);
    expect(body.error.data.retryable).toBe(false);
    expect(body.error.data._service).toMatchObject({ auth: { outcome: 'UNKNOWN' } });
  });
});

describe('tools/call on an MCP session behind the rate limit', () => {
  let server: Server;
  afterAll(async () => {
    await server?.close();
  });

  it('serves the caller the limit identified, and still refuses a key revoked since', async () => {
    server = await startKeyedServer({ cache: new MemoryCache(), rateLimited: true });
    const issued = await server.issue('pro');
    const auth = { ...HEADERS, authorization: `Bearer ${issued.key}` };
    const session = await openSession(server.url, issued.key);
    const post = (id: number) =>
      fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { ...auth, 'mcp-session-id': session },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: { name: 'get_trade_call', arguments: ARGS },
        }),
      });
    const served = await post(1);
    expect(served.headers.get('ratelimit-limit')).not.toBeNull();
    expect(await served.json()).toMatchObject({
      id: 1,
      result: {
        structuredContent: { _service: { auth: { outcome: 'OK', tier: 'pro' }, quota: { used: 1 } } },
      },
    });
    const position = await revokeKey(server.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
    await server.channel.registry.waitFor(position);
    const refused = (await (await post(2)).json()) as { id: number; error: { code: number } };
    expect(refused).toMatchObject({ id: 2, error: { code: -32003 } });
  });
});
