/**
 * When the next attempt of a failed delivery is due. The schedule follows Svix (immediately,
 * 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h) with ± jitter so that a receiver coming back up is
 * not hit by every retry at the same instant; a receiver's Retry-After pushes the next attempt
 * later (never earlier), up to a cap.
 */
export interface RetryPolicy {
  /** Delay before attempt i+1 (index 0 is the first attempt, normally 0). */
  schedule: number[];
  jitter: number;
  retryAfterMaxMs: number;
}

/** 410 Gone disables the subscription at once; anything else is retried while the schedule lasts. */
export function classifyFailure(status: number | null): 'gone' | 'retry' {
  return status === 410 ? 'gone' : 'retry';
}

/** Retry-After as seconds or an HTTP date, in ms from `now`; null when absent or unreadable. */
export function parseRetryAfter(value: string | null | undefined, now: number): number | null {
  if (value === null || value === undefined || value.trim() === '') return null;
  const trimmed = value.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1_000;
  const date = Date.parse(trimmed);
  return Number.isNaN(date) ? null : Math.max(0, date - now);
}

/**
 * The time of the next attempt after attempt `attempt` (1-based) failed, or null when the
 * schedule is exhausted. The delay runs from when the failed attempt was due (`due`), not from
 * when its failure was recorded (`now`): the request's own time, its recording and the wait for a
 * tick would otherwise be added to every delay in turn, and under load the fourth attempt of
 * `0,3s,10s,30s` came 3-6 s past its ±jitter. An attempt that ended after the next one was due
 * is due again at once; a receiver's Retry-After counts from now. `random` is injectable for tests.
 */
export function nextAttemptAt(
  policy: RetryPolicy,
  attempt: number,
  at: { due: number; now: number },
  retryAfterMs: number | null,
  random: () => number = Math.random,
): number | null {
  if (attempt >= policy.schedule.length) return null;
  const base = policy.schedule[attempt]!;
  const jittered = at.due + Math.round(base * (1 + policy.jitter * (2 * random() - 1)));
  const honoured = at.now + (retryAfterMs === null ? 0 : Math.min(retryAfterMs, policy.retryAfterMaxMs));
  return Math.max(jittered, honoured);
}
