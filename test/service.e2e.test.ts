import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHIPPED_MARKET_DIR } from '../adapters/market/replay.ts';
import { loadConfig } from '../contracts/config.ts';
import { newEvent } from '../contracts/events.ts';
import type { EventStats } from '../projections/event-stats.ts';
import type { ProjectionRunner } from '../projections/runner.ts';
import type { Role } from '../services/component.ts';
import { type RunningService, startService } from '../services/service.ts';
import { NATS_URL } from './nats-server.ts';
import { REDIS_URL } from './redis-probe.ts';

const logger = pino({ level: 'silent' });
const roles: Role[] = ['api', 'engine', 'projections'];

/** A service on a fresh DATA_DIR, on loopback with a free port and the replay feed. */
async function start(dirPrefix: string, env: Record<string, string>) {
  const dir = await mkdtemp(join(tmpdir(), dirPrefix));
  // The shipped slice (its six coins are asserted below), not the full data set beside the checkout.
  const config = loadConfig({
    DATA_DIR: dir,
    PORT: '0',
    HOST: '127.0.0.1',
    FEED: 'replay',
    MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
    ...env,
  });
  return { dir, service: await startService(config, roles, logger) };
}

function eventStats(service: RunningService): ProjectionRunner<EventStats> {
  const component = service.components.find((c) => c.name === 'projections') as unknown as {
    runners: Map<string, ProjectionRunner<EventStats>>;
  };
  return component.runners.get('event-stats')!;
}

describe('service on embedded defaults (LMDB, in-process bus and cache)', () => {
  let dir: string;
  let service: RunningService;

  beforeAll(async () => {
    // The replay clock at an hour per 100 ms: the scheduler sees candles close within the test.
    ({ dir, service } = await start('svc-', { REPLAY_SPEED: '36000', SCHEDULE_TIMEFRAMES: '1h' }));
  });
  afterAll(async () => {
    await service?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('answers liveness', async () => {
    const res = await fetch(`${service.url}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ status: 'ok' });
  });

  it('reports each dependency in readiness', async () => {
    const res = await fetch(`${service.url}/readyz`);
    const body = (await res.json()) as {
      status: string;
      checks: Record<string, { ok: boolean; kind?: string }>;
    };
    expect(res.status).toBe(200);
    expect(body.status).toBe('ready');
    expect(body.checks.eventStore).toMatchObject({ ok: true, kind: 'lmdb' });
    expect(body.checks.bus).toMatchObject({ ok: true, kind: 'memory' });
    expect(body.checks.cache).toMatchObject({ ok: true, kind: 'memory' });
    expect(body.checks['projection:event-stats']).toMatchObject({ ok: true });
    expect(body.checks.relay).toMatchObject({ ok: true });
    expect(body.checks.feed).toMatchObject({ ok: true, kind: 'replay' });
    expect(body.checks.scheduler).toMatchObject({ ok: true });
  });

  it('records scheduled verdicts from the replayed candles as they close', async () => {
    const stats = eventStats(service);
    await expect.poll(() => stats.state.byType.VerdictRecorded ?? 0).toBeGreaterThanOrEqual(6);
    const verdicts = (await service.adapters.eventStore.readAll()).filter(
      (e) => e.type === 'VerdictRecorded',
    );
    expect(verdicts.every((e) => (e.data as { trigger: string; feed: string }).trigger === 'schedule')).toBe(
      true,
    );
    const coins = new Set(verdicts.map((e) => (e.data as { coin: string }).coin));
    expect([...coins].every((c) => ['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP'].includes(c))).toBe(true);
    expect(coins.size).toBeGreaterThanOrEqual(3);
  });

  it('folds appended events into the projections and relays them to the bus', async () => {
    const { eventStore, bus } = service.adapters;
    const received: string[] = [];
    const consumer = await bus.consume({ durable: 'svc-test', filterSubject: 'sig.events.>' }, async (m) => {
      received.push(m.msgId);
      await m.ack();
    });
    // A type the relay publishes by default (RELAY_EVENT_TYPES: what the dispatcher consumes).
    const result = await eventStore.append('webhooks-k1', [
      newEvent('SubscriptionReEnabled', { subscriptionId: 'wh_none' }),
    ]);
    const stats = eventStats(service);
    await stats.waitFor(result.position);
    expect(stats.state.byType.SubscriptionReEnabled).toBe(1);
    const [appended] = await eventStore.readAll({ after: result.position - 1, maxCount: 1 });
    await expect.poll(() => received.includes(appended!.id)).toBe(true);
    await consumer.stop();
  });

  it('exports Prometheus metrics', async () => {
    const res = await fetch(`${service.url}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/plain');
    const text = await res.text();
    expect(text).toContain('http_request_duration_seconds_bucket');
    expect(text).toContain('process_resident_memory_bytes');
  });

  it('answers unknown routes with a JSON 404', async () => {
    const res = await fetch(`${service.url}/nope`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      code: 'NOT_FOUND',
      message: 'no route GET /nope',
      _service: expect.objectContaining({ auth: expect.objectContaining({ tier: 'free' }) }),
    });
  });

  it('answers a path it serves, asked with another method, with 405 and Allow', async () => {
    for (const [method, path, allow] of [
      // OPTIONS: the CORS preflight every route a browser page may call answers (api/cors.ts).
      ['PUT', '/api/verdicts?coin=BTC', 'GET, HEAD, OPTIONS'],
      ['GET', '/x402/get_trade_call', 'OPTIONS, POST'],
      ['DELETE', '/api/webhooks', 'GET, HEAD, OPTIONS, POST'],
      ['POST', '/api/webhooks/abc/deliveries', 'GET, HEAD, OPTIONS'],
    ] as const) {
      const res = await fetch(`${service.url}${path}`, { method });
      expect(res.status, `${method} ${path}`).toBe(405);
      expect(res.headers.get('allow'), `${method} ${path}`).toBe(allow);
      const body = await res.json();
      expect(body).toMatchObject({
        code: 'METHOD_NOT_ALLOWED',
        message: `${path.split('?')[0]} does not take ${method}; it takes ${allow}`,
        _service: expect.any(Object),
      });
    }
    // A path it does not serve stays a 404, whatever the method.
    expect((await fetch(`${service.url}/api/nope`, { method: 'PUT' })).status).toBe(404);
  });
});

describe('service on the distributed engines (NATS JetStream, Redis) by configuration alone', () => {
  let dir: string;
  let service: RunningService;
  const id = Math.random().toString(36).slice(2, 10);

  beforeAll(async () => {
    ({ dir, service } = await start('svc-dist-', {
      REPLAY_SPEED: '0',
      SCHEDULE_TIMEFRAMES: '4h',
      BUS: 'nats',
      NATS_URL,
      NATS_STREAM: `SVC_TEST_${id}`,
      NATS_SUBJECT_PREFIX: `svctest${id}`,
      CACHE: 'redis',
      REDIS_URL,
      REDIS_PREFIX: `svctest:${id}:`,
    }));
  });
  afterAll(async () => {
    const bus = service?.adapters.bus as unknown as { deleteStream?: () => Promise<void> };
    await bus?.deleteStream?.();
    await service?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('reports the real servers as ready', async () => {
    const body = (await (await fetch(`${service.url}/readyz`)).json()) as {
      checks: Record<string, { ok: boolean; kind?: string }>;
    };
    expect(body.checks.bus).toMatchObject({ ok: true, kind: 'nats' });
    expect(body.checks.cache).toMatchObject({ ok: true, kind: 'redis' });
  });

  it('relays the scheduled verdicts to JetStream with the event id as message id', async () => {
    const { bus, eventStore } = service.adapters;
    await expect
      .poll(async () => (await eventStore.readAll()).filter((e) => e.type === 'VerdictRecorded').length)
      .toBe(6);
    const ids = (await eventStore.readAll()).map((e) => e.id);
    const received = new Set<string>();
    const consumer = await bus.consume(
      { durable: `svc_${id}`, filterSubject: `svctest${id}.events.VerdictRecorded` },
      async (m) => {
        received.add(m.msgId);
        await m.ack();
      },
    );
    // One scheduled 4h verdict per coin of the shipped slice (six coins on the replay's spot venue).
    await expect.poll(() => received.size).toBe(6);
    expect([...received].every((msgId) => ids.includes(msgId))).toBe(true);
    await consumer.stop();
  });
});
