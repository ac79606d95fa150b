import type { DecidedEvent, Decider } from '../../adapters/event-store/command.ts';
import type { EventData } from '../../contracts/events.ts';
import type { DeliveryRecord } from './delivery-log-fold.ts';
import { classifyFailure, nextAttemptAt, type RetryPolicy } from './retry-policy.ts';
import { RESPONSE_LIMIT, type SendResult } from './sender.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

/**
 * The life of one delivery on its stream `delivery-<id>`: an attempt is claimed, its outcome is
 * recorded with the time of the next attempt, and a failure may call for the subscription to be
 * disabled. Pure: the clock, the jitter sample and the claim's id arrive in the command, so the
 * worker around it only does I/O.
 */

/** What started an attempt, as DeliveryAttempted records it. */
export type Trigger = NonNullable<EventData<'DeliveryAttempted'>['trigger']>;

/** Triggers that start a fresh run through the retry schedule. */
export const SERIES_START: ReadonlySet<string> = new Set<Trigger>(['event', 'digest', 'recover', 'resend']);

/** The outcome of an attempt, with when its request went out (undefined: it never did). */
export type AttemptResult = SendResult & { sentAt?: number; held?: boolean };

export interface DeliveryState {
  /** The latest attempt claimed (0: none yet). */
  attempt: number;
  /** Whether the latest attempt's outcome is recorded. */
  recorded: boolean;
}

export type DeliveryCommand =
  | {
      kind: 'claim';
      /** A fresh id: a second claim of the same attempt must conflict, not pass as a re-append. */
      claimId: string;
      data: EventData<'DeliveryAttempted'>;
    }
  | {
      kind: 'record';
      deliveryId: string;
      subscriptionId: string;
      attempt: number;
      /** Position of the attempt in its run through the retry schedule (1 = first). */
      seriesAttempt: number;
      result: AttemptResult;
      claimedAt: number;
      now: number;
      /** The breaker's end of the open period: a held attempt is not due before it. */
      notBefore?: number;
      retry: RetryPolicy;
      /** A uniform sample in [0, 1) for the schedule's jitter. */
      jitterSample: number;
    };

export type DeliveryEvent = DecidedEvent<'DeliveryAttempted' | 'DeliverySucceeded' | 'DeliveryFailed'>;

export class DeliveryConflictError extends Error {
  override readonly name = 'DeliveryConflictError';
}

export const initialDelivery = (): DeliveryState => ({ attempt: 0, recorded: false });

/** The state a projected delivery record stands for, at `record.revision`. */
export function deliveryStateOf(record: DeliveryRecord): DeliveryState {
  const last = record.attempts.at(-1);
  return { attempt: last?.attempt ?? 0, recorded: last !== undefined && last.outcome !== 'pending' };
}

export const deliveryDecider: Decider<DeliveryState, DeliveryCommand, DeliveryEvent> = {
  eventTypes: ['DeliveryAttempted', 'DeliverySucceeded', 'DeliveryFailed'],
  initialState: initialDelivery,
  evolve(state, event) {
    if (event.type === 'DeliveryAttempted') return { attempt: event.data.attempt, recorded: false };
    // An old attempt reporting late does not close the latest one.
    return event.data.attempt === state.attempt ? { ...state, recorded: true } : state;
  },
  decide(command, state) {
    if (command.kind === 'claim') {
      if (command.data.attempt !== state.attempt + 1) {
        throw new DeliveryConflictError(
          `attempt ${command.data.attempt} of ${command.data.deliveryId} follows attempt ${state.attempt}`,
        );
      }
      return [
        {
          type: 'DeliveryAttempted',
          data: command.data,
          id: command.claimId,
          correlationId: command.data.deliveryId,
        },
      ];
    }
    if (command.attempt !== state.attempt || state.recorded) {
      throw new DeliveryConflictError(
        `attempt ${command.attempt} of ${command.deliveryId} is not the one waiting for its outcome`,
      );
    }
    return [outcomeEvent(command)];
  },
};

function outcomeEvent(command: Extract<DeliveryCommand, { kind: 'record' }>): DeliveryEvent {
  const { result } = command;
  const ref = {
    deliveryId: command.deliveryId,
    subscriptionId: command.subscriptionId,
    attempt: command.attempt,
    ...(result.sentAt !== undefined
      ? {
          sentAt: new Date(result.sentAt).toISOString(),
          queuedMs: Math.max(0, result.sentAt - command.claimedAt),
        }
      : {}),
  };
  if (result.ok) {
    return {
      type: 'DeliverySucceeded',
      data: {
        ...ref,
        status: result.status!,
        latencyMs: result.latencyMs,
        response: (result.response ?? '').slice(0, RESPONSE_LIMIT),
      },
    };
  }
  const next = nextAttempt(command);
  return {
    type: 'DeliveryFailed',
    data: {
      ...ref,
      status: result.status,
      error: result.error,
      latencyMs: result.latencyMs,
      response: result.response === null ? null : result.response.slice(0, RESPONSE_LIMIT),
      nextAttemptAt: next === null ? null : new Date(next).toISOString(),
      ...(result.held ? { held: true } : {}),
    },
  };
}

function nextAttempt(command: Extract<DeliveryCommand, { kind: 'record' }>): number | null {
  const { result } = command;
  // A held attempt is due again when the breaker lets its next probe through, whatever the schedule.
  if (result.held && command.notBefore !== undefined) return command.notBefore;
  if (isGone(result) || result.error === 'subscription disabled') return null;
  return nextAttemptAt(
    command.retry,
    command.seriesAttempt,
    command.now,
    result.retryAfterMs,
    () => command.jitterSample,
  );
}

export function isGone(result: SendResult): boolean {
  return classifyFailure(result.status) === 'gone';
}

/** How an attempt ended, as the metrics count it. */
export function outcomeKind(result: AttemptResult): 'succeeded' | 'held' | 'gone' | 'failed' {
  return result.ok ? 'succeeded' : result.held ? 'held' : isGone(result) ? 'gone' : 'failed';
}

/** The attempt's place in its run through the retry schedule. */
export function seriesAttemptOf(trigger: Trigger, attempt: number, seriesAttempt?: number): number {
  return SERIES_START.has(trigger) ? 1 : (seriesAttempt ?? attempt);
}

/**
 * Attempts sent since the current run through the retry schedule began, the latest included.
 * Attempts held back by an open circuit breaker were never sent and do not count.
 */
export function seriesLength(record: DeliveryRecord): number {
  let n = 0;
  for (let i = record.attempts.length - 1; i >= 0; i--) {
    const attempt = record.attempts[i]!;
    if (!attempt.held) n++;
    if (SERIES_START.has(attempt.trigger)) break;
  }
  return n;
}

export interface DisableRules {
  disableAfterFailedDeliveries: number;
  disableAfterMs: number;
}

/** Why a 410 disables at once; null for any other answer. */
export function goneReason(result: SendResult): string | null {
  return !result.ok && isGone(result) ? 'the receiver answered 410 Gone' : null;
}

/**
 * Why the subscription should be disabled after a failed attempt, as its projection stands once
 * the failure is folded; null while it is healthy enough.
 */
export function persistentFailureReason(
  sub: SubscriptionRecord | undefined,
  rules: DisableRules,
  now: number,
): string | null {
  if (sub?.status !== 'active') return null;
  if (sub.failedDeliveries >= rules.disableAfterFailedDeliveries) {
    return `${sub.failedDeliveries} consecutive deliveries failed every attempt`;
  }
  if (sub.failingSince !== null && now - Date.parse(sub.failingSince) >= rules.disableAfterMs) {
    return `no successful delivery since ${sub.failingSince}`;
  }
  return null;
}
