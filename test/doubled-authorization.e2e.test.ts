import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePortIn } from './ports.ts';
import { rawRequest } from './raw-http.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Authorization sent twice, as two fields or as one a proxy joined from two (`Bearer a, Bearer b`),
 * is one refusal on every route that takes a Bearer credential: 400 in the route's own body
 * (BAD_REQUEST; JSON-RPC -32600 on /mcp) with its Bearer challenge carrying RFC 6750 §3.1's
 * error="invalid_request". /mcp and the /api routes answered the two fields without a challenge,
 * and every route read the joined field as one malformed credential (/mcp served it anonymous,
 * /mcp/signin asked for a token).
 */
const TWICE = 'Authorization was sent more than once; send it exactly once';
const KEY_CHALLENGE = `Bearer realm="signal-service", error="invalid_request", error_description="${TWICE}"`;
const PING = '{"jsonrpc":"2.0","id":1,"method":"ping"}';
const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };

describe('Authorization sent twice', () => {
  let running: TestService;
  let base: string;
  let key: string;

  beforeAll(async () => {
    const port = await freePortIn(19_100, 19_199);
    base = `http://127.0.0.1:${port}`;
    running = await startTestService(['api'], { PORT: String(port), PUBLIC_BASE_URL: base });
    key = await running.issue('pro');
  });
  afterAll(async () => {
    await running?.stop();
  });

  const twice = () =>
    [
      ['two fields', [`Bearer ${key}`, 'Bearer second']],
      ['one joined field', [`Bearer ${key}, Bearer second`]],
    ] as const;

  it('/mcp: 400 -32600 BAD_REQUEST with the key challenge, error="invalid_request"', async () => {
    for (const [how, authorization] of twice()) {
      const res = await rawRequest(`${base}/mcp`, { headers: { ...MCP_HEADERS, authorization }, body: PING });
      expect([how, res.status]).toEqual([how, 400]);
      expect(res.body, how).toMatchObject({
        jsonrpc: '2.0',
        error: { code: -32600, message: TWICE, data: { code: 'BAD_REQUEST' } },
      });
      expect([how, res.headers.get('www-authenticate')]).toEqual([how, KEY_CHALLENGE]);
    }
  });

  it('an /api route: 400 BAD_REQUEST with the key challenge, error="invalid_request"', async () => {
    for (const [how, authorization] of twice()) {
      const res = await rawRequest(`${base}/api/webhooks`, { method: 'GET', headers: { authorization } });
      expect([how, res.status]).toEqual([how, 400]);
      expect([how, res.body]).toEqual([how, { code: 'BAD_REQUEST', message: TWICE }]);
      expect([how, res.headers.get('www-authenticate')]).toEqual([how, KEY_CHALLENGE]);
    }
  });

  it('an /x402 route: 400 BAD_REQUEST with the key challenge, error="invalid_request", not a quote', async () => {
    for (const [how, authorization] of twice()) {
      const res = await rawRequest(`${base}/x402/get_trade_call`, {
        headers: { 'content-type': 'application/json', authorization },
        body: '{"coin":"BTC","timeframe":"1h"}',
      });
      expect([how, res.status]).toEqual([how, 400]);
      expect([how, res.body]).toEqual([how, { code: 'BAD_REQUEST', message: TWICE, retryable: false }]);
      expect([how, res.headers.get('www-authenticate')]).toEqual([how, KEY_CHALLENGE]);
    }
  });

  it('/mcp/signin: 400 -32600 BAD_REQUEST with its own challenge, error="invalid_request"', async () => {
    for (const [how, authorization] of twice()) {
      const res = await rawRequest(`${base}/mcp/signin`, {
        headers: { ...MCP_HEADERS, authorization },
        body: PING,
      });
      expect([how, res.status]).toEqual([how, 400]);
      expect(res.body, how).toMatchObject({ error: { code: -32600, data: { code: 'BAD_REQUEST' } } });
      expect([how, res.headers.get('www-authenticate')]).toEqual([
        how,
        `Bearer resource_metadata="${base}/.well-known/oauth-protected-resource/mcp/signin", scope="mcp", error="invalid_request", error_description="${TWICE}"`,
      ]);
    }
  });

  it('one credential whose quoted parameter holds a comma is not two; a route taking no key challenges for none', async () => {
    const digest = await rawRequest(`${base}/mcp`, {
      headers: { ...MCP_HEADERS, authorization: 'Digest username="a, b c", realm="x"' },
      body: PING,
    });
    expect(digest.status).toBe(200);
    const probe = await rawRequest(`${base}/healthz`, {
      method: 'GET',
      headers: { authorization: [`Bearer ${key}`, 'Bearer second'] },
    });
    expect(probe.status).toBe(400);
    expect(probe.headers.has('www-authenticate')).toBe(false);
  });
});
