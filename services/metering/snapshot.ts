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
 * `_service.quota`. Top level: `remaining` is what the caller can call now (the tighter of the
 * month and the day), `used`/`total`/`resets_at` are the month's. Because a day cap can make
 * `used + remaining` fall short of `total`, each window is also given whole in its own block,
 * where `used + remaining = total` holds (unless a plan change left more used than the new total): `monthly` on every plan, `daily` on plans with
 * a daily cap.
 */
export const QuotaSnapshot = z.object({
  ...WindowFigures,
  monthly: z.object(WindowFigures),
  daily: z.object(WindowFigures).optional(),
});
export type QuotaSnapshot = z.infer<typeof QuotaSnapshot>;

/**
 * `resets_at` of the last few windows. Every answered keyed call carries one or two of them and
 * they change once a day: formatting a Date each time was most of what building a snapshot cost.
 */
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

/**
 * Retry-After (whole seconds, at least 1) of a call refused by the `window` of `quota`: the time
 * until that window starts afresh. 1 when the figures are unknown: try again shortly.
 */
export function quotaRetryAfter(
  quota: QuotaSnapshot | null | undefined,
  window: 'monthly' | 'daily',
  now: number = Date.now(),
): string {
  const resets = window === 'daily' ? quota?.daily?.resets_at : quota?.resets_at;
  const ms = resets ? Date.parse(resets) - now : 0;
  return String(Math.max(1, Math.ceil(ms / 1000)));
}
