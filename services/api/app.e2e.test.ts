import { gzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { rawExchange, readAnswer } from '../../test/raw-http.ts';
import { readyzApp } from '../../test/readyz-app.ts';
import { createMetrics } from '../shared/metrics.ts';
import { Readiness } from '../shared/readiness.ts';
import { buildApp } from './app.ts';

const logger = pino({ level: 'silent' });
let app: FastifyInstance | null = null;
afterEach(async () => {
  await app?.close();
  app = null;
});

/** POSTs `body` as application/json, as it is (it may be malformed on purpose). */
function postJson(url: string, body: string): Promise<Response> {
  return fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
}

/** The first answer in `raw`: its status and JSON body. */
function parseRaw(raw: Buffer): { status: number; body: unknown } {
  const { status, text } = readAnswer(raw);
  return { status, body: JSON.parse(text) };
}

async function start(readiness = new Readiness(), requestTimeoutMs?: number, trustProxy?: string) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  let entered!: () => void;
  /** Resolves once a /slow request is being handled. */
  const inHandler = new Promise<void>((resolve) => {
    entered = resolve;
  });
  app = await buildApp({
    config: {
      BODY_LIMIT_BYTES: 1024,
      ...(requestTimeoutMs === undefined ? {} : { REQUEST_TIMEOUT_MS: requestTimeoutMs }),
      ...(trustProxy === undefined ? {} : { TRUST_PROXY: trustProxy }),
    },
    logger,
    readiness,
    metrics: createMetrics(),
    plugins: [
      async (instance) => {
        instance.post('/slow', async () => {
          entered();
          await gate;
          return { done: true };
        });
        instance.post('/echo', async (request) => ({ body: request.body }));
        instance.post('/api/echo', async (request) => ({ body: request.body }));
        instance.get('/item/:id', async (request) => request.params);
        instance.get('/files/*', async () => ({ ok: true }));
        instance.get('/ip', async (request) => ({ ip: request.ip }));
        instance.get('/boom', async () => {
          throw new Error('database password is hunter2');
        });
        // A header value Node refuses when the head is written, at the end of the turn.
        instance.get('/bad-header', async (_request, reply) => {
          reply.header('x-note', 'two\nlines');
          return { ok: true };
        });
      },
    ],
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, release, inHandler };
}

/** The app with only its readiness checks, listening; `logged` as test/readyz-app.ts reads it. */
async function startLogged(readiness: Readiness) {
  const started = await readyzApp(readiness);
  app = started.app;
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, logged: started.logged };
}

describe('HTTP app', () => {
  it('lets an in-flight request finish on close and refuses new connections', async () => {
    const { url, release, inHandler } = await start();
    const inFlight = fetch(`${url}/slow`, { method: 'POST' });
    // In flight means in the handler: a fixed sleep could close the app before it arrived.
    await inHandler;
    const closing = app!.close();
    setTimeout(release, 100);
    const res = await inFlight;
    expect(res.status).toBe(200);
    // Its keep-alive socket would hold close() open: the answer asks the client to close it.
    expect(res.headers.get('connection')).toBe('close');
    expect(await res.json()).toEqual({ done: true });
    await closing;
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    app = null;
  });

  it('refuses a body over the limit with 413 in the error shape', async () => {
    const { url } = await start();
    const res = await postJson(`${url}/echo`, JSON.stringify({ pad: 'x'.repeat(2000) }));
    expect(res.status).toBe(413);
    // The message names the limit, so the caller knows how far to cut the body.
    expect(await res.json()).toMatchObject({
      code: 'BODY_TOO_LARGE',
      message: 'the body is larger than this route accepts (at most 1024 bytes)',
    });
  });

  it('says a compressed body is compressed, rather than JSON that is not UTF-8', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify({ coin: 'BTC' })),
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({
      code: 'INVALID_JSON',
      message: 'the body is not valid JSON: it is sent with Content-Encoding gzip; send it uncompressed',
    });
  });

  it('reads a body whose Content-Encoding is empty as uncoded', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': '' },
      body: JSON.stringify({ coin: 'BTC' }),
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ body: { coin: 'BTC' } });
  });

  it('answers malformed JSON with 400 in the error shape', async () => {
    const { url } = await start();
    const res = await postJson(`${url}/echo`, '{"coin": ');
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 'INVALID_JSON' });
  });

  it('times each request under its route, and requests that match none as unmatched', async () => {
    const { url } = await start();
    expect((await fetch(`${url}/item/7`)).status).toBe(200);
    expect((await fetch(`${url}/nowhere`)).status).toBe(404);
    const text = await (await fetch(`${url}/metrics`)).text();
    const count = (route: string, status: number) =>
      Number(
        text
          .split('\n')
          .find((line) =>
            line.startsWith(
              `http_request_duration_seconds_count{method="GET",route="${route}",status="${status}"}`,
            ),
          )
          ?.split(' ')[1] ?? 0,
      );
    expect(count('/item/:id', 200)).toBe(1);
    expect(count('unmatched', 404)).toBe(1);
  });

  it('times a request that matches no route and is refused before the not-found handler (a bad JSON body)', async () => {
    const { url } = await start();
    const res = await postJson(`${url}/nowhere`, '{"unterminated');
    expect(res.status).toBe(400);
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(text).toMatch(
      /http_request_duration_seconds_count\{method="POST",route="unmatched",status="400"\} 1/,
    );
  });

  it('answers router errors in the error shape without echoing the URL', async () => {
    const { url } = await start();
    const long = await fetch(`${url}/item/${'a'.repeat(500)}`);
    expect(long.status).toBe(414);
    expect(await long.json()).toEqual({ code: 'URI_TOO_LONG', message: 'a path segment is too long' });
    const bad = await fetch(`${url}/item/%E0%A4%A`);
    expect(bad.status).toBe(400);
    expect(await bad.json()).toEqual({ code: 'BAD_URL', message: 'the URL is not validly percent-encoded' });
  });

  it("answers a path it does not serve with the catalog's 404, echoing the path without its query and cut at 200 characters", async () => {
    const { url } = await start();
    const short = await fetch(`${url}/nowhere?token=secret`);
    expect(short.status).toBe(404);
    expect(await short.json()).toEqual({ code: 'NOT_FOUND', message: 'no route GET /nowhere' });
    const long = await fetch(`${url}/${'a'.repeat(8_000)}?q=${'b'.repeat(4_000)}`);
    expect(long.status).toBe(404);
    expect(await long.json()).toEqual({ code: 'NOT_FOUND', message: `no route GET /${'a'.repeat(199)}…` });
    // Cut inside the escapes of one character (an emoji, 12 characters encoded): it is left out whole,
    // so the message's path decodes.
    const emoji = encodeURIComponent('😀');
    const escaped = await fetch(`${url}/${'a'.repeat(193)}${emoji}`);
    expect(escaped.status).toBe(404);
    expect(await escaped.json()).toEqual({ code: 'NOT_FOUND', message: `no route GET /${'a'.repeat(193)}…` });
    // A path it serves with another method: 405, its path echoed as far.
    const wrong = await fetch(`${url}/files/${'c'.repeat(8_000)}`, { method: 'DELETE' });
    expect(wrong.status).toBe(405);
    expect(((await wrong.json()) as { message: string }).message).toBe(
      `/files/${'c'.repeat(193)}… does not take DELETE; it takes GET, HEAD`,
    );
  });

  it('answers HTTP parser errors in the error shape and closes the connection', async () => {
    const { url } = await start();
    const garbage = parseRaw(await rawExchange(url, ['NOT HTTP AT ALL\r\n\r\n']));
    expect(garbage).toEqual({
      status: 400,
      body: { code: 'BAD_REQUEST', message: 'the request is not valid HTTP' },
    });
    const huge = parseRaw(
      await rawExchange(url, [`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20_000)}\r\n\r\n`]),
    );
    expect(huge).toEqual({
      status: 431,
      body: { code: 'HEADERS_TOO_LARGE', message: 'the request headers are too large' },
    });
  });

  it('answers a request line past the parser limit with 414 (RFC 9112 §3), headers past it with 431', async () => {
    const { url } = await start();
    const tooLong = {
      status: 414,
      body: {
        code: 'URI_TOO_LONG',
        message: 'the request line is longer than the 16 KiB the server reads; send a shorter URL',
      },
    };
    // On a fresh connection, and as a keep-alive connection's second request.
    const longUrl = `GET /healthz?q=${'a'.repeat(17_000)} HTTP/1.1\r\nHost: x\r\n\r\n`;
    expect(parseRaw(await rawExchange(url, [longUrl]))).toEqual(tooLong);
    const second = await rawExchange(url, [`GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n${longUrl}`]);
    expect(parseRaw(second.subarray(second.indexOf('HTTP/1.1 414')))).toEqual(tooLong);
    // A URL within the limit whose headers take the request past it: the headers are too large.
    const both = await rawExchange(url, [
      `GET /healthz?q=${'a'.repeat(10_000)} HTTP/1.1\r\nHost: x\r\nX-Pad: ${'b'.repeat(10_000)}\r\n\r\n`,
    ]);
    expect(parseRaw(both).status).toBe(431);
  });

  it('refuses a request with two Host headers (RFC 9112) with 400, and serves one with one', async () => {
    const { url } = await start();
    const twice = await rawExchange(url, [
      'GET /healthz HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\nConnection: close\r\n\r\n',
    ]);
    expect(parseRaw(twice)).toEqual({
      status: 400,
      body: { code: 'BAD_REQUEST', message: 'Host was sent more than once; send it exactly once' },
    });
    const once = await rawExchange(url, [
      'GET /healthz HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n',
    ]);
    expect(parseRaw(once).status).toBe(200);
  });

  it('refuses a request with two Authorization headers with 400 rather than reading the first', async () => {
    const { url } = await start();
    const twice = await rawExchange(url, [
      'GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nauthorization: Bearer b\r\nConnection: close\r\n\r\n',
    ]);
    expect(parseRaw(twice)).toEqual({
      status: 400,
      body: { code: 'BAD_REQUEST', message: 'Authorization was sent more than once; send it exactly once' },
    });
    const once = await rawExchange(url, [
      'GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\nConnection: close\r\n\r\n',
    ]);
    expect(parseRaw(once).status).toBe(200);
  });

  it('refuses an /api request with two Content-Type headers (RFC 9110 §8.3) with 400 rather than reading the first', async () => {
    const { url } = await start();
    const post = (path: string, types: string[]) =>
      rawExchange(url, [
        `POST ${path} HTTP/1.1\r\nHost: x\r\n${types.map((t) => `Content-Type: ${t}\r\n`).join('')}Content-Length: 8\r\nConnection: close\r\n\r\n{"a":1}\n`,
      ]);
    for (const types of [
      ['application/json', 'application/json'],
      ['application/json', 'text/plain'],
    ]) {
      // The origin form and the absolute form (RFC 9112 §3.2.2), which the router serves alike.
      for (const path of ['/api/echo', 'http://x/api/echo']) {
        expect(parseRaw(await post(path, types)), `${path}: ${types.join(' + ')}`).toEqual({
          status: 400,
          body: {
            code: 'BAD_REQUEST',
            message: 'Content-Type was sent more than once; send it exactly once',
          },
        });
      }
    }
    expect(parseRaw(await post('/api/echo', ['application/json']))).toEqual({
      status: 200,
      body: { body: { a: 1 } },
    });
  });

  it('cuts off a body that trickles in slower than the request timeout with 408', async () => {
    const { url } = await start(new Readiness(), 500);
    // Announces 100 bytes, sends 10, then nothing: the server must answer and close on its own.
    const raw = await rawExchange(url, [
      'POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"pad":"xx',
    ]);
    expect(parseRaw(raw)).toEqual({
      status: 408,
      body: { code: 'REQUEST_TIMEOUT', message: 'the request did not arrive in time' },
    });
  });

  it.each([
    ['', '127.0.0.1'],
    ['10.0.0.0/8', '127.0.0.1'],
    ['1', '198.51.100.7'],
    ['2', '203.0.113.9'],
    ['127.0.0.1', '198.51.100.7'],
    ['127.0.0.0/8,10.0.0.0/8', '198.51.100.7'],
  ])('TRUST_PROXY=%j takes the client address as %s', async (setting, expected) => {
    const { url } = await start(new Readiness(), undefined, setting);
    // The request came through two hops: 203.0.113.9 -> 198.51.100.7 -> us (127.0.0.1).
    const res = await fetch(`${url}/ip`, { headers: { 'x-forwarded-for': '203.0.113.9, 198.51.100.7' } });
    expect(await res.json()).toEqual({ ip: expected });
  });

  it('hides the internals of a 500', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/boom`);
    expect(res.status).toBe(500);
    // Every answer, a refusal or an unknown path's too: no type sniffing, no Referer.
    for (const answer of [res, await fetch(`${url}/no-such-path`)]) {
      expect(answer.headers.get('x-content-type-options')).toBe('nosniff');
      expect(answer.headers.get('referrer-policy')).toBe('no-referrer');
    }
    expect(await res.json()).toEqual({ code: 'INTERNAL_ERROR', message: 'internal error' });
  });

  it('an answer that cannot be written when its turn ends is a 500 in the documented shape, and the process serves on', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/bad-header`);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ code: 'INTERNAL_ERROR', message: 'internal error' });
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
  });

  it('reports not ready with 503 when a check fails or hangs', async () => {
    const readiness = new Readiness();
    readiness.add('fine', async () => ({ ok: true }));
    readiness.add('broken', async () => {
      throw new Error('connection refused');
    });
    readiness.add('hung', () => new Promise(() => {}));
    const { url } = await start(readiness);
    const res = await fetch(`${url}/readyz`);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      status: 'not_ready',
      checks: {
        fine: { ok: true },
        broken: { ok: false, detail: 'failed (the full error is in the service log)' },
        hung: { ok: false, detail: 'no answer within 2000 ms' },
      },
    });
  });

  it("logs a degraded check's words once while only its figures change, and again when its reason does", async () => {
    const readiness = new Readiness();
    // A stale chain as ChainHeads reports it: the age grows at every probe, the RPC's words stay.
    let ageS = 30;
    let reason = 'refused';
    readiness.add('chain', async () => {
      ageS += 2;
      return {
        ok: true,
        degraded: true,
        detail: `eip155:8453: stale, no new block seen for ${ageS} s; its head could not be read (${reason})`,
        networks: [{ network: 'eip155:8453', ageS, stale: true, error: reason }],
        logged: { 'eip155:8453': 'request to rpc.internal/v2/KEY failed' },
      };
    });
    const { url, logged } = await startLogged(readiness);
    for (let probe = 0; probe < 3; probe++) {
      const body = JSON.stringify(await (await fetch(`${url}/readyz`)).json());
      expect(body).not.toContain('rpc.internal');
    }
    expect(logged()).toHaveLength(1);
    expect(logged()[0]).toMatchObject({
      check: 'chain',
      result: { logged: { 'eip155:8453': 'request to rpc.internal/v2/KEY failed' } },
    });
    reason = 'timed out';
    await fetch(`${url}/readyz`);
    expect(logged()).toHaveLength(2);
  });

  it("shows a failing dependency's address only in the log, once until its words change", async () => {
    const readiness = new Readiness();
    readiness.add('eventStore', async () => ({
      ok: false,
      kind: 'postgres',
      detail: 'postgres: connect ECONNREFUSED 10.0.0.5:5432',
    }));
    const { url, logged } = await startLogged(readiness);
    for (let probe = 0; probe < 2; probe++) {
      const res = await fetch(`${url}/readyz`);
      expect(res.status).toBe(503);
      expect(await res.json()).toEqual({
        status: 'not_ready',
        checks: {
          eventStore: {
            ok: false,
            kind: 'postgres',
            detail: 'refused (the full error is in the service log)',
          },
        },
      });
    }
    expect(logged()).toHaveLength(1);
    expect(logged()[0]).toMatchObject({
      check: 'eventStore',
      result: { detail: 'postgres: connect ECONNREFUSED 10.0.0.5:5432' },
    });
  });
});
