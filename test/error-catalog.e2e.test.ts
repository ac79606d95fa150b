import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningService } from '../services/service.ts';
import { rawRequest } from './raw-http.ts';
import { issueServiceKey, startApiOnly } from './service-keys.ts';

/**
 * Rows of the interface contract's errors (section 7, and the webhook URL rule of 4.4/8) that
 * no other suite drives over real HTTP with status, code and body shape on every route the row
 * names: the pay-per-call refusals on each /x402 tool route, the webhook URL refusals (non-HTTPS
 * and internal addresses in the forms an SSRF probe writes them), the key webhook management
 * asks for, and the {code, message} body of every search and chat refusal.
 */
let service: RunningService;
let key: string;
beforeAll(async () => {
  service = await startApiOnly();
  key = (await issueServiceKey(service, { plan: 'free', owner: 'error-catalog' })).key;
});
afterAll(async () => {
  await service?.stop();
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${service.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });

const PAID: [string, Record<string, unknown>][] = [
  ['/x402/get_trade_call', { coin: 'BTC', timeframe: '1h' }],
  ['/x402/scan_funding_arb', {}],
  ['/x402/get_market_regime', { coin: 'ETH' }],
];

describe('7.2 pay-per-call, on each route', () => {
  it.each(PAID)('%s: no payment attached is 402 with a quote', async (path, body) => {
    const res = await post(path, body);
    expect(res.status).toBe(402);
    const quote = (await res.json()) as { accepts: Record<string, unknown>[] };
    expect(quote.accepts.length).toBeGreaterThanOrEqual(1);
    expect(quote.accepts[0]).toMatchObject({
      maxAmountRequired: expect.stringMatching(/^\d+$/),
      asset: expect.stringMatching(/^0x[0-9a-fA-F]{40}$/),
      payTo: expect.stringMatching(/^0x[0-9a-fA-F]{40}$/),
      network: expect.any(String),
    });
  });

  it.each(PAID)(
    '%s: Content-Type twice, merged, or text/plain is 400 invalid_content_type',
    async (path, body) => {
      const json = JSON.stringify(body);
      const answers = [
        await rawRequest(`${service.url}${path}`, {
          headers: { 'content-type': ['application/json', 'application/json'] },
          body: json,
        }),
        await rawRequest(`${service.url}${path}`, {
          headers: { 'content-type': 'application/json, application/json' },
          body: json,
        }),
        await rawRequest(`${service.url}${path}`, {
          headers: { 'content-type': 'application/json;application/json' },
          body: json,
        }),
        await rawRequest(`${service.url}${path}`, {
          headers: { 'content-type': 'text/plain' },
          body: '"ETH"',
        }),
      ];
      for (const answer of answers) {
        expect({ status: answer.status, code: answer.body?.code }, answer.text).toEqual({
          status: 400,
          code: 'invalid_content_type',
        });
        expect(typeof answer.body.message).toBe('string');
        expect(answer.body.retryable).toBe(false);
      }
    },
  );
});

describe('webhook management: a live key, an HTTPS URL that is not internal', () => {
  const create = (url: string, headers: Record<string, string> = { authorization: `Bearer ${key}` }) =>
    post('/api/webhooks', { url, events: ['trade_call'] }, headers);

  it('without a key applied (none, another header, no Bearer prefix) is 401 UNAUTHORIZED', async () => {
    for (const headers of [
      {},
      { 'x-api-key': key },
      { authorization: key },
      { authorization: `Token ${key}` },
    ] as Record<string, string>[]) {
      const res = await create('https://hooks.example.com/in', headers);
      expect(res.status, JSON.stringify(Object.keys(headers))).toBe(401);
      const body = (await res.json()) as { code: string; message: string };
      expect(body.code).toBe('UNAUTHORIZED');
      expect(typeof body.message).toBe('string');
    }
  });

  it.each([
    'http://hooks.example.com/in',
    'ftp://hooks.example.com/in',
    'https://127.0.0.1/in',
    'https://localhost/in',
    'https://[::1]/in',
    'https://169.254.169.254/latest/meta-data',
    'https://0.0.0.0/in',
    'https://10.1.2.3/in',
    'https://172.16.0.1/in',
    'https://192.168.1.1/in',
    'https://100.64.0.1/in',
    'https://[::ffff:127.0.0.1]/in',
    'https://[::ffff:7f00:1]/in',
    'https://2130706433/in',
    'https://0x7f.1/in',
    'https://127.1/in',
    'https://[fd00::1]/in',
    'https://[fe80::1]/in',
    'https://[::]/in',
  ])('%s is refused 400 naming the url', async (url) => {
    const res = await create(url);
    const body = (await res.json()) as { code: string; field?: string; message: string };
    expect({ status: res.status, code: body.code, field: body.field }, body.message).toEqual({
      status: 400,
      code: 'INVALID_URL',
      field: 'url',
    });
    expect(typeof body.message).toBe('string');
  });
});

describe('7.1 search and chat refusals are {code, message}', () => {
  it.each([
    ['/api/search', {}, 'INVALID_QUERY'],
    ['/api/search', { query: 'ab' }, 'QUERY_TOO_SHORT'],
    ['/api/search', { query: 'x'.repeat(501) }, 'QUERY_TOO_LONG'],
    ['/api/chat', { question: 7 }, 'INVALID_QUESTION'],
    ['/api/chat', { question: 'why?' }, 'QUESTION_TOO_SHORT'],
    ['/api/chat', { question: 'q'.repeat(501) }, 'QUESTION_TOO_LONG'],
    ['/api/chat', { question: 'what does squeeze mean', model: 'gpt-9' }, 'INVALID_MODEL'],
  ])('%s %j: 400 %s', async (path, body, code) => {
    const res = await post(path, body, { authorization: `Bearer ${key}` });
    const answer = (await res.json()) as { code: unknown; message: unknown };
    expect({ status: res.status, code: answer.code }).toEqual({ status: 400, code });
    expect(typeof answer.message).toBe('string');
    expect((answer.message as string).length).toBeGreaterThan(0);
  });
});
