import { type FailureReason, failureReason } from './failure-reason.ts';

/**
 * A failed run: what it threw, held in an object of its own, so that a run that threw undefined
 * (or null) is a failure too, where "no failure" is null.
 */
export interface RunFailure<E = unknown> {
  error: E;
}

/**
 * A readiness check's fields for the last failure: its public reason as `lastError` and the thrown
 * value as `cause` (its words go to the log, not to /readyz); none while nothing failed.
 */
export function failureFields(failure: RunFailure | null): { lastError?: FailureReason; cause?: unknown } {
  return failure === null ? {} : { lastError: failureReason(failure.error), cause: failure.error };
}
