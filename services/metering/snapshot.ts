import { z } from 'zod';

const WindowFigures = {
  used: z.number().int().nonnegative(),
  total: z.number().int().positive(),
  remaining: z.number().int().nonnegative(),
  /** ISO time at which this window starts afresh (UTC midnight). */
  resets_at: z.iso.datetime(),
};

/**
 * `_service.quota`: `used`, `total`, `remaining` and `resets_at` of the window that binds (the one
 * with less left, the month on a tie), so they name when calling resumes; each window whole. `remaining`
 * is `total - used`, never below 0: `used` counts the calls made, above `total` after a move to a smaller plan.
 */
export const QuotaSnapshot = z.object({
  ...WindowFigures,
  monthly: z.object(WindowFigures),
  daily: z.object(WindowFigures).optional(),
});
export type QuotaSnapshot = z.infer<typeof QuotaSnapshot>;

/**
 * The window that refuses a call at these figures, or null: the first with nothing left, the month
 * before the day (the order the cache's debit refuses in, its `refusedBy`).
 */
export function exhaustedWindow(quota: QuotaSnapshot): 'monthly' | 'daily' | null {
  if (quota.monthly.remaining === 0) return 'monthly';
  return quota.daily?.remaining === 0 ? 'daily' : null;
}

/**
 * When `window`, the window that refused a call (the meter's `refusedBy`), starts afresh: its own
 * `resets_at` (the block's top-level one whenever that window binds, as a refused one does).
 */
export function refusingResetsAt(
  quota: QuotaSnapshot | null,
  window: 'monthly' | 'daily',
): string | undefined {
  return window === 'daily' ? quota?.daily?.resets_at : quota?.monthly.resets_at;
}

/** Retry-After (whole seconds, at least 1) of a call refused by `window`: until it starts afresh. */
export function quotaRetryAfter(quota: QuotaSnapshot | null, window: 'monthly' | 'daily', now = Date.now()) {
  const resets = refusingResetsAt(quota, window);
  const ms = resets ? Date.parse(resets) - now : 0;
  return String(Math.max(1, Math.ceil(ms / 1000)));
}
