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
