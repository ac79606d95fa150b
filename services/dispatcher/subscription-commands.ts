import { randomBytes } from 'node:crypto';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { newEvent } from '../../contracts/events.ts';
import { CURRENT_EVENT_VERSION } from '../../contracts/webhook-schemas.ts';
import type { CreateWebhookRequest } from '../../contracts/webhooks.ts';
import { foldEvents } from '../../projections/projection.ts';
import { generateWebhookSecret, type SecretBox } from './secret-box.ts';
import {
  evolveSubscriptions,
  findSubscription,
  initialSubscriptions,
  type SubscriptionState,
  subscriptionStream,
} from './subscription-fold.ts';

export class SubscriptionLimitError extends Error {
  override readonly name = 'SubscriptionLimitError';
}
export class SubscriptionNotFoundError extends Error {
  override readonly name = 'SubscriptionNotFoundError';
}

/**
 * Subscription commands. A key's subscriptions share one stream, `webhooks-<keyId>`, and every
 * command appends against the revision it read: the per-key cap holds even when two replicas
 * create at once (one append fails and is retried against the new state).
 */
async function loadKeyStream(
  store: EventStore,
  keyId: string,
): Promise<{ state: SubscriptionState; revision: number | null }> {
  const events = await store.readStream(subscriptionStream(keyId));
  const state = foldEvents(
    { name: 'key-subs', version: 1, initial: initialSubscriptions, evolve: evolveSubscriptions },
    events,
  );
  return { state, revision: events.at(-1)?.revision ?? null };
}

export async function createSubscription(
  store: EventStore,
  input: { keyId: string; request: CreateWebhookRequest; url: string; secrets: SecretBox; maxPerKey: number },
): Promise<{ subscriptionId: string; secret: string; position: number }> {
  const { state, revision } = await loadKeyStream(store, input.keyId);
  if (Object.keys(state.subs).length >= input.maxPerKey) {
    throw new SubscriptionLimitError(
      `this key already has ${input.maxPerKey} webhook subscriptions (the limit)`,
    );
  }
  const subscriptionId = `wh_${randomBytes(12).toString('base64url')}`;
  const secret = generateWebhookSecret();
  const r = input.request;
  const event = newEvent('SubscriptionCreated', {
    subscriptionId,
    keyId: input.keyId,
    url: input.url,
    events: r.events,
    ...(r.timeframes ? { timeframes: r.timeframes } : {}),
    ...(r.assets ? { assets: r.assets } : {}),
    ...(r.min_confidence !== undefined ? { minConfidence: r.min_confidence } : {}),
    ...(r.timeframe ? { timeframe: r.timeframe } : {}),
    ...(r.exchange ? { exchange: r.exchange } : {}),
    ...(r.top_n !== undefined ? { topN: r.top_n } : {}),
    ...(r.cadence ? { cadence: r.cadence } : {}),
    eventVersion: r.event_version ?? CURRENT_EVENT_VERSION,
    secret: input.secrets.seal(secret, subscriptionId),
  });
  const { position } = await store.append(subscriptionStream(input.keyId), [event], {
    expectedRevision: revision ?? 'no_stream',
  });
  return { subscriptionId, secret, position };
}

async function existing(store: EventStore, keyId: string, subscriptionId: string) {
  const { state, revision } = await loadKeyStream(store, keyId);
  const sub = findSubscription(state, subscriptionId);
  // Another key's subscription is indistinguishable from a missing one (404, never 403).
  if (!sub) throw new SubscriptionNotFoundError(`no webhook subscription ${subscriptionId}`);
  return { sub, revision: revision! };
}

export async function deleteSubscription(
  store: EventStore,
  keyId: string,
  subscriptionId: string,
): Promise<number> {
  const { revision } = await existing(store, keyId, subscriptionId);
  const { position } = await store.append(
    subscriptionStream(keyId),
    [newEvent('SubscriptionDeleted', { subscriptionId, keyId })],
    { expectedRevision: revision },
  );
  return position;
}

export async function reEnableSubscription(
  store: EventStore,
  keyId: string,
  subscriptionId: string,
  recoverSince?: string,
): Promise<number> {
  const { revision } = await existing(store, keyId, subscriptionId);
  const { position } = await store.append(
    subscriptionStream(keyId),
    [newEvent('SubscriptionReEnabled', { subscriptionId, ...(recoverSince ? { recoverSince } : {}) })],
    { expectedRevision: revision },
  );
  return position;
}

/**
 * A new secret for the subscription; the previous one keeps signing for `overlapMs` beside it.
 * The new secret is returned once, like at creation.
 */
export async function rotateSecret(
  store: EventStore,
  input: { keyId: string; subscriptionId: string; secrets: SecretBox; overlapMs: number; now?: number },
): Promise<{ secret: string; previousValidUntil: string; position: number }> {
  const { revision } = await existing(store, input.keyId, input.subscriptionId);
  const secret = generateWebhookSecret();
  const previousValidUntil = new Date((input.now ?? Date.now()) + input.overlapMs).toISOString();
  const { position } = await store.append(
    subscriptionStream(input.keyId),
    [
      newEvent('SubscriptionSecretRotated', {
        subscriptionId: input.subscriptionId,
        secret: input.secrets.seal(secret, input.subscriptionId),
        previousValidUntil,
      }),
    ],
    { expectedRevision: revision },
  );
  return { secret, previousValidUntil, position };
}
