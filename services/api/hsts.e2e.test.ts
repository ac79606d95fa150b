import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { Readiness } from '../shared/readiness.ts';
import { buildApp, HSTS } from './app.ts';

/**
 * A security review's walk: served on https, no answer said Strict-Transport-Security, so a person
 * following an http:// link to the sign-in page (where an API key is typed) could be kept on http
 * by whoever sits on the way. Now every answer on https says it, refusals included.
 */
describe('Strict-Transport-Security on https', () => {
  const apps: Awaited<ReturnType<typeof buildApp>>[] = [];
  afterAll(async () => {
    for (const app of apps) await app.close();
  });

  async function serve(config: { PUBLIC_BASE_URL?: string; TRUST_PROXY?: string }): Promise<string> {
    const app = await buildApp({
      config: { BODY_LIMIT_BYTES: 65_536, ...config },
      logger: pino({ level: 'silent' }),
      readiness: new Readiness(),
      metrics: null,
    });
    apps.push(app);
    return app.listen({ host: '127.0.0.1', port: 0 });
  }

  const hsts = async (url: string, headers: Record<string, string> = {}) =>
    (await fetch(url, { headers })).headers.get('strict-transport-security');

  it('on every answer when the public origin is https, a 404 included', async () => {
    const origin = await serve({ PUBLIC_BASE_URL: 'https://signals.example' });
    expect(await hsts(`${origin}/healthz`)).toBe(HSTS);
    expect(await hsts(`${origin}/no-such-page`)).toBe(HSTS);
    // The scheme in capitals, as the setting accepts it.
    const capitals = await serve({ PUBLIC_BASE_URL: 'HTTPS://signals.example' });
    expect(await hsts(`${capitals}/healthz`)).toBe(HSTS);
    const plain = await serve({ PUBLIC_BASE_URL: 'http://signals.example' });
    expect(await hsts(`${plain}/healthz`)).toBeNull();
  });

  it('when a proxy TRUST_PROXY believes says the request came over https, and not otherwise', async () => {
    const origin = await serve({ TRUST_PROXY: '127.0.0.1' });
    expect(await hsts(`${origin}/healthz`, { 'x-forwarded-proto': 'https' })).toBe(HSTS);
    expect(await hsts(`${origin}/healthz`)).toBeNull();
    const untrusting = await serve({});
    // A client's own X-Forwarded-Proto is not believed: plain http, nothing said.
    expect(await hsts(`${untrusting}/healthz`, { 'x-forwarded-proto': 'https' })).toBeNull();
  });
});
