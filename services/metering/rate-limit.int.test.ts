import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { MemoryCache } from '../../adapters/cache/memory.ts';
import type { Cache } from '../../adapters/cache/port.ts';
import { connectRedisCache, MAX_DEBITS_PER_SCRIPT, type RedisCache } from '../../adapters/cache/redis.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { startPrivateRedis } from '../../test/redis-private.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../test/redis-probe.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { RateLimiter, type RateLimitSettings } from './rate-limit.ts';
import type { QuotaSubject } from './windows.ts';

const run = await shouldRunRedisSuite('rate-limit batching suite');

const settings: RateLimitSettings = {
  // Windows end on the clock: an hour's, so one gives the budget back mid-test only in a run that
  // straddles the full hour (about 1 in 1,000 for a few seconds' test).
  RATE_LIMIT_WINDOW_MS: 3_600_000,
  RATE_LIMIT_ANONYMOUS: 4,
  RATE_LIMIT_FREE: 4,
  RATE_LIMIT_STARTER: 4,
  RATE_LIMIT_PRO: 1_000,
  RATE_LIMIT_TOOL_SHARE: 0.5,
  RATE_LIMIT_SIGNIN: 4,
};

/** Records the calls of the cache's debit script (each a round trip to Redis), with their replies. */
function recordScript(
  cache: RedisCache,
  name: 'signalDebitMany',
): { calls: number; replies: Promise<unknown>[]; args: unknown[][] } {
  const redis = cache.shared.redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = redis[name]!;
  const record = { calls: 0, replies: [] as Promise<unknown>[], args: [] as unknown[][] };
  redis[name] = (...args: unknown[]) => {
    record.calls++;
    record.args.push(args);
    const reply = original.apply(redis, args);
    record.replies.push(reply);
    return reply;
  };
  return record;
}

/** Counts the debit scripts the limiter's takes go out in. */
const countScriptCalls = (cache: RedisCache) => recordScript(cache, 'signalDebitMany');

const prefixes: string[] = [];
afterAll(async () => {
  for (const prefix of prefixes) await wipePrefix(prefix);
});
/** A cache on Redis under a key prefix of its own, wiped after the file. */
function connect(tag: string): Promise<RedisCache> {
  const prefix = `test:${tag}:${randomUUID()}:`;
  prefixes.push(prefix);
  return connectRedisCache({ url: REDIS_URL, prefix });
}

describe.runIf(run)('the Redis limiter takes a turn’s requests in one script call', () => {
  it('decides the requests of one turn in the order they asked, each against the shared counts', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache);
      const calls = countScriptCalls(cache);
      // Asked in one turn: free is 4 per window, 2 per tool.
      const decisions = await Promise.all([
        limiter.decide('free', 'c1', 'a'),
        limiter.decide('free', 'c1', 'a'),
        limiter.decide('free', 'c1', 'a'),
        limiter.decide('free', 'c2', null),
        limiter.decide('free', 'c1', null),
        limiter.decide('free', 'c1', 'b'),
        limiter.decide('free', 'c1', 'b'),
      ]);
      expect(calls.calls).toBe(1);
      expect(decisions.map((d) => [d.allowed, d.limit, d.remaining])).toEqual([
        [true, 2, 1],
        [true, 2, 0],
        [false, 2, 0], // tool a's budget refuses; nothing is taken (the credential's stays 2 of 4)
        [true, 4, 3], // another credential, its own budget
        [true, 4, 1],
        [true, 4, 0],
        [false, 4, 0], // the credential's budget refuses: tool b keeps its one left
      ]);
      for (const d of decisions) {
        expect(d.resetMs).toBeGreaterThan(0);
        expect(d.resetMs).toBeLessThanOrEqual(3_600_000);
      }
      const raw = new Redis(REDIS_URL);
      try {
        const base = `${cache.shared.prefix}rl:free:`;
        // The tier twice, as every replica has counted since the limit was shared.
        expect(await raw.get(`${base}all:free:c1`)).toBe('4');
        expect(await raw.get(`${base}tool:free:c1:a`)).toBe('2');
        expect(await raw.get(`${base}tool:free:c1:b`)).toBe('1');
        expect(await raw.pttl(`${base}all:free:c1`)).toBeLessThanOrEqual(decisions[0]!.resetMs);
      } finally {
        raw.disconnect();
      }
      // A take awaited alone is a call of its own, on the same counts (another replica's limiter too).
      const other = new RateLimiter(settings, cache);
      expect(await other.decide('free', 'c2', 'a')).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
      expect(await limiter.decide('free', 'c2', null)).toMatchObject({ allowed: true, remaining: 1 });
      expect(calls.calls).toBe(3);
    } finally {
      await cache.close();
    }
  });

  it('splits a turn with more takes than one script may carry, keeping their order', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache);
      const calls = countScriptCalls(cache);
      const n = MAX_DEBITS_PER_SCRIPT + 5;
      const decisions = await Promise.all(Array.from({ length: n }, () => limiter.decide('pro', 'p', 'x')));
      expect(calls.calls).toBe(2);
      // Pro: 1,000 per window, 500 per tool; the tool budget is the tighter one and counts down.
      expect(decisions.map((d) => d.remaining)).toEqual(Array.from({ length: n }, (_, i) => 500 - 1 - i));
    } finally {
      await cache.close();
    }
  });

  it('falls back to this process for every take of a call that cannot reach Redis', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache);
      const redis = cache.shared.redis as unknown as Record<string, unknown>;
      redis.signalDebitMany = () => Promise.reject(new Error('Connection is closed.'));
      const decisions = await Promise.all(
        Array.from({ length: 6 }, () => limiter.decide('anonymous', 'c', null)),
      );
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);
    } finally {
      await cache.close();
    }
  });

  it('takes a JSON-RPC batch whole on Redis: one per message, each call from its tool, given back when a later step refuses', async () => {
    const cache = await connect('rlbatch');
    try {
      // Pro: 1,000 a window, 500 per tool.
      const limiter = new RateLimiter(settings, cache);
      const other = new RateLimiter(settings, cache);
      // Three calls of a, one of b, one other message: 5 from the key, 3 from a, 1 from b.
      expect(await limiter.decideBatch('pro', 'b1', ['a', 'a', 'a', 'b', null])).toMatchObject({
        allowed: true,
        limit: 500,
        remaining: 497,
      });
      // 498 calls of a do not fit in its 497: refused after the key's 498 were taken, which go back.
      const refused = await other.decideBatch(
        'pro',
        'b1',
        Array.from({ length: 498 }, () => 'a'),
      );
      expect(refused).toMatchObject({ allowed: false, limit: 500, remaining: 497 });
      const mixed = await other.decideBatch('pro', 'b1', [...Array.from({ length: 498 }, () => 'a'), 'b']);
      expect(mixed).toMatchObject({ allowed: false, limit: 500, remaining: 497 });
      // The key's budget is as the first batch left it: 995 of 1,000, shared by both limiters.
      expect(await limiter.decide('pro', 'b1', null)).toMatchObject({
        allowed: true,
        limit: 1_000,
        remaining: 994,
      });
      expect(await other.decideBatch('pro', 'b1', [])).toMatchObject({ allowed: true, remaining: 993 });
    } finally {
      await cache.close();
    }
  });

  it('falls back to this process when Redis answers but cannot take writes (a replica: READONLY; full memory: OOM)', async () => {
    // A replica of a primary that is not there answers every read and refuses every write, as a
    // demoted primary does after a failover.
    const redis = await startPrivateRedis();
    try {
      const cache = await connectRedisCache({ url: redis.url, prefix: 'rl:' });
      try {
        await redis.readOnly();
        const limiter = new RateLimiter(settings, cache);
        const readOnly = await Promise.all(
          Array.from({ length: 6 }, () => limiter.decide('anonymous', 'r', null)),
        );
        expect(readOnly.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);

        await redis.admin.replicaof('NO', 'ONE');
        await redis.admin.config('SET', 'maxmemory-policy', 'noeviction');
        await redis.admin.config('SET', 'maxmemory', '1');
        const full = await Promise.all(
          Array.from({ length: 6 }, () => limiter.decide('anonymous', 'o', null)),
        );
        expect(full.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);
      } finally {
        await cache.close();
      }
    } finally {
      await redis.stop();
    }
  });

  it('surfaces a script error to every take of the call instead of letting them through', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache);
      const redis = cache.shared.redis as unknown as Record<string, unknown>;
      const refused = Object.assign(new Error('ERR bad script'), { name: 'ReplyError' });
      redis.signalDebitMany = () => Promise.reject(refused);
      const outcomes = await Promise.allSettled([
        limiter.decide('free', 'c', 'a'),
        limiter.decide('free', 'c', null),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
    } finally {
      await cache.close();
    }
  });
});

describe.runIf(run)('a busy key’s requests come out of its quota lease', () => {
  const plans: PlanTable = {
    free: { monthly: 1_000, daily: null },
    starter: { monthly: 1_000, daily: null },
    pro: { monthly: 1_000_000, daily: null },
  };
  /** A replica's meter (leasing) and limiter on the shared Redis. */
  const replica = (cache: Cache, pro: number) => {
    const meter = new QuotaMeter({ cache, store: new MemoryEventStore(), plans, lease: { ms: 1_000 } });
    const limiter = new RateLimiter({ ...settings, RATE_LIMIT_PRO: pro }, cache, meter);
    /** One keyed call: its rate decision (the preHandler), then its quota debit when allowed. */
    const call = async (subject: QuotaSubject, tool: string | null = 'get_trade_call') => {
      const decision = await limiter.decide('pro', subject.id, tool);
      if (decision.allowed) expect((await meter.debit(subject, tool ?? 'search')).ok).toBe(true);
      return decision;
    };
    return { meter, call };
  };
  // A give-back in a window's last 5 s is skipped, and a test straddling the hour would find its
  // counters gone: each test starts clear of the hour window's last 15 s.
  beforeEach(async () => {
    const left = settings.RATE_LIMIT_WINDOW_MS - (Date.now() % settings.RATE_LIMIT_WINDOW_MS);
    if (left < 15_000) await delay(left + 10);
  });
  /** The subject's two rate counters (the credential's, the tool's). */
  const counters = (cache: Cache, subject: QuotaSubject) =>
    cache.readWindows([`rl:pro:all:pro:${subject.id}`, `rl:pro:tool:pro:${subject.id}:get_trade_call`]);

  /** A cache and how many rate counts were made on it (Redis: script calls without the quota's marker key). */
  const caches: [string, () => Promise<{ cache: Cache; counts: () => number }>][] = [
    [
      'on Redis, without a round trip',
      async () => {
        const cache = await connect('rllease');
        const scripts = recordScript(cache, 'signalDebitMany');
        // Rate debits go in scripts without the quota's marker key (0 keys): their third argument counts them.
        const debits = () =>
          scripts.args.filter((args) => args[0] === 0).reduce((n, args) => n + Number(args[2]), 0);
        return { cache, counts: debits };
      },
    ],
    [
      'in this process on the embedded defaults',
      async () => {
        const cache = new MemoryCache();
        const debits = vi.spyOn(cache, 'debitWindowsNow');
        return { cache, counts: () => debits.mock.calls.length };
      },
    ],
  ];

  type Opened = Awaited<ReturnType<(typeof caches)[number][1]>>;
  /** `body` with a leasing replica on a fresh cache and a pro key of its own, well within its limit. */
  const busyKey = async (
    open: () => Promise<Opened>,
    body: (t: Opened & ReturnType<typeof replica> & { subject: QuotaSubject }) => Promise<void>,
  ) => {
    const opened = await open();
    try {
      const subject: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'pro' };
      await body({ ...opened, ...replica(opened.cache, 1_000_000), subject });
    } finally {
      await opened.cache.close();
    }
  };

  it.each(caches)(
    'decides most of them %s, counts prepaid ones as spent, and gives unused ones back',
    (_, open) =>
      busyKey(open, async ({ cache, counts, meter, call, subject }) => {
        // As a production key is: a lease covers a second of its calls.
        const remaining: number[] = [];
        for (let i = 0; i < 200; i++) remaining.push((await call(subject)).remaining);
        // The tool's share (500,000) is the tighter budget. Prepaid requests count as spent when
        // granted, so never less left than a lease (256) holds below the requests made; prepaid ones
        // answer the counts of their grant, which miss a request debited one by one in the same script
        // call after it (one at a time here): never more than one over.
        remaining.forEach((left, i) => {
          expect(left).toBeLessThanOrEqual(500_000 - 1 - i + 1);
          expect(left).toBeGreaterThanOrEqual(500_000 - 1 - i - 256);
        });
        // One count per request until the lease's first grant (its 8th call), one per grant after it.
        expect(counts()).toBeLessThan(40);
        // Prepaid ahead of the requests: counted beyond the 200 made while the lease is live.
        const [all, tool] = await counters(cache, subject);
        expect(tool).toBe(all);
        expect(all).toBeGreaterThan(200);
        await meter.stop();
        expect(await counters(cache, subject)).toEqual([200, 200]);
      }),
  );

  it.each(caches)(
    'prepays none %s for a key busy on requests without a tool, which never ask for them',
    (_, open) =>
      busyKey(open, async ({ cache, counts, meter, call, subject }) => {
        for (let i = 0; i < 100; i++) expect((await call(subject, null)).allowed).toBe(true);
        expect(counts()).toBe(100);
        expect(await cache.readWindows([`rl:pro:all:pro:${subject.id}`])).toEqual([100]);
        await meter.stop();
      }),
  );

  it('two replicas prepaying one key never pass its limit, and their give-backs leave what was served', async () => {
    const { cache, counts } = await caches[0]![1]();
    try {
      // 400 a window: 200 for the tool, so each grant prepays at most 12 (1/16 of the limit).
      const a = replica(cache, 400);
      const b = replica(cache, 400);
      const subject: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'pro' };
      let allowed = 0;
      for (let i = 0; i < 150; i++) {
        const pair = await Promise.all([a.call(subject), b.call(subject)]);
        allowed += pair.filter((d) => d.allowed).length;
      }
      // Units one replica holds unused are refused to the other: fewer than 200 may be served, never more.
      expect(allowed).toBeLessThanOrEqual(200);
      expect(allowed).toBeGreaterThanOrEqual(200 - 2 * 12);
      // Prepaid requests were taken: fewer counts than the 300 requests.
      expect(counts()).toBeLessThan(300);
      await Promise.all([a.meter.stop(), b.meter.stop()]);
      const [, tool] = await counters(cache, subject);
      expect(tool).toBe(allowed);
    } finally {
      await cache.close();
    }
  });
});
