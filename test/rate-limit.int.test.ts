import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { Client } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../adapters/cache/redis.ts';
import { RateLimiter } from '../services/metering/rate-limit.ts';
import { startKeyedServer } from './keyed-harness.ts';
import { MCP_ACCEPT, mcpInitialize, mcpSessionHeaders } from './mcp-wire.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from './redis-probe.ts';

const run = await shouldRunRedisSuite('rate-limit suite');
const INIT = mcpInitialize();
const BOTH = MCP_ACCEPT;

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe.runIf(run)('request-rate limits on real Redis (HTTP and MCP, shared by replicas)', () => {
  const prefixes: string[] = [];
  const caches: RedisCache[] = [];
  const servers: Server[] = [];
  let prefix: string;

  async function server(env: Record<string, string>): Promise<Server> {
    const cache = await connectRedisCache({ url: REDIS_URL, prefix });
    caches.push(cache);
    const started = await startKeyedServer({
      cache,
      rateLimited: true,
      // Windows end on the clock: an hour's, so one gives the budget back mid-test only in a run that
      // straddles the full hour (about 1 in 1,000 for a few seconds' test).
      env: { RATE_LIMIT_WINDOW_MS: '3600000', RATE_LIMIT_TOOL_SHARE: '1', ...env },
    });
    servers.push(started);
    return started;
  }

  // Any product route is limited; the sign-in nonce is the plainest one on the keyed channel.
  const quote = (s: Server, headers: Record<string, string> = {}) =>
    fetch(`${s.url}/api/keys/nonce`, { headers });

  const mcpSession = async (s: Server, path = '/mcp') => {
    const init = await fetch(`${s.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: BOTH },
      body: JSON.stringify(INIT),
    });
    expect(init.status).toBe(200);
    const session = init.headers.get('mcp-session-id')!;
    return (id: number, name = 'get_market_regime') =>
      fetch(`${s.url}${path}`, {
        method: 'POST',
        headers: mcpSessionHeaders(session),
        body: JSON.stringify({
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: { name, arguments: name === 'get_market_regime' ? { coin: 'BTC' } : {} },
        }),
      });
  };

  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    for (const c of caches.splice(0)) await c.close();
  });
  afterAll(async () => {
    for (const p of prefixes) await wipePrefix(p);
  });
  // A fresh Redis namespace per test: budgets never leak between tests.
  const fresh = () => {
    prefix = `test:rl:${randomUUID()}:`;
    prefixes.push(prefix);
  };

  it('refuses an anonymous caller past its budget with 429, Retry-After and RateLimit-* headers', async () => {
    fresh();
    const s = await server({ RATE_LIMIT_ANONYMOUS: '3' });
    const statuses: number[] = [];
    let last!: Response;
    for (let i = 0; i < 4; i++) {
      last = await quote(s);
      statuses.push(last.status);
    }
    expect(statuses).toEqual([200, 200, 200, 429]);
    expect(Number(last.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(Number(last.headers.get('retry-after'))).toBeLessThanOrEqual(3_600);
    expect(last.headers.get('ratelimit-limit')).toBe('3');
    expect(last.headers.get('ratelimit-remaining')).toBe('0');
    const body = (await last.json()) as Record<string, unknown>;
    expect(body).toMatchObject({
      code: 'RATE_LIMITED',
      retryable: true,
      _service: { auth: { outcome: 'ABSENT' }, quota: { monthly: { total: 200 } } },
    });
    expect(body.message).toMatch(/rate limit of 3 requests/);
  });

  it('shares one budget across two replicas on the same Redis', async () => {
    fresh();
    const a = await server({ RATE_LIMIT_ANONYMOUS: '4' });
    const b = await server({ RATE_LIMIT_ANONYMOUS: '4' });
    const statuses = [];
    for (const s of [a, b, a, b, a, b]) statuses.push((await quote(s)).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
  });

  it('limits a key by its plan, and made-up keys as their address', async () => {
    fresh();
    const s = await server({ RATE_LIMIT_ANONYMOUS: '2', RATE_LIMIT_PRO: '6' });
    const { key } = await s.issue('pro');
    const keyed = [];
    for (let i = 0; i < 7; i++) keyed.push((await quote(s, { authorization: `Bearer ${key}` })).status);
    expect(keyed.slice(0, 6).every((st) => st === 200)).toBe(true);
    expect(keyed[6]).toBe(429);
    // Each request names a fresh made-up key: all count against the one address.
    const forged = [];
    for (let i = 0; i < 3; i++) {
      const token = `sk_live_${randomBytes(32).toString('base64url').slice(0, 43)}`;
      forged.push((await quote(s, { authorization: `Bearer ${token}` })).status);
    }
    expect(forged).toEqual([200, 200, 429]);
  });

  it('gives each tool its share of the budget', async () => {
    fresh();
    // Budget 10, a tool may take half: initialize counts 1, get_market_regime stops at 5.
    const s = await server({ RATE_LIMIT_ANONYMOUS: '10', RATE_LIMIT_TOOL_SHARE: '0.5' });
    const call = await mcpSession(s);
    const regime = [];
    for (let i = 0; i < 6; i++) regime.push((await call(10 + i)).status);
    expect(regime).toEqual([200, 200, 200, 200, 200, 429]);
    // Another tool still has its own share of what is left.
    expect((await call(20, 'scan_funding_arb')).status).toBe(200);
  });

  it('limits MCP tool calls per tool with a JSON-RPC error body and the same headers', async () => {
    fresh();
    const s = await server({ RATE_LIMIT_ANONYMOUS: '6', RATE_LIMIT_TOOL_SHARE: '0.34' });
    const call = await mcpSession(s);
    // Per tool: ceil(6 × 0.34) = 3 calls.
    const statuses = [(await call(2)).status, (await call(3)).status, (await call(4)).status];
    expect(statuses).toEqual([200, 200, 200]);
    const refused = await call(5);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(refused.headers.get('ratelimit-remaining')).toBe('0');
    expect(await refused.json()).toMatchObject({
      jsonrpc: '2.0',
      id: 5,
      error: {
        code: -32000,
        data: { code: 'RATE_LIMITED', retryable: true, _service: { quota: { monthly: { total: 200 } } } },
      },
    });
  });

  it('limits MCP tool calls by the route that answers, however its path is spelled (/m%63p is /mcp)', async () => {
    // /m%63p is /mcp: its tool calls take the tool's share, and a refusal is JSON-RPC.
    fresh();
    const mcp = await server({ RATE_LIMIT_ANONYMOUS: '6', RATE_LIMIT_TOOL_SHARE: '0.34' });
    const call = await mcpSession(mcp, '/m%63p');
    expect([(await call(2)).status, (await call(3)).status, (await call(4)).status]).toEqual([200, 200, 200]);
    const refused = await call(5);
    expect(refused.status).toBe(429);
    expect(await refused.json()).toMatchObject({ jsonrpc: '2.0', id: 5, error: { code: -32000 } });
  });

  it('limits MCP tool calls sent in absolute form (POST http://host/mcp, RFC 9112 §3.2.2) as on /mcp', async () => {
    // The router serves the absolute form as /mcp: its tool calls take the tool's share too.
    fresh();
    const mcp = await server({ RATE_LIMIT_ANONYMOUS: '6', RATE_LIMIT_TOOL_SHARE: '0.34' });
    const init = await fetch(`${mcp.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: BOTH },
      body: JSON.stringify(INIT),
    });
    expect(init.status).toBe(200);
    const headers = mcpSessionHeaders(init.headers.get('mcp-session-id')!);
    const client = new Client(mcp.url);
    try {
      const call = async (id: number) => {
        const res = await client.request({
          method: 'POST',
          path: `${mcp.url}/mcp`,
          headers,
          body: JSON.stringify({
            jsonrpc: '2.0',
            id,
            method: 'tools/call',
            params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
          }),
        });
        await res.body.dump();
        return res.statusCode;
      };
      expect([await call(2), await call(3), await call(4)]).toEqual([200, 200, 200]);
      expect(await call(5)).toBe(429);
    } finally {
      await client.close();
    }
  });
});

describe.runIf(run)(
  'MCP session caps (least recently used evicted first, anonymous and keyed pools apart)',
  () => {
    const prefix = `test:mcpcap:${randomUUID()}:`;
    let cache: RedisCache;
    let s: Server;
    beforeAll(async () => {
      cache = await connectRedisCache({ url: REDIS_URL, prefix });
      s = await startKeyedServer({
        cache,
        // 7 in all: 3 for anonymous callers together, 2 for free keys, 2 for paid ones.
        // X-Forwarded-For names the address.
        env: {
          MCP_MAX_SESSIONS_PER_CALLER: '3',
          MCP_MAX_SESSIONS: '7',
          MCP_MAX_SESSIONS_ANONYMOUS: '3',
          MCP_MAX_SESSIONS_FREE: '2',
          TRUST_PROXY: '1',
        },
      });
    });
    afterAll(async () => {
      await s?.close();
      await cache?.close();
      await wipePrefix(prefix);
    });

    const open = async (headers: Record<string, string> = {}) => {
      const res = await fetch(`${s.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: BOTH, ...headers },
        body: JSON.stringify(INIT),
      });
      expect(res.status).toBe(200);
      return res.headers.get('mcp-session-id')!;
    };
    const ping = async (session: string, headers: Record<string, string> = {}) =>
      (
        await fetch(`${s.url}/mcp`, {
          method: 'POST',
          headers: { ...mcpSessionHeaders(session), ...headers },
          body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'ping' }),
        })
      ).status;

    it('one caller opening sessions in a loop evicts its own least recently used ones', async () => {
      const sessions = [await open(), await open(), await open()];
      // The first becomes the most recently used: the second is now the oldest.
      expect(await ping(sessions[0]!)).toBe(200);
      sessions.push(await open(), await open());
      expect(await ping(sessions[1]!)).toBe(404);
      expect(await ping(sessions[2]!)).toBe(404);
      for (const id of [sessions[0]!, sessions[3]!, sessions[4]!]) expect(await ping(id)).toBe(200);
    });

    it('a flood of addresses, or of free keys, evicts only sessions of its own pool, never a paid one', async () => {
      const { key: a } = await s.issue('pro');
      const { key: b } = await s.issue('pro');
      const withA = { authorization: `Bearer ${a}` };
      const withB = { authorization: `Bearer ${b}` };
      const a1 = await open(withA);
      const b1 = await open(withB);
      // 3 anonymous sessions are open from the test above (the anonymous pool is full): 12 more, each
      // from its own /64, push out anonymous sessions only.
      const from = (i: number) => ({ 'x-forwarded-for': `2001:db8:${i.toString(16)}::1` });
      const flood: string[] = [];
      for (let i = 1; i <= 12; i++) flood.push(await open(from(i)));
      expect(await ping(a1, withA)).toBe(200);
      expect(await ping(b1, withB)).toBe(200);
      expect(await ping(flood[8]!, from(9))).toBe(404);
      for (const i of [10, 11, 12]) expect(await ping(flood[i - 1]!, from(i))).toBe(200);
      // Addresses of one /64 are one caller: its per-caller cap (3) evicts its own sessions.
      const sameNet = (n: number) => ({ 'x-forwarded-for': `2001:db8:ff::${n}` });
      const net = [
        await open(sameNet(1)),
        await open(sameNet(2)),
        await open(sameNet(3)),
        await open(sameNet(4)),
      ];
      expect(await ping(net[0]!, sameNet(5))).toBe(404);
      for (const id of net.slice(1)) expect(await ping(id, sameNet(6))).toBe(200);
      // Free keys (a wallet signs in to one): 4 of them push out free sessions only.
      const free = await Promise.all(
        [1, 2, 3, 4].map(async () => ({ authorization: `Bearer ${(await s.issue('free')).key}` })),
      );
      const freeSessions: string[] = [];
      for (const h of free) freeSessions.push(await open(h));
      expect(await ping(freeSessions[1]!, free[1]!)).toBe(404);
      for (const i of [2, 3]) expect(await ping(freeSessions[i]!, free[i]!)).toBe(200);
      expect(await ping(a1, withA)).toBe(200);
      expect(await ping(b1, withB)).toBe(200);
      // The paid pool (2) is full: a third paid session evicts the least recently used paid one (b1).
      expect(await ping(a1, withA)).toBe(200);
      const b2 = await open(withB);
      expect(await ping(b1, withB)).toBe(404);
      for (const [id, h] of [
        [a1, withA],
        [b2, withB],
      ] as const)
        expect(await ping(id, h)).toBe(200);
      for (const id of net.slice(1)) expect(await ping(id, sameNet(7))).toBe(200);
      for (const i of [2, 3]) expect(await ping(freeSessions[i]!, free[i]!)).toBe(200);
    });
  },
);

describe.runIf(run)('the limiter itself on Redis: both budgets in one step', () => {
  const settings = {
    RATE_LIMIT_ENABLED: true,
    RATE_LIMIT_WINDOW_MS: 3_600_000,
    RATE_LIMIT_ANONYMOUS: 4,
    RATE_LIMIT_FREE: 4,
    RATE_LIMIT_STARTER: 4,
    RATE_LIMIT_PRO: 4,
    RATE_LIMIT_TOOL_SHARE: 0.5,
    RATE_LIMIT_SIGNIN: 4,
  };
  const prefix = `test:rl:${randomUUID()}:`;
  afterAll(async () => {
    await wipePrefix(prefix);
  });

  it('a refusal by the credential budget takes nothing from the tool budget; the window ends with it', async () => {
    const cache = await connectRedisCache({ url: REDIS_URL, prefix });
    try {
      const limiter = new RateLimiter(settings, cache);
      expect(await limiter.decide('free', 'c1', 'a')).toMatchObject({
        allowed: true,
        limit: 2,
        remaining: 1,
      });
      expect(await limiter.decide('free', 'c1', 'a')).toMatchObject({ allowed: true, remaining: 0 });
      expect(await limiter.decide('free', 'c1', 'a')).toMatchObject({ allowed: false, limit: 2 });
      expect(await limiter.decide('free', 'c1', null)).toMatchObject({
        allowed: true,
        limit: 4,
        remaining: 1,
      });
      expect(await limiter.decide('free', 'c1', null)).toMatchObject({
        allowed: true,
        limit: 4,
        remaining: 0,
      });
      expect(await limiter.decide('free', 'c1', 'b')).toMatchObject({ allowed: false, limit: 4 });
      // Another replica's limiter on the same Redis shares the budgets.
      const other = new RateLimiter(settings, cache);
      const fresh = await other.decide('free', 'c2', 'b');
      expect(fresh).toMatchObject({ allowed: true, remaining: 1 });
      expect(fresh.resetMs).toBeGreaterThan(0);
      expect(fresh.resetMs).toBeLessThanOrEqual(3_600_000);
      const raw = new Redis(REDIS_URL);
      try {
        // Tool a's third take, refused by it, took nothing; the take refused by the credential's
        // budget took nothing from tool b's.
        // (The tier appears twice in a key, as every replica has counted since the limit was shared.)
        expect(await raw.get(`${prefix}rl:free:all:free:c1`)).toBe('4');
        expect(await raw.get(`${prefix}rl:free:tool:free:c1:a`)).toBe('2');
        expect(await raw.get(`${prefix}rl:free:tool:free:c1:b`)).toBeNull();
      } finally {
        raw.disconnect();
      }
    } finally {
      await cache.close();
    }
  });

  it('with Redis out of reach, each process limits on its own instead of failing or letting all through', async () => {
    const cache = await connectRedisCache({ url: 'redis://127.0.0.1:1', prefix, connectTimeoutMs: 200 });
    try {
      const limiter = new RateLimiter(settings, cache);
      const decisions = [];
      for (let i = 0; i < 6; i++) decisions.push(await limiter.decide('anonymous', 'c', null));
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);
    } finally {
      await cache.close();
    }
  });
});
