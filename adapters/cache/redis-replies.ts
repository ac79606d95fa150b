/**
 * Replies of a Redis that cannot serve writes for now: a replica (a demoted primary after a
 * failover), full memory under `noeviction`, a script running too long, data still loading, a
 * cluster or sentinel without a primary, a failed snapshot stopping writes.
 */
const UNAVAILABLE_REPLY = /^(READONLY|OOM|BUSY|LOADING|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|NOREPLICAS|MISCONF)\b/;

/**
 * Whether Redis refused the command itself (a wrong type, a script's own error): a bug to surface.
 * Its replies that only say it cannot serve writes now are an outage like a lost connection, and
 * callers fall back or answer retryable as they do for one: surfaced, each made every limited
 * route and keyed call answer 500 until Redis recovered.
 */
export function refusedByRedis(err: unknown): boolean {
  return err instanceof Error && err.name === 'ReplyError' && !UNAVAILABLE_REPLY.test(err.message);
}
