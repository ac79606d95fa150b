import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_MAX_BATCH } from './plugin.ts';

/**
 * The JSON-RPC envelope and batches on /mcp, over real HTTP: a batch takes one request per message
 * from the rate limit (and each tools/call from its tool's share), refused whole when it does not
 * fit; a batch on revision 2025-06-18 or later, an empty one, or a message that is not JSON-RPC
 * (no jsonrpc, an id that is null, true, an object or 1.5) is -32600 Invalid Request alike with
 * and without a session; a body that is not JSON's media type is 415 with -32600 as documented;
 * a listed browser origin can read Retry-After and RateLimit-* (a 429 included).
 */
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

const init = (version: string) => ({
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'batch-test', version: '0' } },
});
const regime = (id: number) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
});

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

describe('MCP batches and the JSON-RPC envelope', () => {
  let server: Server;
  let key: string;

  const post = async (body: unknown, headers: Record<string, string> = {}): Promise<Answer> => {
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, authorization: `Bearer ${key}`, ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text.length > 0 ? JSON.parse(text) : undefined };
  };
  const open = async (version: string): Promise<string> => {
    const answer = await post(init(version));
    expect(answer.status).toBe(200);
    const session = answer.headers.get('mcp-session-id')!;
    await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session });
    return session;
  };
  const left = (a: Answer) => [a.headers.get('ratelimit-limit'), a.headers.get('ratelimit-remaining')];

  beforeAll(async () => {
    // A free key: 40 requests a window, 20 per tool; an hour's window (see test/rate-limit.int.test.ts).
    server = await startKeyedServer({
      cache: new MemoryCache(),
      rateLimited: true,
      env: { RATE_LIMIT_WINDOW_MS: '3600000', RATE_LIMIT_FREE: '40', RATE_LIMIT_TOOL_SHARE: '0.5' },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('a batch on a 2025-03-26 session takes one per message and each call from its tool’s share, all or none', async () => {
    key = (await server.issue('free', 'batch-rate')).key;
    const session = { 'mcp-session-id': await open('2025-03-26') };
    // initialize and notifications/initialized took 2 of 40; the tool has its 20.
    const first = await post([regime(1), regime(2), regime(3)], session);
    expect(first.status).toBe(200);
    expect((first.body as unknown[]).length).toBe(3);
    expect(left(first)).toEqual(['20', '17']);
    // 18 calls of the tool do not fit in its 17 left: refused whole, nothing taken.
    const big = Array.from({ length: 18 }, (_, i) => regime(10 + i));
    const refused = await post(big, session);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(left(refused)).toEqual(['20', '17']);
    expect(refused.body).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, data: { code: 'RATE_LIMITED' } },
    });
    // A batch of other messages takes from the key's budget only: 40 - 2 - 3 - 5 = 30 left.
    const pings = Array.from({ length: 5 }, (_, i) => ({ jsonrpc: '2.0', id: 100 + i, method: 'ping' }));
    const answered = await post(pings, session);
    expect(answered.status).toBe(200);
    expect(left(answered)).toEqual(['40', '30']);
    expect(left(await post(regime(200), session))).toEqual(['20', '16']);
    // Refused by the tool's share once the key's budget was debited (two amounts, two steps): the
    // key's 18 are given back.
    const mixed = [
      ...Array.from({ length: 17 }, (_, i) => regime(400 + i)),
      { jsonrpc: '2.0', id: 500, method: 'ping' },
    ];
    const refusedMixed = await post(mixed, session);
    expect(refusedMixed.status).toBe(429);
    expect(left(refusedMixed)).toEqual(['20', '16']);
    // The key's budget refuses a batch larger than what it has left (29, the mixed batch's given back).
    const many = Array.from({ length: 30 }, (_, i) => ({ jsonrpc: '2.0', id: 300 + i, method: 'ping' }));
    const over = await post(many, session);
    expect(over.status).toBe(429);
    expect(left(over)).toEqual(['40', '29']);
  });

  it('a one-shot batch without a session is counted per message too', async () => {
    key = (await server.issue('free', 'batch-one-shot')).key;
    const answer = await post([regime(1), regime(2), regime(3), regime(4)]);
    expect(answer.status).toBe(200);
    expect((answer.body as unknown[]).length).toBe(4);
    expect(left(answer)).toEqual(['20', '16']);
  });

  it('a batch no window could take is 400 BATCH_TOO_LARGE, not retryable, and counts as one request', async () => {
    key = (await server.issue('free', 'batch-too-large')).key;
    // The caller is known: its figures ride in the error, as on the route's own 400s.
    const service = { auth: { outcome: 'OK', tier: 'free' }, quota: { remaining: expect.any(Number) } };
    const invalid = (what: RegExp) => ({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message: expect.stringMatching(what),
        data: { code: 'BATCH_TOO_LARGE', _service: service },
      },
    });
    // 41 messages against a limit of 40: never, whatever the window has left.
    const pings = Array.from({ length: 41 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' }));
    const tooMany = await post(pings);
    expect([tooMany.status, tooMany.body]).toMatchObject([
      400,
      invalid(/batch of 41 messages .* 40 per window/),
    ]);
    expect(tooMany.headers.get('retry-after')).toBeNull();
    expect(left(tooMany)).toEqual(['40', '39']);
    // 21 calls of one tool against its share of 20.
    const calls = Array.from({ length: 21 }, (_, i) => regime(i));
    const tooManyCalls = await post(calls);
    expect([tooManyCalls.status, tooManyCalls.body]).toMatchObject([
      400,
      invalid(/batch of 21 calls of get_market_regime .* 20 per window/),
    ]);
    expect(left(tooManyCalls)).toEqual(['40', '38']);
    // A batch its envelope refuses (2025-06-18 has none) is one request too, not one per message.
    const refused = await post(pings.slice(0, 30), { 'mcp-protocol-version': '2025-06-18' });
    expect([refused.status, refused.body]).toMatchObject([400, { error: { code: -32600 } }]);
    expect(left(refused)).toEqual(['40', '37']);
    // What fits is still served.
    const fits = await post(calls.slice(0, 3));
    expect(fits.status).toBe(200);
    expect(left(fits)).toEqual(['20', '17']);
  });

  it('a batch of more messages than a batch may hold (100) is 400 BATCH_TOO_LARGE, counted as one request', async () => {
    // A pro key: its limit is far above the batch, so only the batch cap refuses it.
    key = (await server.issue('pro', 'batch-cap')).key;
    const pings = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' }));
    const first = await post(pings(1));
    const [limit, before] = left(first).map(Number) as [number, number];
    expect(limit).toBeGreaterThan(MCP_MAX_BATCH + 1);
    const over = await post(pings(MCP_MAX_BATCH + 1));
    expect([over.status, over.body]).toMatchObject([
      400,
      {
        jsonrpc: '2.0',
        id: null,
        error: {
          code: -32600,
          message: expect.stringMatching(
            new RegExp(`batch of ${MCP_MAX_BATCH + 1} messages .*${MCP_MAX_BATCH}`),
          ),
          data: { code: 'BATCH_TOO_LARGE' },
        },
      },
    ]);
    expect(over.headers.get('retry-after')).toBeNull();
    expect(Number(over.headers.get('ratelimit-remaining'))).toBe(before - 1);
    // The most a batch may hold is served, one request per message.
    const most = await post(pings(MCP_MAX_BATCH));
    expect(most.status).toBe(200);
    expect(most.body).toHaveLength(MCP_MAX_BATCH);
    expect(Number(most.headers.get('ratelimit-remaining'))).toBe(before - 1 - MCP_MAX_BATCH);
  });

  it('a batch is Invalid Request on 2025-06-18 and later, and when empty', async () => {
    key = (await server.issue('pro', 'batch-version')).key;
    const pings = [
      { jsonrpc: '2.0', id: 1, method: 'ping' },
      { jsonrpc: '2.0', id: 2, method: 'ping' },
    ];
    const invalid = { jsonrpc: '2.0', id: null, error: { code: -32600 } };
    for (const version of ['2025-06-18', '2025-11-25']) {
      const session = await open(version);
      // Known from the header, or else from the session's initialize.
      const withHeader = await post(pings, { 'mcp-session-id': session, 'mcp-protocol-version': version });
      expect([withHeader.status, withHeader.body]).toMatchObject([400, invalid]);
      expect((withHeader.body as { error: { message: string } }).error.message).toContain(version);
      const fromSession = await post(pings, { 'mcp-session-id': session });
      expect([fromSession.status, fromSession.body]).toMatchObject([400, invalid]);
      const oneShot = await post(pings, { 'mcp-protocol-version': version });
      expect([oneShot.status, oneShot.body]).toMatchObject([400, invalid]);
    }
    const old = await open('2025-03-26');
    const answered = await post(pings, { 'mcp-session-id': old });
    expect(answered.status).toBe(200);
    expect(answered.body).toHaveLength(2);
    for (const headers of [{ 'mcp-session-id': old }, {}] as Record<string, string>[]) {
      const empty = await post([], headers);
      expect([empty.status, empty.body]).toMatchObject([
        400,
        { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request: an empty batch' } },
      ]);
    }
  });

  it('a message that is not JSON-RPC is -32600 Invalid Request on a session and one-shot alike', async () => {
    key = (await server.issue('pro', 'envelope')).key;
    const session = { 'mcp-session-id': await open('2025-06-18'), 'mcp-protocol-version': '2025-06-18' };
    const cases: [string, Record<string, unknown>, unknown][] = [
      ['no jsonrpc', { id: 7, method: 'ping' }, 7],
      ['id null', { jsonrpc: '2.0', id: null, method: 'ping' }, null],
      ['id true', { jsonrpc: '2.0', id: true, method: 'ping' }, null],
      ['id an object', { jsonrpc: '2.0', id: { a: 1 }, method: 'ping' }, null],
      // MCP: a string or integer id, on every method alike.
      ['id 1.5 on ping', { jsonrpc: '2.0', id: 1.5, method: 'ping' }, 1.5],
      ['id 1.5 on tools/call', { ...regime(0), id: 1.5 }, 1.5],
    ];
    for (const headers of [session, {}]) {
      for (const [label, body, id] of cases) {
        const answer = await post(body, headers);
        expect([label, answer.status, answer.body], label).toMatchObject([
          label,
          400,
          { jsonrpc: '2.0', id, error: { code: -32600 } },
        ]);
        expect((answer.body as { error: { message: string } }).error.message).toMatch(/^Invalid Request: /);
      }
    }
    // An integer id is served, as before.
    expect((await post({ jsonrpc: '2.0', id: 3, method: 'ping' }, session)).status).toBe(200);
  });

  it('a body that is not application/json is 415 with -32600, as documented', async () => {
    key = (await server.issue('pro', 'media')).key;
    for (const type of ['text/plain', 'application/xml']) {
      const answer = await post('{"jsonrpc":"2.0","id":1,"method":"ping"}', { 'content-type': type });
      expect([answer.status, answer.body]).toMatchObject([
        415,
        { jsonrpc: '2.0', id: null, error: { code: -32600, data: { code: 'UNSUPPORTED_MEDIA_TYPE' } } },
      ]);
    }
  });
});

describe('MCP CORS exposes the rate limit to a listed browser origin', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({
      cache: new MemoryCache(),
      rateLimited: true,
      env: {
        RATE_LIMIT_WINDOW_MS: '3600000',
        RATE_LIMIT_ANONYMOUS: '2',
        ALLOWED_ORIGINS: 'https://host.example',
      },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('Retry-After and RateLimit-* are exposed, on the 429 too', async () => {
    const ping = () =>
      fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { ...HEADERS, origin: 'https://host.example' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
    const statuses: number[] = [];
    let last: Response | undefined;
    for (let i = 0; i < 3; i++) {
      last = await ping();
      statuses.push(last.status);
      const exposed = (last.headers.get('access-control-expose-headers') ?? '').split(/,\s*/);
      expect(exposed).toEqual(
        expect.arrayContaining(['Retry-After', 'RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']),
      );
      expect(last.headers.get('access-control-allow-origin')).toBe('https://host.example');
    }
    expect(statuses).toEqual([200, 200, 429]);
    expect(last!.headers.get('retry-after')).not.toBeNull();
    // Another origin is still refused by the guard, and given no CORS headers.
    const other = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, origin: 'https://evil.example' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
    });
    expect(other.headers.get('access-control-allow-origin')).toBeNull();
  });
});
