import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { Plan } from '../../contracts/events.ts';
import type { Caller } from './caller.ts';
import type { QuotaMeter } from './quota-meter.ts';
import type { ServiceMeta } from './service-meta.ts';
import type { QuotaSnapshot } from './snapshot.ts';

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

/** Told how every metered call ended (the quota metrics). */
export interface QuotaObserver {
  debited(plan: Plan): void;
  refused(plan: Plan, reason: 'daily' | 'monthly' | 'unavailable'): void;
}

/**
 * Observers by meter rather than a parameter of serveMetered: every route and channel that
 * meters calls (MCP, x402, knowledge) shares the api's one meter, so one registration sees them all.
 */
const observers = new WeakMap<QuotaMeter, QuotaObserver>();

/** Reports every call metered against `meter` to `observer`. */
export function observeQuota(meter: QuotaMeter, observer: QuotaObserver): void {
  observers.set(meter, observer);
}

/**
 * The refusal of a call whose quota could not be read or debited. A function of its own, not a
 * closure per call: under tsx every named closure is renamed with a property definition as it is
 * made, which showed in the keyed MCP profile.
 */
function unavailable(
  observer: QuotaObserver | undefined,
  caller: Caller,
  err: unknown,
): QuotaUnavailableError {
  observer?.refused(caller.subject.plan, 'unavailable');
  return new QuotaUnavailableError({ auth: caller.auth, quota: null }, { cause: err });
}

/**
 * Serves one call against the caller's quota. A cheap read refuses an exhausted caller before
 * any work (skipped when the call is prepaid: its unit is held by a lease, QuotaMeter.prepaid);
 * the call then runs,
 * and only a successful result is debited, atomically over the day and month windows. When
 * concurrent calls race for the last units the debit decides: the losers' results are discarded
 * and they get quota_exhausted, so nobody overspends. A call that fails (bad coin, venue down) is
 * not counted.
 */
export async function serveMetered<T>(
  quota: QuotaMeter,
  caller: Caller,
  call: { tool: string; requestId: string },
  run: () => Promise<T>,
): Promise<MeteredResult<T>> {
  const observer = observers.get(quota);
  const plan = caller.subject.plan;
  let before: QuotaSnapshot | null = null;
  if (!quota.prepaid(caller.subject, call.tool)) {
    try {
      before = await quota.peek(caller.subject);
    } catch (err) {
      if (err instanceof CacheUnavailableError) throw unavailable(observer, caller, err);
      throw err;
    }
    if (before.remaining === 0) {
      const window =
        before.daily && before.daily.remaining === 0 && before.used < before.total ? 'daily' : 'monthly';
      observer?.refused(plan, window);
      return { ok: false, reason: 'quota_exhausted', window, service: { auth: caller.auth, quota: before } };
    }
  }
  let value: T;
  try {
    value = await run();
  } catch (error) {
    // Not debited: the figures as they stand, read now when the read before the run was skipped.
    const figures = before ?? (await quota.peek(caller.subject).catch(() => null));
    return { ok: false, reason: 'failed', error, service: { auth: caller.auth, quota: figures } };
  }
  let debit: Awaited<ReturnType<QuotaMeter['debit']>>;
  try {
    debit = await quota.debit(caller.subject, call.tool, call.requestId);
  } catch (err) {
    throw unavailable(observer, caller, err);
  }
  const service = { auth: caller.auth, quota: debit.snapshot };
  if (!debit.ok) {
    observer?.refused(plan, debit.refusedBy ?? 'monthly');
    return { ok: false, reason: 'quota_exhausted', window: debit.refusedBy ?? 'monthly', service };
  }
  observer?.debited(plan);
  return { ok: true, value, service };
}
