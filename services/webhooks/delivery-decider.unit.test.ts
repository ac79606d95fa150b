import { describe, expect, it } from 'vitest';
import { deciderSpec } from '../../test/decider-spec.ts';
import {
  type AttemptResult,
  type DeliveryCommand,
  DeliveryConflictError,
  type DeliveryEvent,
  deliveryDecider,
  deliveryStateOf,
  goneReason,
  persistentFailureReason,
  seriesAttemptOf,
} from './delivery-decider.ts';
import type { DeliveryRecord } from './delivery-log-fold.ts';
import type { RetryPolicy } from './retry-policy.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

const retry: RetryPolicy = { schedule: [0, 5_000, 300_000], jitter: 0, retryAfterMaxMs: 3_600_000 };
const t0 = Date.parse('2026-01-01T00:00:00.000Z');
const ref = { deliveryId: 'd1', subscriptionId: 'wh_1' };

type ClaimTrigger = 'event' | 'retry' | 'stale' | 'digest' | 'recover' | 'resend';

function attempted(attempt: number, trigger: ClaimTrigger = 'event'): DeliveryEvent {
  return {
    type: 'DeliveryAttempted',
    data: {
      ...ref,
      attempt,
      eventId: 'e1',
      webhookEvent: 'trade_call',
      url: 'https://hooks.example.com/a',
      trigger,
      ...(attempt === 1 ? { body: '{}' } : {}),
    },
    id: `claim-${attempt}`,
    correlationId: 'd1',
  };
}

function claim(attempt: number, trigger: ClaimTrigger = 'event'): DeliveryCommand {
  const event = attempted(attempt, trigger);
  return { kind: 'claim', claimId: event.id!, data: event.data as never };
}

const answered = (status: number, extra: Partial<AttemptResult> = {}): AttemptResult => ({
  ok: status >= 200 && status < 300,
  status,
  latencyMs: 12,
  error: status >= 200 && status < 300 ? null : `HTTP ${status}`,
  response: 'body',
  retryAfterMs: null,
  sentAt: t0 + 40,
  ...extra,
});

function record(
  attempt: number,
  result: AttemptResult,
  extra: Partial<DeliveryCommand> = {},
): DeliveryCommand {
  return {
    kind: 'record',
    ...ref,
    attempt,
    seriesAttempt: attempt,
    result,
    claimedAt: t0,
    dueAt: t0 + 100,
    now: t0 + 100,
    retry,
    jitterSample: 0.5,
    ...extra,
  } as DeliveryCommand;
}

function succeeded(attempt: number): DeliveryEvent {
  return { type: 'DeliverySucceeded', data: { ...ref, attempt, status: 200, latencyMs: 1, response: '' } };
}

function failed(attempt: number, nextAttemptAt: string | null, status: number | null = 500): DeliveryEvent {
  return {
    type: 'DeliveryFailed',
    data: { ...ref, attempt, status, error: 'HTTP 500', latencyMs: 1, response: null, nextAttemptAt },
  };
}

const due = new Date(t0 + 5_000).toISOString();
const waiting = (attempt: number) => ({ attempt, recorded: false, outcome: null, nextAttemptAt: null });

const spec = deciderSpec(deliveryDecider);
const conflict = (err: Error) => err instanceof DeliveryConflictError;

describe('delivery decider: claims', () => {
  it('claims the first attempt of a new delivery', () => {
    spec
      .given([])
      .when(claim(1))
      .thenEmits([attempted(1)]);
  });

  it('claims the attempt after the latest, and only that one', () => {
    spec
      .given([attempted(1), failed(1, due)])
      .when(claim(2, 'retry'))
      .thenEmits([attempted(2, 'retry')]);
    spec
      .given([attempted(1), failed(1, due), attempted(2, 'retry'), failed(2, due)])
      .when(claim(2, 'retry'))
      .thenThrows(conflict);
    spec
      .given([attempted(1)])
      .when(claim(1))
      .thenThrows(conflict);
  });

  it('starts a fresh run through the schedule on a new event, a digest, a recovery or a resend', () => {
    expect(seriesAttemptOf('event', 4)).toBe(1);
    expect(seriesAttemptOf('resend', 4, 3)).toBe(1);
    expect(seriesAttemptOf('retry', 4, 3)).toBe(3);
    expect(seriesAttemptOf('stale', 4)).toBe(4);
  });
});

/** The success `record(1, answered(status))` emits: sent 40 ms after its claim, answered in 12 ms. */
function answeredSuccess(status: number): DeliveryEvent {
  return {
    type: 'DeliverySucceeded',
    data: {
      ...ref,
      attempt: 1,
      sentAt: new Date(t0 + 40).toISOString(),
      queuedMs: 40,
      status,
      latencyMs: 12,
      response: 'body',
    },
  };
}

function queued(attempt: number, trigger: ClaimTrigger = 'event'): DeliveryEvent {
  return { ...attempted(attempt, trigger), type: 'DeliveryQueued', id: `queue-${attempt}` } as DeliveryEvent;
}

function queue(attempt: number, trigger: ClaimTrigger = 'event'): DeliveryCommand {
  const event = queued(attempt, trigger);
  return { kind: 'queue', claimId: event.id!, data: event.data as never };
}

/** The claim of a queued attempt at its turn: the same attempt, without the body the queue event holds. */
function turn(attempt: number, trigger: ClaimTrigger = 'event'): DeliveryCommand {
  const { body: _, ...data } = attempted(attempt, trigger).data as { body?: string };
  return { kind: 'claim', claimId: `claim-${attempt}`, data: data as never };
}

describe('delivery decider: an attempt that waits in its endpoint queue', () => {
  it('is queued with the rules of a claim, and claimed at its turn as the same attempt', () => {
    spec
      .given([])
      .when(queue(1))
      .thenEmits([queued(1)]);
    spec
      .given([attempted(1), failed(1, due)])
      .when(queue(2, 'retry'))
      .thenEmits([queued(2, 'retry')]);
    spec
      .given([attempted(1)])
      .when(queue(2, 'retry'))
      .thenThrows(conflict);
    const { body: _, ...data } = attempted(1).data as { body?: string };
    spec
      .given([queued(1)])
      .when(turn(1))
      .thenEmits([{ ...attempted(1), data: data as never }]);
  });

  it('is claimed once: the second claim of its turn, a new stale attempt or an outcome before the claim conflict', () => {
    spec
      .given([queued(1), attempted(1)])
      .when(turn(1))
      .thenThrows(conflict);
    spec
      .given([queued(1)])
      .when(claim(2, 'stale'))
      .thenThrows(conflict);
    spec
      .given([queued(1)])
      .when(claim(2, 'resend'))
      .thenThrows(conflict);
    spec
      .given([queued(1)])
      .when(record(1, answered(200)))
      .thenThrows(conflict);
    // Sent under its queue lease after another dispatcher claimed it: only the claim's outcome counts.
    spec
      .given([queued(1), attempted(1)])
      .when(record(1, answered(200), { fromQueue: true }))
      .thenThrows(conflict);
    spec
      .given([queued(1), attempted(1)])
      .when(record(1, answered(200)))
      .thenEmits([
        {
          type: 'DeliverySucceeded',
          data: {
            ...ref,
            attempt: 1,
            sentAt: new Date(t0 + 40).toISOString(),
            queuedMs: 40,
            status: 200,
            latencyMs: 12,
            response: 'body',
          },
        },
      ]);
  });
});

describe('delivery decider: an attempt sent under its queue lease (no claim at its turn)', () => {
  const success = answeredSuccess(200);

  it('records its outcome against the queued attempt', () => {
    spec
      .given([queued(1)])
      .when(record(1, answered(200), { fromQueue: true }))
      .thenEmits([success]);
    spec
      .given([queued(2, 'retry')])
      .when(record(1, answered(200), { fromQueue: true }))
      .thenThrows(conflict);
  });

  it('closes the attempt: a takeover claim of its turn, a second outcome or a stale claim conflict after it', () => {
    spec
      .given([queued(1), success])
      .when(turn(1))
      .thenThrows(conflict);
    spec
      .given([queued(1), success])
      .when(record(1, answered(200), { fromQueue: true }))
      .thenThrows(conflict);
    spec
      .given([queued(1), success])
      .when(claim(2, 'stale'))
      .thenThrows(conflict);
    // A resend may follow it as it follows any recorded outcome.
    spec
      .given([queued(1), success])
      .when(claim(2, 'resend'))
      .thenEmits([attempted(2, 'resend')]);
  });

  it('schedules a retry after a failure, which is claimed as after a claimed attempt', () => {
    spec
      .given([queued(1), failed(1, due)])
      .when(claim(2, 'retry'))
      .thenEmits([attempted(2, 'retry')]);
  });
});

describe('delivery decider: which claims may follow', () => {
  it('starts a delivery only with an event, a digest or a recovery', () => {
    spec
      .given([])
      .when(claim(1, 'digest'))
      .thenEmits([attempted(1, 'digest')]);
    spec
      .given([])
      .when(claim(1, 'recover'))
      .thenEmits([attempted(1, 'recover')]);
    for (const trigger of ['retry', 'stale', 'resend'] as const) {
      spec.given([]).when(claim(1, trigger)).thenThrows(conflict);
    }
  });

  it('retries only a failure that scheduled a next attempt', () => {
    spec
      .given([attempted(1), succeeded(1)])
      .when(claim(2, 'retry'))
      .thenThrows(conflict);
    spec
      .given([attempted(1), failed(1, null)])
      .when(claim(2, 'retry'))
      .thenThrows(conflict);
    spec
      .given([attempted(1), failed(1, null, 410)])
      .when(claim(2, 'retry'))
      .thenThrows(conflict);
    spec
      .given([attempted(1)])
      .when(claim(2, 'retry'))
      .thenThrows(conflict);
    spec
      .given([attempted(1), failed(1, due), attempted(2, 'retry')])
      .when(claim(3, 'retry'))
      .thenThrows(conflict);
  });

  it('takes over as stale only an attempt still without an outcome', () => {
    spec
      .given([attempted(1)])
      .when(claim(2, 'stale'))
      .thenEmits([attempted(2, 'stale')]);
    spec
      .given([attempted(1), failed(1, due)])
      .when(claim(2, 'stale'))
      .thenThrows(conflict);
    spec
      .given([attempted(1), succeeded(1)])
      .when(claim(2, 'stale'))
      .thenThrows(conflict);
    // An older attempt's late outcome leaves the latest one in flight.
    spec
      .given([attempted(1), attempted(2, 'stale'), failed(1, due)])
      .when(claim(3, 'stale'))
      .thenEmits([attempted(3, 'stale')]);
  });

  it('recovers anything that did not succeed', () => {
    spec
      .given([attempted(1), failed(1, null)])
      .when(claim(2, 'recover'))
      .thenEmits([attempted(2, 'recover')]);
    spec
      .given([attempted(1), failed(1, due)])
      .when(claim(2, 'recover'))
      .thenEmits([attempted(2, 'recover')]);
    spec
      .given([attempted(1)])
      .when(claim(2, 'recover'))
      .thenEmits([attempted(2, 'recover')]);
    spec
      .given([attempted(1), succeeded(1)])
      .when(claim(2, 'recover'))
      .thenThrows(conflict);
  });

  it('resends any recorded outcome, never over an attempt in flight', () => {
    spec
      .given([attempted(1), succeeded(1)])
      .when(claim(2, 'resend'))
      .thenEmits([attempted(2, 'resend')]);
    spec
      .given([attempted(1), failed(1, null, 410)])
      .when(claim(2, 'resend'))
      .thenEmits([attempted(2, 'resend')]);
    spec
      .given([attempted(1)])
      .when(claim(2, 'resend'))
      .thenThrows(conflict);
  });

  it('never claims a second first attempt on a stream that has one', () => {
    spec
      .given([attempted(1), failed(1, due)])
      .when(claim(2, 'event'))
      .thenThrows(conflict);
    spec
      .given([attempted(1), failed(1, due)])
      .when(claim(2, 'digest'))
      .thenThrows(conflict);
  });

  it('reads the same state from a projected record as from the stream', () => {
    const base = {
      attemptedAt: new Date(t0).toISOString(),
      sentAt: null,
      queuedMs: null,
      trigger: 'event',
      status: 500,
      latencyMs: 1,
      error: 'HTTP 500',
      response: null,
    };
    const rec = (attempts: unknown[]) => ({ attempts }) as unknown as DeliveryRecord;
    expect(deliveryStateOf(rec([]))).toEqual(deliveryDecider.initialState());
    expect(deliveryStateOf(rec([{ ...base, attempt: 1, outcome: 'failed', nextAttemptAt: due }]))).toEqual(
      [attempted(1), failed(1, due)].reduce(
        (s, e) => deliveryDecider.evolve(s, e),
        deliveryDecider.initialState(),
      ),
    );
    expect(deliveryStateOf(rec([{ ...base, attempt: 1, outcome: 'pending', nextAttemptAt: null }]))).toEqual(
      waiting(1),
    );
  });
});

describe('delivery decider: outcomes', () => {
  it('records a 2xx as a success, with when it was sent and how long it queued', () => {
    spec
      .given([attempted(1)])
      .when(record(1, answered(204)))
      .thenEmits([answeredSuccess(204)]);
  });

  it('schedules the next attempt of a failure on the retry schedule', () => {
    spec
      .given([attempted(1)])
      .when(record(1, answered(500)))
      .thenEmits([
        {
          type: 'DeliveryFailed',
          data: {
            ...ref,
            attempt: 1,
            sentAt: new Date(t0 + 40).toISOString(),
            queuedMs: 40,
            status: 500,
            error: 'HTTP 500',
            latencyMs: 12,
            response: 'body',
            nextAttemptAt: new Date(t0 + 100 + 5_000).toISOString(),
          },
        },
      ]);
  });

  it('keeps a retry on the schedule however late the failure before it was recorded', () => {
    // Attempt 2 was due at t0 + 100 + 5 s; its failure is recorded 4 s after that.
    const due = t0 + 100 + 5_000;
    const [event] = deliveryDecider.decide(
      record(2, answered(500), { dueAt: due, now: due + 4_000 } as Partial<DeliveryCommand>),
      waiting(2),
    );
    expect(event).toMatchObject({ data: { nextAttemptAt: new Date(due + 300_000).toISOString() } });
  });

  it('honours Retry-After when it is later than the schedule', () => {
    const [event] = deliveryDecider.decide(record(1, answered(503, { retryAfterMs: 60_000 })), waiting(1));
    expect(event).toMatchObject({ data: { nextAttemptAt: new Date(t0 + 100 + 60_000).toISOString() } });
  });

  it('schedules nothing once the schedule is spent, on 410 Gone, or for a disabled subscription', () => {
    const spent = deliveryDecider.decide(record(3, answered(500)), waiting(3));
    expect(spent[0]).toMatchObject({ type: 'DeliveryFailed', data: { nextAttemptAt: null } });
    const gone = deliveryDecider.decide(record(1, answered(410)), waiting(1));
    expect(gone[0]).toMatchObject({ data: { nextAttemptAt: null, status: 410 } });
    const disabled = deliveryDecider.decide(
      record(1, { ...answered(500), status: null, error: 'subscription disabled', sentAt: undefined }),
      waiting(1),
    );
    expect(disabled[0]).toMatchObject({ data: { nextAttemptAt: null } });
  });

  it('holds an attempt the breaker kept back until its next probe, without sending it', () => {
    const held: AttemptResult = {
      ok: false,
      status: null,
      latencyMs: 0,
      error: 'circuit open',
      response: null,
      retryAfterMs: null,
      held: true,
    };
    spec
      .given([attempted(1)])
      .when(record(1, held, { notBefore: t0 + 30_000 } as Partial<DeliveryCommand>))
      .thenEmits([
        {
          type: 'DeliveryFailed',
          data: {
            ...ref,
            attempt: 1,
            status: null,
            error: 'circuit open',
            latencyMs: 0,
            response: null,
            nextAttemptAt: new Date(t0 + 30_000).toISOString(),
            held: true,
          },
        },
      ]);
  });

  it('refuses an outcome for an attempt that is not the one waiting', () => {
    spec
      .given([attempted(1), attempted(2, 'retry')])
      .when(record(1, answered(200)))
      .thenThrows(conflict);
    spec
      .given([
        attempted(1),
        { type: 'DeliverySucceeded', data: { ...ref, attempt: 1, status: 200, latencyMs: 1, response: '' } },
      ])
      .when(record(1, answered(200)))
      .thenThrows(conflict);
  });
});

describe('delivery decider: disabling the subscription', () => {
  const rules = { disableAfterFailedDeliveries: 3, disableAfterMs: 86_400_000 };
  const sub = (patch: Partial<SubscriptionRecord>) =>
    ({
      id: 'wh_1',
      status: 'active',
      failedDeliveries: 0,
      failingSince: null,
      ...patch,
    }) as SubscriptionRecord;

  it('disables at once on 410 Gone', () => {
    expect(goneReason(answered(410))).toBe('the receiver answered 410 Gone');
    expect(goneReason(answered(500))).toBeNull();
  });

  it('disables after enough deliveries failed every attempt, or after failing for long enough', () => {
    expect(persistentFailureReason(sub({ failedDeliveries: 3 }), rules, t0)).toEqual({
      reason: '3 consecutive deliveries failed every attempt',
      consecutiveFailures: 3,
    });
    const since = new Date(t0 - 86_400_000).toISOString();
    expect(persistentFailureReason(sub({ failingSince: since, failedDeliveries: 1 }), rules, t0)).toEqual({
      reason: `no successful delivery since ${since}`,
      consecutiveFailures: 1,
    });
    expect(
      persistentFailureReason(sub({ failedDeliveries: 2, failingSince: since }), rules, t0 - 1),
    ).toBeNull();
    expect(persistentFailureReason(sub({ status: 'disabled', failedDeliveries: 9 }), rules, t0)).toBeNull();
    expect(persistentFailureReason(undefined, rules, t0)).toBeNull();
  });

  it('tells the count rule at its crossing, not the count that failures beside it ran up to', () => {
    // Deliveries in flight beside the third failure failed too before the disable was decided.
    expect(persistentFailureReason(sub({ failedDeliveries: 5 }), rules, t0)).toEqual({
      reason: '3 consecutive deliveries failed every attempt',
      consecutiveFailures: 3,
    });
  });
});
