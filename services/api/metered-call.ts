import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { QuotaMeter } from '../quota/quota-meter.ts';
import type { Caller } from './caller.ts';
import type { ServiceMeta } from './service-meta.ts';

export type MeteredResult<T> =
  | { ok: true; value: T; service: ServiceMeta }
  | { ok: false; reason: 'quota_exhausted'; window: 'monthly' | 'daily'; service: ServiceMeta }
  | { ok: false; reason: 'failed'; error: unknown; service: ServiceMeta };

/** Quota could not be read, debited or recorded right now: nothing was served (retryable). */
export class QuotaUnavailableError extends Error {
  override readonly name = 'QuotaUnavailableError';
  constructor(
    readonly service: ServiceMeta,
    options?: { cause?: unknown },
  ) {
    super('quota could not be checked right now; retry shortly', options);
  }
}

/**
 * Serves one call against the caller's quota. A cheap read refuses an exhausted caller before
 * any work; the call then runs, and only a successful result is debited, atomically over the day
 * and month windows. When concurrent calls race for the last units the debit decides: the
 * losers' results are discarded and they get quota_exhausted, so nobody overspends. A call that
 * fails (bad coin, venue down) is not counted.
 */
export async function serveMetered<T>(
  quota: QuotaMeter,
  caller: Caller,
  call: { tool: string; requestId: string },
  run: () => Promise<T>,
): Promise<MeteredResult<T>> {
  const unavailable = (err: unknown) =>
    new QuotaUnavailableError({ auth: caller.auth, quota: null }, { cause: err });
  let before: Awaited<ReturnType<QuotaMeter['peek']>>;
  try {
    before = await quota.peek(caller.subject);
  } catch (err) {
    if (err instanceof CacheUnavailableError) throw unavailable(err);
    throw err;
  }
  if (before.remaining === 0) {
    const window =
      before.daily && before.daily.remaining === 0 && before.used < before.total ? 'daily' : 'monthly';
    return { ok: false, reason: 'quota_exhausted', window, service: { auth: caller.auth, quota: before } };
  }
  let value: T;
  try {
    value = await run();
  } catch (error) {
    return { ok: false, reason: 'failed', error, service: { auth: caller.auth, quota: before } };
  }
  let debit: Awaited<ReturnType<QuotaMeter['debit']>>;
  try {
    debit = await quota.debit(caller.subject, call.tool, call.requestId);
  } catch (err) {
    throw unavailable(err);
  }
  const service = { auth: caller.auth, quota: debit.snapshot };
  if (!debit.ok)
    return { ok: false, reason: 'quota_exhausted', window: debit.refusedBy ?? 'monthly', service };
  return { ok: true, value, service };
}
