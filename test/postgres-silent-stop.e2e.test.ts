import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { dropSchemas, shouldRunPostgresSuite, silenceableRelay, uniqueSchema } from './postgres-probe.ts';
import { runServiceProcess, type ServiceProcess } from './service-process.ts';

const run = await shouldRunPostgresSuite('stop under a silent PostgreSQL');

const schemas: string[] = [];
const dirs: string[] = [];
const running: ServiceProcess[] = [];

afterAll(async () => {
  for (const r of running)
    if (r.child.exitCode === null && r.child.signalCode === null) r.child.kill('SIGKILL');
  await dropSchemas(schemas);
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/**
 * The api role on PostgreSQL keeps a dozen projections. Each one's stop reads the log's head,
 * folds up to it and saves its snapshot; with the server silent every one of those waits, and
 * waited one projection after another they outlasted SHUTDOWN_TIMEOUT_MS: `shutdown timed out`
 * and a SIGKILL (137) instead of exit 0.
 */
describe.runIf(run)('SIGTERM while PostgreSQL is silent', () => {
  it('stops within SHUTDOWN_TIMEOUT_MS and exits 0, naming the projections it left', async () => {
    const relay = await silenceableRelay();
    try {
      const schema = uniqueSchema('silent_stop');
      schemas.push(schema);
      const dataDir = await mkdtemp(join(tmpdir(), 'silent-stop-'));
      dirs.push(dataDir);
      const r = runServiceProcess(
        {
          DATA_DIR: dataDir,
          REPLAY_SPEED: '0',
          SHUTDOWN_DRAIN_MS: '0',
          EVENT_STORE: 'postgres',
          POSTGRES_URL: relay.url,
          POSTGRES_SCHEMA: schema,
        },
        ['--role', 'api'],
      );
      running.push(r);
      await expect
        .poll(() => r.lines.some((l) => l.msg === 'service started' || r.child.exitCode !== null), {
          timeout: 60_000,
          interval: 100,
        })
        .toBe(true);
      const url = r.lines.find((l) => l.msg === 'service started')?.url as string;
      expect(url, JSON.stringify(r.lines)).toBeTruthy();
      await expect
        .poll(async () => (await fetch(`${url}/readyz`)).status, { timeout: 60_000, interval: 200 })
        .toBe(200);
      relay.silence();
      r.child.kill('SIGTERM');
      const code = await r.exit;
      const lines = JSON.stringify(r.lines.filter((l) => (l.level as number) >= 40));
      expect(
        r.lines.some((l) => l.msg === 'shutdown timed out: exiting'),
        lines,
      ).toBe(false);
      expect(code, lines).toBe(0);
      expect(r.lines.some((l) => l.msg === 'service stopped')).toBe(true);
      // The stop deadline ended the runners' waits, each named.
      const left = r.lines.filter((l) => String(l.msg).includes('by the stop deadline') && !('adapter' in l));
      expect(left.length, lines).toBeGreaterThan(0);
      for (const l of left) expect(l).toMatchObject({ level: 40, projection: expect.any(String) });
    } finally {
      await relay.close();
    }
  }, 120_000);
});
