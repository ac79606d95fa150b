import { parseDomainEvent } from '../../contracts/events.ts';
import type { Projection } from '../../projections/projection.ts';
import {
  applyDeliveryEvent,
  DELIVERY_LOG_LIMIT,
  type DeliveryLogState,
  initialDeliveryLog,
} from './delivery-log-fold.ts';
import { applySubscriptionEvent, initialSubscriptions, type SubscriptionState } from './subscription-fold.ts';

/**
 * The webhook state: subscriptions (the only record of who subscribed to what) and the delivery
 * log (attempts, pending retries). One runner folds both, so a delivery and its subscription are
 * always seen at the same log position.
 */
export interface WebhookState {
  subscriptions: SubscriptionState;
  log: DeliveryLogState;
}

/** The projection keeping `retention` deliveries per subscription in memory. */
export function webhookProjectionWith(retention: number): Projection<WebhookState> {
  return {
    name: 'webhooks',
    version: 1,
    initial: () => ({ subscriptions: initialSubscriptions(), log: initialDeliveryLog() }),
    evolve(state, event) {
      if (!event.type.startsWith('Subscription') && !event.type.startsWith('Delivery')) return state;
      const parsed = parseDomainEvent(event);
      if (parsed === null) return state;
      state.subscriptions = applySubscriptionEvent(state.subscriptions, parsed);
      state.log = applyDeliveryEvent(state.log, parsed, retention);
      return state;
    },
  };
}

export const webhookProjection: Projection<WebhookState> = webhookProjectionWith(DELIVERY_LOG_LIMIT);
