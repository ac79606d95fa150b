import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import type { Role } from '../services/component.ts';
import { type RunningService, startService } from '../services/service.ts';
import { type PrivateNatsServer, requireNats, startNatsServer } from './nats-server.ts';

const logger = pino({ level: 'silent' });

interface Readyz {
  status: string;
  checks: Record<string, { ok: boolean }>;
}

async function readyz(service: RunningService): Promise<{ status: number; body: Readyz }> {
  const res = await fetch(`${service.url}/readyz`);
  return { status: res.status, body: (await res.json()) as Readyz };
}

// Each role's readiness checks only what that role needs: during a NATS outage the api keeps
// serving and must stay in its load balancer; the projections role (the relay) cannot.
describe.runIf(await requireNats())('readiness per role during a NATS outage', () => {
  let nats: PrivateNatsServer;
  const dirs: string[] = [];
  const services: RunningService[] = [];
  // One deployment: every role on one stream, unique to this run.
  const stream = `READYZ_${randomUUID().replaceAll('-', '').slice(0, 12)}`;

  async function start(roles: Role[]): Promise<RunningService> {
    const dir = await mkdtemp(join(tmpdir(), 'readyz-'));
    dirs.push(dir);
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      BUS: 'nats',
      NATS_URL: nats.url,
      NATS_STREAM: stream,
      NATS_SUBJECT_PREFIX: stream.toLowerCase(),
    });
    const service = await startService(config, roles, logger);
    services.push(service);
    return service;
  }

  beforeAll(async () => {
    nats = await startNatsServer();
  });
  afterAll(async () => {
    for (const service of services) await service.stop().catch(() => undefined);
    await nats?.dispose();
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('keeps the api ready and marks the relay role not ready', async () => {
    const api = await start(['api']);
    const projections = await start(['projections']);
    expect((await readyz(api)).status).toBe(200);
    expect((await readyz(projections)).status).toBe(200);
    expect((await readyz(projections)).body.checks.bus).toMatchObject({ ok: true });

    await nats.kill('SIGKILL');

    await expect.poll(async () => (await readyz(projections)).status).toBe(503);
    expect((await readyz(projections)).body.checks.bus).toMatchObject({ ok: false });
    // Named with a generic reason: the lost server's host and port are for the log.
    await expect
      .poll(async () => (await readyz(projections)).body.checks.bus)
      .toMatchObject({ ok: false, detail: 'unreachable (the full error is in the service log)' });
    expect(JSON.stringify((await readyz(projections)).body)).not.toContain(`:${new URL(nats.url).port}`);
    const apiReady = await readyz(api);
    expect(apiReady.status).toBe(200);
    expect(apiReady.body.checks.bus).toBeUndefined();
    expect(apiReady.body.checks.cache).toMatchObject({ ok: true });
    // And it still serves: a quote is an answer, not an outage.
    const quote = await fetch(`${api.url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'BTC' }),
    });
    expect(quote.status).toBe(402);
    // An api replica also starts while NATS is down: it opens no bus.
    const late = await start(['api']);
    expect((await readyz(late)).status).toBe(200);
  });
});
