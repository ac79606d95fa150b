import { request as httpRequest } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ErrorBody, RpcErrorBody } from '../contracts/errors.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Bodies built to hurt (nesting far deeper than any request needs, broken JSON, an empty body
 * under a JSON media type) on a service running the api role: each answers a documented 4xx in
 * its channel's shape, never 500 and never a framework code.
 */

let running: TestService;
let url: string;
let key: string;

const deep = `${'['.repeat(5_000)}${']'.repeat(5_000)}`;
const deepObject = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":${'{"a":'.repeat(2_000)}1${'}'.repeat(2_000)}}`;

beforeAll(async () => {
  running = await startTestService(['api']);
  url = running.service.url;
  key = await running.issue();
}, 60_000);
afterAll(async () => {
  await running?.stop();
});

async function post(
  path: string,
  body: string | Uint8Array,
  headers: Record<string, string> = {},
  method = 'POST',
) {
  const res = await fetch(url + path, {
    method,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), body: text ? JSON.parse(text) : null };
}

const MCP_HEADERS = { accept: 'application/json, text/event-stream' };

/** A request framed exactly as given (fetch would add its own Content-Type and Content-Length). */
function raw(method: string, path: string, headers: Record<string, string>, body: string) {
  return new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = httpRequest(new URL(url + path), { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }));
    });
    req.on('error', reject);
    if (headers['transfer-encoding'] === undefined) req.setHeader('content-length', Buffer.byteLength(body));
    req.end(body);
  });
}

describe('hostile bodies', () => {
  it('answers 5,000 nested arrays on /mcp with a JSON-RPC parse error', async () => {
    expect(deep.length).toBe(10_000);
    const res = await post('/mcp', deep, MCP_HEADERS);
    expect(res.status).toBe(400);
    expect(res.type).toMatch(/^application\/json/);
    expect(RpcErrorBody.parse(res.body)).toMatchObject({
      jsonrpc: '2.0',
      error: { code: -32700, data: { code: 'JSON_TOO_DEEP' } },
      id: null,
    });
  });

  it('answers a deep object inside a valid JSON-RPC call on /mcp with the same parse error', async () => {
    const res = await post('/mcp', deepObject, MCP_HEADERS);
    expect(res.status).toBe(400);
    expect(res.body.error.code).toBe(-32700);
  });

  it('answers broken JSON on /mcp with a JSON-RPC parse error', async () => {
    const res = await post('/mcp', '{"jsonrpc":"2.0",', MCP_HEADERS);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      jsonrpc: '2.0',
      error: { code: -32700, data: { code: 'INVALID_JSON' } },
    });
  });

  it('refuses bytes that are not UTF-8 and a poisoning key as not JSON, saying which, and reads a real U+FFFD', async () => {
    const url1 = Buffer.from('{"url":"https://1.1.1.1/"}');
    // "https://1.1.1.1/\xe9": a lone Latin-1 byte, which a lenient decoder turns into U+FFFD.
    const latin1 = Buffer.concat([url1.subarray(0, 24), Buffer.from([0xe9]), url1.subarray(24)]);
    const bytes = await post('/api/webhooks', latin1);
    expect(bytes.status).toBe(400);
    expect(bytes.body).toMatchObject({
      code: 'INVALID_JSON',
      message: 'the body is not valid JSON: it is not UTF-8',
    });
    for (const poisoned of ['{"__proto__":{}}', '{"constructor":{"prototype":{}}}']) {
      const res = await post('/api/webhooks', poisoned);
      expect(res.status, poisoned).toBe(400);
      expect(res.body, poisoned).toMatchObject({
        code: 'INVALID_JSON',
        message: 'the body is not valid JSON: a __proto__ or constructor.prototype key is refused',
      });
    }
    const broken = await post('/api/webhooks', '{"url":');
    expect(broken.body).toMatchObject({ code: 'INVALID_JSON', message: 'the body is not valid JSON' });
    // U+FFFD sent as UTF-8 is a character like any other: the body is read, and judged by its fields.
    const replacement = await post('/api/webhooks', '{"url":"https://1.1.1.1/\uFFFD","events":["nope"]}');
    expect(replacement.status).toBe(400);
    expect(replacement.body.code).toBe('INVALID_FIELD');
  });

  // One code for a body nested too deep on every /api route, search and chat included.
  it.each([
    ['/api/webhooks', 'JSON_TOO_DEEP'],
    ['/api/keys', 'JSON_TOO_DEEP'],
    ['/api/search', 'JSON_TOO_DEEP'],
    ['/api/chat', 'JSON_TOO_DEEP'],
  ])('answers 5,000 nested arrays on %s with 400 %s', async (path, code) => {
    const res = await post(path, deep);
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(ErrorBody.parse(res.body)).toMatchObject({ code, message: expect.stringMatching(/nests deeper/) });
  });

  it("answers a deep body within the paid routes' size limit with their family's invalid_input", async () => {
    // The pay-per-call family reads its bodies raw: a deep one is input its schema refuses.
    for (const body of [
      `${'['.repeat(100)}${']'.repeat(100)}`,
      `{"coin":${'{"a":'.repeat(100)}1${'}'.repeat(100)},"timeframe":"1h"}`,
    ]) {
      const res = await post('/x402/get_trade_call', body);
      expect(res.status).toBe(400);
      expect(res.body).toMatchObject({ code: 'invalid_input', _service: { quota: expect.any(Object) } });
    }
  });

  it('does not answer 500 to deep bodies on the paid routes', async () => {
    const res = await post('/x402/get_trade_call', deep);
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(res.status).toBeLessThan(500);
  });

  it('keeps the nesting a real request has', async () => {
    const res = await post('/api/search', JSON.stringify({ query: 'regime', limit: 2 }));
    expect(res.status).toBe(200);
  });

  it('treats an empty JSON body as no body where the route takes none', async () => {
    for (const [method, path] of [
      ['POST', '/api/webhooks/wh_missing/test'],
      ['DELETE', '/api/webhooks/wh_missing'],
      ['POST', '/api/webhooks/wh_missing/enable'],
    ] as const) {
      const res = await post(path, '', {}, method);
      expect(res.status, `${method} ${path}: ${JSON.stringify(res.body)}`).toBe(404);
      expect(res.body).toMatchObject({ code: 'NOT_FOUND' });
    }
  });

  // A body of no bytes is no body however it is framed: `curl -X POST -d ''` names
  // application/x-www-form-urlencoded, and Node's http.request ended without data sends an empty
  // chunked body with no Content-Type. Neither is 415 on the routes that take none, so the key is
  // checked first (401 without one); bytes under such a type are 415.
  it.each([
    ['an empty form body', { 'content-type': 'application/x-www-form-urlencoded' }, ''],
    ['an empty chunked body without Content-Type', { 'transfer-encoding': 'chunked' }, ''],
  ])('treats %s as no body where the route takes none', async (_label, framing, body) => {
    for (const [method, path] of [
      ['POST', '/api/webhooks/wh_missing/test'],
      ['POST', '/api/webhooks/wh_missing/disable'],
      ['DELETE', '/api/webhooks/wh_missing'],
    ] as const) {
      const keyed = await raw(method, path, { ...framing, authorization: `Bearer ${key}` }, body);
      expect(keyed.status, `${method} ${path}: ${keyed.text}`).toBe(404);
      expect(JSON.parse(keyed.text)).toMatchObject({ code: 'NOT_FOUND' });
      const keyless = await raw(method, path, framing, body);
      expect(keyless.status, `${method} ${path} without a key: ${keyless.text}`).toBe(401);
      expect(JSON.parse(keyless.text)).toMatchObject({ code: 'UNAUTHORIZED' });
    }
    const typed = await raw(
      'POST',
      '/api/webhooks/wh_missing/test',
      { ...framing, authorization: `Bearer ${key}` },
      'a=1',
    );
    expect(typed.status, typed.text).toBe(415);
    expect(JSON.parse(typed.text)).toMatchObject({ code: 'UNSUPPORTED_MEDIA_TYPE' });
  });

  // One rule for a body in another media type on every /api route: text/plain is refused as a
  // form or XML is (415), not read as text and then judged as a body that is not an object; search
  // and chat answer it in their own code, as the spec fixes.
  it('refuses a body in any media type but JSON alike on every /api route, text/plain as a form', async () => {
    const json = JSON.stringify({ query: 'what is the risk band' });
    const answers = [];
    for (const path of ['/api/keys', '/api/webhooks', '/api/search', '/api/chat']) {
      for (const type of ['text/plain', 'text/plain; charset=utf-8', 'application/x-www-form-urlencoded']) {
        const res = await post(path, json, { 'content-type': type });
        answers.push([path, type, res.status, res.body.code]);
      }
    }
    const expected = { '/api/search': 'INVALID_QUERY', '/api/chat': 'INVALID_QUESTION' } as Record<
      string,
      string
    >;
    expect(answers).toEqual(
      answers.map(([path, type]) => [
        path,
        type,
        expected[path as string] ? 400 : 415,
        expected[path as string] ?? 'UNSUPPORTED_MEDIA_TYPE',
      ]),
    );
  });

  it('refuses an empty body where the route needs one, naming what is missing', async () => {
    const res = await post('/api/webhooks', '');
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('INVALID_FIELD');
  });
});
