import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectRedisCache, type RedisCache } from '../../adapters/cache/redis.ts';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from '../../test/redis-probe.ts';
import type { PlanTable } from './plans.ts';
import { QuotaMeter } from './quota-meter.ts';
import { debitedUnits } from './quota-projection.ts';
import { QUOTA_FAMILY } from './quota-rebuild.ts';
import { type QuotaSubject, quotaPeriod, quotaWindows } from './windows.ts';

const run = await shouldRunRedisSuite('quota suite against Redis');
const PREFIX = `test:quota:${randomUUID()}:`;
const PLANS: PlanTable = {
  free: { monthly: 200, daily: 100 },
  starter: { monthly: 10_000, daily: null },
  pro: { monthly: 100_000, daily: null },
};
// 2031-03-31 23:00 UTC (in the future, so Redis keeps the counters): the next hour crosses a day and a month.
const T0 = Date.UTC(2031, 2, 31, 23, 0, 0);

describe.runIf(run)('quota on the real Redis', () => {
  let cache: RedisCache;
  beforeAll(async () => {
    cache = await connectRedisCache({ url: REDIS_URL, prefix: PREFIX });
  });
  afterAll(async () => {
    await cache?.close();
    await wipePrefix(PREFIX);
  });

  it('200 concurrent calls against a key with 5 calls left serve exactly 5', async () => {
    const store = new MemoryEventStore();
    const meter = new QuotaMeter({
      cache,
      store,
      plans: { ...PLANS, starter: { monthly: 10, daily: null } },
      now: () => T0,
    });
    const subject: QuotaSubject = { id: `k-${randomUUID()}`, kind: 'key', plan: 'starter' };
    for (let i = 0; i < 5; i++) expect((await meter.debit(subject, 'get_trade_call')).ok).toBe(true);

    const outcomes = await Promise.all(
      Array.from({ length: 200 }, () => meter.debit(subject, 'get_trade_call')),
    );
    expect(outcomes.filter((o) => o.ok)).toHaveLength(5);
    expect(outcomes.filter((o) => !o.ok).every((o) => o.refusedBy === 'monthly')).toBe(true);
    const peek = await meter.peek(subject);
    expect(peek).toMatchObject({ used: 10, total: 10, remaining: 0 });
    // Every served call, and only those, is on the log.
    const debits = (await store.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(debits.map((e) => debitedUnits(e))).toEqual(Array(10).fill(1));
  });

  it('the free plan stops at 100 a day, and the day and month roll over at UTC midnight', async () => {
    let now = T0;
    const store = new MemoryEventStore();
    const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => now });
    const subject: QuotaSubject = { id: `a-${randomUUID()}`, kind: 'anonymous', plan: 'free' };
    const served = await Promise.all(Array.from({ length: 120 }, () => meter.debit(subject, 't')));
    expect(served.filter((o) => o.ok)).toHaveLength(100);
    const refused = served.find((o) => !o.ok)!;
    expect(refused.refusedBy).toBe('daily');
    expect(refused.snapshot).toEqual({
      // The day binds: the block is its figures. The month block adds up (100 + 100 = 200).
      used: 100,
      total: 100,
      remaining: 0,
      resets_at: '2031-04-01T00:00:00.000Z',
      monthly: { used: 100, total: 200, remaining: 100, resets_at: '2031-04-01T00:00:00.000Z' },
      daily: { used: 100, total: 100, remaining: 0, resets_at: '2031-04-01T00:00:00.000Z' },
    });

    now = T0 + 60 * 60_000; // 2031-04-01 00:00 UTC: a new day and a new month
    const next = await meter.debit(subject, 't');
    expect(next.ok).toBe(true);
    expect(next.snapshot).toMatchObject({
      used: 1,
      remaining: 99,
      resets_at: '2031-04-02T00:00:00.000Z',
      monthly: { used: 1, remaining: 199, resets_at: '2031-05-01T00:00:00.000Z' },
      daily: { used: 1, remaining: 99, resets_at: '2031-04-02T00:00:00.000Z' },
    });

    // A day later in the same month: the day starts afresh, the month keeps counting.
    now = T0 + 25 * 60 * 60_000;
    const later = await meter.debit(subject, 't');
    expect(later.snapshot).toMatchObject({
      used: 1,
      remaining: 99,
      monthly: { used: 2, remaining: 198 },
      daily: { used: 1, remaining: 99 },
    });
  });

  it('wipe Redis: the next read finds the counters gone and rebuilds the same balances from the log', async () => {
    const store = new MemoryEventStore();
    let now = T0 - 3 * 60 * 60_000;
    const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => now });
    const subjects: QuotaSubject[] = [
      { id: `r1-${randomUUID()}`, kind: 'key', plan: 'pro' },
      { id: `r2-${randomUUID()}`, kind: 'key', plan: 'starter' },
      { id: `r3-${randomUUID()}`, kind: 'anonymous', plan: 'free' },
    ];
    for (let i = 0; i < 30; i++) await meter.debit(subjects[i % 3]!, 'get_trade_call');
    now = T0 + 90 * 60_000; // next day and month; the previous windows are within their grace hour
    for (let i = 0; i < 12; i++) await meter.debit(subjects[i % 2]!, 'scan_funding_arb');

    const keysOf = (s: QuotaSubject, at: number) =>
      quotaWindows(s.id, PLANS[s.plan], quotaPeriod(at)).map((w) => w.key);
    const allKeys = subjects.flatMap((s) => [...keysOf(s, T0 - 3 * 60 * 60_000), ...keysOf(s, now)]);
    const before = await cache.readLive(QUOTA_FAMILY, allKeys);
    expect(before.reduce((a, b) => a + b, 0)).toBe(2 * 42);

    expect(await wipePrefix(PREFIX)).toBeGreaterThan(0);
    expect(await cache.liveGeneration(QUOTA_FAMILY)).toBeNull();

    const after = await Promise.all(subjects.map((s) => meter.peek(s)));
    expect(after.map((p) => p.used)).toEqual([6, 6, 0]);
    expect(await cache.readLive(QUOTA_FAMILY, allKeys)).toEqual(before);
    await meter.counters.stop();
  });

  it('concurrent calls, each recorded: a wipe of Redis rebuilds the same counters from the log', async () => {
    const store = new MemoryEventStore();
    const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => T0 });
    const subjects: QuotaSubject[] = [
      { id: `b1-${randomUUID()}`, kind: 'key', plan: 'pro' },
      { id: `b2-${randomUUID()}`, kind: 'key', plan: 'starter' },
    ];
    // Three bursts of 40 concurrent calls over the two keys, one pipelined Redis round trip each.
    for (let burst = 0; burst < 3; burst++)
      await Promise.all(
        Array.from({ length: 40 }, (_, i) => meter.debit(subjects[i % 2]!, 'get_trade_call')),
      );
    const events = (await store.readAll()).filter((e) => debitedUnits(e) > 0);
    expect(events.map((e) => debitedUnits(e))).toEqual(Array(120).fill(1));
    const keys = subjects.flatMap((s) =>
      quotaWindows(s.id, PLANS[s.plan], quotaPeriod(T0)).map((w) => w.key),
    );
    const before = await cache.readLive(QUOTA_FAMILY, keys);
    expect(before).toEqual([60, 60, 60, 60]);

    await wipePrefix(PREFIX);
    expect(await cache.liveGeneration(QUOTA_FAMILY)).toBeNull();
    expect((await meter.peek(subjects[0]!)).used).toBe(60);
    expect(await cache.readLive(QUOTA_FAMILY, keys)).toEqual(before);
    await meter.counters.stop();
  });

  // Issue 33: after store write failures the Redis counter stayed 3 above the log. The debit is
  // counted in Redis before its record is appended; a record that fails must give it back.
  it('a store that fails writes (LMDB closed under the meter): refused calls leave the counter equal to the log', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'quota-closed-'));
    try {
      const store = await openLmdbEventStore({ path: dir });
      const meter = new QuotaMeter({ cache, store, plans: PLANS, now: () => T0 });
      const subject: QuotaSubject = { id: `c-${randomUUID()}`, kind: 'key', plan: 'pro' };
      const served = await Promise.all(
        Array.from({ length: 5 }, () => meter.debit(subject, 'get_trade_call')),
      );
      expect(served.every((o) => o.ok)).toBe(true);
      await store.close();
      const refused = await Promise.allSettled(
        Array.from({ length: 3 }, () => meter.debit(subject, 'get_trade_call')),
      );
      expect(refused.map((r) => r.status)).toEqual(['rejected', 'rejected', 'rejected']);
      const keys = quotaWindows(subject.id, PLANS.pro, quotaPeriod(T0)).map((w) => w.key);
      expect(await cache.readLive(QUOTA_FAMILY, keys)).toEqual([5, 5]);

      const reopened = await openLmdbEventStore({ path: dir });
      const logged = (await reopened.readAll()).reduce((sum, e) => sum + debitedUnits(e, subject.id), 0);
      await reopened.close();
      expect(logged).toBe(5);
      await meter.counters.stop();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
