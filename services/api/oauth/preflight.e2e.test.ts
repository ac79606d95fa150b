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
});
