import { describe, expect, it } from 'vitest';
import { dueDigests, passedWithLaterCloses, skippedPeriods } from './digest-schedule.ts';
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
      { sub, periodStart: Date.UTC(2025, 9, 25, 10), since: seenAt },
    ]);
    // Not in the period it was first seen in: the first digest comes at the next boundary.
    expect(dueDigests([sub], feedNow, () => feedNow - 10 * 60_000)).toEqual([]);
  });

  it('on the wall clock counts from digestSince (a create, or an edit that started its digests), not the creation', () => {
    const edited = { ...sub, createdAt: '2026-11-22T08:00:00.000Z', digestSince: '2026-11-22T10:20:00.000Z' };
    expect(dueDigests([edited], Date.parse('2026-11-22T10:40:00.000Z'))).toEqual([]);
    expect(dueDigests([edited], Date.parse('2026-11-22T11:05:00.000Z'))).toEqual([
      {
        sub: edited,
        periodStart: Date.parse('2026-11-22T11:00:00.000Z'),
        since: Date.parse('2026-11-22T10:20:00.000Z'),
      },
    ]);
  });

  it('after a stop across several boundaries, only the current period is due, once: the ones passed meanwhile are counted, not sent', () => {
    const t = (iso: string) => Date.parse(`2026-11-22T${iso}:00.000Z`);
    // Running until 10:30 (the 10:00 digest sent), back at 15:20: 11:00 to 14:00 passed while down.
    const back = t('15:20');
    const due = dueDigests([sub], back);
    expect(due).toEqual([{ sub, periodStart: t('15:00'), since: t('10:00') }]);
    expect(skippedPeriods('1h', t('15:00'), t('10:00'), t('10:00'))).toBe(4);
    // Back within the next period: nothing passed unsent.
    expect(skippedPeriods('1h', t('11:00'), t('10:00'), t('10:00'))).toBe(0);
    // On a replay clock a subscription from before the start counts from -Infinity: any stop, one digest.
    const replay = dueDigests([sub], back, () => Number.NEGATIVE_INFINITY);
    expect(replay.map((d) => d.periodStart)).toEqual([t('15:00')]);
    expect(skippedPeriods('1h', t('15:00'), Number.NEGATIVE_INFINITY, t('12:00'))).toBe(2);
  });

  it('counts skipped periods from the series start when no digest was sent, and not across a cadence change', () => {
    const t = (iso: string) => Date.parse(`2026-11-22T${iso}:00.000Z`);
    // Created at 10:20, down before 11:00, back at 13:10: 11:00 and 12:00 passed unsent.
    expect(skippedPeriods('1h', t('13:00'), t('10:20'), Number.NEGATIVE_INFINITY)).toBe(2);
    // Its first boundary: none before it.
    expect(skippedPeriods('1h', t('11:00'), t('10:20'), Number.NEGATIVE_INFINITY)).toBe(0);
    // Hourly until 10:00, edited to 4h at 10:20: the 10:00 digest is of the old series (12:00 and
    // 16:00 are the new one's boundaries before 20:00).
    expect(skippedPeriods('4h', t('12:00'), t('10:20'), t('10:00'))).toBe(0);
    expect(skippedPeriods('4h', t('20:00'), t('10:20'), t('10:00'))).toBe(2);
    expect(skippedPeriods('1d', Date.parse('2026-11-25T00:00:00.000Z'), t('10:20'), t('10:20'))).toBe(2);
    // Disabled from before 11:00 until 14:20: 11:00 to 13:00 were not due, and the 14:00 digest
    // goes out at the re-enable, so none passed unsent; with no dispatcher from the re-enable
    // until 17:10, 14:00 to 16:00 did.
    expect(skippedPeriods('1h', t('14:00'), t('08:00'), t('10:00'), t('14:20'))).toBe(0);
    expect(skippedPeriods('1h', t('17:00'), t('08:00'), t('10:00'), t('14:20'))).toBe(3);
    expect(skippedPeriods('1h', t('17:00'), t('08:00'), t('14:00'), t('14:20'))).toBe(2);
    expect(skippedPeriods('1h', t('17:00'), t('08:00'), t('10:00'), null)).toBeNull();
    // Not known: the last digest delivery is not on record, or neither bound is finite.
    expect(skippedPeriods('1h', t('13:00'), t('10:20'), undefined)).toBeNull();
    expect(skippedPeriods('1h', t('13:00'), Number.NEGATIVE_INFINITY, Number.NEGATIVE_INFINITY)).toBeNull();
  });
});

describe('a digest built after its period', () => {
  const start = Date.UTC(2025, 9, 1, 10);
  it('carries later closes when one of its verdicts is of a close at or after its end, whatever the period now', () => {
    // Built at 15:10 with verdicts of 12:00 and 14:00: later than its period (10:00-11:00), though
    // none is of the current period (15:00).
    expect(passedWithLaterCloses('1h', start, start + 5 * H + 600_000, [start + 2 * H, start + 4 * H])).toBe(
      true,
    );
    expect(passedWithLaterCloses('1h', start, start + 5 * H, [start, start + H])).toBe(true);
  });
  it('does not while its period runs, nor with verdicts of its own close only', () => {
    expect(passedWithLaterCloses('1h', start, start + H - 1, [start + H])).toBe(false);
    expect(passedWithLaterCloses('1h', start, start + 3 * H, [start, start - H])).toBe(false);
    expect(passedWithLaterCloses('4h', start - 2 * H, start + H, [start])).toBe(false);
  });
});
