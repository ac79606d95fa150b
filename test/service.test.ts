import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import { newEvent } from '../contracts/events.ts';
import type { EventStats } from '../projections/event-stats.ts';
import type { ProjectionRunner } from '../projections/runner.ts';
import { type RunningService, startService } from '../services/service.ts';

const logger = pino({ level: 'silent' });

describe('service on embedded defaults (LMDB, in-process bus and cache)', () => {
  let dir: string;
  let service: RunningService;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'svc-'));
    // The replay clock at an hour per 100 ms: the scheduler sees candles close within the test.
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      REPLAY_SPEED: '36000',
      SCHEDULE_TIMEFRAMES: '1h',
    });
    service = await startService(config, ['api', 'engine', 'projections'], logger);
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
    const component = service.components.find((c) => c.name === 'projections') as unknown as {
      runners: Map<string, ProjectionRunner<EventStats>>;
    };
    const stats = component.runners.get('event-stats')!;
    await expect
      .poll(() => stats.state.byType.VerdictRecorded ?? 0, { timeout: 15_000 })
      .toBeGreaterThanOrEqual(6);
    const verdicts = (await service.adapters.eventStore.readAll()).filter(
      (e) => e.type === 'VerdictRecorded',
    );
    expect(verdicts.every((e) => (e.data as { trigger: string; feed: string }).trigger === 'schedule')).toBe(
      true,
    );
    expect(new Set(verdicts.map((e) => (e.data as { coin: string }).coin))).toEqual(
      new Set(['BTC', 'ETH', 'SOL']),
    );
  });

  it('folds appended events into the projections and relays them to the bus', async () => {
    const { eventStore, bus } = service.adapters;
    const received: string[] = [];
    const consumer = await bus.consume({ durable: 'svc-test', filterSubject: 'sig.events.>' }, async (m) => {
      received.push(m.msgId);
      await m.ack();
    });
    const result = await eventStore.append('apikey-k1', [
      newEvent('ApiKeyIssued', {
        keyId: 'k1',
        keyHash: 'a'.repeat(64),
        prefix: 'sk_live_',
        plan: 'pro',
        owner: 'test',
        via: 'operator',
      }),
    ]);
    const component = service.components.find((c) => c.name === 'projections') as unknown as {
      runners: Map<string, ProjectionRunner<EventStats>>;
    };
    const stats = component.runners.get('event-stats')!;
    await stats.waitFor(result.position);
    expect(stats.state.byType.ApiKeyIssued).toBe(1);
    const [appended] = await eventStore.readAll({ after: result.position - 1, maxCount: 1 });
    await expect.poll(() => received.includes(appended!.id), { timeout: 5_000 }).toBe(true);
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
    expect(await res.json()).toEqual({ code: 'NOT_FOUND', message: 'no route GET /nope' });
  });
});
