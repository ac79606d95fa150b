import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { connectRedisCache, type RedisCache } from '../../adapters/cache/redis.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { loadConfig } from '../../contracts/config.ts';
import { newEvent } from '../../contracts/events.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../test/redis-probe.ts';
import { relay } from '../../test/redis-relay.ts';
import { keyedChannel } from '../api/plugins.ts';
import type { SignalOperations } from '../engine/operations.ts';
import { ChatQuota } from '../knowledge/chat-quota.ts';
import { runOperatorCommand } from '../operator/operator-commands.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import { QUOTA_FAMILY, rebuildQuotaGeneration } from './quota-rebuild.ts';
import { chatKey, type QuotaSubject, quotaPeriod, quotaWindows } from './windows.ts';

const run = await shouldRunRedisSuite('quota rebuild suite against Redis');
const RUN_PREFIX = `test:quota-rebuild:${randomUUID()}:`;
const PLANS: PlanTable = {
  free: { monthly: 1_000, daily: 60 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 1_000_000, daily: null },
};
// A fixed instant well inside a UTC day of the future, so no window rolls over mid-test.
const T0 = Date.UTC(2031, 5, 10, 12, 0, 0);

/** What Redis restarting without persistence does to our keys: all of them gone in one step. */
const FLUSH_PREFIX = `for _, key in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', key) end return 1`;

/** Calls debited on the log for `subject`: the units of its debit events. */
async function debitsOf(store: EventStore, subject: string): Promise<number> {
  return (await store.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject), 0);
}

/** Calls until `attempts` are made by `workers` callers at once; counts what each call got. */
async function load(
  meter: QuotaMeter,
  subjects: QuotaSubject[],
  options: { workers: number; attempts?: number; until?: () => boolean; onServed?: (n: number) => void },
) {
  const tally = { served: 0, refused: 0, unavailable: 0 };
  let attempt = 0;
  const worker = async () => {
    for (;;) {
      const i = attempt++;
      if (options.attempts !== undefined ? i >= options.attempts : options.until!()) return;
      try {
        const outcome = await meter.debit(subjects[i % subjects.length]!, 'get_trade_call');
        if (outcome.ok) {
          tally.served++;
          options.onServed?.(tally.served);
        } else tally.refused++;
      } catch (err) {
        if (!(err instanceof CacheUnavailableError)) throw err;
        tally.unavailable++;
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
  };
  await Promise.all(Array.from({ length: options.workers }, worker));
  return tally;
}

describe.runIf(run)('quota counters survive Redis losing its data, and rebuilds under traffic', () => {
  let raw: Redis;
  const opened: RedisCache[] = [];
  const meters: QuotaMeter[] = [];
  const open = async () => {
    const prefix = `${RUN_PREFIX}${randomUUID()}:`;
    const cache = await connectRedisCache({ url: REDIS_URL, prefix });
    opened.push(cache);
    return { cache, prefix };
  };
  const meterOf = (cache: RedisCache, store: EventStore) => {
    const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => T0 });
    meters.push(meter);
    return meter;
  };

  beforeAll(() => {
    raw = new Redis(REDIS_URL);
  });
  afterEach(async () => {
    await Promise.all(meters.splice(0).map((m) => m.counters.stop()));
    await Promise.all(opened.splice(0).map((c) => c.close()));
  });
  afterAll(async () => {
    await raw?.quit();
    await wipePrefix(RUN_PREFIX);
  });

  it('Redis flushed under load: the counters come back equal to the log, and no call beyond the quota is served', async () => {
    const { cache, prefix } = await open();
    const store = new MemoryEventStore();
    const meter = meterOf(cache, store);
    const key: QuotaSubject = { id: `free-${randomUUID()}`, kind: 'key', plan: 'free' };
    // The key of the report: 41 calls on the log, 60 a day allowed.
    for (let i = 0; i < 41; i++) expect((await meter.debit(key, 'get_trade_call')).ok).toBe(true);

    let flushed: Promise<unknown> | null = null;
    const tally = await load(meter, [key], {
      workers: 8,
      attempts: 200,
      onServed: (served) => {
        if (served === 5) flushed ??= raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);
      },
    });
    await flushed;

    const logged = await debitsOf(store, key.id);
    expect(logged).toBe(41 + tally.served);
    // Exactly the day's 60: the flush gave nothing away.
    expect(logged).toBe(60);
    expect(tally.refused).toBeGreaterThan(0);
    await expect.poll(async () => (await meter.peek(key)).daily?.used).toBe(logged);
    expect((await meter.peek(key)).used).toBe(logged);
    expect((await meter.debit(key, 'get_trade_call')).ok).toBe(false);
  });

  it('an api start on a flushed Redis rebuilds before serving: a free key with 41 logged calls shows used 41', async () => {
    const { cache, prefix } = await open();
    const store = new MemoryEventStore();
    const key: QuotaSubject = { id: `free-${randomUUID()}`, kind: 'key', plan: 'free' };
    const first = meterOf(cache, store);
    for (let i = 0; i < 41; i++) await first.debit(key, 'get_trade_call');
    await raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);

    const restarted = meterOf(cache, store);
    await restarted.counters.ensure();
    expect(await restarted.peek(key)).toMatchObject({ used: 41, daily: { used: 41, remaining: 19 } });
  });

  it('the api rebuilds the counters when its Redis connection comes back emptied, before any call', async () => {
    const proxy = relay(new URL(REDIS_URL));
    const port = await proxy.start();
    const prefix = `${RUN_PREFIX}${randomUUID()}:`;
    const cache = await connectRedisCache({
      url: `redis://127.0.0.1:${port}`,
      prefix,
      connectTimeoutMs: 500,
    });
    opened.push(cache);
    const store = new MemoryEventStore();
    const channel = keyedChannel({
      config: loadConfig({ EVENT_STORE: 'memory', NODE_ENV: 'test', RATE_LIMIT_ENABLED: 'false' }),
      adapters: { eventStore: store, projectionStore: new MemoryProjectionStore(), cache },
      logger: pino({ level: 'silent' }),
      ops: {} as SignalOperations,
    });
    try {
      await channel.start();
      const key: QuotaSubject = { id: `free-${randomUUID()}`, kind: 'key', plan: 'free' };
      for (let i = 0; i < 41; i++) await channel.quota.debit(key, 'get_trade_call');
      const before = await cache.liveGeneration(QUOTA_FAMILY);
      expect(before).not.toBeNull();

      // Redis restarts without persistence: the connection drops and the data is gone.
      await proxy.stop();
      await raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);
      await proxy.start(port);

      await expect
        .poll(async () => (await cache.liveGeneration(QUOTA_FAMILY).catch(() => null))?.id)
        .toEqual(expect.any(String));
      expect((await cache.liveGeneration(QUOTA_FAMILY))!.id).not.toBe(before!.id);
      expect(await channel.quota.peek(key)).toMatchObject({ used: 41, daily: { used: 41 } });
    } finally {
      await channel.stop();
      await proxy.stop();
    }
  });

  it('keys rebuild-quota while debits run: afterwards every counter equals the debits on the log, exactly', async () => {
    const { cache } = await open();
    const memory = new MemoryEventStore();
    // A log slow to read, as a big one is: the rebuild takes a while and debits go on meanwhile.
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      readAll: async (options?: { after?: number; maxCount?: number }) => {
        await new Promise((resolve) => setTimeout(resolve, 30));
        return memory.readAll(options);
      },
    });
    const meter = meterOf(cache, memory);
    const subjects: QuotaSubject[] = Array.from({ length: 4 }, (_, i) => ({
      id: `pro-${i}-${randomUUID()}`,
      kind: 'key',
      plan: 'pro',
    }));
    await load(meter, subjects, { workers: 4, attempts: 400 });

    let running = true;
    const traffic = load(meter, subjects, { workers: 8, until: () => !running });
    const outputs: string[] = [];
    for (let i = 0; i < 3; i++) {
      outputs.push(await runOperatorCommand(['rebuild-quota'], { store, cache, settleMs: 3_000 }));
    }
    running = false;
    const tally = await traffic;
    expect(tally.served).toBeGreaterThan(50);
    expect(tally.unavailable).toBe(0);
    expect(outputs.join('\n')).toMatch(/debits made meanwhile replayed/);

    for (const subject of subjects) {
      const logged = await debitsOf(memory, subject.id);
      const keys = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
      const [month, day] = await cache.readLive(QUOTA_FAMILY, keys);
      expect({ subject: subject.id, month, day }).toEqual({
        subject: subject.id,
        month: logged,
        day: logged,
      });
    }
  });
  it('chats: counted in the quota generation, Redis wiped under chat load, rebuilt from the log; no chat beyond the month', async () => {
    const { cache, prefix } = await open();
    const store = new MemoryEventStore();
    const meter = meterOf(cache, store);
    const chats = new ChatQuota({
      cache,
      store,
      limits: { free: 30, starter: 50, pro: 200 },
      now: () => T0,
      ensureCounters: () => meter.counters.ensure(),
    });
    const key: QuotaSubject = { id: `free-${randomUUID()}`, kind: 'key', plan: 'free' };
    const { month } = quotaPeriod(T0);
    await meter.counters.ensure();
    for (let i = 0; i < 12; i++) expect((await chats.consume(key, 'extractive', `c${i}`)).ok).toBe(true);
    await chats.refund(key, month, 'c0', 'provider_unavailable');
    await chats.refund(key, month, 'c1', 'provider_unavailable');
    expect(await chats.peek(key)).toMatchObject({ used: 10, remaining: 20 });

    // Wiped: the counters come back from the log, chats included.
    await raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);
    expect(await cache.liveGeneration(QUOTA_FAMILY)).toBeNull();
    expect(await chats.peek(key)).toMatchObject({ used: 10, remaining: 20 });

    // Wiped again in the middle of 60 concurrent chats: exactly the 20 left are served.
    let wiped: Promise<unknown> | null = null;
    let served = 0;
    let refused = 0;
    let next = 0;
    const worker = async () => {
      while (next < 60) {
        const i = next++;
        try {
          const taken = await chats.consume(key, 'extractive', `load-${i}`);
          if (taken.ok) {
            served++;
            if (served === 4) wiped ??= raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);
          } else refused++;
        } catch (err) {
          if (!(err instanceof CacheUnavailableError)) throw err;
          // Retryable (the counters being rebuilt): the same chat is tried again.
          next--;
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      }
    };
    await Promise.all(Array.from({ length: 6 }, worker));
    await wiped;
    const events = await store.readAll();
    const consumed = events.filter((e) => e.type === 'ChatQuotaConsumed').length;
    const refunded = events.filter((e) => e.type === 'ChatQuotaRefunded').length;
    expect(consumed - refunded).toBe(30);
    expect(served).toBe(20);
    expect(refused).toBeGreaterThan(0);
    await expect.poll(async () => (await chats.peek(key)).used).toBe(30);
    expect((await chats.consume(key, 'extractive', 'after')).ok).toBe(false);
    // The chat counter sits beside the call counters in the live generation.
    const live = await cache.liveGeneration(QUOTA_FAMILY);
    expect(await raw.get(`${prefix}g:${live!.id}:${chatKey(key.id, month)}`)).toBe('30');
  });

  it('Redis wiped in the middle of a rebuild: the partial generation never goes live; the rebuild starts over', async () => {
    const { cache, prefix } = await open();
    const memory = new MemoryEventStore();
    const subjects = Array.from({ length: 5 }, () => `pro-${randomUUID()}`);
    const { day, month } = quotaPeriod(T0);
    for (let batch = 0; batch < 20; batch++) {
      const events = Array.from({ length: 50 }, (_, i) =>
        newEvent('QuotaDebited', {
          subject: subjects[i % subjects.length]!,
          subjectKind: 'key',
          plan: 'pro',
          tool: 'get_trade_call',
          units: 1,
          day,
          month,
          requestId: `r${batch}-${i}`,
        }),
      );
      await memory.append(`quota-batch-${batch}`, events);
    }
    // The wipe lands after a few pages are folded into the new generation, before its switch.
    let pages = 0;
    const store: EventStore = Object.assign(Object.create(memory) as EventStore, {
      readAll: async (options?: { after?: number; maxCount?: number }) => {
        if (++pages === 4) await raw.eval(FLUSH_PREFIX, 0, `${prefix}*`);
        return memory.readAll(options);
      },
    });
    const outcome = await rebuildQuotaGeneration({ store, cache, pageSize: 100, settleMs: 0, now: () => T0 });
    expect(outcome.switched).toBe(true);
    expect(outcome.restarts).toBe(1);
    for (const subject of subjects) {
      const keys = quotaWindows(subject, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
      expect(await cache.readLive(QUOTA_FAMILY, keys)).toEqual([200, 200]);
    }
  });
});
