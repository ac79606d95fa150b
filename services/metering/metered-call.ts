import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { Caller } from './caller.ts';
import type { QuotaMeter } from './quota-meter.ts';
import type { ServiceMeta } from './service-meta.ts';
import { exhaustedWindow } from './snapshot.ts';
import { subjectWindows } from './windows.ts';

export type MeteredResult<T> =
  | { ok: true; value: T; service: ServiceMeta }
  | {
      ok: false;
      reason: 'quota_exhausted';
      window: 'monthly' | 'daily';
      service: ServiceMeta;
      /** What the call made before its debit lost the race, thrown away; undefined when refused before it ran. */
      ran?: T;
    }
  | { ok: false; reason: 'failed'; error: unknown; service: ServiceMeta };

/** Quota could not be read, debited or recorded right now: nothing was served (retryable). */
export class QuotaUnavailableError extends Error {
  override readonly name = 'QuotaUnavailableError';
  /** What the call made before its debit failed, thrown away; undefined when it did not run. */
  readonly ran: unknown;
  constructor(
    readonly service: ServiceMeta,
    options?: { cause?: unknown; ran?: unknown },
  ) {
    super('quota could not be checked right now; retry shortly', options);
    this.ran = options?.ran;
  }
}

/**
 * A call its client cancelled (MCP notifications/cancelled) before the debit: not counted. `ran`
 * is what it made, thrown away (undefined when it was cancelled before it ran).
 */
export class CallCancelledError extends Error {
  override readonly name = 'CallCancelledError';
  constructor(readonly ran?: unknown) {
    super('the call was cancelled by its client; it was not counted');
  }
}

/**
 * Serves one call against the caller's quota: the figures before it refuse an exhausted caller before any
 * work; only a result is debited (a failed call is not counted), and among calls racing for the last
 * units the debit decides (the losers get quota_exhausted).
 */
export async function serveMetered<T>(
  quota: QuotaMeter,
  caller: Caller,
  call: { tool: string },
  run: () => Promise<T>,
  /** Whether the client cancelled the call: asked before the run and before the debit (neither then happens). */
  cancelled?: () => boolean,
): Promise<MeteredResult<T>> {
  const { observer } = quota;
  const at = subjectWindows(caller.subject, quota.plans, quota.now());
  const before = await quota.peek(caller.subject, at).catch((err: unknown) => {
    if (!(err instanceof CacheUnavailableError)) throw err;
    observer?.refused(caller.subject.plan, 'unavailable');
    throw new QuotaUnavailableError({ auth: caller.auth, quota: null }, { cause: err });
  });
  // Refused before any work by the window the debit would name (`refusedBy`).
  const window = exhaustedWindow(before);
  if (window !== null) {
    observer?.refused(caller.subject.plan, window);
    return { ok: false, reason: 'quota_exhausted', window, service: { auth: caller.auth, quota: before } };
  }
  // Refused with the figures read before the call: nothing was debited.
  const failed = (error: unknown) => ({
    ok: false as const,
    reason: 'failed' as const,
    error,
    service: { auth: caller.auth, quota: before },
  });
  if (cancelled?.()) return failed(new CallCancelledError());
  let value: T;
  try {
    value = await run();
  } catch (error) {
    return failed(error);
  }
  if (cancelled?.()) return failed(new CallCancelledError(value));
  // In the windows it was read in: a call counts on the day it was asked (one across midnight too).
  const debit = await quota.debit(caller.subject, call.tool, at).catch((err: unknown) => {
    observer?.refused(caller.subject.plan, 'unavailable');
    throw new QuotaUnavailableError({ auth: caller.auth, quota: null }, { cause: err, ran: value });
  });
  const service = { auth: caller.auth, quota: debit.snapshot };
  if (!debit.ok) {
    observer?.refused(caller.subject.plan, debit.refusedBy);
    return { ok: false, reason: 'quota_exhausted', window: debit.refusedBy, service, ran: value };
  }
  observer?.debited(caller.subject.plan);
  return { ok: true, value, service };
}
