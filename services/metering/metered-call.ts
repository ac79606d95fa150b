import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { Plan } from '../../contracts/events.ts';
import { setBounded } from '../shared/bounded-map.ts';
import type { Caller } from './caller.ts';
import type { QuotaMeter } from './quota-meter.ts';
import type { ServiceMeta } from './service-meta.ts';
import { type QuotaSnapshot, resetTime } from './snapshot.ts';

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
 * What the last debit of a subject left, in this process. While it leaves a wide margin, the
 * next call of that subject skips the read before its run: that read only spares work for a
 * caller who is already out of calls, which a subject this far from its limit is not (another
 * replica would have to spend the whole margin within HEADROOM_MS). The debit after the run still
 * decides atomically, so nobody overspends; at worst a run is wasted and refused. Profiled under
 * load, that read was a second cache round trip per keyed call.
 */
interface Headroom {
  plan: Plan;
  /** Trusted until: shortly after the debit, and never past a window's reset. */
  until: number;
}
const headrooms = new WeakMap<QuotaMeter, Map<string, Headroom>>();
/** Calls a subject must have left for its next call to skip the read. */
export const HEADROOM_MARGIN = 1_000;
const HEADROOM_MS = 2_000;
const HEADROOM_SUBJECTS = 10_000;

function headroomOf(quota: QuotaMeter): Map<string, Headroom> {
  let map = headrooms.get(quota);
  if (map === undefined) {
    map = new Map();
    headrooms.set(quota, map);
  }
  return map;
}

function rememberHeadroom(quota: QuotaMeter, caller: Caller, snapshot: QuotaSnapshot, now: number): void {
  const map = headroomOf(quota);
  const id = caller.subject.id;
  if (snapshot.remaining <= HEADROOM_MARGIN) {
    map.delete(id);
    return;
  }
  const resets = Math.min(
    resetTime(snapshot.resets_at),
    snapshot.daily ? resetTime(snapshot.daily.resets_at) : Number.POSITIVE_INFINITY,
  );
  setBounded(
    map,
    id,
    { plan: caller.subject.plan, until: Math.min(now + HEADROOM_MS, resets) },
    HEADROOM_SUBJECTS,
  );
}

function hasHeadroom(quota: QuotaMeter, caller: Caller, now: number): boolean {
  const entry = headrooms.get(quota)?.get(caller.subject.id);
  return entry !== undefined && entry.plan === caller.subject.plan && now < entry.until;
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
 * any work (skipped while a recent debit left a wide margin: see Headroom); the call then runs,
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
  if (!hasHeadroom(quota, caller, Date.now())) {
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
    headroomOf(quota).delete(caller.subject.id);
    throw unavailable(observer, caller, err);
  }
  const service = { auth: caller.auth, quota: debit.snapshot };
  rememberHeadroom(quota, caller, debit.snapshot, Date.now());
  if (!debit.ok) {
    observer?.refused(plan, debit.refusedBy ?? 'monthly');
    return { ok: false, reason: 'quota_exhausted', window: debit.refusedBy ?? 'monthly', service };
  }
  observer?.debited(plan);
  return { ok: true, value, service };
}
