import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { connectRedisCache, type RedisCache } from '../../adapters/cache/redis.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { freePortIn } from '../../test/ports.ts';
import { startPrivateRedis } from '../../test/redis-private.ts';
import { shouldRunRedisSuite } from '../../test/redis-probe.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import type { QuotaSubject } from './windows.ts';

const run = await shouldRunRedisSuite('quota debit across a Redis timeout');
// In the future, so Redis keeps the counters.
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);

/**
 * A quota debit whose Redis command times out (a Redis that hangs: here SIGSTOP) may run in Redis
 * all the same (its command waits in the server's buffer) while the caller is told the quota is
 * unavailable, which is retryable. The debit is given back once Redis answers again, so the call
 * made again is counted once, and the counters stay equal to the log.
 */
describe.runIf(run)('a quota debit whose Redis command timed out', () => {
  let server: Awaited<ReturnType<typeof startPrivateRedis>>;
  let pid: number;
  let cache: RedisCache;

  beforeAll(async () => {
    server = await startPrivateRedis({ port: await freePortIn(19_000, 19_999) });
    pid = Number(/process_id:(\d+)/.exec(await server.admin.info('server'))?.[1]);
    cache = await connectRedisCache({
      url: server.url,
      prefix: 'timeout:',
      connectTimeoutMs: 500,
      commandTimeoutMs: 500,
    });
  });

  afterAll(async () => {
    try {
      process.kill(pid, 'SIGCONT');
    } catch {
      // already gone
    }
    await cache?.close();
    await server?.stop();
  });

  it('is given back once Redis answers again: the call made again is counted once, as on the log', async () => {
    const store = new MemoryEventStore();
    const meter = new QuotaMeter({
      cache,
      store,
      plans: {
        free: { monthly: 100, daily: 10 },
        starter: { monthly: 1_000, daily: null },
        pro: { monthly: 10_000, daily: null },
      },
      now: () => T0,
    });
    const subject: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'starter' };
    expect((await meter.debit(subject, 'get_trade_call')).snapshot.used).toBe(1);

    process.kill(pid, 'SIGSTOP');
    await expect(meter.debit(subject, 'get_trade_call')).rejects.toThrow(CacheUnavailableError);
    process.kill(pid, 'SIGCONT');
    await expect.poll(async () => (await cache.health()).ok, { interval: 50 }).toBe(true);

    const again = await meter.debit(subject, 'get_trade_call');
    expect(again).toMatchObject({ ok: true, snapshot: { used: 2, remaining: 998 } });
    expect(await meter.peek(subject)).toMatchObject({ used: 2 });
    const logged = (await store.readAll()).reduce((sum, event) => sum + debitedUnits(event), 0);
    expect(logged).toBe(2);
  });
});
