import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../adapters/cache/redis.ts';
import { startPrivateRedis } from '../../test/redis-private.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../test/redis-probe.ts';
import { MAX_TAKES_PER_SCRIPT, RateLimiter, type RateLimitSettings } from './rate-limit.ts';

const run = await shouldRunRedisSuite('rate-limit batching suite');

const settings: RateLimitSettings = {
  RATE_LIMIT_ENABLED: true,
  RATE_LIMIT_WINDOW_MS: 60_000,
  RATE_LIMIT_ANONYMOUS: 4,
  RATE_LIMIT_FREE: 4,
  RATE_LIMIT_STARTER: 4,
  RATE_LIMIT_PRO: 1_000,
  RATE_LIMIT_TOOL_SHARE: 0.5,
  RATE_LIMIT_LEASE_MAX: 64,
};

/** Records the calls of one of the limiter's scripts (each a round trip to Redis), with their replies. */
function recordScript(
  cache: RedisCache,
  name: 'signalRateTakeMany' | 'signalRateReturn',
): { calls: number; replies: Promise<unknown>[] } {
  const redis = cache.shared.redis as unknown as Record<string, (...args: unknown[]) => Promise<unknown>>;
  const original = redis[name]!;
  const record = { calls: 0, replies: [] as Promise<unknown>[] };
  redis[name] = (...args: unknown[]) => {
    record.calls++;
    const reply = original.apply(redis, args);
    record.replies.push(reply);
    return reply;
  };
  return record;
}

/** Counts the take scripts the limiter sends. */
const countScriptCalls = (cache: RedisCache) => recordScript(cache, 'signalRateTakeMany');

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
      const limiter = new RateLimiter(settings, cache.shared);
      const calls = countScriptCalls(cache);
      // Asked in one turn: free is 4 per window, 2 per tool.
      const decisions = await Promise.all([
        limiter.take('free', 'c1', 'a'),
        limiter.take('free', 'c1', 'a'),
        limiter.take('free', 'c1', 'a'),
        limiter.take('free', 'c2', null),
        limiter.take('free', 'c1', null),
        limiter.take('free', 'c1', 'b'),
        limiter.take('free', 'c1', 'b'),
      ]);
      expect(calls.calls).toBe(1);
      expect(decisions.map((d) => [d.allowed, d.limit, d.remaining])).toEqual([
        [true, 2, 1],
        [true, 2, 0],
        [false, 2, 0], // tool a's budget refuses; the credential's counted it (3 of 4)
        [true, 4, 3], // another credential, its own budget
        [true, 4, 0],
        [false, 4, 0], // the credential's budget refuses: tool b is not reached
        [false, 4, 0],
      ]);
      for (const d of decisions) {
        expect(d.resetMs).toBeGreaterThan(50_000);
        expect(d.resetMs).toBeLessThanOrEqual(60_000);
      }
      const raw = new Redis(REDIS_URL);
      try {
        const base = `${cache.shared.prefix}rl:free:`;
        // The tier twice, as every replica has counted since the limit was shared.
        expect(await raw.get(`${base}all:free:c1`)).toBe('6');
        expect(await raw.get(`${base}tool:free:c1:a`)).toBe('3');
        expect(await raw.get(`${base}tool:free:c1:b`)).toBeNull();
        expect(await raw.pttl(`${base}all:free:c1`)).toBeGreaterThan(50_000);
      } finally {
        raw.disconnect();
      }
      // A take awaited alone is a call of its own, on the same counts (another replica's limiter too).
      const other = new RateLimiter(settings, cache.shared);
      expect(await other.take('free', 'c2', 'a')).toMatchObject({ allowed: true, limit: 2, remaining: 1 });
      expect(await limiter.take('free', 'c2', null)).toMatchObject({ allowed: true, remaining: 1 });
      expect(calls.calls).toBe(3);
    } finally {
      await cache.close();
    }
  });

  it('splits a turn with more takes than one script may carry, keeping their order', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache.shared);
      const calls = countScriptCalls(cache);
      const n = MAX_TAKES_PER_SCRIPT + 5;
      const decisions = await Promise.all(Array.from({ length: n }, () => limiter.take('pro', 'p', 'x')));
      expect(calls.calls).toBe(2);
      // Pro: 1,000 per window, 500 per tool; the tool budget is the tighter one and counts down.
      // The first script also leases 31 units of it (a sixteenth of 500), counted in Redis before
      // the second script's takes; held here, not let through, they are not taken from what remains.
      expect(decisions.map((d) => d.remaining)).toEqual(Array.from({ length: n }, (_, i) => 500 - 1 - i));
    } finally {
      await cache.close();
    }
  });

  it('falls back to this process for every take of a call that cannot reach Redis', async () => {
    const cache = await connect('rlbatch');
    try {
      const limiter = new RateLimiter(settings, cache.shared);
      const redis = cache.shared.redis as unknown as Record<string, unknown>;
      redis.signalRateTakeMany = () => Promise.reject(new Error('Connection is closed.'));
      const decisions = await Promise.all(
        Array.from({ length: 6 }, () => limiter.take('anonymous', 'c', null)),
      );
      expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);
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
        const limiter = new RateLimiter(settings, cache.shared);
        const readOnly = await Promise.all(
          Array.from({ length: 6 }, () => limiter.take('anonymous', 'r', null)),
        );
        expect(readOnly.map((d) => d.allowed)).toEqual([true, true, true, true, false, false]);

        await redis.admin.replicaof('NO', 'ONE');
        await redis.admin.config('SET', 'maxmemory-policy', 'noeviction');
        await redis.admin.config('SET', 'maxmemory', '1');
        const full = await Promise.all(Array.from({ length: 6 }, () => limiter.take('anonymous', 'o', null)));
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
      const limiter = new RateLimiter(settings, cache.shared);
      const redis = cache.shared.redis as unknown as Record<string, unknown>;
      const refused = Object.assign(new Error('ERR bad script'), { name: 'ReplyError' });
      redis.signalRateTakeMany = () => Promise.reject(refused);
      const outcomes = await Promise.allSettled([
        limiter.take('free', 'c', 'a'),
        limiter.take('free', 'c', null),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'rejected']);
    } finally {
      await cache.close();
    }
  });
});

describe.runIf(run)('a busy budget leases units ahead on Redis', () => {
  const counts = async (cache: RedisCache, tier: string, credential: string, tool: string) => {
    const raw = new Redis(REDIS_URL);
    try {
      const base = `${cache.shared.prefix}rl:${tier}:`;
      return {
        all: Number(await raw.get(`${base}all:${tier}:${credential}`)),
        tool: Number(await raw.get(`${base}tool:${tier}:${credential}:${tool}`)),
      };
    } finally {
      raw.disconnect();
    }
  };

  /** 16 requests of one shape in one turn: busy, and past the budget's MIN_UNITS calls. */
  const burst = (limiter: RateLimiter, credential: string, n = 16) =>
    Promise.all(Array.from({ length: n }, () => limiter.take('pro', credential, 'x')));
  /**
   * One request as the hook asks it (RateLimiter.decide): its decision when a lease held a unit for
   * it, else null once Redis has counted it.
   */
  const leasedOrCounted = async (limiter: RateLimiter, credential: string) => {
    const decision = limiter.decide('pro', credential, 'x');
    if (!(decision instanceof Promise)) return decision;
    await decision;
    return null;
  };
  /** Waits for the lease granted after a burst to be counted in Redis. */
  const granted = (cache: RedisCache, credential: string, requests: number) =>
    vi.waitFor(
      async () => expect((await counts(cache, 'pro', credential, 'x')).tool).toBeGreaterThan(requests),
      { timeout: 5_000, interval: 10 },
    );

  it('decides the next requests without Redis, every unit counted there first', async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter(settings, cache.shared);
    try {
      const calls = countScriptCalls(cache);
      // Pro: 1,000 per window, 500 per tool: a lease is at most (500 - 16) / 16 = 30 units.
      await burst(limiter, 'p');
      expect(calls.calls).toBe(1);
      await granted(cache, 'p', 16);
      expect(await counts(cache, 'pro', 'p', 'x')).toEqual({ all: 16 + 30, tool: 16 + 30 });
      const leased = [];
      for (let i = 0; i < 30; i++) leased.push(await leasedOrCounted(limiter, 'p'));
      expect(calls.calls).toBe(1);
      // The tool's budget is the tighter: 500 less the requests let through (held units are not).
      expect(leased.map((d) => d?.remaining)).toEqual(Array.from({ length: 30 }, (_, i) => 483 - i));
      expect(leased.every((d) => d?.allowed === true && d.limit === 500 && d.resetMs > 50_000)).toBe(true);
      // Used up before the next grant lands: the next request is counted through Redis again.
      expect(await leasedOrCounted(limiter, 'p')).toBeNull();
      // Another credential has no lease of its own.
      expect(await leasedOrCounted(limiter, 'q')).toBeNull();
      await limiter.close();
      expect(await counts(cache, 'pro', 'p', 'x')).toEqual({ all: 47, tool: 47 });
    } finally {
      await limiter.close();
      await cache.close();
    }
  });

  it('leases no caller whose requests come further apart than the busy time, nor a short burst', async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter(settings, cache.shared);
    try {
      await burst(limiter, 'short', 4);
      for (let i = 0; i < 4; i++) {
        if (i > 0) await sleep(150);
        await limiter.take('pro', 'slow', 'x');
      }
      await sleep(50);
      expect(await leasedOrCounted(limiter, 'short')).toBeNull();
      expect(await leasedOrCounted(limiter, 'slow')).toBeNull();
      expect(await counts(cache, 'pro', 'short', 'x')).toEqual({ all: 5, tool: 5 });
      expect(await counts(cache, 'pro', 'slow', 'x')).toEqual({ all: 5, tool: 5 });
    } finally {
      await limiter.close();
      await cache.close();
    }
  });

  it('gives back what no request took once the budget goes quiet, and at close', async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter(settings, cache.shared);
    try {
      await burst(limiter, 'p');
      await granted(cache, 'p', 16);
      for (let i = 0; i < 5; i++) expect((await leasedOrCounted(limiter, 'p'))?.allowed).toBe(true);
      // Quiet for one to two idle periods: the units no request took go back.
      await vi.waitFor(
        async () => expect(await counts(cache, 'pro', 'p', 'x')).toEqual({ all: 21, tool: 21 }),
        { timeout: 5_000, interval: 50 },
      );
      expect(await leasedOrCounted(limiter, 'p')).toBeNull();
      await burst(limiter, 'p');
      await granted(cache, 'p', 38);
      await limiter.close();
      expect(await counts(cache, 'pro', 'p', 'x')).toEqual({ all: 38, tool: 38 });
    } finally {
      await limiter.close();
      await cache.close();
    }
  });

  it('never lets two replicas through past the limit; held units refuse early by at most a lease each', async () => {
    const cache = await connect('rllease');
    // Pro 1,600 per window, 800 per tool: leases of at most 50.
    const tight = { ...settings, RATE_LIMIT_PRO: 1_600 };
    const a = new RateLimiter(tight, cache.shared);
    const b = new RateLimiter(tight, cache.shared);
    try {
      let allowed = 0;
      let leasedAnswers = 0;
      for (let round = 0; round < 70; round++) {
        const decisions = await Promise.all(
          Array.from({ length: 16 }, (_, i) => {
            const limiter = i % 2 === 0 ? a : b;
            const decision = limiter.decide('pro', 'p', 'x');
            if (!(decision instanceof Promise)) leasedAnswers++;
            return decision;
          }),
        );
        allowed += decisions.filter((d) => d.allowed).length;
        await sleep(1);
      }
      expect(leasedAnswers).toBeGreaterThan(0);
      expect(allowed).toBeLessThanOrEqual(800);
      expect(allowed).toBeGreaterThanOrEqual(800 - 2 * 50);
      const held = await counts(cache, 'pro', 'p', 'x');
      await a.close();
      await b.close();
      const after = await counts(cache, 'pro', 'p', 'x');
      expect(held.tool - after.tool).toBeLessThanOrEqual(2 * 50);
      // Every request let through was counted in Redis (given-back units never include a used one).
      expect(after.tool).toBeGreaterThanOrEqual(allowed);
    } finally {
      await a.close();
      await b.close();
      await cache.close();
    }
  });

  it("neither uses nor takes a lease within a second of the window's end", async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter({ ...settings, RATE_LIMIT_WINDOW_MS: 2_500 }, cache.shared);
    try {
      await burst(limiter, 's');
      await granted(cache, 's', 16);
      // Used every 50 ms (never quiet long enough to be given back) until it may not be.
      const resets: number[] = [];
      for (let i = 0; i < 60; i++) {
        const decision = await leasedOrCounted(limiter, 's');
        if (decision === null) break;
        resets.push(decision.resetMs);
        await sleep(50);
      }
      expect(resets.length).toBeGreaterThan(0);
      expect(resets.length).toBeLessThan(60);
      expect(Math.min(...resets)).toBeGreaterThanOrEqual(1_000);
    } finally {
      await limiter.close();
      await cache.close();
    }
  });

  it('takes none with RATE_LIMIT_LEASE_MAX=0 or a window of two seconds or less', async () => {
    const cache = await connect('rllease');
    const off = new RateLimiter({ ...settings, RATE_LIMIT_LEASE_MAX: 0 }, cache.shared);
    const short = new RateLimiter({ ...settings, RATE_LIMIT_WINDOW_MS: 2_000 }, cache.shared);
    try {
      await Promise.all([off.take('pro', 'o', 'x'), off.take('pro', 'o', 'x')]);
      expect(await leasedOrCounted(off, 'o')).toBeNull();
      expect(await counts(cache, 'pro', 'o', 'x')).toEqual({ all: 3, tool: 3 });
      await Promise.all([short.take('pro', 's', 'x'), short.take('pro', 's', 'x')]);
      expect(await leasedOrCounted(short, 's')).toBeNull();
      expect(await counts(cache, 'pro', 's', 'x')).toEqual({ all: 3, tool: 3 });
    } finally {
      await off.close();
      await short.close();
      await cache.close();
    }
  });

  it('gives nothing back into a new window of the same budget (the old key gone meanwhile)', async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter(settings, cache.shared);
    const other = new RateLimiter({ ...settings, RATE_LIMIT_LEASE_MAX: 0 }, cache.shared);
    const raw = new Redis(REDIS_URL);
    // Each give-back the limiter sends, to wait for it.
    const returns = recordScript(cache, 'signalRateReturn');
    try {
      await burst(limiter, 'n');
      await granted(cache, 'n', 16);
      // The server loses the keys (evicted, or restarted empty) and a new window opens later.
      const base = `${cache.shared.prefix}rl:pro:`;
      await raw.del(`${base}all:pro:n`, `${base}tool:pro:n:x`);
      await sleep(150);
      await other.take('pro', 'n', 'x');
      // Quiet (the lease untouched since its grant): it is given back, but not into the new window.
      await vi.waitFor(() => expect(returns.calls).toBeGreaterThan(0), { timeout: 5_000, interval: 20 });
      await Promise.all(returns.replies);
      expect(await counts(cache, 'pro', 'n', 'x')).toEqual({ all: 1, tool: 1 });
    } finally {
      raw.disconnect();
      await limiter.close();
      await other.close();
      await cache.close();
    }
  });

  it('leases none while a lease would be over 1/16 of what a budget has left, and never opens a budget the request did not reach', async () => {
    const cache = await connect('rllease');
    const limiter = new RateLimiter(settings, cache.shared);
    const raw = new Redis(REDIS_URL);
    try {
      const base = `${cache.shared.prefix}rl:pro:`;
      // The credential's budget (1,000) has 107 left after the burst: a lease of 8 would be over 1/16 of it.
      await raw.set(`${base}all:pro:g`, 1_000 - 123, 'PX', 60_000);
      await burst(limiter, 'g');
      await sleep(50);
      expect(await counts(cache, 'pro', 'g', 'x')).toEqual({ all: 893, tool: 16 });
      expect(await leasedOrCounted(limiter, 'g')).toBeNull();
      // A credential at its limit refuses: the tool's budget is neither taken nor leased.
      await raw.set(`${base}all:pro:h`, 1_000, 'PX', 60_000);
      const refused = await Promise.all([limiter.take('pro', 'h', 'y'), limiter.take('pro', 'h', 'y')]);
      expect(refused.map((d) => [d.allowed, d.remaining])).toEqual([
        [false, 0],
        [false, 0],
      ]);
      expect(await raw.get(`${base}tool:pro:h:y`)).toBeNull();
    } finally {
      raw.disconnect();
      await limiter.close();
      await cache.close();
    }
  });
});
