import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { createMetrics } from '../shared/metrics.ts';
import { Readiness } from '../shared/readiness.ts';
import { buildApp } from './app.ts';

const logger = pino({ level: 'silent' });
let app: FastifyInstance | null = null;
afterEach(async () => {
  await app?.close();
  app = null;
});

async function start(readiness = new Readiness()) {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  app = await buildApp({
    config: { BODY_LIMIT_BYTES: 1024 },
    logger,
    readiness,
    metrics: createMetrics(),
    plugins: [
      async (instance) => {
        instance.post('/slow', async () => {
          await gate;
          return { done: true };
        });
        instance.post('/echo', async (request) => ({ body: request.body }));
        instance.get('/boom', async () => {
          throw new Error('database password is hunter2');
        });
      },
    ],
  });
  const url = await app.listen({ host: '127.0.0.1', port: 0 });
  return { url, release };
}

describe('HTTP app', () => {
  it('lets an in-flight request finish on close and refuses new connections', async () => {
    const { url, release } = await start();
    const inFlight = fetch(`${url}/slow`, { method: 'POST' });
    await new Promise((r) => setTimeout(r, 100));
    const closing = app!.close();
    setTimeout(release, 100);
    const res = await inFlight;
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ done: true });
    await closing;
    await expect(fetch(`${url}/healthz`)).rejects.toThrow();
    app = null;
  });

  it('refuses a body over the limit with 413 in the error shape', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ pad: 'x'.repeat(2000) }),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toMatchObject({ code: 'FST_ERR_CTP_BODY_TOO_LARGE' });
  });

  it('answers malformed JSON with 400 in the error shape', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"coin": ',
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ code: 'FST_ERR_CTP_INVALID_JSON_BODY' });
  });

  it('hides the internals of a 500', async () => {
    const { url } = await start();
    const res = await fetch(`${url}/boom`);
    expect(res.status).toBe(500);
    expect(await res.json()).toEqual({ code: 'INTERNAL_ERROR', message: 'internal error' });
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
        broken: { ok: false, detail: 'connection refused' },
        hung: { ok: false, detail: 'no answer within 2000 ms' },
      },
    });
  });
});
