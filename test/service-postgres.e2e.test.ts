import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SHIPPED_MARKET_DIR } from '../adapters/market/replay.ts';
import { loadConfig } from '../contracts/config.ts';
import type { Role } from '../services/component.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { type RunningService, startService } from '../services/service.ts';
import { NATS_URL } from './nats-server.ts';
import {
  dropSchemas,
  POSTGRES_URL,
  postgresRelay,
  shouldRunPostgresSuite,
  uniqueSchema,
} from './postgres-probe.ts';
import { REDIS_URL } from './redis-probe.ts';

const run = await shouldRunPostgresSuite('service on PostgreSQL');
const logger = pino({ level: 'silent' });
const roles: Role[] = ['api', 'engine', 'projections', 'dispatcher'];

interface Ready {
  status: string;
  checks: Record<string, { ok: boolean; kind?: string; detail?: string }>;
}

describe.runIf(run)('service on PostgreSQL, NATS JetStream and Redis by configuration alone', () => {
  let dir: string;
  let service: RunningService;
  const id = Math.random().toString(36).slice(2, 10);
  const schema = uniqueSchema('svc_test');
  const relay = postgresRelay();

  beforeAll(async () => {
    await relay.start();
    dir = await mkdtemp(join(tmpdir(), 'svc-pg-'));
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      // The shipped slice: one 4h verdict for each of its six coins is asserted below.
      MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
      REPLAY_SPEED: '0',
      SCHEDULE_TIMEFRAMES: '4h',
      EVENT_STORE: 'postgres',
      POSTGRES_URL: relay.url,
      POSTGRES_SCHEMA: schema,
      POSTGRES_POOL_SIZE: '4',
      BUS: 'nats',
      NATS_URL,
      NATS_STREAM: `SVC_PG_${id}`,
      NATS_SUBJECT_PREFIX: `svcpg${id}`,
      CACHE: 'redis',
      REDIS_URL,
      REDIS_PREFIX: `svcpg:${id}:`,
      WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
    });
    service = await startService(config, roles, logger);
  });
  afterAll(async () => {
    const bus = service?.adapters.bus as unknown as { deleteStream?: () => Promise<void> };
    await bus?.deleteStream?.();
    await service?.stop();
    await relay.cut();
    await rm(dir, { recursive: true, force: true });
    await dropSchemas([schema]);
  });

  const ready = async () => {
    const res = await fetch(`${service.url}/readyz`);
    return { status: res.status, body: (await res.json()) as Ready };
  };

  it('reports PostgreSQL, NATS and Redis as ready', async () => {
    // Ready once its followers have caught up with the log the scheduler is writing into at start
    // and every check answers within its bound: on a loaded host (CI, load 5-6) the first probe
    // can come before that, as an orchestrator's would. The checks not ok are named on failure.
    // The kinds are read from that same answer: a later probe on such a host can find a check's
    // bound passed again (Redis's PING answered after its health timeout: seen in CI at load 15).
    let body: Ready | undefined;
    const notOk = async () => {
      const probe = await ready();
      body = probe.body;
      const failing = Object.entries(probe.body.checks).filter(([, check]) => !check.ok);
      return { status: probe.status, failing: Object.fromEntries(failing) };
    };
    await expect.poll(notOk, { interval: 250 }).toEqual({ status: 200, failing: {} });
    if (!body) throw new Error('no readiness answer');
    expect(body.checks.eventStore).toMatchObject({ ok: true, kind: 'postgres' });
    expect(body.checks.bus).toMatchObject({ ok: true, kind: 'nats' });
    expect(body.checks.cache).toMatchObject({ ok: true, kind: 'redis' });
  });

  it('shows on /metrics how much committed log is not yet flushed, and the bound on it', async () => {
    // A scrape leaves out a source slower than SOURCE_TIMEOUT_MS (a store query on a loaded host,
    // the pool's first connection): the series shows on a later scrape, as a Prometheus server sees it.
    let text = '';
    await expect
      .poll(
        async () => {
          text = await (await fetch(`${service.url}/metrics`)).text();
          return /^event_store_unflushed\{unit="seconds"\}/m.test(text);
        },
        { interval: 250 },
      )
      .toBe(true);
    const bound = /^event_store_unflushed\{unit="seconds"\} ([0-9.]+)$/m.exec(text);
    const bytes = /^event_store_unflushed\{unit="bytes"\} ([0-9.]+)$/m.exec(text);
    const delay = await new pg.Client({ connectionString: POSTGRES_URL });
    await delay.connect();
    try {
      const { rows } = await delay.query(
        `SELECT setting::int AS ms FROM pg_settings WHERE name = 'wal_writer_delay'`,
      );
      expect(Number(bound?.[1])).toBeCloseTo((3 * rows[0].ms) / 1000, 6);
    } finally {
      await delay.end();
    }
    expect(Number(bytes?.[1])).toBeGreaterThanOrEqual(0);
  });

  it('records the scheduled verdicts in PostgreSQL and keeps projection snapshots beside them', async () => {
    const { eventStore } = service.adapters;
    // One 4h verdict for each of the six replayed spot coins (BTC, ETH, SOL, BNB, XRP, DOGE),
    // recorded concurrently: the count goes from 0 to 6 between two polls, never stopping at 3.
    await expect
      .poll(async () =>
        (await eventStore.readAll())
          .filter((e) => e.type === 'VerdictRecorded')
          .map((e) => e.stream)
          .sort(),
      )
      .toEqual(['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP'].map((coin) => `verdicts-BINANCE_SPOT-${coin}-4h`));
    const client = new pg.Client({ connectionString: POSTGRES_URL });
    await client.connect();
    try {
      // The service keeps appending (outcomes, quota): the table's rows are the log the store
      // reads, up to the head it reports (positions increase but are not consecutive).
      const log = await eventStore.readAll();
      const { rows } = await client.query(
        `SELECT count(*)::int AS n FROM "${schema}".events WHERE position <= $1`,
        [log.at(-1)!.position],
      );
      expect(rows[0].n).toBe(log.length);
      expect(await eventStore.headPosition()).toBeGreaterThanOrEqual(log.at(-1)!.position);
      await service.adapters.projectionStore.save('probe', { version: 1, checkpoint: 3, state: { a: 1 } });
      const saved = await client.query(
        `SELECT checkpoint, state FROM "${schema}".projections WHERE name = 'probe'`,
      );
      expect(saved.rows[0]).toEqual({ checkpoint: '3', state: { a: 1 } });
    } finally {
      await client.end();
    }
  });

  it('goes not ready and answers writes with a retryable 503 while PostgreSQL is away, reads keep serving', async () => {
    const issued = await issueKey(service.adapters.eventStore, {
      plan: 'pro',
      owner: `pg-${id}`,
      via: 'operator',
    });
    const auth = { authorization: `Bearer ${issued.key}`, 'content-type': 'application/json' };
    await expect
      .poll(async () => (await fetch(`${service.url}/api/webhooks`, { headers: auth })).status)
      .toBe(200);
    const create = () =>
      fetch(`${service.url}/api/webhooks`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ url: 'https://127.0.0.1/hook', events: ['trade_call'] }),
      });

    await relay.cut();
    try {
      const down = await ready();
      expect(down.status).toBe(503);
      expect(down.body.status).toBe('not_ready');
      expect(down.body.checks.eventStore).toMatchObject({ ok: false, kind: 'postgres' });
      // Anyone who reaches the port reads /readyz: once the pool's connections are gone, the check
      // is named with a generic reason, not the driver's words (connect ECONNREFUSED <host>:<port>),
      // which go to the log.
      await expect
        .poll(async () => (await ready()).body.checks.eventStore?.detail)
        .toBe('refused (the full error is in the service log)');
      const refusedReady = JSON.stringify((await ready()).body);
      expect(refusedReady).not.toContain(`:${new URL(relay.url).port}`);
      expect(refusedReady).not.toContain('127.0.0.1');
      expect(down.body.checks.bus?.ok).toBe(true);

      const refused = await create();
      expect(refused.status).toBe(503);
      const refusedBody = (await refused.json()) as { message: string };
      expect(refusedBody).toMatchObject({ code: 'event_store_unavailable', retryable: true });
      // Not the driver's words, which name the server (connect ECONNREFUSED <host>:<port>).
      expect(refusedBody.message).toBe('the event log is unreachable right now; retry shortly');
      expect(refused.headers.get('retry-after')).toBe('1');

      const listed = await fetch(`${service.url}/api/webhooks`, { headers: auth });
      expect(listed.status).toBe(200);
      expect(await listed.json()).toEqual({
        webhooks: [],
        _service: expect.objectContaining({ auth: expect.objectContaining({ outcome: 'OK' }) }),
      });
    } finally {
      await relay.start();
    }

    await expect.poll(async () => (await ready()).status).toBe(200);
    const created = await create();
    expect(created.status).toBe(201);
  });
});
