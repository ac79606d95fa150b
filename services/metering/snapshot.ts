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
 * with less left, the month on a tie), so they add up and name when calling resumes; each window whole.
 */
export const QuotaSnapshot = z.object({
  ...WindowFigures,
  monthly: z.object(WindowFigures),
  daily: z.object(WindowFigures).optional(),
});
export type QuotaSnapshot = z.infer<typeof QuotaSnapshot>;

/** Retry-After (whole seconds, at least 1) of a call refused by `window`: until it starts afresh. */
export function quotaRetryAfter(quota: QuotaSnapshot | null, window: 'monthly' | 'daily', now = Date.now()) {
  const resets = window === 'daily' ? quota?.daily?.resets_at : quota?.monthly.resets_at;
  const ms = resets ? Date.parse(resets) - now : 0;
  return String(Math.max(1, Math.ceil(ms / 1000)));
}
