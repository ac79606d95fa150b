import { existsSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHROMIUM, launchChromium } from './chromium.ts';
import { startTestService, type TestService } from './service-harness.ts';

const present = existsSync(CHROMIUM);
if (!present && process.env.CI !== 'true') {
  console.warn(`\n*** ${CHROMIUM} missing (apt-get install -y chromium): browser CORS suite NOT RUN ***\n`);
}

/** What a page's fetch() got: its status, the JSON (or text) it read, the headers it could read. */
interface Read {
  status: number;
  body: unknown;
  headers: Record<string, string | null>;
}

let running: TestService;
let api: string;
let key: string;
let site: Server;
let browser: BrowserContext;
let closeBrowser: (() => Promise<void>) | undefined;
let page: Page;

/**
 * A web app on another origin (another port of localhost) calling the API from its own page with
 * fetch(), as a front-end developer embedding the service would: the browser enforces CORS (the
 * preflight of a keyed or conditional request, the headers a script may read), which no
 * server-side client does.
 */
describe.runIf(present || process.env.CI === 'true')('the API from a page of another origin', () => {
  beforeAll(async () => {
    running = await startTestService(['api'], {
      RATE_LIMIT_ENABLED: 'true',
      // Small enough for the anonymous calls below to reach a 429, large for the key's.
      RATE_LIMIT_ANONYMOUS: '12',
      RATE_LIMIT_PRO: '1000000',
      RATE_LIMIT_WINDOW_MS: '3600000',
    });
    api = running.service.url;
    key = await running.issue('pro');
    site = createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      response.end('<!doctype html><html lang="en"><title>app.example</title><p>an embedding app</p></html>');
    });
    await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
    ({ browser, close: closeBrowser } = await launchChromium('cors'));
    page = await browser.newPage();
    // localhost, not 127.0.0.1 as the API: another host and port, so another origin by any rule.
    await page.goto(`http://localhost:${(site.address() as AddressInfo).port}/`);
  }, 120_000);
  afterAll(async () => {
    await closeBrowser?.();
    await new Promise((resolve) => site?.close(resolve));
    await running?.stop();
  });

  /** fetch() from the page; a request the browser blocks answers `blocked` (a TypeError). */
  async function call(
    path: string,
    init: { method?: string; headers?: Record<string, string>; body?: string; cache?: 'no-store' } = {},
    read: string[] = [],
  ): Promise<Read | { blocked: string }> {
    return page.evaluate(
      async ({ url, init, read }) => {
        try {
          const response = await fetch(url, init);
          const text = await response.text();
          let body: unknown = text;
          try {
            body = JSON.parse(text);
          } catch {
            // NDJSON or a page: kept as text.
          }
          return {
            status: response.status,
            body,
            headers: Object.fromEntries(read.map((name) => [name, response.headers.get(name)])),
          };
        } catch (err) {
          return { blocked: String(err) };
        }
      },
      { url: `${api}${path}`, init, read },
    );
  }

  it('reads the public track record and its rate limit, and a conditional request is preflighted', async () => {
    const plain = await call('/api/track-record', {}, [
      'RateLimit-Remaining',
      'RateLimit-Limit',
      'Cache-Control',
    ]);
    expect(plain).toMatchObject({ status: 200, body: expect.objectContaining({}) });
    const read = plain as Read;
    expect(Number(read.headers['RateLimit-Limit'])).toBe(12);
    expect(Number(read.headers['RateLimit-Remaining'])).toBeGreaterThan(0);
    expect(read.headers['Cache-Control']).toBe('public, max-age=60');
    // If-None-Match is not CORS-safelisted: the browser asks first (OPTIONS), then sends it.
    const conditional = await call('/api/track-record', { headers: { 'If-None-Match': '"x"' } });
    expect(conditional).toMatchObject({ status: 200 });
  });

  it('reads /verify/sample, the webhook schemas and the OpenAPI document', async () => {
    for (const path of ['/verify/sample', '/api/webhooks/schemas', '/openapi.json', '/healthz']) {
      const read = await call(path);
      expect(read, path).toMatchObject({ status: 200, body: expect.any(Object) });
    }
  });

  it('calls a keyed route with a Bearer key: the preflight passes, the answer and its headers are read', async () => {
    const read = await call(
      '/api/verdicts?limit=1',
      { headers: { Authorization: `Bearer ${key}`, Accept: 'application/x-ndjson; profile="trailer"' } },
      ['RateLimit-Remaining', 'X-Service-Meta', 'Content-Type'],
    );
    expect(read).toMatchObject({ status: 200 });
    const { body, headers } = read as Read;
    // NDJSON: the rows (none or one), then the trailer line asked for.
    const lines = String(typeof body === 'string' ? body : JSON.stringify(body))
      .trim()
      .split('\n');
    const trailer = JSON.parse(lines.at(-1)!) as { cursor: string; rows: number; _service: unknown };
    expect(trailer).toMatchObject({ cursor: expect.any(String), rows: expect.any(Number) });
    expect(Number(headers['RateLimit-Remaining'])).toBeGreaterThan(1000);
    expect(JSON.parse(headers['X-Service-Meta']!)).toMatchObject({ auth: { tier: 'pro' } });
  });

  it("reads a refusal's body: a 401 for a wrong key, a 400 for a bad filter", async () => {
    const unauthorized = await call('/api/verdicts?limit=1', {
      headers: { Authorization: 'Bearer sk_live_nope' },
    });
    expect(unauthorized).toMatchObject({ status: 401, body: { code: 'UNAUTHORIZED' } });
    const bad = await call('/api/verdicts?limit=0', { headers: { Authorization: `Bearer ${key}` } });
    expect(bad).toMatchObject({ status: 400, body: { code: expect.any(String) } });
  });

  it('keeps the HTML page its own: another origin cannot read /track-record', async () => {
    const read = await call('/track-record');
    expect(read).toMatchObject({ blocked: expect.stringContaining('Failed to fetch') });
  });

  it("reads the rate limit's 429 and when to retry", async () => {
    let last: Read | { blocked: string } | null = null;
    for (let i = 0; i < 20; i++) {
      // Not from the browser's cache (the answer may be kept a minute): each call reaches the server.
      last = await call('/api/track-record', { cache: 'no-store' }, ['Retry-After', 'RateLimit-Remaining']);
      if ('status' in last && last.status === 429) break;
    }
    expect(last).toMatchObject({
      status: 429,
      body: { code: 'RATE_LIMITED' },
      headers: { 'RateLimit-Remaining': '0', 'Retry-After': expect.stringMatching(/^\d+$/) },
    });
  });
});

/** The preflights themselves, as a browser sends them: the methods each path serves, the headers its routes read. */
describe('preflights of the open routes', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService(['api']);
  }, 60_000);
  afterAll(async () => service?.stop());

  const preflight = (path: string, method: string, headers: string) =>
    fetch(`${service.service.url}${path}`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://app.example.com',
        'access-control-request-method': method,
        'access-control-request-headers': headers,
      },
    });

  it('answers each with any origin, its methods and the request headers its routes read', async () => {
    const cases: [string, string, string[]][] = [
      ['/api/track-record', 'GET', ['GET']],
      ['/api/verdicts', 'GET', ['GET']],
      ['/api/search', 'POST', ['POST']],
      ['/api/webhooks', 'POST', ['GET', 'POST']],
      ['/api/webhooks/wh_1', 'PATCH', ['DELETE', 'PATCH']],
      ['/api/webhooks/wh_1/disable', 'POST', ['POST']],
      ['/verify/sample', 'GET', ['GET']],
      ['/verify/BINANCE-BTC-1h/3', 'GET', ['GET']],
      ['/openapi.json', 'GET', ['GET']],
      ['/.well-known/mcp.json', 'GET', ['GET']],
    ];
    for (const [path, method, methods] of cases) {
      const res = await preflight(path, method, 'authorization, content-type, if-none-match');
      expect(res.status, path).toBe(204);
      expect(res.headers.get('access-control-allow-origin'), path).toBe('*');
      expect(res.headers.get('access-control-allow-credentials'), path).toBeNull();
      expect(res.headers.get('access-control-allow-methods')!.split(', ').sort(), path).toEqual(methods);
      expect(res.headers.get('access-control-allow-headers'), path).toBe(
        'Authorization, Content-Type, Accept, If-None-Match',
      );
    }
    // What a page may read, as the README lists it; not the history's HTTP trailer, which fetch()
    // never shows (a page resumes from a row's cursor or the trailer line).
    const answer = await fetch(`${service.service.url}/api/track-record`, {
      headers: { origin: 'https://app.example.com' },
    });
    expect(answer.headers.get('access-control-expose-headers')!.split(', ').sort()).toEqual(
      [
        'Content-Disposition',
        'ETag',
        'RateLimit-Limit',
        'RateLimit-Remaining',
        'RateLimit-Reset',
        'Retry-After',
        'X-Service-Meta',
      ].sort(),
    );
    await answer.body?.cancel();
  });

  it('sends the headers on a HEAD as on its GET', async () => {
    const res = await fetch(`${service.service.url}/api/track-record`, {
      method: 'HEAD',
      headers: { origin: 'https://app.example.com' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('access-control-allow-origin')).toBe('*');
  });

  it('leaves the pages, /readyz and /metrics closed, and the origin-guarded routes to their guard', async () => {
    for (const path of ['/track-record', '/docs', '/readyz', '/metrics']) {
      const res = await preflight(path, 'GET', 'if-none-match');
      expect(res.headers.get('access-control-allow-origin'), path).toBeNull();
      // A simple GET needs no preflight: its answer must not open itself either.
      const simple = await fetch(`${service.service.url}${path}`, {
        headers: { origin: 'https://app.example.com' },
      });
      expect(simple.headers.get('access-control-allow-origin'), path).toBeNull();
    }
    // /api/keys answers listed origins only (mcp/request-guard.ts): another site's is refused.
    const keys = await preflight('/api/keys', 'POST', 'content-type');
    expect(keys.headers.get('access-control-allow-origin')).toBeNull();
  });
});
