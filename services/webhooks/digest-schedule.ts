import type { Cadence } from '../../contracts/webhooks.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

const CADENCE_MS: Record<Cadence, number> = { '1h': 3_600_000, '4h': 4 * 3_600_000, '1d': 86_400_000 };

/** Start (Unix ms, UTC-aligned) of the cadence period containing `now`. */
export function periodStart(cadence: Cadence, now: number): number {
  const ms = CADENCE_MS[cadence];
  return Math.floor(now / ms) * ms;
}

/** A digest due: its subscription, its period, and since when the subscription's series runs. */
export interface DueDigest {
  sub: SubscriptionRecord;
  periodStart: number;
  /** When the subscription began taking digests on its cadence (what `existsSince` answered). */
  since: number;
}

/**
 * Digests due at `now`: one per active digest subscription, for the period containing `now`, if
 * the subscription took digests on its cadence when the period began (`existsSince`: a new
 * subscriber's, or an edit's that added scan_digest or changed the cadence, first digest comes at
 * the next boundary, not at once).
 *
 * Only the period containing `now` is ever due. A period whose boundary passed while no
 * dispatcher ran (down, or starting), or while a digest pass ran past it, is not sent late: a
 * digest lists the verdicts on record when it is built, so a late one would carry later closes'
 * verdicts under an older `period_start`, and a dispatcher back after a long stop would send a
 * burst of them. The next digest is the current period's, once; `skippedPeriods` counts the ones
 * passed unsent before it.
 */
export function dueDigests(
  subs: Iterable<SubscriptionRecord>,
  now: number,
  existsSince: (sub: SubscriptionRecord) => number = (sub) => Date.parse(sub.digestSince),
): DueDigest[] {
  const due: DueDigest[] = [];
  for (const sub of subs) {
    if (sub.status !== 'active' || !sub.events.includes('scan_digest') || !sub.cadence) continue;
    const start = periodStart(sub.cadence, now);
    const since = existsSince(sub);
    if (since < start) due.push({ sub, periodStart: start, since });
  }
  return due;
}

/**
 * The periods of a series (begun at `since`) that passed unsent before the digest of the period
 * at `start`: its boundaries after `lastSent`, the period of the subscription's last digest
 * delivery (-Infinity: it had none), and before `start`. A digest at or before `since` is of an
 * earlier series (another cadence): the count runs from `since` then. The periods it spent
 * disabled were not due: after a re-enable at `enabledSince` (-Infinity: never re-enabled) the
 * count runs from the period the re-enable falls in, which is due at once. Null when it cannot be
 * told: the last digest delivery is not known (undefined), nor the re-enable's time (null), or no
 * bound is (a subscription from before the dispatcher started, on a replay clock, with no digest
 * delivery).
 */
export function skippedPeriods(
  cadence: Cadence,
  start: number,
  since: number,
  lastSent: number | undefined,
  enabledSince: number | null = Number.NEGATIVE_INFINITY,
): number | null {
  if (lastSent === undefined || enabledSince === null) return null;
  const ms = CADENCE_MS[cadence];
  const beforeEnabled = periodStart(cadence, enabledSince) - ms;
  const from = Math.max(since, lastSent, beforeEnabled);
  if (!Number.isFinite(from)) return null;
  const firstAfter = Math.floor(from / ms) * ms + ms;
  return Math.max(0, (start - firstAfter) / ms);
}

/**
 * Whether a digest of the period at `start`, built at `now`, is of a period already over and lists
 * a verdict of a close at or after its end (`closes`, Unix ms): it would carry later closes'
 * verdicts under its `period_start`.
 */
export function passedWithLaterCloses(
  cadence: Cadence,
  start: number,
  now: number,
  closes: Iterable<number>,
): boolean {
  const end = periodStart(cadence, start) + CADENCE_MS[cadence];
  if (now < end) return false;
  for (const close of closes) if (close >= end) return true;
  return false;
}
