import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { freePort } from '../../../test/ports.ts';

/**
 * The OAuth sign-in paths and their discovery documents take from a budget of their own
 * (RATE_LIMIT_SIGNIN), not the anonymous product budget: a host whose anonymous /mcp traffic (or
 * a NAT's) used that up could neither sign in nor refresh its token. Their answers carry
 * RateLimit-*, the library's own (hijacked) ones too; past the budget, token, register and the
 * documents answer 429 in RFC 6749's shape, the authorize page a page.
 */
describe('the OAuth sign-in paths have a rate budget of their own', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  let base: string;

  beforeAll(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = await startKeyedServer({
      cache: new MemoryCache(),
      rateLimited: true,
      port,
      env: {
        PUBLIC_BASE_URL: base,
        RATE_LIMIT_WINDOW_MS: '3600000',
        RATE_LIMIT_ANONYMOUS: '3',
        RATE_LIMIT_SIGNIN: '7',
      },
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  const register = () =>
    fetch(`${base}/oauth/register`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        client_name: 'rate host',
        redirect_uris: ['http://127.0.0.1:9/callback'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      }),
    });
  const token = () =>
    fetch(`${base}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'grant_type=refresh_token&refresh_token=nope&client_id=nobody',
    });
  const get = (path: string) => fetch(`${base}${path}`, { redirect: 'manual' });
  const limits = (res: Response) => [
    res.headers.get('ratelimit-limit'),
    res.headers.get('ratelimit-remaining'),
  ];

  it('past the anonymous budget, discovery, register, authorize and token still answer, on their own budget', async () => {
    const ping = () =>
      fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
    const pings = [];
    for (let i = 0; i < 4; i++) pings.push((await ping()).status);
    expect(pings).toEqual([200, 200, 200, 429]);

    // Each answer tells the sign-in budget (7), the library's hijacked ones too.
    const as = await get('/.well-known/oauth-authorization-server');
    expect([as.status, ...limits(as)]).toEqual([200, '7', '6']);
    const jwks = await get('/oauth/jwks');
    expect([jwks.status, ...limits(jwks)]).toEqual([200, '7', '5']);
    const resource = await get('/.well-known/oauth-protected-resource/mcp/signin');
    expect([resource.status, ...limits(resource)]).toEqual([200, '7', '4']);
    const registered = await register();
    expect([registered.status, ...limits(registered)]).toEqual([201, '7', '3']);
    const authorize = await get('/oauth/authorize?client_id=nobody');
    expect(authorize.status).not.toBe(429);
    expect(limits(authorize)).toEqual(['7', '2']);
    const refused = await token();
    // The library's own refusal (no such client), not the rate limit's.
    expect(refused.status).toBe(401);
    expect(((await refused.json()) as { error: string }).error).toBe('invalid_client');
    expect(limits(refused)).toEqual(['7', '1']);
    // The product budget is still the anonymous one, used up.
    expect((await ping()).status).toBe(429);
  });

  it('past the sign-in budget: RFC 6749 errors with Retry-After, and a page for the authorize endpoint', async () => {
    // One left of 7 after the test above.
    expect((await get('/.well-known/oauth-authorization-server')).status).toBe(200);
    const limited = await token();
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(limits(limited)).toEqual(['7', '0']);
    const body = (await limited.json()) as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(['error', 'error_description']);
    expect(body.error).toBe('temporarily_unavailable');
    expect(body.error_description).toMatch(/at most 7 per window; retry in \d+ s/);
    // A browser-based host's page reads it, and when to retry.
    expect(limited.headers.get('access-control-allow-origin')).toBe('*');
    expect(limited.headers.get('access-control-expose-headers')).toContain('Retry-After');
    for (const answer of [await register(), await get('/.well-known/oauth-authorization-server')]) {
      expect(answer.status).toBe(429);
      expect(answer.headers.get('retry-after')).not.toBeNull();
      expect(((await answer.json()) as { error: string }).error).toBe('temporarily_unavailable');
    }
    // The authorize endpoint and its resume step, where the browser is sent after the consent page.
    for (const path of ['/oauth/authorize?client_id=nobody', '/oauth/authorize/some-interaction']) {
      const page = await get(path);
      expect([path, page.status]).toEqual([path, 429]);
      expect(page.headers.get('content-type')).toMatch(/^text\/html/);
      expect(page.headers.get('retry-after')).not.toBeNull();
      const html = await page.text();
      expect(html).toMatch(/try again in \d+ seconds/);
      // A page a person reads on any screen: a heading, the viewport, its icon (no /favicon.ico asked),
      // and words rather than the machine's error text.
      expect(html).toContain('<h1>Too many sign-in requests</h1>');
      expect(html).toContain('<meta name="viewport" content="width=device-width,initial-scale=1">');
      expect(html).toContain('<link rel="icon" href="data:,">');
      expect(html).not.toContain('per window');
    }
  });
});
