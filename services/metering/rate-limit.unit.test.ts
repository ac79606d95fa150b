import type { Logger } from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type Cache, CacheUnavailableError, type DebitResult } from '../../adapters/cache/port.ts';
import { type RateDecision, RateLimiter, type RateLimitSettings } from './rate-limit.ts';

const settings: RateLimitSettings = {
  RATE_LIMIT_WINDOW_MS: 60_000,
  RATE_LIMIT_ANONYMOUS: 4,
  RATE_LIMIT_FREE: 10,
  RATE_LIMIT_STARTER: 20,
  RATE_LIMIT_PRO: 40,
  RATE_LIMIT_TOOL_SHARE: 0.5,
  RATE_LIMIT_SIGNIN: 4,
};

/** Without Redis every request is decided at once, as the hook asks it (RateLimiter.decide). */
function decideNow(limiter: RateLimiter, ...request: Parameters<RateLimiter['decide']>): RateDecision {
  const decision = limiter.decide(...request);
  if (decision instanceof Promise) throw new Error('decided through Redis, which this limiter has none of');
  return decision;
}

describe('RateLimiter in-process (no Redis)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-11-23T10:00:00Z'));
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('decides at once, refuses past the limit, and opens a new window when the old one ends', () => {
    const limiter = new RateLimiter(settings, null);
    const taken = [1, 2, 3, 4, 5].map(() => decideNow(limiter, 'anonymous', 'a', null));
    expect(taken.map((d) => d.allowed)).toEqual([true, true, true, true, false]);
    expect(taken.map((d) => d.remaining)).toEqual([3, 2, 1, 0, 0]);
    expect(taken[4]).toMatchObject({ limit: 4, resetMs: 60_000 });
    // Another credential has its own budget.
    expect(decideNow(limiter, 'anonymous', 'b', null)).toMatchObject({ allowed: true, remaining: 3 });

    vi.advanceTimersByTime(30_000);
    expect(decideNow(limiter, 'anonymous', 'a', null)).toMatchObject({ allowed: false, resetMs: 30_000 });
    vi.advanceTimersByTime(30_000);
    expect(decideNow(limiter, 'anonymous', 'a', null)).toMatchObject({ allowed: true, remaining: 3 });
  });

  it('gives each tool its share; a refused request takes from no budget', async () => {
    const limiter = new RateLimiter(settings, null);
    // Free: 10 per window, 5 per tool.
    for (let i = 0; i < 5; i++) expect(decideNow(limiter, 'free', 'k', 'x').allowed).toBe(true);
    // Refused by tool x: the credential's budget keeps the 5 it had left.
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, limit: 5 });
    expect(decideNow(limiter, 'free', 'k', null)).toMatchObject({ allowed: true, limit: 10, remaining: 4 });
    for (let i = 0; i < 4; i++) expect(decideNow(limiter, 'free', 'k', 'y').allowed).toBe(true);
    // Eleventh request: the credential's budget refuses, tool z's stays untouched.
    expect(decideNow(limiter, 'free', 'k', 'z')).toMatchObject({ allowed: false, limit: 10 });
    expect(await limiter.decide('free', 'other', 'z')).toMatchObject({ allowed: true, remaining: 4 });
  });

  it('ends every window on the clock, however late in it the first request came', () => {
    const limiter = new RateLimiter(settings, null);
    vi.advanceTimersByTime(45_000);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({
      allowed: true,
      remaining: 4,
      resetMs: 15_000,
    });
    for (let i = 0; i < 4; i++) decideNow(limiter, 'free', 'k', 'x');
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, limit: 5, resetMs: 15_000 });
    vi.advanceTimersByTime(14_999);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, resetMs: 1 });
    // The next window: both budgets start afresh at once.
    vi.advanceTimersByTime(1);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({
      allowed: true,
      limit: 5,
      remaining: 4,
      resetMs: 60_000,
    });
    expect(decideNow(limiter, 'free', 'k', null)).toMatchObject({ allowed: true, limit: 10, remaining: 8 });
  });
});

describe('RateLimiter.decideBatch gives back what a batch took unless it is served', () => {
  /** Redis as the limiter sees it: the first step debits, the second refuses or throws. */
  function redis(second: 'refuse' | 'throw', release: 'ok' | 'fail') {
    const debits: number[] = [];
    const releases: [string[], number][] = [];
    const cache = {
      kind: 'redis',
      async debitWindows(windows: { key: string }[], amount: number): Promise<DebitResult> {
        debits.push(amount);
        if (debits.length === 1) return { ok: true, counts: windows.map(() => amount), refusedBy: null };
        if (second === 'throw') throw new Error('NOSCRIPT: a refused script');
        return { ok: false, counts: windows.map(() => 5), refusedBy: 0 };
      },
      async releaseWindows(keys: string[], amount: number): Promise<number[]> {
        releases.push([keys, amount]);
        if (release === 'fail') throw new CacheUnavailableError('connection lost');
        return keys.map(() => 0);
      },
    } as unknown as Cache;
    return { cache, debits, releases };
  }
  const logger = () => ({ warn: vi.fn() });

  it('a step that throws (not an outage) gives back the steps before it, then the error goes on', async () => {
    const { cache, releases } = redis('throw', 'ok');
    const log = logger();
    const limiter = new RateLimiter(settings, cache, undefined, log as unknown as Logger);
    // Three messages (the key's step, 3) and two calls of x (the tool's step, 2).
    await expect(limiter.decideBatch('free', 'k', ['x', 'x', null])).rejects.toThrow(/refused script/);
    expect(releases).toEqual([[['rl:free:all:free:k'], 3]]);
    expect(log.warn).not.toHaveBeenCalled();
  });

  it('a give-back that fails is logged, and the batch is still refused', async () => {
    const { cache, releases } = redis('refuse', 'fail');
    const log = logger();
    const limiter = new RateLimiter(settings, cache, undefined, log as unknown as Logger);
    expect(await limiter.decideBatch('free', 'k', ['x', 'x', null])).toMatchObject({ allowed: false });
    expect(releases).toHaveLength(1);
    expect(log.warn).toHaveBeenCalledTimes(1);
    expect(log.warn.mock.calls[0]![0]).toMatchObject({ keys: ['rl:free:all:free:k'], amount: 3 });
  });

  it('tells a batch no window could take: more messages than the limit, or calls than a tool’s share', () => {
    const limiter = new RateLimiter(settings, null);
    // Anonymous: 4 a window, 2 per tool.
    expect(limiter.batchTooLarge('anonymous', [null, null, null, null])).toBeNull();
    expect(limiter.batchTooLarge('anonymous', [null, null, null, null, null])).toEqual({
      size: 5,
      limit: 4,
      tool: null,
    });
    expect(limiter.batchTooLarge('anonymous', ['x', 'y', 'x', 'x'])).toEqual({
      size: 3,
      limit: 2,
      tool: 'x',
    });
    expect(limiter.batchTooLarge('anonymous', ['x', 'y', 'y', 'x'])).toBeNull();
  });
});
