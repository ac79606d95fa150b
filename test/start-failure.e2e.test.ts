import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePortIn } from './ports.ts';
import { POSTGRES_URL } from './postgres-probe.ts';
import { startPrivateRedis } from './redis-private.ts';
import { runServiceProcess } from './service-process.ts';

describe('a start that fails once the configuration holds', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it('is one pino line at fatal with the message, credentials masked, then exit 1', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    // Nothing listens on port 9 (discard): the bus never becomes usable within the short timeout.
    const r = runServiceProcess({
      DATA_DIR: dir,
      BUS: 'nats',
      NATS_URL: 'nats://u:SECRETPW2@127.0.0.1:9',
      NATS_STARTUP_TIMEOUT_MS: '300',
    });
    expect(await r.exit).toBe(1);
    const fatal = r.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.msg).toMatch(
      /^failed to start: NATS at nats:\/\/u:\*\*\*@127\.0\.0\.1:9 not usable within 300 ms/,
    );
    // The line says what to do, not only what failed.
    expect(fatal[0]!.msg).toContain(
      'Start nats-server with JetStream (-js) or correct NATS_URL; NATS_STARTUP_TIMEOUT_MS sets how long a start waits for it',
    );
    // A server that did not answer in time is an expected failure: the line alone, no stack.
    expect(fatal[0]!.err).not.toHaveProperty('stack');
    expect(r.stderr).not.toContain('failed to start');
    expect(JSON.stringify(r.lines) + r.stderr).not.toContain('SECRETPW2');
  }, 60_000);

  it('a REDIS_URL database the server refuses stops the start, naming REDIS_URL, with nothing written to database 0', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    const redis = await startPrivateRedis({
      port: await freePortIn(19_400, 19_499),
      args: ['--databases', '16'],
    });
    try {
      const r = runServiceProcess({
        DATA_DIR: dir,
        CACHE: 'redis',
        REDIS_URL: `${redis.url}/99`,
        REDIS_PREFIX: 'start-failure-db:',
      });
      // Either end, so a start that goes on (on database 0) fails here instead of running on.
      await expect
        .poll(() => r.child.exitCode ?? r.lines.find((l) => l.msg === 'service started')?.msg, {
          interval: 100,
        })
        .toBeDefined();
      if (r.child.exitCode === null) r.child.kill('SIGKILL');
      expect(await r.exit).toBe(1);
      const fatal = r.lines.filter((l) => l.level === 60);
      expect(fatal).toHaveLength(1);
      expect(fatal[0]!.msg).toBe(
        `failed to start: redis at ${redis.url}/99: the server refused database 99 of REDIS_URL (ERR DB index is out of range): set REDIS_URL to a database it has (0 up to its 'databases' setting less one) or no path for database 0`,
      );
      // A setting to correct: the line alone, no stack.
      expect(fatal[0]!.err).not.toHaveProperty('stack');
      expect(await redis.admin.dbsize()).toBe(0);
    } finally {
      await redis.stop();
    }
  });

  it('a POSTGRES_URL asking SSL of a server without it: the line naming sslmode and what to set, no stack', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    // The loopback server serves no SSL: the start logged pg's bare 'The server does not support
    // SSL connections' with its stack, naming neither PostgreSQL nor POSTGRES_URL.
    const url = new URL(POSTGRES_URL);
    url.searchParams.set('sslmode', 'require');
    const r = runServiceProcess({ DATA_DIR: dir, EVENT_STORE: 'postgres', POSTGRES_URL: url.toString() });
    expect(await r.exit).toBe(1);
    const fatal = r.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    expect(fatal[0]!.msg).toBe(
      `failed to start: PostgreSQL at ${url} (POSTGRES_URL) does not accept SSL: The server does not support SSL connections, ` +
        "which POSTGRES_URL's sslmode=require asks for. To fix it, set sslmode=disable in POSTGRES_URL, or enable SSL on the server",
    );
    expect(fatal[0]!.err).not.toHaveProperty('stack');
    expect(r.stderr).not.toContain('SECURITY WARNING');
  }, 60_000);

  it("states the cause once: the logged error's message does not repeat the cause its text already names", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'start-failure-'));
    dirs.push(dir);
    // Nothing listens on port 9: the first connection is refused.
    const r = runServiceProcess({
      DATA_DIR: dir,
      EVENT_STORE: 'postgres',
      POSTGRES_URL: 'postgres://signal:SECRETPW3@127.0.0.1:9/signals',
    });
    expect(await r.exit).toBe(1);
    const fatal = r.lines.filter((l) => l.level === 60);
    expect(fatal).toHaveLength(1);
    const cause = 'connect ECONNREFUSED 127.0.0.1:9';
    expect(fatal[0]!.msg).toContain(`is unreachable: ${cause}.`);
    const { message } = fatal[0]!.err as { message: string };
    // pino's serializer appended the cause's message to one that already ended its sentence with it.
    expect(message.split(cause)).toHaveLength(2);
    expect(message).toBe((fatal[0]!.msg as string).slice('failed to start: '.length));
    // A refused server is the line alone: no stack of ours, nor the driver's beneath it.
    expect(fatal[0]!.err).not.toHaveProperty('stack');
    expect(JSON.stringify(r.lines) + r.stderr).not.toContain('SECRETPW3');
  }, 60_000);
});
