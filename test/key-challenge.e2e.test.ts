import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateApiKey } from '../services/keys/key-material.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * A 401 says how to authenticate (RFC 9110 §15.5.2: a 401 MUST carry a WWW-Authenticate
 * challenge). A walk as a trading agent's developer found every 401 refusing an API key without
 * one (the webhooks, verdict history, search and chat routes without a key, the pay-per-call routes
 * with a key that is not live), where /mcp/signin's carries its own: an HTTP client that reads the
 * challenge to pick its credential found none. Now each is `Bearer realm="signal-service"`, with
 * RFC 6750's `error="invalid_token"` when a Bearer key was sent, and the document declares it.
 */
type Json = Record<string, unknown>;

describe('the challenge of a 401 that refuses an API key', () => {
  let running: TestService;
  let base: string;
  const notLive = generateApiKey().key;

  beforeAll(async () => {
    running = await startTestService(['api']);
    base = running.service.url;
  });
  afterAll(async () => {
    await running?.stop();
  });

  const ask = (method: string, path: string, key?: string, body?: unknown) =>
    fetch(`${base}${path}`, {
      method,
      headers: {
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });

  it('asks for a Bearer key when none was sent, and says a key sent is not live', async () => {
    const keyless = [
      ['GET', '/api/webhooks', undefined],
      ['GET', '/api/verdicts?coin=BTC', undefined],
      ['POST', '/api/search', { query: 'what does HOLD mean' }],
      ['POST', '/api/chat', { question: 'what does HOLD mean?' }],
    ] as const;
    for (const [method, path, body] of keyless) {
      const res = await ask(method, path, undefined, body);
      expect([path, res.status]).toEqual([path, 401]);
      expect([path, res.headers.get('www-authenticate')]).toEqual([path, 'Bearer realm="signal-service"']);
    }
    const refused = [...keyless, ['POST', '/x402/get_trade_call', { coin: 'BTC', timeframe: '1h' }]] as const;
    for (const [method, path, body] of refused) {
      const res = await ask(method, path, notLive, body);
      expect([path, res.status]).toEqual([path, 401]);
      expect([path, res.headers.get('www-authenticate')]).toEqual([
        path,
        'Bearer realm="signal-service", error="invalid_token", error_description="the API key is not a live key of this service"',
      ]);
    }
  });

  it('is declared on the 401 of every operation that takes an API key', async () => {
    const doc = (await (await fetch(`${base}/openapi.json`)).json()) as {
      paths: Record<
        string,
        Record<string, { security?: Json[]; responses: Record<string, { headers?: Json }> }>
      >;
    };
    let checked = 0;
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        const unauthorized = op.responses['401'];
        if (!unauthorized || !JSON.stringify(op.security ?? []).includes('apiKey')) continue;
        const names = Object.keys(unauthorized.headers ?? {}).map((name) => name.toLowerCase());
        expect(names, `${method} ${path}`).toContain('www-authenticate');
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(5);
  });
});
