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

/**
 * `_service.quota`: `remaining` is the tighter of month and day, `used`/`total`/`resets_at` the
 * month's; each window is also given whole (`monthly`, and `daily` on plans with a day cap).
 */
export const QuotaSnapshot = z.object({
  ...WindowFigures,
  monthly: z.object(WindowFigures),
  daily: z.object(WindowFigures).optional(),
});
export type QuotaSnapshot = z.infer<typeof QuotaSnapshot>;

/** `resets_at` of the last few windows: formatting a Date per call was most of a snapshot's cost. */
const resetLabels = new Map<number, string>();

function resetLabel(at: number): string {
  let label = resetLabels.get(at);
  if (label === undefined) {
    label = new Date(at).toISOString();
    if (resetLabels.size >= 64) resetLabels.clear();
    resetLabels.set(at, label);
  }
  return label;
}

/** Figures from the counters `[month, day]`; remaining is what the tighter window still allows. */
export function quotaSnapshot(
  limits: PlanLimits,
  period: QuotaPeriod,
  counts: readonly number[],
): QuotaSnapshot {
  const monthUsed = counts[0] ?? 0;
  const dayUsed = counts[1] ?? 0;
  const monthRemaining = Math.max(0, limits.monthly - monthUsed);
  const monthly = {
    used: monthUsed,
    total: limits.monthly,
    remaining: monthRemaining,
    resets_at: resetLabel(period.monthResetsAt),
  };
  if (limits.daily === null) return { ...monthly, monthly };
  const dayRemaining = Math.max(0, limits.daily - dayUsed);
  return {
    ...monthly,
    remaining: Math.min(monthRemaining, dayRemaining),
    monthly,
    daily: {
      used: dayUsed,
      total: limits.daily,
      remaining: dayRemaining,
      resets_at: resetLabel(period.dayResetsAt),
    },
  };
}

/** Retry-After (whole seconds, at least 1) of a call refused by `window`: until it starts afresh. */
export function quotaRetryAfter(
  quota: QuotaSnapshot | null | undefined,
  window: 'monthly' | 'daily',
  now: number = Date.now(),
): string {
  const resets = window === 'daily' ? quota?.daily?.resets_at : quota?.resets_at;
  const ms = resets ? Date.parse(resets) - now : 0;
  return String(Math.max(1, Math.ceil(ms / 1000)));
}
