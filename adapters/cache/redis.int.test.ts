import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort, freePortIn } from '../../test/ports.ts';
import { startPrivateRedis } from '../../test/redis-private.ts';
import { redisUnreachable } from '../../test/redis-probe.ts';
import { relay } from '../../test/redis-relay.ts';
import { describeCacheContract } from './contract.ts';
import { CacheUnavailableError } from './port.ts';
import { connectRedisCache, type RedisCache } from './redis.ts';

const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const CI = process.env.CI === 'true';
const RUN_PREFIX = `test:cache:${randomUUID()}:`;

const unreachable = await redisUnreachable(REDIS_URL);
if (unreachable !== null && !CI) {
  console.warn(`\n*** Redis at ${REDIS_URL} unreachable (${unreachable}): Redis cache suite NOT RUN ***\n`);
}

describe.runIf(unreachable === null || CI)(`redis cache against ${REDIS_URL}`, () => {
  let raw: Redis;
  let n = 0;
  const nextPrefix = () => `${RUN_PREFIX}${n++}:`;

  beforeAll(() => {
    if (unreachable !== null)
      throw new Error(`Redis at ${REDIS_URL} is unreachable under CI=true: ${unreachable}`);
    raw = new Redis(REDIS_URL);
  });

  afterAll(async () => {
    if (!raw) return;
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await raw.scan(cursor, 'MATCH', `${RUN_PREFIX}*`, 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    if (keys.length > 0) await raw.del(...keys);
    await raw.quit();
  });

  describeCacheContract('redis', {
    open: () => connectRedisCache({ url: REDIS_URL, prefix: nextPrefix() }),
    openReplicas: async () => {
      const prefix = nextPrefix();
      return [
        await connectRedisCache({ url: REDIS_URL, prefix }),
        await connectRedisCache({ url: REDIS_URL, prefix }),
      ];
    },
  });

  describe('redis specifics', () => {
    it('every key lives under the prefix, and a counter expires exactly at its expiresAt', async () => {
      const prefix = nextPrefix();
      const cache = await connectRedisCache({ url: REDIS_URL, prefix });
      try {
        const expiresAt = Date.now() + 3_600_000;
        await cache.set('plain', 'v');
        await cache.debitWindows([{ key: 'quota:debited', limit: 5, expiresAt }], 2);
        await cache.setWindows([{ key: 'quota:rebuilt', count: 3, expiresAt: expiresAt + 1 }]);
        expect(await raw.get(`${prefix}plain`)).toBe('v');
        expect(await raw.get(`${prefix}quota:debited`)).toBe('2');
        expect(await raw.pexpiretime(`${prefix}quota:debited`)).toBe(expiresAt);
        expect(await raw.pexpiretime(`${prefix}quota:rebuilt`)).toBe(expiresAt + 1);
        expect(await raw.pexpiretime(`${prefix}plain`)).toBe(-1);
      } finally {
        await cache.close();
      }
    });

    it('a refused debit leaves every window as it found it: counts and expiries kept, no counter made', async () => {
      const prefix = nextPrefix();
      const cache = await connectRedisCache({ url: REDIS_URL, prefix });
      try {
        const expiresAt = Date.now() + 3_600_000;
        const held = { key: 'rl:held', limit: 10, expiresAt };
        await cache.debitWindows([held], 2);
        // Refused by its second window, which did not exist: the first is debited and undone.
        expect(await cache.debitWindows([held, { key: 'rl:none', limit: 0, expiresAt }], 1)).toEqual({
          ok: false,
          counts: [2, 0],
          refusedBy: 1,
        });
        // Refused by its first window: the second, after it, is read, neither debited nor made.
        const full = { key: 'rl:full', limit: 2, expiresAt };
        await cache.debitWindows([full], 2);
        expect(await cache.debitWindows([full, held, { key: 'rl:later', limit: 5, expiresAt }], 1)).toEqual({
          ok: false,
          counts: [2, 2, 0],
          refusedBy: 0,
        });
        // A bad counter after a debited window: the debited one is undone.
        await cache.set('rl:text', 'x');
        await expect(cache.debitWindows([held, { key: 'rl:text', limit: 5, expiresAt }], 1)).rejects.toThrow(
          TypeError,
        );
        // Refused by its first window, with a bad counter after it: that counter is reported (a
        // TypeError), not read as a number, as when the debit is allowed.
        await expect(cache.debitWindows([full, { key: 'rl:text', limit: 5, expiresAt }], 1)).rejects.toThrow(
          TypeError,
        );
        // A key of another type fails the script as Redis's own error, the debited window undone.
        await raw.hset(`${prefix}rl:hash`, 'f', '1');
        await expect(cache.debitWindows([held, { key: 'rl:hash', limit: 5, expiresAt }], 1)).rejects.toThrow(
          /^WRONGTYPE/,
        );
        expect(await raw.get(`${prefix}rl:held`)).toBe('2');
        expect(await raw.get(`${prefix}rl:full`)).toBe('2');
        expect(await raw.pexpiretime(`${prefix}rl:held`)).toBe(expiresAt);
        expect(await raw.pexpiretime(`${prefix}rl:full`)).toBe(expiresAt);
        expect(await raw.exists(`${prefix}rl:none`, `${prefix}rl:later`)).toBe(0);
      } finally {
        await cache.close();
      }
    });

    it('the debits of one turn go in one script call, each decided in order; a bad counter fails only its own', async () => {
      const prefix = nextPrefix();
      const cache = await connectRedisCache({ url: REDIS_URL, prefix });
      try {
        await cache.beginGeneration('g1');
        await cache.switchGeneration('quota', null, { id: 'g1', position: 0 });
        const expiresAt = Date.now() + 3_600_000;
        const month = { key: 'quota:month', limit: 5, expiresAt };
        const day = { key: 'quota:day', limit: 100, expiresAt };
        await raw.set(`${prefix}g:g1:quota:broken`, 'not a number');
        // The one script call a turn's debits share, counted on the adapter's own connection.
        const client = cache.shared.redis as unknown as Record<string, (...args: unknown[]) => unknown>;
        const send = client.signalDebitMany!.bind(client);
        let scripts = 0;
        client.signalDebitMany = (...args: unknown[]) => {
          scripts += 1;
          return send(...args);
        };
        const debits = Array.from({ length: 8 }, (_, i) =>
          i === 2
            ? cache.debitLive('quota', [{ key: 'quota:broken', limit: 10, expiresAt }], 1)
            : cache.debitLive('quota', [month, day], 1),
        );
        const settled = await Promise.allSettled(debits);
        expect(settled[2]!.status).toBe('rejected');
        const others = settled
          .filter((_, i) => i !== 2)
          .map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
        expect(others.map((r) => [r.ok, r.counts, r.generation])).toEqual([
          [true, [1, 1], 'g1'],
          [true, [2, 2], 'g1'],
          [true, [3, 3], 'g1'],
          [true, [4, 4], 'g1'],
          [true, [5, 5], 'g1'],
          [false, [5, 5], 'g1'],
          [false, [5, 5], 'g1'],
        ]);
        expect(others.at(-1)!.refusedBy).toBe(0);
        expect(await cache.generationDebits('g1')).toBe(5);
        expect(await cache.readLive('quota', ['quota:month', 'quota:day'])).toEqual([5, 5]);
        // The reads above are no debits: still the one script call.
        expect(scripts).toBe(1);
      } finally {
        await cache.close();
      }
    });

    it('a refused debit leaves the expiry of every window untouched', async () => {
      const prefix = nextPrefix();
      const cache = await connectRedisCache({ url: REDIS_URL, prefix });
      try {
        const expiresAt = Date.now() + 3_600_000;
        await cache.debitWindows([{ key: 'a', limit: 1, expiresAt }], 1);
        const refused = await cache.debitWindows(
          [
            { key: 'a', limit: 1, expiresAt: expiresAt + 5_000 },
            { key: 'b', limit: 1, expiresAt: expiresAt + 5_000 },
          ],
          1,
        );
        expect(refused).toEqual({ ok: false, counts: [1, 0], refusedBy: 0 });
        expect(await raw.pexpiretime(`${prefix}a`)).toBe(expiresAt);
        expect(await raw.exists(`${prefix}b`)).toBe(0);
      } finally {
        await cache.close();
      }
    });

    it('a command Redis itself refuses surfaces as the Redis error, not as an outage', async () => {
      const prefix = nextPrefix();
      const cache = await connectRedisCache({ url: REDIS_URL, prefix });
      try {
        await raw.rpush(`${prefix}list`, 'x');
        const error = await cache.get('list').catch((e: unknown) => e);
        expect(error).toBeInstanceOf(Error);
        expect(error).not.toBeInstanceOf(CacheUnavailableError);
        expect((error as Error).message).toMatch(/WRONGTYPE/);
        expect((await cache.health()).ok).toBe(true);
      } finally {
        await cache.close();
      }
    });

    it('a Redis that cannot take writes now (a replica: READONLY) is an outage: CacheUnavailableError, not its reply', async () => {
      const redis = await startPrivateRedis();
      try {
        const cache = await connectRedisCache({ url: redis.url, prefix: nextPrefix() });
        try {
          await redis.readOnly();
          const error = await cache.set('k', 'v').catch((e: unknown) => e);
          expect(error).toBeInstanceOf(CacheUnavailableError);
          expect((error as Error).message).toMatch(/READONLY/);
        } finally {
          await cache.close();
        }
      } finally {
        await redis.stop();
      }
    });

    it('losing the connection fails calls fast, and the adapter recovers when Redis is back', async () => {
      const proxy = relay(new URL(REDIS_URL));
      const port = await proxy.start();
      const cache = await connectRedisCache({
        url: `redis://127.0.0.1:${port}`,
        prefix: nextPrefix(),
        connectTimeoutMs: 500,
        commandTimeoutMs: 1_000,
      });
      let reconnects = 0;
      cache.onReconnect(() => reconnects++);
      try {
        const window = { key: 'quota:q', limit: 10, expiresAt: Date.now() + 3_600_000 };
        expect((await cache.debitWindows([window], 1)).ok).toBe(true);
        expect(reconnects).toBe(0);
        await proxy.stop();
        await expect.poll(async () => (await cache.health()).ok, { interval: 50 }).toBe(false);
        await expect(cache.debitWindows([window], 1)).rejects.toThrow(CacheUnavailableError);
        await expect(cache.readWindows([window.key])).rejects.toThrow(/not connected/);
        await proxy.start(port);
        await expect.poll(async () => (await cache.health()).ok, { interval: 100 }).toBe(true);
        expect(await cache.debitWindows([window], 1)).toEqual({ ok: true, counts: [2], refusedBy: null });
        // Told once per reconnection, so the owners of counters can check their marker.
        expect(reconnects).toBe(1);
      } finally {
        await cache.close();
        await proxy.stop();
      }
    });
  });
});

describe('redis cache when Redis cannot be reached', () => {
  let cache: RedisCache;
  let url: string;

  beforeAll(async () => {
    url = `redis://user:s3cret@127.0.0.1:${await freePort()}`;
    cache = await connectRedisCache({ url, prefix: 'never:', connectTimeoutMs: 500, commandTimeoutMs: 500 });
  });

  afterAll(async () => {
    await cache?.close();
  });

  it('health reports not ok with the cause, without the password', async () => {
    const health = await cache.health();
    expect(health.ok).toBe(false);
    expect(health.detail).toMatch(/ECONNREFUSED/);
    expect(health.detail).not.toMatch(/s3cret/);
  });

  it('a server that refuses the login is named so, with where the password goes', async () => {
    const server = await startPrivateRedis();
    await server.admin.config('SET', 'requirepass', 'right-one');
    const port = new URL(server.url).port;
    const caches = [
      await connectRedisCache({ url: `redis://127.0.0.1:${port}`, prefix: 'auth:', connectTimeoutMs: 500 }),
      await connectRedisCache({
        url: `redis://:wrong@127.0.0.1:${port}`,
        prefix: 'auth:',
        connectTimeoutMs: 500,
      }),
    ];
    try {
      for (const [i, refused] of caches.entries()) {
        await expect
          .poll(async () => (await refused.health()).detail ?? '', { interval: 50 })
          .toMatch(/(NOAUTH|WRONGPASS)/);
        const { detail } = await refused.health();
        expect(detail, String(i)).toMatch(
          /; the server refused the login: put its user and password in REDIS_URL \(redis:\/\/user:password@host:port\)$/,
        );
        expect(detail).not.toContain('wrong');
      }
    } finally {
      for (const c of caches) await c.close();
      await server.stop();
    }
  });

  it('every operation rejects with CacheUnavailableError instead of waiting for Redis', async () => {
    const window = { key: 'quota:q', limit: 5, expiresAt: Date.now() + 60_000 };
    const error = await cache.debitWindows([window], 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CacheUnavailableError);
    expect((error as Error).message).toMatch(
      /debitWindows failed: redis at redis:\/\/user:\*\*\*@127\.0\.0\.1:\d+/,
    );
    await expect(cache.get('k')).rejects.toThrow(CacheUnavailableError);
    await expect(cache.set('k', 'v', { ttlMs: 1_000 })).rejects.toThrow(CacheUnavailableError);
    await expect(cache.setIfAbsent('k', 'v')).rejects.toThrow(CacheUnavailableError);
    await expect(cache.delete('k')).rejects.toThrow(CacheUnavailableError);
    await expect(cache.readWindows(['k'])).rejects.toThrow(CacheUnavailableError);
    await expect(cache.setWindows([{ key: 'k', count: 1, expiresAt: Date.now() + 1_000 }])).rejects.toThrow(
      CacheUnavailableError,
    );
  });

  it('a server that accepts connections but never answers is reported, not waited on forever', async () => {
    const sockets: net.Socket[] = [];
    const silent = net.createServer((socket) => {
      sockets.push(socket);
      socket.resume();
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as net.AddressInfo;
    const hung = await connectRedisCache({
      url: `redis://127.0.0.1:${port}`,
      prefix: 'never:',
      connectTimeoutMs: 300,
      commandTimeoutMs: 300,
    });
    try {
      expect((await hung.health()).ok).toBe(false);
      await expect(
        hung.debitWindows([{ key: 'q', limit: 1, expiresAt: Date.now() + 1_000 }], 1),
      ).rejects.toThrow(CacheUnavailableError);
    } finally {
      await hung.close();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  it('a server that stops answering (SIGSTOP) is dropped after a timed-out command: later calls fail at once, and it recovers', async () => {
    const server = await startPrivateRedis();
    const pid = Number(/process_id:(\d+)/.exec(await server.admin.info('server'))?.[1]);
    const stopped = await connectRedisCache({
      url: server.url,
      prefix: 'stopped:',
      connectTimeoutMs: 500,
      commandTimeoutMs: 500,
    });
    const window = { key: 'quota:q', limit: 10, expiresAt: Date.now() + 60_000 };
    try {
      expect((await stopped.debitWindows([window], 1)).ok).toBe(true);
      process.kill(pid, 'SIGSTOP');
      // Two calls in flight on the hung connection: the first to time out drops it, and the other
      // is refused too (CacheUnavailableError, the retryable outage), neither resent nor answered.
      const inFlight = await Promise.allSettled([
        stopped.get('k'),
        stopped.debitWindows([{ ...window, key: 'quota:beside' }], 1),
      ]);
      for (const call of inFlight) {
        expect(call.status === 'rejected' && call.reason).toBeInstanceOf(CacheUnavailableError);
      }
      expect(inFlight.map((call) => (call.status === 'rejected' ? String(call.reason) : ''))).toContainEqual(
        expect.stringMatching(/failed at .*: Command timed out/),
      );
      // Not another wait for its own timeout on the hung connection: refused as not connected.
      await expect
        .poll(async () => (await stopped.health()).detail ?? '', { interval: 50 })
        .toMatch(/is not connected/);
      await expect(stopped.get('k')).rejects.toThrow(
        /is not connected \(status \w+, last error: (get|debitWindows) got no reply within the command timeout\)/,
      );
      const debit = await stopped.debitWindows([window], 1).catch((e: unknown) => e);
      expect(debit).toBeInstanceOf(CacheUnavailableError);
      expect((debit as Error).message).not.toMatch(/timed out/);
      process.kill(pid, 'SIGCONT');
      await expect.poll(async () => (await stopped.health()).ok, { interval: 100 }).toBe(true);
      expect(await stopped.debitWindows([window], 1)).toEqual({ ok: true, counts: [2], refusedBy: null });
      // The debit in flight ran once Redis woke (its command was in the server's buffer), and its
      // caller was told unavailable: given back, so a caller that calls again is counted once.
      expect(await stopped.readWindows(['quota:beside'])).toEqual([0]);
    } finally {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // already gone
      }
      await stopped.close();
      await server.stop();
    }
  });

  it("gives back a lost debit only on its own window: a later window's counter under the same key stays", async () => {
    const server = await startPrivateRedis({ port: await freePortIn(19_000, 19_999) });
    const pid = Number(/process_id:(\d+)/.exec(await server.admin.info('server'))?.[1]);
    const proxy = relay(new URL(server.url));
    const port = await proxy.start(await freePortIn(19_000, 19_999));
    const prefix = 'expired:';
    const cache = await connectRedisCache({
      url: `redis://127.0.0.1:${port}`,
      prefix,
      connectTimeoutMs: 500,
      commandTimeoutMs: 500,
    });
    const other = await connectRedisCache({ url: server.url, prefix });
    // A rate window's key names no period: the next window's counter lives under the same key.
    const key = 'rate:all:k';
    try {
      process.kill(pid, 'SIGSTOP');
      const lost = cache.debitWindows([{ key, limit: 10, expiresAt: Date.now() + 3_000 }], 1);
      await expect(lost).rejects.toThrow(CacheUnavailableError);
      // No way back until the lost debit has run and its window is over.
      await proxy.stop();
      process.kill(pid, 'SIGCONT');
      await expect.poll(async () => (await server.admin.keys(`${prefix}debits:*`)).length).toBe(1);
      await expect.poll(async () => server.admin.exists(`${prefix}${key}`)).toBe(0);
      // The next window: another call's debit.
      expect(await other.debitWindows([{ key, limit: 10, expiresAt: Date.now() + 60_000 }], 1)).toEqual({
        ok: true,
        counts: [1],
        refusedBy: null,
      });
      await proxy.start(port);
      await expect.poll(async () => (await cache.health()).ok, { interval: 100 }).toBe(true);
      // The give-back went first on the new connection, and marked the lost call's outcome key.
      expect(await server.admin.mget(...(await server.admin.keys(`${prefix}debits:*`)))).toContain('-');
      expect(await other.readWindows([key])).toEqual([1]);
    } finally {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // already gone
      }
      await cache.close();
      await other.close();
      await proxy.stop();
      await server.stop();
    }
  });

  it('a database the server refuses stops the start, naming REDIS_URL: nothing is written to database 0', async () => {
    const server = await startPrivateRedis({
      port: await freePortIn(19_400, 19_499),
      args: ['--databases', '16'],
    });
    const prefix = 'refused-db:';
    try {
      await expect(
        connectRedisCache({ url: `${server.url}/99`, prefix, connectTimeoutMs: 500 }),
      ).rejects.toThrow(
        `redis at ${server.url}/99: the server refused database 99 of REDIS_URL (ERR DB index is out of range): set REDIS_URL to a database it has`,
      );
      expect(await server.admin.dbsize()).toBe(0);
    } finally {
      await server.stop();
    }
  });

  it('a reconnect the server refuses the database on stays unavailable, never on database 0, and recovers with it', async () => {
    const port = await freePortIn(19_400, 19_499);
    let server = await startPrivateRedis({ port });
    const url = `${server.url}/5`;
    const cache = await connectRedisCache({ url, prefix: 'reselect:', connectTimeoutMs: 500 });
    try {
      await cache.set('k', 'v');
      await server.admin.select(5);
      expect(await server.admin.get('reselect:k')).toBe('v');
      await server.stop();
      // Back on the same port with fewer databases: SELECT 5 is refused on every reconnect.
      server = await startPrivateRedis({ port, args: ['--databases', '2'] });
      await expect
        .poll(async () => (await cache.health()).detail ?? '', { interval: 50 })
        .toContain('the server refused database 5 of REDIS_URL');
      await expect(cache.set('k', 'lost')).rejects.toThrow(CacheUnavailableError);
      expect((await cache.health()).ok).toBe(false);
      expect(await server.admin.dbsize()).toBe(0);
      await server.stop();
      server = await startPrivateRedis({ port, args: ['--databases', '16'] });
      await expect.poll(async () => (await cache.health()).ok, { interval: 100 }).toBe(true);
      await cache.set('k', 'back');
      await server.admin.select(5);
      expect(await server.admin.get('reselect:k')).toBe('back');
    } finally {
      await cache.close();
      await server.stop();
    }
  });

  it('rejects a URL that is not a Redis URL and an empty prefix', async () => {
    await expect(connectRedisCache({ url: 'http://127.0.0.1:6379', prefix: 'p:' })).rejects.toThrow(
      RangeError,
    );
    await expect(connectRedisCache({ url: 'not a url', prefix: 'p:' })).rejects.toThrow(RangeError);
    await expect(connectRedisCache({ url: REDIS_URL, prefix: '' })).rejects.toThrow(RangeError);
  });
});
