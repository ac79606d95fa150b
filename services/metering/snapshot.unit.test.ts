import { describe, expect, it } from 'vitest';
import { quotaSnapshot } from './quota-meter.ts';
import { exhaustedWindow, QuotaSnapshot, quotaRetryAfter, refusingResetsAt } from './snapshot.ts';
import { quotaPeriod } from './windows.ts';

describe('quotaSnapshot', () => {
  it('names the end of each window as an ISO time for every day of two years', () => {
    const start = Date.UTC(2030, 0, 1, 12);
    for (let day = 0; day < 730; day++) {
      const now = start + day * 86_400_000;
      const period = quotaPeriod(now);
      const snapshot = quotaSnapshot({ monthly: 1_000, daily: 60 }, period, [10, 3]);
      const date = new Date(now);
      const dayEnd = Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate() + 1);
      const monthEnd = Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1);
      // 57 left of the day's 60 against 990 of the month's: the day binds.
      expect(snapshot.resets_at).toBe(new Date(dayEnd).toISOString());
      expect(snapshot.monthly.resets_at).toBe(new Date(monthEnd).toISOString());
      expect(snapshot.daily?.resets_at).toBe(new Date(dayEnd).toISOString());
    }
  });

  it('a free key over its daily cap: the block is the day, so it adds up and resets tomorrow', () => {
    const period = quotaPeriod(Date.UTC(2026, 10, 28, 2, 11, 35));
    const snapshot = quotaSnapshot({ monthly: 200, daily: 100 }, period, [100, 100]);
    expect(snapshot).toEqual({
      used: 100,
      total: 100,
      remaining: 0,
      resets_at: '2026-11-29T00:00:00.000Z',
      monthly: { used: 100, total: 200, remaining: 100, resets_at: '2026-12-01T00:00:00.000Z' },
      daily: { used: 100, total: 100, remaining: 0, resets_at: '2026-11-29T00:00:00.000Z' },
    });
    // Both spent: calling waits for the month, so the block is the month's.
    expect(quotaSnapshot({ monthly: 200, daily: 100 }, period, [200, 100])).toMatchObject({
      used: 200,
      total: 200,
      remaining: 0,
      resets_at: '2026-12-01T00:00:00.000Z',
    });
    // Equal left in both: the month's, the later reset.
    expect(quotaSnapshot({ monthly: 200, daily: 100 }, period, [150, 50])).toMatchObject({
      used: 150,
      total: 200,
      remaining: 50,
    });
  });

  it('gives the figures of both windows, the block the tighter of the two, in the contract shape', () => {
    const period = quotaPeriod(Date.UTC(2031, 5, 10, 8));
    const daily = quotaSnapshot({ monthly: 1_000, daily: 60 }, period, [990, 20]);
    expect(daily).toEqual({
      used: 990,
      total: 1_000,
      remaining: 10,
      resets_at: '2031-07-01T00:00:00.000Z',
      monthly: { used: 990, total: 1_000, remaining: 10, resets_at: '2031-07-01T00:00:00.000Z' },
      daily: { used: 20, total: 60, remaining: 40, resets_at: '2031-06-11T00:00:00.000Z' },
    });
    expect(QuotaSnapshot.parse(daily)).toEqual(daily);
    const monthlyOnly = quotaSnapshot({ monthly: 5_000, daily: null }, period, [7, 7]);
    expect(monthlyOnly).toEqual({
      used: 7,
      total: 5_000,
      remaining: 4_993,
      resets_at: '2031-07-01T00:00:00.000Z',
      monthly: { used: 7, total: 5_000, remaining: 4_993, resets_at: '2031-07-01T00:00:00.000Z' },
    });
  });
});

describe('quotaRetryAfter', () => {
  it('is the whole seconds until the refusing window resets, at least 1', () => {
    const now = Date.UTC(2031, 5, 10, 23, 59, 58, 500);
    const snapshot = quotaSnapshot({ monthly: 1_000, daily: 60 }, quotaPeriod(now), [1_000, 60]);
    expect(quotaRetryAfter(snapshot, 'daily', now)).toBe('2');
    expect(quotaRetryAfter(snapshot, 'monthly', now)).toBe(String(20 * 86_400 + 2));
    expect(quotaRetryAfter(snapshot, 'daily', Date.UTC(2031, 5, 11))).toBe('1');
    expect(quotaRetryAfter(null, 'monthly', now)).toBe('1');
  });
});

describe('exhaustedWindow', () => {
  const period = quotaPeriod(Date.UTC(2026, 10, 28, 2, 11, 35));
  it('names the first full window, the month before the day, as the debit refuses', () => {
    expect(exhaustedWindow(quotaSnapshot({ monthly: 200, daily: 100 }, period, [150, 99]))).toBeNull();
    expect(exhaustedWindow(quotaSnapshot({ monthly: 200, daily: 100 }, period, [150, 100]))).toBe('daily');
    expect(exhaustedWindow(quotaSnapshot({ monthly: 200, daily: 100 }, period, [200, 50]))).toBe('monthly');
    expect(exhaustedWindow(quotaSnapshot({ monthly: 200, daily: 100 }, period, [200, 100]))).toBe('monthly');
    expect(exhaustedWindow(quotaSnapshot({ monthly: 200, daily: null }, period, [200]))).toBe('monthly');
  });

  it('the refusing window resets when the block says calling resumes', () => {
    for (const counts of [
      [150, 100],
      [200, 50],
      [200, 100],
    ]) {
      const snapshot = quotaSnapshot({ monthly: 200, daily: 100 }, period, counts);
      expect(refusingResetsAt(snapshot, exhaustedWindow(snapshot)!)).toBe(snapshot.resets_at);
    }
  });
});
