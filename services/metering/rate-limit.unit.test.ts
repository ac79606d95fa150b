import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { type RateDecision, RateLimiter, type RateLimitSettings } from './rate-limit.ts';

const settings: RateLimitSettings = {
  RATE_LIMIT_ENABLED: true,
  RATE_LIMIT_WINDOW_MS: 60_000,
  RATE_LIMIT_ANONYMOUS: 4,
  RATE_LIMIT_FREE: 10,
  RATE_LIMIT_STARTER: 20,
  RATE_LIMIT_PRO: 40,
  RATE_LIMIT_TOOL_SHARE: 0.5,
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

  it('gives each tool its share, and a refusal by the credential budget takes nothing from the tool', async () => {
    const limiter = new RateLimiter(settings, null);
    // Free: 10 per window, 5 per tool.
    for (let i = 0; i < 5; i++) expect(decideNow(limiter, 'free', 'k', 'x').allowed).toBe(true);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, limit: 5 });
    for (let i = 0; i < 4; i++) expect(decideNow(limiter, 'free', 'k', 'y').allowed).toBe(true);
    // Eleventh request: the credential's budget refuses, tool z's stays untouched.
    expect(decideNow(limiter, 'free', 'k', 'z')).toMatchObject({ allowed: false, limit: 10 });
    expect(await limiter.decide('free', 'other', 'z')).toMatchObject({ allowed: true, remaining: 4 });
  });

  it("opens a tool's window at the tool's first request, so it may outlast the credential's window", () => {
    const limiter = new RateLimiter(settings, null);
    expect(decideNow(limiter, 'free', 'k', null)).toMatchObject({
      allowed: true,
      remaining: 9,
      resetMs: 60_000,
    });
    vi.advanceTimersByTime(30_000);
    for (let i = 0; i < 5; i++) expect(decideNow(limiter, 'free', 'k', 'x').allowed).toBe(true);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, limit: 5, resetMs: 60_000 });
    // The credential's window starts afresh; tool x's still has 30 s to run, and refuses.
    vi.advanceTimersByTime(30_000);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: false, limit: 5, resetMs: 30_000 });
    expect(decideNow(limiter, 'free', 'k', null)).toMatchObject({ allowed: true, limit: 10, remaining: 8 });
    vi.advanceTimersByTime(30_000);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({ allowed: true, limit: 5, remaining: 4 });
    // Long after both ended, everything starts afresh.
    vi.advanceTimersByTime(600_000);
    expect(decideNow(limiter, 'free', 'k', 'x')).toMatchObject({
      allowed: true,
      limit: 5,
      remaining: 4,
      resetMs: 60_000,
    });
    expect(decideNow(limiter, 'free', 'k', null)).toMatchObject({ allowed: true, limit: 10, remaining: 8 });
  });
});
