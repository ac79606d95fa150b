import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { freePort } from '../../../test/ports.ts';

/**
 * A host registering from a browser page: the registration endpoint and the others a page calls
 * answer the CORS preflight and then the call itself with the page's origin allowed.
 */
describe('OAuth endpoints from a browser page (CORS)', () => {
  let server: Awaited<ReturnType<typeof startKeyedServer>>;
  let base: string;
  const origin = 'https://host.example';

  beforeAll(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = await startKeyedServer({ cache: new MemoryCache(), port, env: { PUBLIC_BASE_URL: base } });
  });
  afterAll(async () => {
    await server?.close();
  });

  it.each(['/oauth/register', '/oauth/token', '/oauth/revoke'])(
    '%s answers the POST preflight',
    async (path) => {
      const res = await fetch(`${base}${path}`, {
        method: 'OPTIONS',
        headers: {
          origin,
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'content-type',
        },
      });
      expect(res.status).toBe(204);
      // The library echoes the page's origin; registration (answered by us) allows any.
      expect([origin, '*']).toContain(res.headers.get('access-control-allow-origin'));
      expect(res.headers.get('access-control-allow-methods')).toMatch(/POST/);
      expect(res.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('content-type');
    },
  );

  it('the registration itself is readable by the page', async () => {
    const res = await fetch(`${base}/oauth/register`, {
      method: 'POST',
      headers: { origin, 'content-type': 'application/json' },
      body: JSON.stringify({
        client_name: 'browser host',
        redirect_uris: ['https://host.example/callback'],
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        token_endpoint_auth_method: 'none',
        scope: 'mcp',
      }),
    });
    expect(res.status).toBe(201);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
  });

  it('/mcp/signin without a token applies the Origin policy: a refused origin gets 403 and no CORS header', async () => {
    const signin = (from: string) =>
      fetch(`${base}/mcp/signin`, {
        method: 'POST',
        headers: {
          origin: from,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      });
    // Before the change: 401 with access-control-allow-origin: https://evil.example.
    const evil = await signin('https://evil.example');
    expect(evil.status).toBe(403);
    expect(evil.headers.get('access-control-allow-origin')).toBeNull();
    expect(((await evil.json()) as { error: { message: string } }).error.message).toContain(
      'Origin not allowed',
    );
    // A page on this machine (allowed on the defaults outside production) reads its challenge.
    const local = await signin('http://localhost:5173');
    expect(local.status).toBe(401);
    expect(local.headers.get('access-control-allow-origin')).toBe('http://localhost:5173');
    expect(local.headers.get('www-authenticate')).toContain('resource_metadata=');
  });
});
