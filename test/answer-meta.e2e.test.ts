import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * What every answer of a product route carries, refusals first: the rate limit's headers (the
 * request is counted before its key and input are judged) and the caller's `_service` (contract 8:
 * the live quota "in any response"). Real HTTP against the service on the embedded defaults, as
 * `npm start` runs it, with the limiter on.
 */
let running: TestService;
let url: string;
let pro: Record<string, string>;
let free: Record<string, string>;

beforeAll(async () => {
  running = await startTestService(['api', 'engine', 'projections', 'dispatcher'], {
    RATE_LIMIT_ENABLED: 'true',
    // A free key's budget, spent below by malformed requests alone.
    RATE_LIMIT_FREE: '4',
    // Windows end on the clock: an hour's, so none gives the budget back mid-test but in a run that
    // straddles the full hour.
    RATE_LIMIT_WINDOW_MS: '3600000',
    WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
    WEBHOOK_ALLOWED_PORTS: '*',
  });
  url = running.service.url;
  pro = { authorization: `Bearer ${await running.issue('pro')}` };
  free = { authorization: `Bearer ${await running.issue('free')}` };
}, 60_000);
afterAll(async () => {
  await running?.stop();
});

const json = { 'content-type': 'application/json' };

async function call(
  method: string,
  path: string,
  init: { headers?: Record<string, string>; body?: string } = {},
) {
  const res = await fetch(`${url}${path}`, { method, ...init });
  const text = await res.text();
  return {
    res,
    status: res.status,
    body: text === '' ? null : (JSON.parse(text) as Record<string, unknown>),
  };
}

const limitOf = (res: Response) => ({
  limit: res.headers.get('ratelimit-limit'),
  remaining: res.headers.get('ratelimit-remaining'),
  reset: res.headers.get('ratelimit-reset'),
});

/** The refusals a buyer met without the headers, and what each answered. */
const REFUSALS: [string, string, { headers?: Record<string, string>; body?: string }, number, string][] = [
  ['POST', '/api/search', { headers: json, body: '{"query":"ab"}' }, 401, 'UNAUTHORIZED'],
  ['GET', '/api/verdicts?limit=0', {}, 401, 'UNAUTHORIZED'],
  ['GET', '/api/track-record?window=1y', {}, 400, 'INVALID_WINDOW'],
  ['GET', '/api/webhooks', {}, 401, 'UNAUTHORIZED'],
  ['POST', '/api/webhooks', { headers: json, body: '{}' }, 401, 'UNAUTHORIZED'],
  ['DELETE', '/api/webhooks/nope', {}, 401, 'UNAUTHORIZED'],
  ['POST', '/x402/nope', {}, 404, 'NOT_FOUND'],
];

describe('the rate limit is taken before a request is judged, and every answer says so', () => {
  it('puts RateLimit-* on 400s and 401s, keyed or not, and counts each', async () => {
    const keyed: typeof REFUSALS = [
      [
        'POST',
        '/api/search',
        { headers: { ...json, ...pro }, body: '{"query":"ab"}' },
        400,
        'QUERY_TOO_SHORT',
      ],
      ['GET', '/api/verdicts?limit=0', { headers: pro }, 400, 'INVALID_LIMIT'],
      ['POST', '/api/webhooks', { headers: { ...json, ...pro }, body: '{}' }, 400, 'INVALID_FIELD'],
    ];
    let anonymousLeft = Number.POSITIVE_INFINITY;
    for (const [method, path, init, status, code] of [...REFUSALS, ...keyed]) {
      const { res, body } = await call(method, path, init);
      expect([res.status, body?.code], `${method} ${path}`).toEqual([status, code]);
      const { limit, remaining, reset } = limitOf(res);
      expect(limit, `${method} ${path}`).toMatch(/^\d+$/);
      expect(remaining, `${method} ${path}`).toMatch(/^\d+$/);
      expect(Number(reset), `${method} ${path}`).toBeGreaterThan(0);
      // The anonymous caller's budget goes down by one each (the headers of a tool's call, /x402/… and
      // /api/search, speak of the tool's own, tighter share).
      const tool = path.startsWith('/x402/') || path === '/api/search';
      if (!tool && init.headers?.authorization === undefined) {
        expect(Number(remaining)).toBeLessThan(anonymousLeft);
        anonymousLeft = Number(remaining);
      }
    }
  });

  it('puts them on a body that cannot be read: JSON-RPC -32700 on /mcp, UNSUPPORTED_MEDIA_TYPE on /api/webhooks', async () => {
    const mcp = await call('POST', '/mcp', {
      headers: { ...json, accept: 'application/json, text/event-stream' },
      body: '{bad',
    });
    expect(mcp.status).toBe(400);
    expect(mcp.body).toMatchObject({ error: { code: -32700 } });
    expect(limitOf(mcp.res).limit).toMatch(/^\d+$/);
    const text = await call('POST', '/api/webhooks', {
      headers: { 'content-type': 'text/plain', ...pro },
      body: 'x',
    });
    expect(text.status).toBe(415);
    expect(limitOf(text.res).remaining).toMatch(/^\d+$/);
    // Told what to send, not that a field of the text is wrong.
    expect(text.body).toMatchObject({
      code: 'UNSUPPORTED_MEDIA_TYPE',
      message: 'send the body as application/json',
    });
  });

  it('refuses a flood of malformed requests with 429 once the budget is spent', async () => {
    const malformed = { headers: { ...json, ...free }, body: '{}' };
    const answers: number[] = [];
    for (let i = 0; i < 5; i++) answers.push((await call('POST', '/api/webhooks', malformed)).status);
    expect(answers).toEqual([400, 400, 400, 400, 429]);
    const refused = await call('POST', '/api/webhooks', malformed);
    expect(refused.status).toBe(429);
    expect(refused.body).toMatchObject({ code: 'RATE_LIMITED', _service: { auth: { tier: 'free' } } });
    expect(limitOf(refused.res)).toMatchObject({ limit: '4', remaining: '0' });
    expect(refused.res.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});

describe('`_service` on every answer that is per caller', () => {
  it('on the refusals: webhooks 401 and 400, track-record 400, an unknown route 404', async () => {
    for (const [method, path, init, status] of REFUSALS) {
      const { body } = await call(method, path, init);
      expect(body?._service, `${method} ${path} ${status}`).toMatchObject({
        auth: { outcome: 'ABSENT', presented: false, tier: 'free' },
        // The anonymous caller's live figures (its address's quota), not null.
        quota: { total: expect.any(Number), remaining: expect.any(Number) },
      });
    }
    const invalid = await call('POST', '/api/webhooks', { headers: { ...json, ...pro }, body: '{}' });
    expect(invalid.body?._service).toMatchObject({ auth: { outcome: 'OK', tier: 'pro' } });
  });

  it('on a webhooks 401 refusing a key never issued: tier free (the key not applied), detail saying why', async () => {
    // The pro key with its last character changed: shaped like a live key, never issued.
    const key = pro.authorization!.slice('Bearer '.length);
    const forged = `${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`;
    const refused = await call('GET', '/api/webhooks', { headers: { authorization: `Bearer ${forged}` } });
    expect(refused.status).toBe(401);
    expect(refused.body?._service).toMatchObject({
      auth: { outcome: 'UNKNOWN', presented: true, tier: 'free', detail: 'no such key was issued' },
      quota: { total: expect.any(Number), remaining: expect.any(Number) },
    });
  });

  it('on every keyed webhook answer: create, list, delete', async () => {
    const created = await call('POST', '/api/webhooks', {
      headers: { ...json, ...pro },
      body: JSON.stringify({ url: 'https://127.0.0.1:9/hook', events: ['trade_call'], assets: ['BTC'] }),
    });
    expect(created.status).toBe(201);
    expect(created.body?._service).toMatchObject({ auth: { outcome: 'OK', tier: 'pro' }, quota: {} });
    const listed = await call('GET', '/api/webhooks', { headers: pro });
    expect(listed.body).toMatchObject({ webhooks: [{ id: created.body?.id }], _service: { auth: {} } });
    const deleted = await call('DELETE', `/api/webhooks/${created.body?.id}`, { headers: pro });
    expect(deleted.body).toMatchObject({ deleted: true, _service: { auth: { outcome: 'OK' } } });
    const gone = await call('DELETE', `/api/webhooks/${created.body?.id}`, { headers: pro });
    expect(gone.status).toBe(404);
    expect(gone.body?._service).toMatchObject({ auth: { outcome: 'OK' } });
  });

  it('not on the public track record, whose 200 is the same bytes for everyone and publicly cached', async () => {
    const { res, body } = await call('GET', '/api/track-record?window=7d', { headers: pro });
    expect(res.status).toBe(200);
    expect(res.headers.get('cache-control')).toMatch(/^public/);
    expect(body).not.toHaveProperty('_service');
  });
});
