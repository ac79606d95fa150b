import { z } from 'zod';
import type { PlanLimits } from './plans.ts';
import type { QuotaPeriod } from './windows.ts';

const WindowFigures = {
  used: z.number().int().nonnegative(),
  total: z.number().int().positive(),
  remaining: z.number().int().nonnegative(),
  /** ISO time at which this window starts afresh (UTC midnight). */
  resets_at: z.iso.datetime(),
};

/** `_service.quota`: the month's figures, plus the day's on plans with a daily cap. */
export const QuotaSnapshot = z.object({
  ...WindowFigures,
  daily: z.object(WindowFigures).optional(),
});
export type QuotaSnapshot = z.infer<typeof QuotaSnapshot>;

/** Figures from the counters `[month, day]`; remaining is what the tighter window still allows. */
export function quotaSnapshot(
  limits: PlanLimits,
  period: QuotaPeriod,
  counts: readonly number[],
): QuotaSnapshot {
  const monthUsed = counts[0] ?? 0;
  const dayUsed = counts[1] ?? 0;
  const monthRemaining = Math.max(0, limits.monthly - monthUsed);
  if (limits.daily === null) {
    return {
      used: monthUsed,
      total: limits.monthly,
      remaining: monthRemaining,
      resets_at: new Date(period.monthResetsAt).toISOString(),
    };
  }
  const dayRemaining = Math.max(0, limits.daily - dayUsed);
  return {
    used: monthUsed,
    total: limits.monthly,
    remaining: Math.min(monthRemaining, dayRemaining),
    resets_at: new Date(period.monthResetsAt).toISOString(),
    daily: {
      used: dayUsed,
      total: limits.daily,
      remaining: dayRemaining,
      resets_at: new Date(period.dayResetsAt).toISOString(),
    },
  };
}
