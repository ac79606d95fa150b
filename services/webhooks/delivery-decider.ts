import type { DecidedEvent, Decider } from '../../adapters/event-store/command.ts';
import type { EventData } from '../../contracts/events.ts';
import type { DeliveryRecord } from './delivery-log-fold.ts';
import { classifyFailure, nextAttemptAt, type RetryPolicy } from './retry-policy.ts';
import { RESPONSE_LIMIT, type SendResult } from './sender.ts';
import { SUBSCRIPTION_DISABLED, type SubscriptionRecord } from './subscription-fold.ts';

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
  /** The latest attempt queued or claimed (0: none yet). */
  attempt: number;
  /** The latest attempt waits in an endpoint queue: reserved, not claimed, nothing sent. */
  queued?: boolean;
  /** Whether the latest attempt's outcome is recorded. */
  recorded: boolean;
  /** How the latest attempt ended (null: no attempt yet, or it is still in flight). */
  outcome: 'succeeded' | 'failed' | null;
  /** When the latest failed attempt is due again (null: it is not, the delivery failed for good). */
  nextAttemptAt: string | null;
}

export type DeliveryCommand =
  | {
      /**
       * 'claim': the attempt is sent now; 'queue': it waits in its endpoint's queue, and is sent at
       * its turn under the queue record's lease or claimed then.
       */
      kind: 'claim' | 'queue';
      /** A fresh id: a second claim of the same attempt must conflict, not pass as a re-append. */
      claimId: string;
      data: EventData<'DeliveryAttempted'>;
    }
  | {
      kind: 'record';
      deliveryId: string;
      subscriptionId: string;
      attempt: number;
      /** The delivery's sequence number, carried by its outcome (see `DeliverySequenced.first`). */
      seq?: number;
      /** Position of the attempt in its run through the retry schedule (1 = first). */
      seriesAttempt: number;
      result: AttemptResult;
      claimedAt: number;
      /** When this attempt was due by the schedule: the next one's delay counts from here. */
      dueAt: number;
      /**
       * Sent at its turn in the queue without a claim, under the lease its queueing gave (see the
       * worker's `leaseHolds`): its outcome closes the queued attempt. Otherwise the attempt was claimed.
       */
      fromQueue?: boolean;
      now: number;
      /** The breaker's end of the open period: a held attempt is not due before it. */
      notBefore?: number;
      retry: RetryPolicy;
      /** A uniform sample in [0, 1) for the schedule's jitter. */
      jitterSample: number;
    };

export type DeliveryEvent = DecidedEvent<
  'DeliveryAttempted' | 'DeliveryQueued' | 'DeliverySucceeded' | 'DeliveryFailed'
>;

export class DeliveryConflictError extends Error {
  override readonly name = 'DeliveryConflictError';
}

export const initialDelivery = (): DeliveryState => ({
  attempt: 0,
  recorded: false,
  outcome: null,
  nextAttemptAt: null,
});

/** The state a projected delivery record stands for, at `record.revision`. */
export function deliveryStateOf(record: DeliveryRecord): DeliveryState {
  const last = record.attempts.at(-1);
  if (!last) return initialDelivery();
  const outcome = last.outcome === 'pending' ? null : last.outcome;
  return {
    attempt: last.attempt,
    ...(last.queued ? { queued: true } : {}),
    recorded: outcome !== null,
    outcome,
    nextAttemptAt: outcome === 'failed' ? last.nextAttemptAt : null,
  };
}

/** Triggers that claim a delivery's first attempt (a recovery delivers events never attempted). */
const FIRST_TRIGGERS: ReadonlySet<string> = new Set<Trigger>(['event', 'digest', 'recover']);

/**
 * Why a claim may not follow the stream's latest attempt, or null when it may: a retry follows a
 * failure that scheduled one; a stale claim takes over an attempt still without an outcome (the
 * worker judges it stuck); a recovery follows anything but a success; a resend follows a
 * recorded outcome, never an attempt in flight. The clock is the caller's: whether a retry is due
 * or an attempt stuck is not decided here.
 */
function claimRefusal(trigger: Trigger, state: DeliveryState): string | null {
  if (state.attempt === 0) {
    return FIRST_TRIGGERS.has(trigger) ? null : `a ${trigger} claim needs an attempt before it`;
  }
  switch (trigger) {
    case 'retry':
      if (state.outcome === 'failed' && state.nextAttemptAt !== null) return null;
      return state.outcome === 'failed'
        ? 'it failed for good (no next attempt scheduled)'
        : state.outcome === 'succeeded'
          ? 'it succeeded'
          : 'its latest attempt is still in flight';
    case 'stale':
      // A queued attempt is taken over by claiming that attempt at its turn, not by a new one.
      if (state.queued) return 'its latest attempt is queued';
      return state.outcome === null ? null : `its latest attempt already ${state.outcome}`;
    case 'recover':
      return state.outcome === 'succeeded' ? 'it succeeded' : null;
    case 'resend':
      return state.outcome === null ? 'its latest attempt is still in flight' : null;
    default:
      return `a ${trigger} claim only starts a delivery`;
  }
}

export const deliveryDecider: Decider<DeliveryState, DeliveryCommand, DeliveryEvent> = {
  eventTypes: ['DeliveryAttempted', 'DeliveryQueued', 'DeliverySucceeded', 'DeliveryFailed'],
  initialState: initialDelivery,
  evolve(state, event) {
    if (event.type === 'DeliveryAttempted') {
      return { attempt: event.data.attempt, recorded: false, outcome: null, nextAttemptAt: null };
    }
    if (event.type === 'DeliveryQueued') {
      return {
        attempt: event.data.attempt,
        queued: true,
        recorded: false,
        outcome: null,
        nextAttemptAt: null,
      };
    }
    // An old attempt reporting late does not close the latest one.
    if (event.data.attempt !== state.attempt) return state;
    // An outcome closes the attempt, queued (sent under its queue lease) or claimed.
    const { attempt } = state;
    return event.type === 'DeliverySucceeded'
      ? { attempt, recorded: true, outcome: 'succeeded', nextAttemptAt: null }
      : { attempt, recorded: true, outcome: 'failed', nextAttemptAt: event.data.nextAttemptAt };
  },
  decide(command, state) {
    if (command.kind !== 'record') {
      if (command.kind === 'claim' && state.queued) {
        // The turn of an attempt that waited in a queue: whoever claims it first sends it.
        if (command.data.attempt !== state.attempt) {
          throw new DeliveryConflictError(
            `attempt ${state.attempt} of ${command.data.deliveryId} is queued; it is the one to claim`,
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
      if (command.data.attempt !== state.attempt + 1) {
        throw new DeliveryConflictError(
          `attempt ${command.data.attempt} of ${command.data.deliveryId} follows attempt ${state.attempt}`,
        );
      }
      const trigger = command.data.trigger ?? 'event';
      const refusal = claimRefusal(trigger, state);
      if (refusal !== null) {
        throw new DeliveryConflictError(
          `${command.data.deliveryId} cannot be claimed for a ${trigger}: ${refusal}`,
        );
      }
      return [
        {
          type: command.kind === 'queue' ? 'DeliveryQueued' : 'DeliveryAttempted',
          data: command.data,
          id: command.claimId,
          correlationId: command.data.deliveryId,
        },
      ];
    }
    // A queued attempt's outcome comes only from the dispatcher that sent it under its queue
    // lease; once claimed, only the claim's outcome counts.
    if (command.attempt !== state.attempt || state.recorded || !state.queued !== !command.fromQueue) {
      throw new DeliveryConflictError(
        `attempt ${command.attempt} of ${command.deliveryId} is not the one waiting for its outcome`,
      );
    }
    return [outcomeEvent(command)];
  },
};

function outcomeEvent(command: Extract<DeliveryCommand, { kind: 'record' }>): DeliveryEvent {
  const { result } = command;
  const { deliveryId, subscriptionId, attempt } = command;
  // Written out as literals in one field order rather than spread together from a shared
  // reference: V8 (Node 20) clones such spread objects on a slow path, tens of µs per outcome.
  const sentAt = result.sentAt === undefined ? undefined : new Date(result.sentAt).toISOString();
  const queuedMs = result.sentAt === undefined ? 0 : Math.max(0, result.sentAt - command.claimedAt);
  if (result.ok) {
    const status = result.status!;
    const latencyMs = result.latencyMs;
    const response = (result.response ?? '').slice(0, RESPONSE_LIMIT);
    const data: EventData<'DeliverySucceeded'> =
      sentAt !== undefined
        ? { deliveryId, subscriptionId, attempt, sentAt, queuedMs, status, latencyMs, response }
        : { deliveryId, subscriptionId, attempt, status, latencyMs, response };
    if (command.seq !== undefined) data.seq = command.seq;
    return { type: 'DeliverySucceeded', data };
  }
  const next = nextAttempt(command);
  const status = result.status;
  const error = result.error;
  const latencyMs = result.latencyMs;
  const response = result.response === null ? null : result.response.slice(0, RESPONSE_LIMIT);
  const nextAttemptAt = next === null ? null : new Date(next).toISOString();
  const data: EventData<'DeliveryFailed'> =
    sentAt !== undefined
      ? {
          deliveryId,
          subscriptionId,
          attempt,
          sentAt,
          queuedMs,
          status,
          error,
          latencyMs,
          response,
          nextAttemptAt,
        }
      : { deliveryId, subscriptionId, attempt, status, error, latencyMs, response, nextAttemptAt };
  if (result.held) data.held = true;
  if (command.seq !== undefined) data.seq = command.seq;
  return { type: 'DeliveryFailed', data };
}

function nextAttempt(command: Extract<DeliveryCommand, { kind: 'record' }>): number | null {
  const { result } = command;
  // A held attempt is due again when the breaker lets its next probe through, whatever the schedule.
  if (result.held && command.notBefore !== undefined) return command.notBefore;
  if (isGone(result) || result.error === SUBSCRIPTION_DISABLED) return null;
  return nextAttemptAt(
    command.retry,
    command.seriesAttempt,
    { due: command.dueAt, now: command.now },
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

/** Why a subscription is disabled, and the failed deliveries in a row its disable records. */
export interface DisableCause {
  reason: string;
  consecutiveFailures: number;
}

/**
 * Why the subscription should be disabled after a failed attempt, as its projection stands once
 * the failure is folded; null while it is healthy enough. The count rule is told at its crossing,
 * the threshold itself: deliveries running beside the one that crossed it go on failing (and
 * counting) until the disable is recorded, and the count read then (5 at a threshold of 3) would
 * say more than the rule saw when it fired.
 */
export function persistentFailureReason(
  sub: SubscriptionRecord | undefined,
  rules: DisableRules,
  now: number,
): DisableCause | null {
  if (sub?.status !== 'active') return null;
  if (sub.failedDeliveries >= rules.disableAfterFailedDeliveries) {
    const crossed = rules.disableAfterFailedDeliveries;
    return { reason: `${crossed} consecutive deliveries failed every attempt`, consecutiveFailures: crossed };
  }
  if (sub.failingSince !== null && now - Date.parse(sub.failingSince) >= rules.disableAfterMs) {
    return {
      reason: `no successful delivery since ${sub.failingSince}`,
      consecutiveFailures: sub.failedDeliveries,
    };
  }
  return null;
}
