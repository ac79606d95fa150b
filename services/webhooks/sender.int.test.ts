import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EVENT_VERSION_HEADER,
  SEQUENCE_HEADER,
  signedHeaders,
  verifyWebhook,
} from '../../contracts/webhook-verify.ts';
import { RESPONSE_LIMIT, sendSigned } from './sender.ts';

/** Each path answers its own way; every request is remembered with its raw body. */
const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/ok': (_req, res) => res.writeHead(200).end('thanks'),
  '/long': (_req, res) => res.writeHead(200).end('x'.repeat(RESPONSE_LIMIT * 64)),
  '/busy': (_req, res) => res.writeHead(503, { 'retry-after': '7' }).end('later'),
  '/moved': (_req, res) => res.writeHead(302, { location: '/ok' }).end(),
  '/hang': () => {},
  '/stall': (_req, res) => {
    res.writeHead(200, { 'content-length': '100' });
    res.write('partial');
  },
};

describe('sendSigned', () => {
  let server: Server;
  let base: string;
  const agent = new Agent({ connections: 4 });
  const sockets = new Set<Socket>();
  const received: { path: string; headers: IncomingMessage['headers']; body: string }[] = [];
  const secret = `whsec_${Buffer.from('a secret of thirty-two bytes!!!!').toString('base64')}`;
  const send = (path: string, timeoutMs = 2_000) =>
    sendSigned(agent, {
      url: `${base}${path}?q=1`,
      secret,
      event: 'trade_call',
      deliveryId: 'd-1',
      seq: 3,
      body: JSON.stringify({ event: 'trade_call', delivery_id: 'd-1', data: { note: 'ünïcode' } }),
      timeoutMs,
    });

  beforeAll(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const path = req.url!.split('?')[0]!;
        received.push({ path: req.url!, headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
        routes[path]!(req, res);
      });
    });
    server.on('connection', (s: Socket) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
    await agent.close();
  });

  it('posts the exact body with signatures both verifiers accept, and keeps the answer', async () => {
    const result = await send('/ok');
    expect(result).toMatchObject({
      ok: true,
      status: 200,
      error: null,
      response: 'thanks',
      retryAfterMs: null,
    });
    const got = received.at(-1)!;
    expect(got.path).toBe('/ok?q=1');
    expect(got.headers[SEQUENCE_HEADER]).toBe('3');
    expect(got.headers['content-type']).toBe('application/json');
    expect(got.headers[EVENT_VERSION_HEADER]).toBe('1');
    expect(got.headers['user-agent']).toBe('signal-service-webhooks/1');
    // Every header the contract's signedHeaders makes, as it makes it, arrives over HTTP.
    const signed = signedHeaders({
      secret,
      event: 'trade_call',
      deliveryId: 'd-1',
      timestamp: Number(got.headers['x-service-timestamp']),
      rawBody: got.body,
    });
    for (const [name, value] of Object.entries(signed)) expect(got.headers[name]).toBe(value);
    expect(verifyWebhook({ secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
    const headers = Object.fromEntries(Object.entries(got.headers).map(([k, v]) => [k, String(v)]));
    expect(new Webhook(secret.slice('whsec_'.length)).verify(got.body, headers)).toMatchObject({
      delivery_id: 'd-1',
    });
  });

  it('keeps only the first RESPONSE_LIMIT bytes of a long answer', async () => {
    const result = await send('/long');
    expect(result.ok).toBe(true);
    expect(result.response).toHaveLength(RESPONSE_LIMIT);
  });

  it('reports a failing status with its Retry-After, and does not follow redirects', async () => {
    expect(await send('/busy')).toMatchObject({
      ok: false,
      status: 503,
      error: 'HTTP 503',
      retryAfterMs: 7_000,
    });
    const before = received.length;
    expect(await send('/moved')).toMatchObject({
      ok: false,
      status: 302,
      error: 'redirect (302) not followed',
    });
    expect(received.length).toBe(before + 1);
  });

  it('times out an endpoint that never answers, after timeoutMs', async () => {
    const started = Date.now();
    const result = await send('/hang', 300);
    expect(result).toMatchObject({ ok: false, status: null, response: null });
    expect(result.error).toMatch(/^timeout/);
    // /hang never answers: a result at all shows the timeout ended the wait; it did not end sooner.
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
  });

  it('times out an answer whose body stalls past timeoutMs, as one that never answers', async () => {
    const started = Date.now();
    const result = await send('/stall', 300);
    // Not a success: a 200 whose body never completes is no complete response.
    expect(result).toMatchObject({ ok: false, status: null, response: null });
    expect(result.error).toBe('timeout: no complete response in time (HTTP 200 headers, body unfinished)');
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
  });

  it('reports a refused connection as a failure, never throwing', async () => {
    const result = await sendSigned(agent, {
      url: 'http://127.0.0.1:1/',
      secret,
      event: 'trade_call',
      deliveryId: 'd-2',
      body: '{}',
      timeoutMs: 1_000,
    });
    expect(result).toMatchObject({ ok: false, status: null, response: null });
    expect(result.error).toMatch(/ECONNREFUSED/);
  });
});
