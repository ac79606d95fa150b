import { randomBytes } from 'node:crypto';
import { handleCommand } from '../../adapters/event-store/command.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { EventData } from '../../contracts/events.ts';
import { CURRENT_EVENT_VERSION } from '../../contracts/webhook-schemas.ts';
import type { CreateWebhookRequest } from '../../contracts/webhooks.ts';
import { generateWebhookSecret, type SecretBox } from './secret-box.ts';
import {
  SubscriptionChangedError,
  type SubscriptionCommand,
  SubscriptionLimitError,
  SubscriptionNotFoundError,
  subscriptionDecider,
} from './subscription-decider.ts';
import { eventFiltersOf, type WireFilter } from './subscription-filters.ts';
import { DISABLED_BY_SUBSCRIBER, type SubscriptionRecord, subscriptionStream } from './subscription-fold.ts';

export { SubscriptionChangedError, SubscriptionLimitError, SubscriptionNotFoundError };

/**
 * Subscription commands. A key's subscriptions share one stream, `webhooks-<keyId>`, and every
 * command appends against the revision it read: the per-key cap holds even when two replicas
 * create at once (one append fails and is retried against the new state).
 */
const COMMAND_RETRIES = 3;

async function execute(store: EventStore, keyId: string, command: SubscriptionCommand): Promise<number> {
  // A command that lost the race is decided again on the newer stream (the cap checked afresh,
  // a subscription deleted meanwhile not found); a loss past the retries answers 409, not 500.
  const { position } = await handleCommand(store, subscriptionStream(keyId), subscriptionDecider, command, {
    retry: COMMAND_RETRIES,
  });
  // These commands decide one event or throw, so something was written.
  return position as number;
}

/** A request's filters (its wire names) as the subscription events record them; absent stays absent. */
export function filtersOf(
  r: Pick<CreateWebhookRequest, 'events' | WireFilter>,
): Omit<EventData<'SubscriptionUpdated'>, 'subscriptionId' | 'url'> {
  return { events: r.events, ...eventFiltersOf(r) };
}

export async function createSubscription(
  store: EventStore,
  input: { keyId: string; request: CreateWebhookRequest; url: string; secrets: SecretBox; maxPerKey: number },
): Promise<{ subscriptionId: string; secret: string; position: number }> {
  const subscriptionId = `wh_${randomBytes(12).toString('base64url')}`;
  const secret = generateWebhookSecret();
  const r = input.request;
  const position = await execute(store, input.keyId, {
    kind: 'create',
    maxPerKey: input.maxPerKey,
    data: {
      subscriptionId,
      keyId: input.keyId,
      url: input.url,
      ...filtersOf(r),
      eventVersion: r.event_version ?? CURRENT_EVENT_VERSION,
      secret: input.secrets.seal(secret, subscriptionId),
    },
  });
  return { subscriptionId, secret, position };
}

export async function deleteSubscription(
  store: EventStore,
  keyId: string,
  subscriptionId: string,
): Promise<number> {
  return execute(store, keyId, { kind: 'delete', keyId, subscriptionId });
}

export async function reEnableSubscription(
  store: EventStore,
  keyId: string,
  subscriptionId: string,
  recoverSince?: string,
): Promise<number> {
  return execute(store, keyId, {
    kind: 'reEnable',
    subscriptionId,
    ...(recoverSince ? { recoverSince } : {}),
  });
}

/**
 * A new secret for the subscription; the previous one keeps signing for `overlapMs` beside it.
 * The new secret is returned once, like at creation. `expected` is the sealed secret read as
 * current: when another rotation was recorded since, nothing is written (SecretRotatedError);
 * when other changes of the key's subscriptions win its append past the retries, nothing is
 * written either (SECRET_ROTATION_RACED).
 */
export async function rotateSecret(
  store: EventStore,
  input: {
    keyId: string;
    subscriptionId: string;
    secrets: SecretBox;
    overlapMs: number;
    expected: SubscriptionRecord['secret'];
    now?: number;
  },
): Promise<{ secret: string; previousValidUntil: string; position: number }> {
  const secret = generateWebhookSecret();
  const previousValidUntil = new Date((input.now ?? Date.now()) + input.overlapMs).toISOString();
  const command: SubscriptionCommand = {
    kind: 'rotate',
    data: {
      subscriptionId: input.subscriptionId,
      secret: input.secrets.seal(secret, input.subscriptionId),
      previousValidUntil,
    },
    expected: input.expected,
  };
  try {
    return { secret, previousValidUntil, position: await execute(store, input.keyId, command) };
  } catch (error) {
    // Lost to other changes of the key's subscriptions past the retries: told as a rotation's loss
    // (nothing changed, the current secret still signs), not as a bare race.
    if (error instanceof WrongExpectedRevisionError)
      throw new SubscriptionChangedError('SECRET_ROTATION_RACED');
    throw error;
  }
}

/**
 * Replaces what the subscription takes and where it sends (the whole set, `settings`); its id,
 * secret, numbering and deliveries stay. The log position of the change, or null when it changes
 * nothing (nothing is written).
 */
export async function updateSubscription(
  store: EventStore,
  keyId: string,
  settings: EventData<'SubscriptionUpdated'>,
  /** The settings read before `settings` were made from them (SubscriptionChangedError otherwise). */
  expected: EventData<'SubscriptionUpdated'>,
): Promise<number | null> {
  const { position } = await handleCommand(
    store,
    subscriptionStream(keyId),
    subscriptionDecider,
    { kind: 'update', data: settings, expected },
    { retry: COMMAND_RETRIES },
  );
  return position;
}

/**
 * Disables an active subscription (nothing when it is gone or already disabled). Several workers
 * may decide it at once: a conflict is decided again on the newer stream.
 */
export async function disableSubscription(
  store: EventStore,
  input: { keyId: string; subscriptionId: string; reason: string; consecutiveFailures: number },
): Promise<boolean> {
  return (await recordDisable(store, input)) !== null;
}

/**
 * The subscriber pauses its subscription: the same disable the dispatcher records for a failing
 * endpoint, with the reason `disabled_by_subscriber`, and resumed by the same re-enable. The log
 * position of the disable, or null when it was not active (already disabled, by either): nothing
 * is written then.
 */
export function pauseSubscription(
  store: EventStore,
  input: { keyId: string; subscriptionId: string; consecutiveFailures: number },
): Promise<number | null> {
  return recordDisable(store, { ...input, reason: DISABLED_BY_SUBSCRIBER });
}

/** The disable command on the key's stream: its log position, or null when nothing was written. */
async function recordDisable(
  store: EventStore,
  input: { keyId: string; subscriptionId: string; reason: string; consecutiveFailures: number },
): Promise<number | null> {
  const { position } = await handleCommand(
    store,
    subscriptionStream(input.keyId),
    subscriptionDecider,
    {
      kind: 'disable',
      subscriptionId: input.subscriptionId,
      reason: input.reason,
      consecutiveFailures: input.consecutiveFailures,
    },
    { retry: COMMAND_RETRIES },
  );
  return position;
}
