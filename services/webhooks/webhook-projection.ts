import type { DomainEvent } from '../../contracts/events.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import {
  applyDeliveryEvent,
  DELIVERY_LOG_LIMIT,
  type DeliveryLogState,
  findDelivery,
  initialDeliveryLog,
} from './delivery-log-fold.ts';
import {
  applySubscriptionEvent,
  findSubscription,
  initialSubscriptions,
  SUBSCRIPTION_EVENT_TYPES,
  type SubscriptionState,
} from './subscription-fold.ts';

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
  return defineProjection({
    name: 'webhooks',
    // 2: held attempts no longer start a subscription's failingSince; snapshots folded before
    // would keep one the fold no longer makes. 3: subscriptions keep their creation position.
    // 4: a key's revocation disables its subscriptions (and the state keeps revoked keys).
    // 5: a delivery held for its disabled subscription is not counted a failed delivery.
    // 6: a delivery held for its subscription's disable is never evicted (the retry scan sends it
    // after a re-enable, from this log only); a snapshot folded before may have dropped one.
    // 7: an edited subscription keeps the filters of its earlier settings (earlierFilters), which a
    // snapshot folded before lacks. 8: a subscription keeps since when it takes digests on its
    // cadence (digestSince, set by a create and by an edit that adds scan_digest or changes the
    // cadence), which a snapshot folded before lacks. 9: a subscription keeps its failed
    // deliveries in a row at the first 410 Gone (failedDeliveriesAtGone) and since when a
    // re-enable made it active again (enabledSince), which a snapshot folded before lacks.
    // 10: failingSince is when the failed attempt was made (failingFromAttempt), not when its
    // failure was recorded. 11: an enable of an active subscription keeps its failing_since and
    // failed deliveries in a row (only a disabled one's re-enable starts them over). 12: the
    // failed deliveries in a row are distinct deliveries (failedDeliveryIds): a resend or a
    // recovery failing a delivery already counted does not count it again, as a snapshot
    // folded before did.
    version: 12,
    eventTypes: [
      ...SUBSCRIPTION_EVENT_TYPES,
      'DeliveryAttempted',
      'DeliveryQueued',
      'DeliverySequenced',
      'DeliverySucceeded',
      'DeliveryFailed',
    ],
    initial: (): WebhookState => ({ subscriptions: initialSubscriptions(), log: initialDeliveryLog() }),
    evolve(state, event) {
      const wasFailing =
        event.type === 'DeliveryFailed'
          ? findSubscription(state.subscriptions, event.data.subscriptionId)?.failingSince != null
          : true;
      state.subscriptions = applySubscriptionEvent(state.subscriptions, event);
      if (!wasFailing) failingFromAttempt(state, event);
      state.log = applyDeliveryEvent(state.log, event, retention);
      return state;
    },
  });
}

/**
 * A failure that starts a subscription's `failing_since` dates it from its attempt (the
 * `attempted_at` the delivery log shows: its claim or queue record), not from its outcome's
 * recording, a request's length or more later. A re-enable with `recover_since` the
 * `failing_since` the list showed reads the log from that record on, and so re-sends the
 * delivery that failed then (the recovery passes over whatever was recorded before its T).
 */
function failingFromAttempt(state: WebhookState, event: DomainEvent): void {
  if (event.type !== 'DeliveryFailed') return;
  const sub = findSubscription(state.subscriptions, event.data.subscriptionId);
  if (sub?.failingSince !== event.recordedAt) return;
  const record = findDelivery(state.log, event.data.deliveryId);
  const attempt = record?.attempts.find((a) => a.attempt === event.data.attempt);
  if (attempt && Date.parse(attempt.attemptedAt) < Date.parse(sub.failingSince)) {
    sub.failingSince = attempt.attemptedAt;
  }
}

export const webhookProjection: Projection<WebhookState> = webhookProjectionWith(DELIVERY_LOG_LIMIT);
