import type { z } from 'zod';
import { MAX_DISABLE_AFTER_FAILED_DELIVERIES } from '../../contracts/config.ts';
import type { DomainEvent, EncryptedSecret } from '../../contracts/events.ts';
import type { WebhookView } from '../../contracts/webhooks.ts';
import { classifyFailure } from './retry-policy.ts';
import { EVENT_FILTERS, type EventFilter, heldFilters, wireFiltersOf } from './subscription-filters.ts';

type CreatedData = Extract<DomainEvent, { type: 'SubscriptionCreated' }>['data'];

export interface SubscriptionRecord extends Omit<CreatedData, 'secret' | 'subscriptionId'> {
  id: string;
  secret: z.infer<typeof EncryptedSecret>;
  status: 'active' | 'disabled';
  createdAt: string;
  /**
   * The log position of its SubscriptionCreated: it takes only events recorded after it (a lagging
   * dispatcher must not hand a new subscription what was recorded before it existed).
   */
  createdPosition: number;
  /**
   * Since when (recording time and log position) it takes digests on its present cadence: its
   * creation, or the edit that added scan_digest or changed the cadence. Its first digest is
   * the one of the next period boundary after it, whether it subscribed by a create or an edit.
   */
  digestSince: string;
  digestSincePosition: number;
  disabledAt: string | null;
  disabledReason: string | null;
  /** Re-enables so far: makes each disable a distinct, idempotent fact. */
  generation: number;
  /**
   * Since when (recording time and log position) it is active again after its latest disable;
   * absent while it was never re-enabled. The digest periods it spent disabled were not due, so
   * they are not counted as skipped (skippedPeriods).
   */
  enabledSince?: string;
  enabledSincePosition?: number;
  /**
   * Distinct deliveries in a row that failed every attempt since the last success (or a disabled
   * subscription's re-enable): a delivery re-sent (a resend, a recovery) that fails again is
   * counted once in the run.
   */
  failedDeliveries: number;
  /**
   * The ids of the deliveries `failedDeliveries` counts (absent while it is 0). The count rule
   * disables an active subscription when it reaches WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES, so
   * the list holds about that many ids (and the deliveries in flight beside them), and never more
   * than MAX_DISABLE_AFTER_FAILED_DELIVERIES, the highest threshold the setting takes: the count
   * stops there, having reached every threshold, however long a disabled subscription's deliveries
   * in flight go on failing.
   */
  failedDeliveryIds?: string[];
  /**
   * `failedDeliveries` as the first 410 Gone since the last success (or re-enable) left it, that
   * one counted: what its disable records. Deliveries in flight beside it, failing after it in
   * the log before the disable is written, are not in it. Absent while no 410 was folded.
   */
  failedDeliveriesAtGone?: number;
  /** First failed attempt since the last success (null while healthy). */
  failingSince: string | null;
  lastSuccessAt: string | null;
  /** The secret before the last rotation, still signing until `previousSecretValidUntil`. */
  previousSecret: z.infer<typeof EncryptedSecret> | null;
  previousSecretValidUntil: string | null;
  /**
   * The filters it had before its latest edits (PATCH), oldest first, each with the log position
   * of the edit that replaced them: an event recorded before an edit is matched with the filters
   * of its time, however far behind the dispatcher is. The latest EARLIER_FILTERS_KEPT only.
   */
  earlierFilters?: { until: number; filters: MatchFilters }[];
}

/** What matching reads of a subscription besides its status and creation position. */
export type MatchFilters = Pick<SubscriptionRecord, 'events' | (typeof MATCH_FILTERS)[number]>;

/** The filters matching reads (the rest choose a digest's markets and cadence). */
const MATCH_FILTERS = ['timeframes', 'assets', 'minConfidence'] as const satisfies readonly EventFilter[];

/**
 * Edits whose earlier filters are kept. A dispatcher more edits behind than this matches the
 * events before them with the oldest filters kept; the bound keeps a subscription's record small
 * however often it is edited.
 */
export const EARLIER_FILTERS_KEPT = 16;

/** The filters a subscription matched events with at log position `position`. */
export function filtersAt(sub: SubscriptionRecord, position: number): MatchFilters {
  for (const earlier of sub.earlierFilters ?? []) if (position < earlier.until) return earlier.filters;
  return sub;
}

export interface SubscriptionState {
  subs: Record<string, SubscriptionRecord>;
  /**
   * Revoked keys, with their revocation time: a revocation is final, so a subscription of such a
   * key is disabled whatever comes after (a create that raced the revocation, a re-enable).
   */
  revokedKeys: Record<string, string>;
}

/**
 * The error of an attempt held because its subscription was disabled before its turn: not retried
 * on the schedule, not a failed delivery; any re-enable sends it (the dispatcher's retry scan).
 */
export const SUBSCRIPTION_DISABLED = 'subscription disabled';

/** The `disabled_reason` of a subscription whose key was revoked. */
export const KEY_REVOKED = 'key_revoked';

/** The `disabled_reason` of a subscription its subscriber paused (POST /api/webhooks/:id/disable). */
export const DISABLED_BY_SUBSCRIBER = 'disabled_by_subscriber';

export function subscriptionStream(keyId: string): string {
  return `webhooks-${keyId}`;
}

export const initialSubscriptions = (): SubscriptionState => ({ subs: {}, revokedKeys: {} });

/** The event types applySubscriptionEvent reads: every projection folding it subscribes to these. */
export const SUBSCRIPTION_EVENT_TYPES = [
  'SubscriptionCreated',
  'SubscriptionDeleted',
  'SubscriptionDisabled',
  'SubscriptionReEnabled',
  'SubscriptionSecretRotated',
  'SubscriptionSecretResealed',
  'SubscriptionUpdated',
  'ApiKeyRevoked',
] as const;

export function findSubscription(state: SubscriptionState, id: string): SubscriptionRecord | undefined {
  return Object.hasOwn(state.subs, id) ? state.subs[id] : undefined;
}

export function subscriptionsOfKey(state: SubscriptionState, keyId: string): SubscriptionRecord[] {
  return Object.values(state.subs)
    .filter((s) => s.keyId === keyId)
    .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.id.localeCompare(b.id));
}

/**
 * Subscriptions live and deleted (deleted ones are dropped from the state altogether), folded over
 * an already validated event: the webhook projection validates once for both folds.
 */
export function applySubscriptionEvent(state: SubscriptionState, event: DomainEvent): SubscriptionState {
  switch (event.type) {
    case 'SubscriptionCreated': {
      const { subscriptionId, secret, ...rest } = event.data;
      state.subs[subscriptionId] = {
        ...rest,
        id: subscriptionId,
        secret,
        status: 'active',
        createdAt: event.recordedAt,
        createdPosition: event.position,
        digestSince: event.recordedAt,
        digestSincePosition: event.position,
        disabledAt: null,
        disabledReason: null,
        generation: 0,
        failedDeliveries: 0,
        failingSince: null,
        lastSuccessAt: null,
        previousSecret: null,
        previousSecretValidUntil: null,
      };
      // Created by a request authorised just before its key's revocation was recorded.
      const revokedAt = revokedAtOf(state, rest.keyId);
      if (revokedAt !== undefined) disableForRevokedKey(state.subs[subscriptionId]!, revokedAt);
      break;
    }
    case 'ApiKeyRevoked': {
      // The key's subscriptions stop receiving: here, in the fold every dispatcher and the api
      // share, so they all agree at the same log position and a restart folds it again. Nothing is
      // appended for it (no SubscriptionDisabled, hence no `subscription_disabled` notice): the
      // notice goes only to the same key's other subscriptions, which are disabled by the same
      // revocation, and a revoked customer is not someone the service still writes to. What was
      // pending stays pending and is never retried (the dispatcher retries only active ones).
      state.revokedKeys[event.data.keyId] = event.recordedAt;
      for (const sub of Object.values(state.subs)) {
        if (sub.keyId === event.data.keyId) disableForRevokedKey(sub, event.recordedAt);
      }
      break;
    }
    case 'SubscriptionDeleted':
      delete state.subs[event.data.subscriptionId];
      break;
    case 'SubscriptionDisabled': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub && sub.status === 'active') {
        sub.status = 'disabled';
        sub.disabledAt = event.recordedAt;
        sub.disabledReason = event.data.reason;
      }
      break;
    }
    case 'SubscriptionSecretRotated': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub) {
        sub.previousSecret = sub.secret;
        sub.previousSecretValidUntil = event.data.previousValidUntil;
        sub.secret = event.data.secret;
      }
      break;
    }
    case 'SubscriptionSecretResealed': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub) {
        sub.secret = event.data.secret;
        if (event.data.previousSecret) sub.previousSecret = event.data.previousSecret;
      }
      break;
    }
    case 'SubscriptionUpdated': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub) {
        // Id, key, secret, status, creation position (what it takes from) and the delivery
        // counters stay: only what it takes and where it sends change.
        const { subscriptionId: _id, ...settings } = event.data;
        const filters = { events: sub.events, ...heldFilters(pick(sub, MATCH_FILTERS)) } as MatchFilters;
        sub.earlierFilters = [...(sub.earlierFilters ?? []), { until: event.position, filters }].slice(
          -EARLIER_FILTERS_KEPT,
        );
        // An edit that adds scan_digest or changes the cadence starts a new series of periods, so
        // its first digest waits for the next boundary as a create's does (none at once for the
        // period the edit falls in). One that changes only the markets (exchange, timeframe,
        // top_n, min_confidence) keeps the series: the period it falls in was already due.
        const digestStarts =
          settings.events.includes('scan_digest') &&
          (!sub.events.includes('scan_digest') || settings.cadence !== sub.cadence);
        for (const field of EVENT_FILTERS) delete sub[field];
        Object.assign(sub, settings);
        if (digestStarts) {
          sub.digestSince = event.recordedAt;
          sub.digestSincePosition = event.position;
        }
      }
      break;
    }
    case 'SubscriptionReEnabled': {
      const sub = findSubscription(state, event.data.subscriptionId);
      // A revoked key's subscription is not re-enabled by anything (its key cannot ask, and an
      // enable that raced the revocation must not revive it).
      if (sub && revokedAtOf(state, sub.keyId) === undefined) {
        if (sub.status === 'disabled') {
          sub.generation++;
          sub.enabledSince = event.recordedAt;
          sub.enabledSincePosition = event.position;
          // A disabled subscription starts its counts over: what failed before the disable does
          // not disable it again at once. An enable of an active one (a recover_since) re-sends
          // what failed and keeps its failing run: nothing has succeeded, so `failing_since`
          // stays, and so do the disable rules' counts (calling enable does not put them off).
          endFailingRun(sub);
        }
        sub.status = 'active';
        sub.disabledAt = null;
        sub.disabledReason = null;
      }
      break;
    }
    case 'DeliverySucceeded': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub) {
        endFailingRun(sub);
        sub.lastSuccessAt = event.recordedAt;
      }
      break;
    }
    case 'DeliveryFailed': {
      const sub = findSubscription(state, event.data.subscriptionId);
      if (sub) {
        // A held attempt was not sent (an open breaker, whose timeouts already started the clock,
        // a stopping dispatcher, or a subscription disabled before its turn): it says nothing of
        // the endpoint.
        if (!event.data.held) sub.failingSince ??= event.recordedAt;
        // One held for its disabled subscription is not a failed delivery: a re-enable sends it.
        // A delivery already counted in this run (re-sent by a resend or a recovery, failing
        // again) is not counted a second time: the rule is of deliveries, not of attempts.
        if (event.data.nextAttemptAt === null && event.data.error !== SUBSCRIPTION_DISABLED) {
          const counted = sub.failedDeliveryIds ?? [];
          if (
            counted.length < MAX_DISABLE_AFTER_FAILED_DELIVERIES &&
            !counted.includes(event.data.deliveryId)
          ) {
            sub.failedDeliveryIds = [...counted, event.data.deliveryId];
            sub.failedDeliveries++;
          }
          if (!event.data.held && classifyFailure(event.data.status) === 'gone') {
            sub.failedDeliveriesAtGone ??= sub.failedDeliveries;
          }
        }
      }
      break;
    }
  }
  return state;
}

/** A success, or a disabled subscription's re-enable: its failing run and counts start over. */
function endFailingRun(sub: SubscriptionRecord): void {
  sub.failedDeliveries = 0;
  delete sub.failedDeliveryIds;
  delete sub.failedDeliveriesAtGone;
  sub.failingSince = null;
}

function revokedAtOf(state: SubscriptionState, keyId: string): string | undefined {
  return Object.hasOwn(state.revokedKeys, keyId) ? state.revokedKeys[keyId] : undefined;
}

function disableForRevokedKey(sub: SubscriptionRecord, revokedAt: string): void {
  if (sub.status === 'disabled' && sub.disabledReason === KEY_REVOKED) return;
  // One already disabled by its endpoint now shows the key's reason, which no re-enable undoes.
  sub.status = 'disabled';
  sub.disabledAt = revokedAt;
  sub.disabledReason = KEY_REVOKED;
}

export function toView(sub: SubscriptionRecord): WebhookView {
  return {
    id: sub.id,
    url: sub.url,
    events: sub.events,
    ...wireFiltersOf(sub),
    status: sub.status,
    event_version: sub.eventVersion ?? 1,
    created_at: sub.createdAt,
    disabled_at: sub.disabledAt,
    disabled_reason: sub.disabledReason,
    last_success_at: sub.lastSuccessAt,
    failing_since: sub.failingSince,
  };
}

function pick<T extends object, K extends keyof T>(from: T, keys: readonly K[]): Partial<Pick<T, K>> {
  const out: Partial<Pick<T, K>> = {};
  for (const key of keys) out[key] = from[key];
  return out;
}
