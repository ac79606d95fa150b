import { describe, expect, it } from 'vitest';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { ERRORS } from '../../contracts/errors.ts';
import { deciderSpec } from '../../test/decider-spec.ts';
import {
  SubscriptionChangedError,
  type SubscriptionEvent,
  SubscriptionLimitError,
  SubscriptionNotFoundError,
  subscriptionDecider,
} from './subscription-decider.ts';

const secret = { keyVersion: 'v1', iv: 'iv', tag: 'tag', ciphertext: 'ct' };
const created = (id: string): Extract<SubscriptionEvent, { type: 'SubscriptionCreated' }> => ({
  type: 'SubscriptionCreated',
  data: {
    subscriptionId: id,
    keyId: 'key_a',
    url: 'https://hooks.example.com/a',
    events: ['trade_call'],
    eventVersion: 1,
    secret,
  },
});
const disabled = (id: string, generation = 0): SubscriptionEvent => ({
  type: 'SubscriptionDisabled',
  data: { subscriptionId: id, reason: 'the receiver answered 410 Gone', consecutiveFailures: 2 },
  id: deterministicId('webhook-disabled', id, generation),
});
const reEnabled = (id: string): SubscriptionEvent => ({
  type: 'SubscriptionReEnabled',
  data: { subscriptionId: id },
});

const spec = deciderSpec(subscriptionDecider);
const notFound = (err: Error) => err instanceof SubscriptionNotFoundError;

describe('subscription decider', () => {
  it('creates a subscription while the key is under its cap', () => {
    spec
      .given([created('wh_1')])
      .when({ kind: 'create', data: created('wh_2').data, maxPerKey: 2 })
      .thenEmits([created('wh_2')]);
    spec
      .given([created('wh_1'), created('wh_2')])
      .when({ kind: 'create', data: created('wh_3').data, maxPerKey: 2 })
      .thenThrows((err) => err instanceof SubscriptionLimitError);
  });

  it('frees a slot of the cap when a subscription is deleted', () => {
    spec
      .given([
        created('wh_1'),
        created('wh_2'),
        { type: 'SubscriptionDeleted', data: { subscriptionId: 'wh_1', keyId: 'key_a' } },
      ])
      .when({ kind: 'create', data: created('wh_3').data, maxPerKey: 2 })
      .thenEmits([created('wh_3')]);
  });

  it('deletes, re-enables and rotates only a subscription of this key', () => {
    spec
      .given([created('wh_1')])
      .when({ kind: 'delete', keyId: 'key_a', subscriptionId: 'wh_1' })
      .thenEmits([{ type: 'SubscriptionDeleted', data: { subscriptionId: 'wh_1', keyId: 'key_a' } }]);
    spec
      .given([created('wh_1')])
      .when({ kind: 'delete', keyId: 'key_a', subscriptionId: 'wh_9' })
      .thenThrows(notFound);
    spec
      .given([created('wh_1'), disabled('wh_1')])
      .when({ kind: 'reEnable', subscriptionId: 'wh_1', recoverSince: '2026-01-01T00:00:00.000Z' })
      .thenEmits([
        {
          type: 'SubscriptionReEnabled',
          data: { subscriptionId: 'wh_1', recoverSince: '2026-01-01T00:00:00.000Z' },
        },
      ]);
    spec.given([]).when({ kind: 'reEnable', subscriptionId: 'wh_1' }).thenThrows(notFound);
    const rotated = { subscriptionId: 'wh_1', secret, previousValidUntil: '2026-01-02T00:00:00.000Z' };
    spec
      .given([created('wh_1')])
      .when({ kind: 'rotate', data: rotated, expected: secret })
      .thenEmits([{ type: 'SubscriptionSecretRotated', data: rotated }]);
    spec.given([]).when({ kind: 'rotate', data: rotated, expected: secret }).thenThrows(notFound);
  });

  it('refuses a rotation decided after another one it did not read: one new secret, never a lost one', () => {
    const first = {
      subscriptionId: 'wh_1',
      secret: { keyVersion: 'v1', iv: 'iv2', tag: 'tag2', ciphertext: 'ct2' },
      previousValidUntil: '2026-01-02T00:00:00.000Z',
    };
    const second = { ...first, secret: { keyVersion: 'v1', iv: 'iv3', tag: 'tag3', ciphertext: 'ct3' } };
    // Both read the created secret; the first is recorded, the second is refused.
    spec
      .given([created('wh_1'), { type: 'SubscriptionSecretRotated', data: first }])
      .when({ kind: 'rotate', data: second, expected: secret })
      .thenThrows(
        (err) => err instanceof SubscriptionChangedError && err.code === 'SECRET_ROTATION_CONFLICT',
      );
    // Not retryable on the wire: a client retrying on its own would end the other caller's secret.
    expect(ERRORS.SECRET_ROTATION_CONFLICT.retryable).toBe(false);
    // One that read the first rotation's secret rotates.
    spec
      .given([created('wh_1'), { type: 'SubscriptionSecretRotated', data: first }])
      .when({ kind: 'rotate', data: second, expected: first.secret })
      .thenEmits([{ type: 'SubscriptionSecretRotated', data: second }]);
  });

  it('re-seals only the secrets it read, once', () => {
    const resealed = {
      subscriptionId: 'wh_1',
      secret: { keyVersion: 'v2', iv: 'iv2', tag: 'tag2', ciphertext: 'ct2' },
    };
    const command = {
      kind: 'reseal',
      data: resealed,
      expected: { secret, previousSecret: null },
    } as const;
    spec
      .given([created('wh_1')])
      .when(command)
      .thenEmits([{ type: 'SubscriptionSecretResealed', data: resealed }]);
    // Run again (a second run, or one restarted after it appended): nothing.
    spec
      .given([created('wh_1'), { type: 'SubscriptionSecretResealed', data: resealed }])
      .when(command)
      .thenNothing();
    // Rotated after it was read: the rotation's new secret stays.
    const rotated = {
      subscriptionId: 'wh_1',
      secret: resealed.secret,
      previousValidUntil: '2026-01-02T00:00:00.000Z',
    };
    spec
      .given([created('wh_1'), { type: 'SubscriptionSecretRotated', data: rotated }])
      .when(command)
      .thenNothing();
    // Deleted meanwhile: nothing, not an error.
    spec.given([]).when(command).thenNothing();
  });

  it('disables an active subscription once per enabled period', () => {
    const command = {
      kind: 'disable',
      subscriptionId: 'wh_1',
      reason: 'the receiver answered 410 Gone',
      consecutiveFailures: 2,
    } as const;
    spec
      .given([created('wh_1')])
      .when(command)
      .thenEmits([disabled('wh_1', 0)]);
    spec
      .given([created('wh_1'), disabled('wh_1')])
      .when(command)
      .thenNothing();
    spec
      .given([created('wh_1'), disabled('wh_1'), reEnabled('wh_1')])
      .when(command)
      .thenEmits([disabled('wh_1', 1)]);
    spec.given([]).when(command).thenNothing();
  });

  it('changes the settings of a subscription of this key, and records nothing for no change', () => {
    const updated = {
      type: 'SubscriptionUpdated',
      data: {
        subscriptionId: 'wh_1',
        url: 'https://hooks.example.com/b',
        events: ['trade_call'],
        assets: ['ETH'],
      },
    } as const satisfies SubscriptionEvent;
    const asCreated = {
      subscriptionId: 'wh_1',
      url: 'https://hooks.example.com/a',
      events: ['trade_call' as const],
    };
    const update = { kind: 'update', data: updated.data, expected: asCreated } as const;
    spec
      .given([created('wh_1')])
      .when(update)
      .thenEmits([updated]);
    spec.given([]).when(update).thenThrows(notFound);
    // Made from a read older than the change recorded since: not overwritten (409, retryable).
    spec
      .given([created('wh_1'), updated])
      .when({ ...update, data: { ...updated.data, url: 'https://hooks.example.com/c' } })
      .thenThrows((err) => err instanceof SubscriptionChangedError && err.code === 'CONFLICT');
    // The settings it holds already: nothing to record.
    spec
      .given([created('wh_1'), updated])
      .when({ ...update, expected: updated.data })
      .thenNothing();
    spec
      .given([created('wh_1')])
      .when({ ...update, data: { ...asCreated, events: ['trade_call'] } })
      .thenNothing();
  });

  it('an update replaces the settings whole (a filter it does not carry is removed) and keeps the rest', () => {
    const state = [
      created('wh_1'),
      {
        type: 'SubscriptionUpdated',
        data: {
          subscriptionId: 'wh_1',
          url: 'https://hooks.example.com/b',
          events: ['regime_shift'],
          assets: ['ETH'],
        },
      },
      {
        type: 'SubscriptionUpdated',
        data: {
          subscriptionId: 'wh_1',
          url: 'https://hooks.example.com/c',
          events: ['trade_call'],
          minConfidence: 70,
        },
      },
    ].reduce(
      (s, e) => subscriptionDecider.evolve(s, e as SubscriptionEvent),
      subscriptionDecider.initialState(),
    );
    const sub = state.subs.wh_1!;
    expect(sub).toMatchObject({
      url: 'https://hooks.example.com/c',
      events: ['trade_call'],
      minConfidence: 70,
    });
    expect(sub.assets).toBeUndefined();
    expect(sub).toMatchObject({ keyId: 'key_a', secret, eventVersion: 1, status: 'active' });
  });

  it('folds the shared subscription fold, so the cap counts disabled subscriptions too', () => {
    const state = [created('wh_1'), disabled('wh_1')].reduce(
      (s, e) => subscriptionDecider.evolve(s, e),
      subscriptionDecider.initialState(),
    );
    expect(state.subs.wh_1?.status).toBe('disabled');
  });
});
