import { describe, expect, it } from 'vitest';
import { dueDigests } from './digest-schedule.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

const H = 3_600_000;
const sub = {
  id: 'sub-1',
  status: 'active',
  events: ['scan_digest'],
  cadence: '1h',
  createdAt: '2026-11-22T10:00:00.000Z',
  digestSince: '2026-11-22T10:00:00.000Z',
} as unknown as SubscriptionRecord;

describe('digest schedule on the feed clock', () => {
  it('a replay clock in 2025 still finds digests due, counting the subscription from when it was first seen', () => {
    const feedNow = Date.UTC(2025, 9, 25, 10, 30);
    // By wall-clock creation time (2026) the subscription would never be due at 2025 feed times.
    expect(dueDigests([sub], feedNow)).toEqual([]);
    const seenAt = feedNow - 2 * H;
    expect(dueDigests([sub], feedNow, () => seenAt)).toEqual([
      { sub, periodStart: Date.UTC(2025, 9, 25, 10) },
    ]);
    // Not in the period it was first seen in: the first digest comes at the next boundary.
    expect(dueDigests([sub], feedNow, () => feedNow - 10 * 60_000)).toEqual([]);
  });

  it('on the wall clock counts from digestSince (a create, or an edit that started its digests), not the creation', () => {
    const edited = { ...sub, createdAt: '2026-11-22T08:00:00.000Z', digestSince: '2026-11-22T10:20:00.000Z' };
    expect(dueDigests([edited], Date.parse('2026-11-22T10:40:00.000Z'))).toEqual([]);
    expect(dueDigests([edited], Date.parse('2026-11-22T11:05:00.000Z'))).toEqual([
      { sub: edited, periodStart: Date.parse('2026-11-22T11:00:00.000Z') },
    ]);
  });
});
