import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { connectRedisCache, type RedisCache } from '../adapters/cache/redis.ts';
import { revokeKey } from '../services/keys/key-commands.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import { PAYMENT_REQUIRED, startKeyedServer } from './keyed-harness.ts';
import { MCP_ACCEPT, mcpInitialize } from './mcp-wire.ts';
import { freePort } from './ports.ts';
import { rawRequest } from './raw-http.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from './redis-probe.ts';

const run = await shouldRunRedisSuite('MCP suite');
const PREFIX = `test:mcp:${randomUUID()}:`;
const INIT = mcpInitialize();
const BOTH = MCP_ACCEPT;

type Server = Awaited<ReturnType<typeof startKeyedServer>>;

async function connect(url: string, headers: Record<string, string> = {}): Promise<Client> {
  const client = new Client({ name: 'test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers } }),
  );
  return client;
}

function service(result: unknown) {
  return ServiceMeta.parse(
    (result as { structuredContent?: { _service?: unknown } }).structuredContent?._service,
  );
}

type RpcBody = { error: { code: number; message: string }; result: { serverInfo: { name: string } } };
async function json(res: Response): Promise<RpcBody> {
  return (await res.json()) as RpcBody;
}

async function rpcError(promise: Promise<unknown>): Promise<McpError> {
  const error = await promise.then(
    () => null,
    (err: unknown) => err,
  );
  expect(error).toBeInstanceOf(McpError);
  return error as McpError;
}

describe.runIf(run)(
  'MCP server over Streamable HTTP (SDK client, real port, real engine, real Redis)',
  () => {
    let cache: RedisCache;
    let server: Server;
    const clients: Client[] = [];
    const open = async (headers: Record<string, string> = {}) => {
      const client = await connect(server.url, headers);
      clients.push(client);
      return client;
    };

    beforeAll(async () => {
      cache = await connectRedisCache({ url: REDIS_URL, prefix: PREFIX });
      server = await startKeyedServer({ cache, env: { PLAN_STARTER_MONTHLY_CALLS: '3' } });
    });
    afterAll(async () => {
      for (const client of clients) await client.close().catch(() => undefined);
      await server?.close();
      await cache?.close();
      await wipePrefix(PREFIX);
    });

    it('handshakes and lists the sold tools with their input schemas', async () => {
      const client = await open();
      expect(client.getServerVersion()?.name).toBe('signal-service');
      const { tools } = await client.listTools();
      expect(tools.map((t) => t.name).sort()).toEqual([
        'get_market_regime',
        'get_risk_forecast',
        'get_track_record',
        'get_trade_call',
        'scan_funding_arb',
        'scan_trade_calls',
      ]);
      const trade = tools.find((t) => t.name === 'get_trade_call')!;
      expect(trade.inputSchema).toMatchObject({
        type: 'object',
        required: ['coin'],
        additionalProperties: false,
      });
      expect(Object.keys(trade.inputSchema.properties ?? {})).toEqual([
        'coin',
        'timeframe',
        'exchange',
        'includeReasoning',
        'riskBudgetUsd',
      ]);
    });

    it('serves every tool to a keyed caller, with the live quota falling in _service', async () => {
      const { key } = await server.issue('pro');
      const client = await open({ Authorization: `Bearer ${key}` });
      const calls: [string, Record<string, unknown>][] = [
        ['get_trade_call', { coin: 'BTC', timeframe: '1h' }],
        ['get_market_regime', { coin: 'ETH', timeframe: '4h' }],
        ['get_risk_forecast', { coin: 'ETH', timeframe: '15m' }],
        ['scan_trade_calls', { timeframe: '1h', topN: 3, includeHolds: true }],
        ['scan_funding_arb', { minSpreadBps: 0, limit: 3 }],
        ['get_track_record', { window: '7d' }],
      ];
      const used: number[] = [];
      for (const [name, args] of calls) {
        const result = await client.callTool({ name, arguments: args });
        expect(result.isError, `${name}: ${JSON.stringify(result.content)}`).toBeFalsy();
        const meta = service(result);
        expect(meta.auth).toEqual({ outcome: 'OK', presented: true, tier: 'pro' });
        expect(meta.quota).toMatchObject({ total: 100_000 });
        expect(meta.quota!.daily).toBeUndefined();
        used.push(meta.quota!.used);
        // The text content carries the same object for clients that ignore structuredContent.
        const [content] = result.content as { type: string; text: string }[];
        expect(JSON.parse(content!.text)).toEqual(result.structuredContent);
      }
      expect(used).toEqual([1, 2, 3, 4, 5, 6]);
      const trade = (
        await client.callTool({ name: 'get_trade_call', arguments: { coin: 'BTC', timeframe: '1h' } })
      ).structuredContent as Record<string, unknown>;
      // No exchange named: the replay's default venue, the spot book (it serves every timeframe).
      expect(trade).toMatchObject({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE_SPOT', feed: 'replay' });
      expect(['BUY', 'SELL', 'HOLD']).toContain(trade.call);
      // A newcomer's first scan, on the replay defaults, lists the markets (HOLDs included), each
      // with its lean, expected move and regime.
      const scan = (await client.callTool({ name: 'scan_trade_calls', arguments: {} })).structuredContent as {
        scanned: number;
        calls: {
          call: string;
          regime: string;
          expectedMovePct: number | null;
          lean: Record<string, unknown> | null;
        }[];
      };
      expect(scan.scanned).toBeGreaterThan(0);
      expect(scan.calls.length).toBe(Math.min(scan.scanned, 10));
      let leans = 0;
      for (const row of scan.calls) {
        expect(row.regime).toBeTruthy();
        expect(row.expectedMovePct).toBeGreaterThan(0);
        expect(row).toHaveProperty('lean');
        if (row.lean === null) continue;
        leans++;
        // The lean's net figures to 0.01 bps, not the calibration table's float tails.
        for (const key of ['expected_net_bps', 'expected_net_bps_low', 'expected_net_bps_high']) {
          const x = row.lean[key];
          if (x !== null) expect(String(x), key).toMatch(/^-?\d+(\.\d{1,2})?$/);
        }
      }
      expect(leans).toBeGreaterThan(0);
    });

    it('serves an anonymous caller on the free limits, naming why no key applied', async () => {
      const cases: [Record<string, string>, string, boolean][] = [
        [{}, 'ABSENT', false],
        [{ 'X-API-Key': `sk_live_${'a'.repeat(43)}` }, 'ABSENT', true],
        [{ Authorization: `sk_live_${'a'.repeat(43)}` }, 'MALFORMED', true],
      ];
      for (const [headers, outcome, presented] of cases) {
        const client = await open(headers);
        const result = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } });
        expect(result.isError).toBeFalsy();
        const meta = service(result);
        expect(meta.auth).toMatchObject({ outcome, presented, tier: 'free' });
        expect(meta.quota).toMatchObject({ monthly: { total: 200 }, daily: { total: 100 } });
      }
      // All three came from 127.0.0.1: one anonymous subject, metered together.
      const client = await open();
      const result = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } });
      expect(service(result).quota).toMatchObject({ used: 4, daily: { used: 4, remaining: 96 } });
    });

    it('an unknown well-formed key and a revoked key are JSON-RPC errors -32003, not results', async () => {
      // Refused at connect (initialize), with the error a call gets: the host learns it before any call.
      const error = await rpcError(open({ Authorization: `Bearer sk_live_${'Z'.repeat(43)}` }));
      expect(error.code).toBe(-32003);
      expect(error.data).toMatchObject({
        retryable: false,
        // The live count of what the request counts as without the key: its address's free quota.
        _service: {
          auth: { outcome: 'UNKNOWN', tier: 'free' },
          quota: { total: 100, monthly: { total: 200 }, daily: { total: 100 } },
        },
      });

      const issued = await server.issue('pro');
      const client = await open({ Authorization: `Bearer ${issued.key}` });
      expect(
        (await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } })).isError,
      ).toBeFalsy();
      const position = await revokeKey(server.store, `apikey-${issued.keyId}`, issued.keyId, 'leaked');
      await server.channel.registry.waitFor(position);
      const revoked = await rpcError(
        client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } }),
      );
      expect(revoked.code).toBe(-32003);
      expect(revoked.message).toContain('revoked');
    });

    it('invalid arguments are a result with isError and -32602 in the text, carrying _service', async () => {
      const { key } = await server.issue('pro');
      const client = await open({ Authorization: `Bearer ${key}` });
      for (const args of [{}, { coin: 'BTC', timeframe: '7m' }, { coin: 'BTC', extra: 1 }]) {
        const result = await client.callTool({ name: 'get_trade_call', arguments: args });
        expect(result.isError).toBe(true);
        const [content] = result.content as { type: string; text: string }[];
        expect(content!.text).toContain('-32602');
        // Nothing was served, so nothing was counted.
        expect(service(result)).toMatchObject({ auth: { outcome: 'OK' }, quota: { used: 0 } });
      }
      const unknownTool = await client.callTool({ name: 'no_such_tool', arguments: {} });
      expect(unknownTool.isError).toBe(true);
      expect((unknownTool.content as { text: string }[])[0]!.text).toContain('-32602');
    });

    it('an exhausted key gets a tool error carrying the x402 payment requirements', async () => {
      const { key } = await server.issue('starter');
      const client = await open({ Authorization: `Bearer ${key}` });
      for (let i = 0; i < 3; i++) {
        const result = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } });
        expect(service(result).quota).toMatchObject({ used: i + 1, remaining: 2 - i });
      }
      const refused = await client.callTool({ name: 'get_market_regime', arguments: { coin: 'BTC' } });
      expect(refused.isError).toBe(true);
      expect(refused.structuredContent).toMatchObject({
        ...PAYMENT_REQUIRED,
        code: 'quota_exhausted',
        window: 'monthly',
        _service: { auth: { outcome: 'OK', tier: 'starter' }, quota: { used: 3, total: 3, remaining: 0 } },
      });
      expect((refused.content as { text: string }[])[0]!.text).toContain('quota_exhausted');
    });

    it('a key that cannot be verified right now (Redis down) is a JSON-RPC error -32004', async () => {
      const dead = await connectRedisCache({
        url: `redis://127.0.0.1:${await freePort()}`,
        prefix: PREFIX,
        connectTimeoutMs: 200,
      });
      const broken = await startKeyedServer({ cache: dead, engine: server.engine });
      try {
        const { key } = await broken.issue('pro');
        const keyed = await connect(broken.url, { Authorization: `Bearer ${key}` });
        const error = await rpcError(keyed.callTool({ name: 'get_trade_call', arguments: { coin: 'BTC' } }));
        expect(error.code).toBe(-32004);
        expect(error.data).toMatchObject({ retryable: true });
        await keyed.close();
      } finally {
        await broken.close();
        await dead.close();
      }
    });

    it('DELETE ends a session; an idle session is swept', async () => {
      const client = await open();
      const transport = client.transport as StreamableHTTPClientTransport;
      const sessionId = transport.sessionId!;
      expect(sessionId).toBeTruthy();
      await transport.terminateSession();
      const after = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: BOTH, 'mcp-session-id': sessionId },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/list' }),
      });
      expect(after.status).toBe(404);

      const sweeping = await startKeyedServer({
        cache,
        engine: server.engine,
        env: { MCP_SESSION_IDLE_MS: '200' },
        sweepIntervalMs: 50,
      });
      try {
        // Opened by one initialize request, not the SDK's handshake: its second request
        // (notifications/initialized) came more than the 200 ms idle time later on a loaded
        // machine, after the sweep had closed the session (404 Session not found).
        const init = await fetch(`${sweeping.url}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: BOTH },
          body: JSON.stringify(INIT),
        });
        expect(init.status).toBe(200);
        const id = init.headers.get('mcp-session-id')!;
        expect(id).toBeTruthy();
        await vi.waitFor(
          async () => {
            const res = await fetch(`${sweeping.url}/mcp`, {
              method: 'POST',
              headers: { 'content-type': 'application/json', accept: BOTH, 'mcp-session-id': id },
              body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }),
            });
            expect(res.status).toBe(404);
          },
          // Each probe is itself a request that marks the session used, so probes come slower than
          // the idle time. vi.waitFor's default of 1 s left room for two probes, fewer than a loaded
          // machine's late sweep timer needs; 60 s is a hang bound only (the sweep never coming).
          { interval: 600, timeout: 60_000 },
        );
      } finally {
        await sweeping.close();
      }
    });

    describe('raw HTTP', () => {
      const post = (body: unknown, headers: Record<string, string> = {}) =>
        fetch(`${server.url}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: BOTH, ...headers },
          body: JSON.stringify(body),
        });

      it('406 without both media types in Accept', async () => {
        const res = await post(INIT, { accept: 'application/json' });
        expect(res.status).toBe(406);
        expect((await json(res)).error.code).toBe(-32000);
      });

      it('404 for an unknown session, 400 for a GET without one, 405 for another method', async () => {
        const unknown = await post(
          { jsonrpc: '2.0', id: 2, method: 'tools/list' },
          { 'mcp-session-id': randomUUID() },
        );
        expect(unknown.status).toBe(404);
        // Anonymous: its _service says so, with the free figures (every refusal after the caller is known).
        expect((await json(unknown)).error).toEqual({
          code: -32001,
          message: 'Session not found',
          data: {
            code: 'SESSION_NOT_FOUND',
            _service: expect.objectContaining({ auth: expect.objectContaining({ tier: 'free' }) }),
          },
        });
        // A POST without a session is answered statelessly (test/mcp-generations.e2e.test.ts); a GET is not.
        const missing = await fetch(`${server.url}/mcp`, { headers: { accept: 'text/event-stream' } });
        expect(missing.status).toBe(400);
        const put = await fetch(`${server.url}/mcp`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        expect(put.status).toBe(405);
        expect(put.headers.get('allow')).toBe('GET, POST, DELETE, OPTIONS');
      });

      it("a session is its opener's: another key, an unknown key or no key gets 404 on it, its own key (revoked too) does not", async () => {
        const mine = await server.issue('pro');
        const other = await server.issue('pro');
        const as = (key: string | null): Record<string, string> =>
          key === null ? {} : { authorization: `Bearer ${key}` };
        const init = await post(INIT, as(mine.key));
        const session = { 'mcp-session-id': init.headers.get('mcp-session-id')! };
        await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { ...session, ...as(mine.key) });
        const list = { jsonrpc: '2.0', id: 7, method: 'tools/list' };
        for (const key of [other.key, `sk_live_${'Z'.repeat(43)}`, null]) {
          const res = await post(list, { ...session, ...as(key) });
          expect(res.status).toBe(404);
          // Saying why: the session was opened with another credential.
          expect((await json(res)).error).toMatchObject({
            code: -32001,
            message: expect.stringMatching(
              /^Session not found for this caller: it was opened with another credential/,
            ),
            data: { code: 'SESSION_NOT_FOUND' },
          });
          const closing = await fetch(`${server.url}/mcp`, {
            method: 'DELETE',
            headers: { ...session, ...as(key) },
          });
          expect(closing.status).toBe(404);
        }
        expect((await post(list, { ...session, ...as(mine.key) })).status).toBe(200);
        // Its own key, once revoked, is told so on it (-32003), not that the session is gone.
        const position = await revokeKey(server.store, `apikey-${mine.keyId}`, mine.keyId, 'leaked');
        await server.channel.registry.waitFor(position);
        const call = {
          jsonrpc: '2.0',
          id: 8,
          method: 'tools/call',
          params: { name: 'get_market_regime', arguments: { coin: 'BTC' } },
        };
        const refused = await post(call, { ...session, ...as(mine.key) });
        expect((await json(refused)).error?.code).toBe(-32003);
      });

      it('a second request with an id already in flight on the session is refused at once, not left hanging', async () => {
        // 2025-03-26: the last revision with JSON-RPC batches, which the end of this test sends.
        const init = await post({ ...INIT, params: { ...INIT.params, protocolVersion: '2025-03-26' } });
        const session = { 'mcp-session-id': init.headers.get('mcp-session-id')! };
        await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, session);
        const call = (id: number | string) => ({
          jsonrpc: '2.0',
          id,
          method: 'tools/call',
          params: { name: 'get_trade_call', arguments: { coin: 'BTC', timeframe: '1h' } },
        });
        const within = AbortSignal.timeout(10_000);
        // Two at once with one id: one is served, the other refused with -32600 naming the id.
        const [a, b] = await Promise.all([
          fetch(`${server.url}/mcp`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: BOTH, ...session },
            body: JSON.stringify(call(7)),
            signal: within,
          }),
          fetch(`${server.url}/mcp`, {
            method: 'POST',
            headers: { 'content-type': 'application/json', accept: BOTH, ...session },
            body: JSON.stringify(call(7)),
            signal: within,
          }),
        ]);
        const answers = [
          { status: a.status, body: (await a.json()) as { id: unknown; error?: { code: number } } },
          { status: b.status, body: (await b.json()) as { id: unknown; error?: { code: number } } },
        ].sort((x, y) => x.status - y.status);
        expect(answers.map((x) => x.status)).toEqual([200, 409]);
        expect(answers[0]!.body.error).toBeUndefined();
        expect(answers[1]!.body).toMatchObject({ id: 7, error: { code: -32600 } });
        // A batch that repeats an id is refused whole; "7" and 7 are different ids.
        const batch = await post([call(8), call(8)], session);
        expect(batch.status).toBe(409);
        expect(await json(batch)).toMatchObject({ error: { code: -32600 } });
        // Once answered, the id may be used again.
        const again = await post(call(7), session);
        expect(again.status).toBe(200);
        const other = await post(call('7'), session);
        expect(other.status).toBe(200);
      });

      it('initialize answers JSON with Mcp-Session-Id', async () => {
        const res = await post(INIT);
        expect(res.status).toBe(200);
        expect(res.headers.get('content-type')).toContain('application/json');
        expect(res.headers.get('mcp-session-id')).toMatch(/^[0-9a-f-]{36}$/);
        expect((await json(res)).result.serverInfo.name).toBe('signal-service');
      });

      it('refuses a foreign Host or Origin (DNS rebinding) with 403', async () => {
        // fetch will not send a forged Host header; a raw request does.
        const host = await rawRequest(`${server.url}/mcp`, {
          headers: { host: `evil.example:${server.port}`, 'content-type': 'application/json', accept: BOTH },
          body: JSON.stringify(INIT),
        });
        expect(host.status).toBe(403);
        const origin = await post(INIT, { origin: 'http://evil.example' });
        expect(origin.status).toBe(403);
        expect((await json(origin)).error.message).toBe('Forbidden: Origin not allowed');
      });
    });
  },
);

describe.runIf(run)('MCP CORS for a listed browser origin', () => {
  it('answers the preflight and exposes Mcp-Session-Id', async () => {
    const cache = await connectRedisCache({ url: REDIS_URL, prefix: PREFIX });
    const server = await startKeyedServer({ cache, env: { ALLOWED_ORIGINS: 'https://app.example' } });
    try {
      const preflight = await fetch(`${server.url}/mcp`, {
        method: 'OPTIONS',
        headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' },
      });
      expect(preflight.status).toBe(204);
      expect(preflight.headers.get('access-control-allow-origin')).toBe('https://app.example');
      expect(preflight.headers.get('access-control-allow-headers')).toContain('Mcp-Session-Id');
      const init = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { origin: 'https://app.example', 'content-type': 'application/json', accept: BOTH },
        body: JSON.stringify(INIT),
      });
      expect(init.status).toBe(200);
      expect(init.headers.get('access-control-expose-headers')).toContain('Mcp-Session-Id');
      expect(init.headers.get('access-control-allow-origin')).toBe('https://app.example');
    } finally {
      await server.close();
      await cache.close();
    }
  });
});
