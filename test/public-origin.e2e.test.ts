import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * One public origin: with PUBLIC_BASE_URL set, every document and quote a client or indexer reads
 * names that origin and no other, whatever Host the request came to (here 127.0.0.1:<port>).
 */
const PUBLIC = 'https://signals.example';

const DOCUMENTS = [
  '/.well-known/x402',
  '/.well-known/mcp.json',
  '/mcp/server-card',
  '/mcp/signin/server-card',
  '/.well-known/ai-catalog.json',
  '/.well-known/mcp/catalog.json',
  '/llms.txt',
  '/.well-known/oauth-protected-resource/mcp/signin',
  '/.well-known/oauth-authorization-server',
  '/openapi.json',
];

/** A GET of `path` at the service `base` that names `host` as its Host (fetch would send the real one). */
function getWithHost(
  base: string,
  path: string,
  host: string,
): Promise<{ status: number; cacheControl: string; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path, headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        body += chunk;
      });
      res.on('end', () =>
        resolve({
          status: res.statusCode ?? 0,
          cacheControl: String(res.headers['cache-control'] ?? ''),
          body,
        }),
      );
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const FORGED = 'evil.example';

/** Every origin a text names (http and https URLs), but the ones of others (specs, schemas). */
function originsIn(text: string): string[] {
  const found = [...text.matchAll(/https?:\/\/[A-Za-z0-9.-]+(?::\d+)?/g)].map((m) => m[0]);
  return [...new Set(found)].filter((o) => o === PUBLIC || /localhost|127\.0\.0\.1|\[::1\]/.test(o));
}

/**
 * A JSON text without its `example` members: recorded answers (OpenAPI's, the bazaar output's)
 * show the origin they were recorded at, and say so.
 */
function withoutExamples(text: string): string {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return text;
  }
  return JSON.stringify(doc, (key, value) => (key === 'example' || key === 'examples' ? undefined : value));
}

describe('one public origin (PUBLIC_BASE_URL set)', () => {
  let running: TestService;
  let url: string;

  beforeAll(async () => {
    running = await startTestService(['api'], { PUBLIC_BASE_URL: PUBLIC });
    url = running.service.url;
  }, 60_000);
  afterAll(async () => {
    await running?.stop();
  });

  it.each(DOCUMENTS)('%s names only the public origin', async (path) => {
    const res = await fetch(`${url}${path}`);
    expect(res.status).toBe(200);
    expect(originsIn(withoutExamples(await res.text()))).toEqual([PUBLIC]);
  });

  it.each(DOCUMENTS)(
    '%s answers a forged Host as any other: the public origin, its usual caching',
    async (path) => {
      const res = await getWithHost(url, path, FORGED);
      expect(res.status).toBe(200);
      expect(res.body).not.toContain(FORGED);
      expect(originsIn(withoutExamples(res.body))).toEqual([PUBLIC]);
      // The library's OAuth metadata sends none; ours stay shared-cacheable.
      if (!path.startsWith('/.well-known/oauth-authorization-server'))
        expect(res.cacheControl).toBe('public, max-age=300');
    },
  );

  it('a 402 quotes the resource at the public origin, in the header and the body', async () => {
    const res = await fetch(`${url}/x402/get_trade_call`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC', timeframe: '1h' }),
    });
    expect(res.status).toBe(402);
    const header = Buffer.from(res.headers.get('payment-required')!, 'base64').toString('utf8');
    expect((JSON.parse(header) as { resource: { url: string } }).resource.url).toBe(
      `${PUBLIC}/x402/get_trade_call`,
    );
    expect(originsIn(withoutExamples(header))).toEqual([PUBLIC]);
    expect(originsIn(withoutExamples(await res.text()))).toEqual([PUBLIC]);
  });

  it('the sign-in nonce names the public origin as the SIWE domain', async () => {
    const res = await fetch(`${url}/api/keys/nonce`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { domain: string }).domain).toBe('signals.example');
  });
});

/**
 * Without PUBLIC_BASE_URL the documents name the Host the request came to, which any client
 * names: no shared cache may keep such an answer for the next client of the same URL (a forged
 * Host would then reach everyone), so each is private (deploy/README.md, "Behind a CDN or shared
 * cache").
 */
describe('the origin of the request (PUBLIC_BASE_URL unset)', () => {
  let running: TestService;
  let url: string;

  beforeAll(async () => {
    running = await startTestService(['api']);
    url = running.service.url;
  }, 60_000);
  afterAll(async () => {
    await running?.stop();
  });

  // The sign-in metadata names the request's origin only for a Host the MCP routes serve (ALLOWED_HOSTS).
  const reflecting = DOCUMENTS.filter((path) => !path.startsWith('/.well-known/oauth-protected-resource'));

  it.each(reflecting)('%s names a forged Host, in an answer no shared cache may keep', async (path) => {
    const res = await getWithHost(url, path, FORGED);
    expect(res.status).toBe(200);
    expect(res.body).toContain(`http://${FORGED}`);
    const directives = res.cacheControl.split(',').map((d) => d.trim().toLowerCase());
    expect(directives).toContain('private');
    expect(directives).not.toContain('public');
    expect(directives.filter((d) => d.startsWith('s-maxage'))).toEqual([]);
  });

  it('the protected-resource metadata names an allowed Host, else the configured origin, in a private answer', async () => {
    const { port } = new URL(url);
    const own = await getWithHost(
      url,
      '/.well-known/oauth-protected-resource/mcp/signin',
      `127.0.0.1:${port}`,
    );
    expect(JSON.parse(own.body).resource).toBe(`http://127.0.0.1:${port}/mcp/signin`);
    const res = await getWithHost(url, '/.well-known/oauth-protected-resource/mcp/signin', FORGED);
    expect(res.status).toBe(200);
    expect(res.body).not.toContain(FORGED);
    for (const answer of [own, res]) expect(answer.cacheControl).toBe('private, max-age=300');
  });
});
