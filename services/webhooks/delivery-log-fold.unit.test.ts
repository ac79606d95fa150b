import { describe, expect, it } from 'vitest';
import type { DomainEvent } from '../../contracts/events.ts';
import { deliveryStateOf } from './delivery-decider.ts';
import {
  applyDeliveryEvent,
  DELIVERY_LOG_LIMIT,
  type DeliveryLogState,
  deliveryView,
  initialDeliveryLog,
  NO_STREAM,
} from './delivery-log-fold.ts';
import { SUBSCRIPTION_DISABLED } from './subscription-fold.ts';

let position = 0;

function recorded<T extends DomainEvent['type']>(
  type: T,
  data: Extract<DomainEvent, { type: T }>['data'],
): DomainEvent {
  position++;
  return {
    id: `e${position}`,
    type,
    stream: 'delivery-x',
    revision: 0,
    position,
    recordedAt: new Date(1_700_000_000_000 + position).toISOString(),
    correlationId: `e${position}`,
    causationId: null,
    data,
  } as DomainEvent;
}

const attempted = (deliveryId: string, subscriptionId = 'sub-a', attempt = 1) =>
  recorded('DeliveryAttempted', {
    deliveryId,
    subscriptionId,
    attempt,
    eventId: `ev-${deliveryId}`,
    webhookEvent: 'trade_call',
    url: 'https://hooks.example.com/x',
    trigger: 'event',
  });

/** The first attempt put in its endpoint's queue, with the body. */
const queued = (deliveryId: string) =>
  recorded('DeliveryQueued', {
    deliveryId,
    subscriptionId: 'sub-a',
    attempt: 1,
    eventId: `ev-${deliveryId}`,
    webhookEvent: 'trade_call',
    url: 'https://hooks.example.com/x',
    trigger: 'event',
    body: '{}',
  });

const succeeded = (deliveryId: string, subscriptionId = 'sub-a', attempt = 1) =>
  recorded('DeliverySucceeded', {
    deliveryId,
    subscriptionId,
    attempt,
    status: 200,
    latencyMs: 3,
    response: 'ok',
  });

const failed = (deliveryId: string, nextAttemptAt: string | null, subscriptionId = 'sub-a') =>
  recorded('DeliveryFailed', {
    deliveryId,
    subscriptionId,
    attempt: 1,
    status: 500,
    error: 'HTTP 500',
    latencyMs: 3,
    response: null,
    nextAttemptAt,
  });

function fold(events: DomainEvent[], start = initialDeliveryLog()): DeliveryLogState {
  return events.reduce((state, event) => applyDeliveryEvent(state, event), start);
}

describe('delivery log eviction', () => {
  it('keeps every pending delivery, however many, and evicts finished ones oldest first', () => {
    const n = DELIVERY_LOG_LIMIT + 50;
    const state = fold(Array.from({ length: n }, (_, i) => attempted(`d${i}`)));
    expect(state.bySub['sub-a']).toHaveLength(n);
    // Two finish in the middle, then a new one arrives: only those two can go, the older first.
    fold([succeeded('d120'), failed('d7', null), attempted('new-1')], state);
    expect(state.bySub['sub-a']).toHaveLength(n - 1);
    expect(state.deliveries.d7).toBeUndefined();
    expect(state.deliveries.d120).toBeUndefined();
    expect(state.deliveries['new-1']?.status).toBe('pending');
  });

  it('drops a delivery past the limit as it finishes, not at the next one added', () => {
    const n = DELIVERY_LOG_LIMIT + 3;
    const state = fold(Array.from({ length: n }, (_, i) => attempted(`d${i}`)));
    // A flood's backlog finishing with nothing added after it: the log comes back to its limit.
    fold([succeeded('d1'), failed('d0', null), succeeded('d2'), succeeded('d3')], state);
    expect(state.bySub['sub-a']).toHaveLength(DELIVERY_LOG_LIMIT);
    expect(state.bySub['sub-a']![0]).toBe('d3');
    for (const id of ['d0', 'd1', 'd2']) expect(state.deliveries[id]).toBeUndefined();
    // Within the limit a finished one stays.
    expect(state.deliveries.d3?.status).toBe('succeeded');
  });

  it('keeps a delivery that finished and was sent again before the next eviction', () => {
    // At the limit: its finish leaves the log as it is, and the next delivery added evicts.
    const n = DELIVERY_LOG_LIMIT;
    const state = fold(Array.from({ length: n }, (_, i) => attempted(`d${i}`)));
    // d0 finishes, then a resend makes it pending again before any new delivery comes.
    fold([succeeded('d0'), attempted('d0', 'sub-a', 2), attempted('new-1')], state);
    expect(state.deliveries.d0?.status).toBe('pending');
    expect(state.bySub['sub-a']).toHaveLength(n + 1);
    // Once it finishes for good it is the first to go.
    fold([succeeded('d0', 'sub-a', 2), succeeded('d5'), attempted('new-2')], state);
    expect(state.deliveries.d0).toBeUndefined();
    expect(state.deliveries.d5).toBeUndefined();
    expect(state.bySub['sub-a']).toHaveLength(n);
  });

  it('does not evict a delivery that failed with a retry still due', () => {
    const state = fold(Array.from({ length: DELIVERY_LOG_LIMIT }, (_, i) => attempted(`d${i}`)));
    fold([failed('d0', new Date(2_000_000_000_000).toISOString()), attempted('d-next')], state);
    expect(state.deliveries.d0?.status).toBe('pending');
    expect(state.bySub['sub-a']).toHaveLength(DELIVERY_LOG_LIMIT + 1);
  });

  it('treats deliveries of a disabled subscription as finished', () => {
    const state = fold(Array.from({ length: DELIVERY_LOG_LIMIT + 5 }, (_, i) => attempted(`d${i}`)));
    fold(
      [
        recorded('SubscriptionDisabled', { subscriptionId: 'sub-a', reason: 'x', consecutiveFailures: 5 }),
        attempted('after'),
      ],
      state,
    );
    expect(state.bySub['sub-a']).toHaveLength(DELIVERY_LOG_LIMIT);
    expect(state.bySub['sub-a']![0]).toBe('d6');
  });

  it('keeps a delivery held for the disable of its subscription until a re-enable sends it', () => {
    const state = fold(Array.from({ length: DELIVERY_LOG_LIMIT }, (_, i) => attempted(`d${i}`)));
    const heldForDisable = recorded('DeliveryFailed', {
      deliveryId: 'd0',
      subscriptionId: 'sub-a',
      attempt: 1,
      status: null,
      error: SUBSCRIPTION_DISABLED,
      latencyMs: 0,
      response: null,
      nextAttemptAt: null,
      held: true,
    });
    fold(
      [
        recorded('SubscriptionDisabled', { subscriptionId: 'sub-a', reason: 'x', consecutiveFailures: 5 }),
        heldForDisable,
        failed('d1', null),
        attempted('after-1'),
        attempted('after-2'),
      ],
      state,
    );
    // d1 (failed, sent) went; d0 (held, never sent) stays for the re-enable to find.
    expect(state.deliveries.d1).toBeUndefined();
    expect(state.deliveries.d0?.status).toBe('failed');
    expect(state.bySub['sub-a']![0]).toBe('d0');
  });

  it('evicts exactly what the plain rule evicts on a random history, across a snapshot copy', () => {
    let seed = 42;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    // The rule in its plainest form: per subscription, oldest first; when a delivery is added or
    // finishes, while over the limit, drop the oldest delivery that is no longer pending.
    const model = new Map<string, string[]>();
    const trimModel = (ids: string[]) => {
      while (ids.length > DELIVERY_LOG_LIMIT) {
        const index = ids.findIndex((x) => !pending.has(x));
        if (index < 0) break;
        ids.splice(index, 1);
      }
    };
    const pending = new Set<string>();
    let state = initialDeliveryLog();
    const open: { id: string; sub: string; attempt?: number }[] = [];
    for (let i = 0; i < 3_000; i++) {
      const sub = random() < 0.8 ? 'sub-a' : 'sub-b';
      const r = random();
      const finishedIds = (model.get(sub) ?? []).filter((x) => !pending.has(x));
      if (r > 0.97 && finishedIds.length > 0) {
        // A resend (or a recovery) of a finished delivery still in the log: pending again.
        const id = finishedIds[Math.floor(random() * finishedIds.length)]!;
        state = applyDeliveryEvent(state, attempted(id, sub, 2));
        open.push({ id, sub, attempt: 2 });
        pending.add(id);
      } else if (open.length === 0 || r < 0.55) {
        const id = `d${i}`;
        state = applyDeliveryEvent(state, attempted(id, sub));
        open.push({ id, sub });
        pending.add(id);
        const ids = model.get(sub) ?? [];
        ids.push(id);
        model.set(sub, ids);
        trimModel(ids);
      } else {
        const [done] = open.splice(Math.floor(random() * open.length), 1);
        const retry = r > 0.95 && done!.attempt === undefined;
        state = applyDeliveryEvent(
          state,
          r < 0.85 || done!.attempt !== undefined
            ? succeeded(done!.id, done!.sub, done!.attempt)
            : failed(done!.id, retry ? new Date(2_000_000_000_000).toISOString() : null, done!.sub),
        );
        if (retry) open.push(done!);
        else {
          pending.delete(done!.id);
          trimModel(model.get(done!.sub) ?? []);
        }
      }
      // A snapshot load hands the fold fresh arrays mid-history.
      if (i === 1_500) state = structuredClone(state);
      expect(state.bySub[sub] ?? []).toEqual(model.get(sub) ?? []);
    }
    for (const id of pending) expect(state.deliveries[id]?.status).toBe('pending');
    expect(Object.keys(state.deliveries).sort()).toEqual([...model.values()].flat().sort());
    expect(state.bySub['sub-a']!.length).toBeGreaterThan(DELIVERY_LOG_LIMIT);
  });
});

describe('sequence numbers in the delivery log', () => {
  it('joins a DeliverySequenced to its claim in either order', () => {
    const seqEvent = (deliveryId: string, revision: number) => {
      const e = recorded('DeliverySequenced', { subscriptionId: 'sub-s', deliveryId });
      return { ...e, revision } as DomainEvent;
    };
    const state = fold([
      seqEvent('s1', 0),
      attempted('s1', 'sub-s'),
      attempted('s2', 'sub-s'),
      seqEvent('s2', 1),
    ]);
    expect(state.deliveries.s1?.seq).toBe(1);
    expect(state.deliveries.s2?.seq).toBe(2);
    expect(state.seqWaiting).toEqual({});
  });
});

describe('a first attempt recorded in its DeliverySequenced', () => {
  /** The delivery's sequence event at `revision`, carrying its first attempt (queued) when `first`. */
  const sequenced = (deliveryId: string, revision: number, first: boolean) => {
    const e = recorded('DeliverySequenced', {
      subscriptionId: 'sub-a',
      deliveryId,
      ...(first
        ? {
            first: {
              deliveryId,
              subscriptionId: 'sub-a',
              attempt: 1,
              eventId: `ev-${deliveryId}`,
              webhookEvent: 'trade_call' as const,
              url: 'https://hooks.example.com/x',
              trigger: 'event' as const,
              body: '{}',
              queued: true,
              claimId: `claim-${deliveryId}`,
            },
          }
        : {}),
    });
    return { ...e, stream: 'webhook-seq-sub-a', revision } as DomainEvent;
  };
  /** An event of the delivery's own stream at `revision`. */
  const at = (event: DomainEvent, revision: number) => ({ ...event, revision }) as DomainEvent;

  it('folds to the view the older log (a sequence event, then the attempt in its own stream) folds to', () => {
    // The same history written both ways: queued, sent under its queue lease, failed with a retry
    // due, retried (claimed) and succeeded.
    const retryAt = new Date(1_900_000_000_000).toISOString();
    const retried = (first: number) => {
      const claim = recorded('DeliveryAttempted', {
        deliveryId: 'n1',
        subscriptionId: 'sub-a',
        attempt: 2,
        eventId: 'ev-n1',
        webhookEvent: 'trade_call',
        url: 'https://hooks.example.com/x',
        trigger: 'retry',
        seq: 5,
      });
      return [
        at(failed('n1', retryAt), first),
        at(claim, first + 1),
        at(succeeded('n1', 'sub-a', 2), first + 2),
      ];
    };
    position = 0;
    const now = fold([sequenced('n1', 4, true), ...retried(0)]);
    position = 0;
    const before = fold([sequenced('n1', 4, false), at(queued('n1'), 0), ...retried(1)]);
    const record = now.deliveries.n1!;
    expect(record.seq).toBe(5);
    expect(record.revision).toBe(2);
    expect(before.deliveries.n1!.revision).toBe(3);
    // The times are the events' own: one more event in the older log moves them by a step.
    const untimed = (view: ReturnType<typeof deliveryView>) => ({
      ...view,
      created_at: null,
      attempts: view.attempts.map((a) => ({ ...a, attempted_at: null })),
    });
    expect(untimed(deliveryView(record))).toEqual(untimed(deliveryView(before.deliveries.n1!)));
    expect(deliveryView(record).attempts.map((a) => [a.trigger, a.outcome])).toEqual([
      ['event', 'failed'],
      ['retry', 'succeeded'],
    ]);
  });

  it('stands for a delivery whose own stream does not exist yet, and keeps it past the log limit', () => {
    const state = fold([sequenced('only', 0, true)]);
    expect(state.deliveries.only).toMatchObject({ seq: 1, revision: NO_STREAM, status: 'pending' });
    expect(state.deliveries.only!.attempts).toMatchObject([{ attempt: 1, queued: true, outcome: 'pending' }]);
    expect(deliveryStateOf(state.deliveries.only!)).toMatchObject({
      attempt: 1,
      queued: true,
      recorded: false,
    });
    // Disabled, it counts as failed, yet stays: only this log can answer for it by its id.
    fold(
      [
        recorded('SubscriptionDisabled', { subscriptionId: 'sub-a', reason: 'x', consecutiveFailures: 5 }),
        ...Array.from({ length: DELIVERY_LOG_LIMIT + 5 }, (_, i) => [
          attempted(`d${i}`),
          succeeded(`d${i}`),
        ]).flat(),
      ],
      state,
    );
    expect(state.deliveries.only?.status).toBe('failed');
    expect(state.bySub['sub-a']![0]).toBe('only');
    expect(state.bySub['sub-a']).toHaveLength(DELIVERY_LOG_LIMIT);
  });
});

describe('the delivery log view', () => {
  it("names no next attempt for a delivery whose retry its subscription's disable called off", () => {
    const later = new Date(2_000_000_000_000).toISOString();
    const state = fold([
      attempted('r1'),
      failed('r1', later),
      recorded('SubscriptionDisabled', { subscriptionId: 'sub-a', reason: 'x', consecutiveFailures: 5 }),
    ]);
    const view = deliveryView(state.deliveries.r1!);
    // Failed: no attempt follows (a re-enable with recover_since sends it again, as a new attempt).
    expect(view.status).toBe('failed');
    expect(view.attempts.map((a) => [a.outcome, a.next_attempt_at])).toEqual([['failed', null]]);
    // The retry it had scheduled stays in the fold's state: only the view says none follows.
    expect(state.deliveries.r1!.attempts[0]!.nextAttemptAt).toBe(later);
  });

  it('shows attempts held by an open breaker as held and unnumbered, and numbers the requests sent', () => {
    const later = new Date(2_000_000_000_000).toISOString();
    const timedOut = {
      ...failed('h1', later),
      data: { ...failed('h1', later).data, error: 'timeout: no answer' },
    };
    const heldAttempt = (attempt: number) =>
      recorded('DeliveryFailed', {
        deliveryId: 'h1',
        subscriptionId: 'sub-a',
        attempt,
        status: null,
        error: 'circuit open: probing at the next delay',
        latencyMs: 0,
        response: null,
        nextAttemptAt: later,
        held: true,
      });
    const retryClaim = (attempt: number) =>
      ({
        ...attempted('h1', 'sub-a', attempt),
        data: { ...attempted('h1', 'sub-a', attempt).data, trigger: 'retry' },
      }) as DomainEvent;
    const state = fold([
      attempted('h1'),
      timedOut as DomainEvent,
      retryClaim(2),
      heldAttempt(2),
      retryClaim(3),
      heldAttempt(3),
      retryClaim(4),
      succeeded('h1', 'sub-a', 4),
    ]);
    const view = deliveryView(state.deliveries.h1!);
    expect(view.status).toBe('succeeded');
    expect(view.attempts.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'failed'],
      [null, 'held'],
      [null, 'held'],
      [2, 'succeeded'],
    ]);
  });
});

describe('an attempt queued before its claim', () => {
  it('shows as its one pending attempt from when it was queued, and is stuck only from its claim', () => {
    const queuedAt = queued('q1');
    let state = fold([queuedAt]);
    expect(state.deliveries.q1!.attempts).toMatchObject([{ attempt: 1, outcome: 'pending', queued: true }]);
    const claim = attempted('q1');
    state = fold([claim], state);
    const [attempt] = state.deliveries.q1!.attempts;
    expect(state.deliveries.q1!.attempts).toHaveLength(1);
    expect(attempt!.queued).toBeUndefined();
    expect(attempt!.attemptedAt).toBe(queuedAt.recordedAt);
    expect(attempt!.claimedAt).toBe(claim.recordedAt);
    expect(state.deliveries.q1!.revision).toBe(claim.revision);
    state = fold([succeeded('q1')], state);
    expect(deliveryView(state.deliveries.q1!).attempts).toMatchObject([
      { attempt: 1, outcome: 'succeeded', attempted_at: queuedAt.recordedAt },
    ]);
  });

  it('shows latency in whole milliseconds, as the test send answers it', () => {
    const outcome = recorded('DeliverySucceeded', {
      deliveryId: 'q3',
      subscriptionId: 'sub-a',
      attempt: 1,
      status: 200,
      latencyMs: 259.1469470000011,
      response: 'ok',
    });
    const state = fold([queued('q3'), outcome]);
    expect(deliveryView(state.deliveries.q3!).attempts[0]!.latency_ms).toBe(259);
  });

  it('sent under its queue lease, takes its outcome with no claim between', () => {
    const queuedAt = queued('q2');
    const outcome = succeeded('q2');
    const state = fold([queuedAt, outcome]);
    const record = state.deliveries.q2!;
    expect(record.status).toBe('succeeded');
    expect(record.attempts).toHaveLength(1);
    expect(record.attempts[0]!.queued).toBeUndefined();
    expect(record.attempts[0]!.claimedAt).toBeUndefined();
    expect(deliveryStateOf(record)).toEqual({
      attempt: 1,
      recorded: true,
      outcome: 'succeeded',
      nextAttemptAt: null,
    });
    expect(deliveryView(record).attempts).toMatchObject([
      { attempt: 1, outcome: 'succeeded', attempted_at: queuedAt.recordedAt, trigger: 'event' },
    ]);
  });
});
