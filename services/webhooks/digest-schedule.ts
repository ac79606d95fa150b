import type { Cadence } from '../../contracts/webhooks.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

const CADENCE_MS: Record<Cadence, number> = { '1h': 3_600_000, '4h': 4 * 3_600_000, '1d': 86_400_000 };

/** Start (Unix ms, UTC-aligned) of the cadence period containing `now`. */
export function periodStart(cadence: Cadence, now: number): number {
  const ms = CADENCE_MS[cadence];
  return Math.floor(now / ms) * ms;
}

/**
 * Digests due at `now`: one per active digest subscription for the current period, if the
 * subscription took digests on its cadence when the period began (`digestSince`: a new
 * subscriber's, or an edit's that added scan_digest or changed the cadence, first digest comes at
 * the next boundary, not at once).
 */
export function dueDigests(
  subs: Iterable<SubscriptionRecord>,
  now: number,
  existsSince: (sub: SubscriptionRecord) => number = (sub) => Date.parse(sub.digestSince),
): { sub: SubscriptionRecord; periodStart: number }[] {
  const due: { sub: SubscriptionRecord; periodStart: number }[] = [];
  for (const sub of subs) {
    if (sub.status !== 'active' || !sub.events.includes('scan_digest') || !sub.cadence) continue;
    const start = periodStart(sub.cadence, now);
    if (existsSince(sub) < start) due.push({ sub, periodStart: start });
  }
  return due;
}
