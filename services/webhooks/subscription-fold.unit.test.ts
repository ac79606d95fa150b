import { describe, expect, it } from 'vitest';
import type { DomainEvent } from '../../contracts/events.ts';
import {
  applySubscriptionEvent,
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
});

describe('the subscription fold of delivery outcomes', () => {
  it('a held attempt (never sent) does not start the disable clock; a failed one does', () => {
    const afterHeld = applySubscriptionEvent(state(), failed(true));
    expect(afterHeld.subs['s-1']).toMatchObject({ failingSince: null, failedDeliveries: 0 });
    const afterFailed = applySubscriptionEvent(state(), failed(false));
    expect(afterFailed.subs['s-1']).toMatchObject({ failingSince: at, failedDeliveries: 0 });
  });
});
