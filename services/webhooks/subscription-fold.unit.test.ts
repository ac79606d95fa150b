import { describe, expect, it } from 'vitest';
import { MAX_DISABLE_AFTER_FAILED_DELIVERIES } from '../../contracts/config.ts';
import type { DomainEvent } from '../../contracts/events.ts';
import {
  applySubscriptionEvent,
  EARLIER_FILTERS_KEPT,
  filtersAt,
  initialSubscriptions,
  SUBSCRIPTION_DISABLED,
  type SubscriptionRecord,
  type SubscriptionState,
} from './subscription-fold.ts';

const at = '2031-06-10T12:00:00.000Z';

function failed(held: boolean): DomainEvent {
  return {
    type: 'DeliveryFailed',
    recordedAt: at,
    data: {
      deliveryId: 'd-1',
      subscriptionId: 's-1',
      attempt: held ? null : 1,
      status: null,
      error: held ? 'not sent: the dispatcher stopped' : 'timeout after 1000 ms',
      latencyMs: 0,
      response: null,
      nextAttemptAt: at,
      ...(held ? { held: true } : {}),
    },
  } as unknown as DomainEvent;
}

const state = (): SubscriptionState => ({
  subs: {
    's-1': { id: 's-1', status: 'active', failedDeliveries: 0, failingSince: null } as SubscriptionRecord,
  },
  revokedKeys: {},
});

describe('the subscription fold of delivery outcomes', () => {
  it('a held attempt (never sent) does not start the disable clock; a failed one does', () => {
    const afterHeld = applySubscriptionEvent(state(), failed(true));
    expect(afterHeld.subs['s-1']).toMatchObject({ failingSince: null, failedDeliveries: 0 });
    const afterFailed = applySubscriptionEvent(state(), failed(false));
    expect(afterFailed.subs['s-1']).toMatchObject({ failingSince: at, failedDeliveries: 0 });
  });

  it('a delivery held for its disabled subscription is not a failed one; a last failed attempt is', () => {
    const final = (e: DomainEvent, error: string) =>
      ({ ...e, data: { ...(e.data as object), nextAttemptAt: null, error } }) as unknown as DomainEvent;
    const afterHeld = applySubscriptionEvent(state(), final(failed(true), SUBSCRIPTION_DISABLED));
    expect(afterHeld.subs['s-1']).toMatchObject({ failingSince: null, failedDeliveries: 0 });
    const afterLast = applySubscriptionEvent(state(), final(failed(false), 'timeout after 1000 ms'));
    expect(afterLast.subs['s-1']).toMatchObject({ failingSince: at, failedDeliveries: 1 });
  });

  it('an enable of an active subscription (recover_since) keeps its failing run; one of a disabled subscription ends it', () => {
    const last = {
      ...failed(false),
      data: { ...(failed(false).data as object), nextAttemptAt: null },
    } as DomainEvent;
    const enable = event('SubscriptionReEnabled', { subscriptionId: 's-1', recoverSince: at }, later);
    // Active and failing: a recovery re-sends what failed, but nothing has succeeded yet.
    const failing = applySubscriptionEvent(state(), last);
    expect(applySubscriptionEvent(failing, enable).subs['s-1']).toMatchObject({
      status: 'active',
      failingSince: at,
      failedDeliveries: 1,
    });
    // Disabled for it: the re-enable starts the subscription's counts over.
    const disabled = applySubscriptionEvent(
      applySubscriptionEvent(state(), last),
      event('SubscriptionDisabled', { subscriptionId: 's-1', reason: 'x' }),
    );
    expect(applySubscriptionEvent(disabled, enable).subs['s-1']).toMatchObject({
      status: 'active',
      failingSince: null,
      failedDeliveries: 0,
    });
  });

  it('keeps the failed deliveries in a row at the first 410 Gone, that one counted, until a success', () => {
    let n = 0;
    const last = (status: number | null) =>
      ({
        ...failed(false),
        data: { ...(failed(false).data as object), deliveryId: `d-${++n}`, nextAttemptAt: null, status },
      }) as DomainEvent;
    const fold = (events: DomainEvent[], from = state()) => events.reduce(applySubscriptionEvent, from);
    const gone = fold([last(500), last(null), last(410), last(410), last(500)]);
    expect(gone.subs['s-1']).toMatchObject({ failedDeliveries: 5, failedDeliveriesAtGone: 3 });
    const healed = fold([event('DeliverySucceeded', { deliveryId: 'd-2', subscriptionId: 's-1' })], gone);
    expect(healed.subs['s-1']!.failedDeliveriesAtGone).toBeUndefined();
    expect(fold([last(410)], healed).subs['s-1']).toMatchObject({
      failedDeliveries: 1,
      failedDeliveriesAtGone: 1,
    });
  });
  it('keeps at most the highest threshold a setting takes of failed delivery ids, the count stopping there', () => {
    const last = (deliveryId: string) =>
      ({
        ...failed(false),
        data: { ...(failed(false).data as object), deliveryId, nextAttemptAt: null },
      }) as DomainEvent;
    let s = state();
    const past = MAX_DISABLE_AFTER_FAILED_DELIVERIES + 50;
    for (let i = 1; i <= past; i++) s = applySubscriptionEvent(s, last(`d-${i}`));
    const sub = s.subs['s-1']!;
    expect(sub.failedDeliveries).toBe(MAX_DISABLE_AFTER_FAILED_DELIVERIES);
    expect(sub.failedDeliveryIds).toHaveLength(MAX_DISABLE_AFTER_FAILED_DELIVERIES);
    // The count reaches every threshold a setting takes, so the disable rule fires all the same.
    expect(sub.failedDeliveryIds!.at(-1)).toBe(`d-${MAX_DISABLE_AFTER_FAILED_DELIVERIES}`);
    // A counted one re-sent and failing again is still counted once.
    expect(applySubscriptionEvent(s, last('d-1')).subs['s-1']!.failedDeliveries).toBe(
      MAX_DISABLE_AFTER_FAILED_DELIVERIES,
    );
  });

  it('counts a delivery once per failing run, however often a resend or a recovery fails it', () => {
    const last = (deliveryId: string, attempt: number, status: number | null = 500) =>
      ({
        ...failed(false),
        data: { ...(failed(false).data as object), deliveryId, attempt, nextAttemptAt: null, status },
      }) as DomainEvent;
    const fold = (events: DomainEvent[], from = state()) => events.reduce(applySubscriptionEvent, from);
    const enable = event('SubscriptionReEnabled', { subscriptionId: 's-1', recoverSince: at }, later);
    // d-1 failed, then failed again when resent twice and when an enable of the active
    // subscription (recover_since) re-sent it: one delivery in a row, not four.
    const resent = fold([last('d-1', 1), last('d-1', 2), last('d-1', 3), enable, last('d-1', 4)]);
    expect(resent.subs['s-1']).toMatchObject({ failedDeliveries: 1, failingSince: at });
    // Another delivery is the second in a row, and d-1 resent beside it counts no more.
    // (The fold changes the state it is given: each branch folds a copy.)
    expect(fold([last('d-2', 1), last('d-1', 5)], structuredClone(resent)).subs['s-1']).toMatchObject({
      failedDeliveries: 2,
    });
    // A 410 to a resend of a delivery already counted records the run as it stands.
    expect(fold([last('d-1', 5, 410)], structuredClone(resent)).subs['s-1']).toMatchObject({
      failedDeliveries: 1,
      failedDeliveriesAtGone: 1,
    });
    // A success ends the run: the same delivery failing in the next run is counted in it.
    const success = event('DeliverySucceeded', { deliveryId: 'd-3', subscriptionId: 's-1' });
    const healed = fold([success], structuredClone(resent));
    expect(fold([last('d-1', 5)], healed).subs['s-1']).toMatchObject({ failedDeliveries: 1 });
  });
});

const later = '2031-06-10T13:00:00.000Z';
const event = (type: string, data: object, recordedAt = at): DomainEvent =>
  ({ type, data, recordedAt, position: 1 }) as unknown as DomainEvent;
const created = (id: string, keyId: string) =>
  event('SubscriptionCreated', {
    subscriptionId: id,
    keyId,
    url: 'https://h.example/x',
    events: ['trade_call'],
    secret: {},
  });

describe("the subscription fold of a key's revocation", () => {
  it('disables every subscription of the revoked key with reason key_revoked, and only its', () => {
    let s = initialSubscriptions();
    for (const e of [created('a', 'k1'), created('b', 'k1'), created('c', 'k2')])
      s = applySubscriptionEvent(s, e);
    s = applySubscriptionEvent(
      s,
      event('SubscriptionDisabled', { subscriptionId: 'b', reason: 'gone', consecutiveFailures: 1 }),
    );
    s = applySubscriptionEvent(s, event('ApiKeyRevoked', { keyId: 'k1', reason: 'leaked' }, later));
    expect(s.subs.a).toMatchObject({ status: 'disabled', disabledReason: 'key_revoked', disabledAt: later });
    expect(s.subs.b).toMatchObject({ status: 'disabled', disabledReason: 'key_revoked', disabledAt: later });
    expect(s.subs.c).toMatchObject({ status: 'active', disabledReason: null });
  });

  it('is final: a re-enable does not revive one, and a create that raced the revocation is born disabled', () => {
    let s = applySubscriptionEvent(initialSubscriptions(), created('a', 'k1'));
    s = applySubscriptionEvent(s, event('ApiKeyRevoked', { keyId: 'k1', reason: 'leaked' }, later));
    s = applySubscriptionEvent(s, event('SubscriptionReEnabled', { subscriptionId: 'a' }));
    expect(s.subs.a).toMatchObject({ status: 'disabled', disabledReason: 'key_revoked' });
    s = applySubscriptionEvent(s, created('late', 'k1'));
    expect(s.subs.late).toMatchObject({
      status: 'disabled',
      disabledReason: 'key_revoked',
      disabledAt: later,
    });
    // A disable decided from the key's own stream (which never sees the revocation) changes nothing.
    s = applySubscriptionEvent(
      s,
      event('SubscriptionDisabled', { subscriptionId: 'a', reason: 'gone', consecutiveFailures: 1 }),
    );
    expect(s.subs.a).toMatchObject({ disabledReason: 'key_revoked' });
  });
});

describe('a subscription edited (SubscriptionUpdated)', () => {
  const secret = { keyVersion: 'v1', iv: 'iv', tag: 'tag', ciphertext: 'ct' };
  const recorded = (position: number, type: string, data: Record<string, unknown>) =>
    ({ type, data, position, recordedAt: at }) as unknown as DomainEvent;
  const created = recorded(10, 'SubscriptionCreated', {
    subscriptionId: 's-1',
    keyId: 'k',
    url: 'https://hooks.example.com/a',
    events: ['trade_call'],
    assets: ['BTC'],
    secret,
  });
  const edit = (position: number, assets: string[]) =>
    recorded(position, 'SubscriptionUpdated', {
      subscriptionId: 's-1',
      url: 'https://hooks.example.com/a',
      events: ['trade_call'],
      assets,
    });

  it('matches an event with the filters of its log position: an edit applies from its own on', () => {
    const state = [created, edit(20, ['ETH']), edit(30, ['SOL'])].reduce(
      applySubscriptionEvent,
      initialSubscriptions(),
    );
    const sub = state.subs['s-1']!;
    expect(sub.assets).toEqual(['SOL']);
    expect(filtersAt(sub, 15).assets).toEqual(['BTC']);
    expect(filtersAt(sub, 20).assets).toEqual(['ETH']);
    expect(filtersAt(sub, 29).assets).toEqual(['ETH']);
    expect(filtersAt(sub, 30).assets).toEqual(['SOL']);
    expect(filtersAt(sub, 99).assets).toEqual(['SOL']);
  });

  it(`keeps the filters of the latest ${EARLIER_FILTERS_KEPT} edits only`, () => {
    const edits = Array.from({ length: EARLIER_FILTERS_KEPT + 4 }, (_, i) => edit(100 + i, [`C${i}`]));
    const sub = [created, ...edits].reduce(applySubscriptionEvent, initialSubscriptions()).subs['s-1']!;
    expect(sub.earlierFilters).toHaveLength(EARLIER_FILTERS_KEPT);
    // Before the oldest edit kept: the oldest filters kept (the created ones are gone).
    expect(filtersAt(sub, 11).assets).toEqual(['C3']);
    expect(filtersAt(sub, 100 + EARLIER_FILTERS_KEPT + 3).assets).toEqual([`C${EARLIER_FILTERS_KEPT + 3}`]);
  });

  it('counts its digests from an edit that adds scan_digest or changes the cadence, not from one of the markets', () => {
    const digest = { timeframe: '1h', exchange: 'BINANCE', topN: 3 };
    const update = (position: number, recordedAt: string, data: Record<string, unknown>) =>
      ({
        type: 'SubscriptionUpdated',
        position,
        recordedAt,
        data: { subscriptionId: 's-1', url: 'https://hooks.example.com/a', ...data },
      }) as unknown as DomainEvent;
    let state = applySubscriptionEvent(initialSubscriptions(), created);
    expect(state.subs['s-1']).toMatchObject({ digestSince: at, digestSincePosition: 10 });
    const since = (position: number, recordedAt: string, data: Record<string, unknown>) => {
      state = applySubscriptionEvent(state, update(position, recordedAt, data));
      const { digestSince, digestSincePosition } = state.subs['s-1']!;
      return { digestSince, digestSincePosition };
    };
    const t = (hour: number) => `2031-06-10T${hour}:30:00.000Z`;
    expect(since(20, t(13), { events: ['scan_digest'], ...digest, cadence: '1d' })).toEqual({
      digestSince: t(13),
      digestSincePosition: 20,
    });
    // Other markets, the same periods: the period it falls in was due already.
    expect(since(30, t(14), { events: ['scan_digest'], ...digest, topN: 5, cadence: '1d' })).toEqual({
      digestSince: t(13),
      digestSincePosition: 20,
    });
    expect(since(40, t(15), { events: ['scan_digest'], ...digest, topN: 5, cadence: '1h' })).toEqual({
      digestSince: t(15),
      digestSincePosition: 40,
    });
    // Dropped and taken again: a new series.
    since(50, t(16), { events: ['trade_call'] });
    expect(since(60, t(17), { events: ['scan_digest'], ...digest, cadence: '1h' })).toEqual({
      digestSince: t(17),
      digestSincePosition: 60,
    });
  });
});
