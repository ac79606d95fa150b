import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { debitedUnits } from '../services/quota/quota-projection.ts';
import { type RunningService, startService } from '../services/service.ts';
import { mountSmallDisk } from './disk-full.ts';

/**
 * Issue 13, item 4: the api on an LMDB store whose disk fills up answers writes with a retryable
 * 503, reports itself not ready, keeps serving reads, and recovers when space returns.
 */
const disk = mountSmallDisk(48);
if (typeof disk === 'string' && process.env.CI !== 'true') {
  console.warn(`\n*** ${disk}: disk-full service suite NOT RUN ***\n`);
}

describe.runIf(typeof disk !== 'string' || process.env.CI === 'true')('the api when its disk is full', () => {
  let service: RunningService;
  let key: string;
  let acknowledged: number;

  const call = (coin = 'BTC') =>
    fetch(`${service.url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ coin, timeframe: '1h' }),
    });
  const ready = async () => {
    const res = await fetch(`${service.url}/readyz`);
    return {
      status: res.status,
      body: (await res.json()) as { checks: Record<string, { ok: boolean; detail?: string }> },
    };
  };

  beforeAll(async () => {
    if (typeof disk === 'string') throw new Error(disk);
    const config = loadConfig({
      DATA_DIR: join(disk.dir, 'data'),
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      RATE_LIMIT_ENABLED: 'false',
      // Each call's own debit, so the first write after the disk fills is a call's: a key called
      // this fast would otherwise be leased, its calls served from units already on the log, and
      // the write that fails would be a reservation's some calls later (that path, a reservation
      // whose append fails, is quota-lease.unit.test.ts's).
      QUOTA_LEASE_MS: '0',
    });
    service = await startService(config, ['api'], pino({ level: 'silent' }));
    const issued = await issueKey(service.adapters.eventStore, {
      plan: 'pro',
      owner: 'disk',
      via: 'operator',
    });
    key = issued.key;
    const channel = service.components.find((c) => c.name === 'keyed-channel') as unknown as {
      registry: { waitFor(position: number): Promise<void> };
    };
    await channel.registry.waitFor(issued.position);
  });
  afterAll(async () => {
    await service?.stop();
    if (typeof disk !== 'string') disk.unmount();
  });

  it('serves keyed calls while there is space', async () => {
    const res = await call();
    expect(res.status).toBe(200);
    expect((await ready()).status).toBe(200);
    acknowledged = await service.adapters.eventStore.headPosition();
  });

  it('a full disk: keyed writes get a retryable 503 in the documented shape, /readyz names the store, reads go on', async () => {
    if (typeof disk === 'string') return;
    disk.fill();
    let res: Response | null = null;
    // LMDB may still find a free page or two before it needs the disk.
    for (let i = 0; i < 200; i++) {
      res = await call();
      if (res.status !== 200) break;
      acknowledged = await service.adapters.eventStore.headPosition();
    }
    expect(res!.status).toBe(503);
    // The keyed route's documented refusal: nothing was served or charged, retry.
    expect(await res!.json()).toMatchObject({
      code: 'quota_unavailable',
      message: expect.any(String),
      retryable: true,
    });

    const { status, body } = await ready();
    expect(status).toBe(503);
    expect(body.checks.eventStore).toMatchObject({
      ok: false,
      detail: expect.stringMatching(/out of space/),
    });

    expect((await fetch(`${service.url}/healthz`)).status).toBe(200);
    expect((await fetch(`${service.url}/api/track-record`)).status).toBe(200);
    expect((await fetch(`${service.url}/llms.txt`)).status).toBe(200);
    expect((await fetch(`${service.url}/openapi.json`)).status).toBe(200);
  });

  it('space returns: /readyz is ready again without a write, keyed calls are served, nothing acknowledged is lost', async () => {
    if (typeof disk === 'string') return;
    disk.free();
    await expect.poll(async () => (await ready()).status).toBe(200);
    const res = await call('ETH');
    expect(res.status).toBe(200);
    const all = await service.adapters.eventStore.readAll();
    // The refused calls did not use up quota: used = the debits on the log.
    const debits = all.reduce((sum, e) => sum + debitedUnits(e), 0);
    expect(((await res.json()) as { _service: { quota: { used: number } } })._service.quota.used).toBe(
      debits,
    );
    expect(all.length).toBeGreaterThan(acknowledged);
    expect(all.slice(0, acknowledged).map((e) => e.position)).toEqual(
      Array.from({ length: acknowledged }, (_, i) => i + 1),
    );
  });
});
