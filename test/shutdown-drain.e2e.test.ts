import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { SHIPPED_MARKET_DIR } from '../adapters/market/replay.ts';
import { loadConfig } from '../contracts/config.ts';
import { startService } from '../services/service.ts';

const logger = pino({ level: 'silent' });

/**
 * Whether a call is still served (200). A stop without a drain may meet the call at either side of
 * the listener's close: refused, cut with the connections that sent nothing yet, or answered 503 by
 * the closing server; never served.
 */
async function served(url: string): Promise<boolean> {
  try {
    return (await fetch(url)).status === 200;
  } catch {
    return false;
  }
}

/**
 * A rolling restart behind a load balancer that health-checks /readyz: with SHUTDOWN_DRAIN_MS the
 * stopping api answers /readyz 503 while it still serves, so the balancer takes it out of its pool
 * before its listener closes. Without it the listener closed as the signal came, and every call the
 * balancer sent it until its checks failed was refused (ECONNREFUSED in an operator's walk).
 */
describe('SHUTDOWN_DRAIN_MS', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('keeps serving with /readyz 503 (check shutdown) for the drain, then closes the listener', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'drain-'));
    dirs.push(dir);
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
      // Long enough that the calls below cannot outlast it on a loaded machine; nothing is timed.
      SHUTDOWN_DRAIN_MS: '15000',
    });
    const service = await startService(config, ['api'], logger);
    await expect
      .poll(async () => (await fetch(`${service.url}/readyz`)).status, { timeout: 60_000 })
      .toBe(200);

    const stopping = service.stop();
    const ready = await fetch(`${service.url}/readyz`);
    expect(ready.status).toBe(503);
    const body = (await ready.json()) as { checks: Record<string, { ok: boolean; detail?: string }> };
    expect(body.checks.shutdown).toMatchObject({ ok: false });
    expect(body.checks.shutdown?.detail).toMatch(/^stopping: still serving, the listener closes in \d+ ms/);
    // Still served meanwhile: a call the balancer sent before its checks failed gets its answer.
    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${service.url}/api/track-record`)).status).toBe(200);

    await stopping;
    await expect(fetch(`${service.url}/healthz`)).rejects.toThrow();
  }, 120_000);

  it('is spent by an api process only: a role without callers closes at once', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'drain-'));
    dirs.push(dir);
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
      SHUTDOWN_DRAIN_MS: '600000',
    });
    const service = await startService(config, ['projections'], logger);
    const stopping = service.stop();
    expect(await served(`${service.url}/healthz`)).toBe(false);
    await stopping;
  }, 120_000);

  it('is off by default: the listener closes as the stop begins', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'drain-'));
    dirs.push(dir);
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      MARKET_DATA_DIR: SHIPPED_MARKET_DIR,
    });
    expect(config.SHUTDOWN_DRAIN_MS).toBe(0);
    const service = await startService(config, ['api'], logger);
    const stopping = service.stop();
    expect(await served(`${service.url}/healthz`)).toBe(false);
    await stopping;
  }, 120_000);
});
