import type { DecidedEvent, Decider, EventMeta } from '../../adapters/event-store/command.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { type ErrorCode, ServiceError } from '../../contracts/errors.ts';
import type { DomainEvent, EventData } from '../../contracts/events.ts';
import { heldFilters } from './subscription-filters.ts';
import {
  applySubscriptionEvent,
  findSubscription,
  initialSubscriptions,
  type SubscriptionRecord,
  type SubscriptionState,
} from './subscription-fold.ts';

export class SubscriptionLimitError extends ServiceError {
  override readonly name = 'SubscriptionLimitError';
  constructor(max: number) {
    super('SUBSCRIPTION_LIMIT', { max });
  }
}
export class SubscriptionNotFoundError extends ServiceError {
  override readonly name = 'SubscriptionNotFoundError';
  constructor(subscriptionId: string) {
    super('NOT_FOUND', { detail: `no webhook subscription ${subscriptionId}` });
  }
}

/** The subscription changed since the caller read it (a PATCH made from an older read). */
export class SubscriptionChangedError extends ServiceError {
  override readonly name: string = 'SubscriptionChangedError';
  constructor(code: ErrorCode = 'CONFLICT') {
    super(code);
  }
}

/**
 * A rotation decided after another one its caller did not read (two rotate-secret calls at once):
 * its own words, since a retry of the same request is not what the caller wants, a rotation of
 * its own is (or the other's secret).
 */
export class SecretRotatedError extends SubscriptionChangedError {
  override readonly name = 'SecretRotatedError';
  constructor() {
    super('SECRET_ROTATION_CONFLICT');
  }
}

/**
 * What may happen to a key's subscriptions, decided on the key's stream `webhooks-<keyId>`.
 * Secrets arrive sealed and ids and times arrive chosen: deciding stays free of randomness and
 * clocks.
 */
export type SubscriptionCommand =
  | { kind: 'create'; data: EventData<'SubscriptionCreated'>; maxPerKey: number }
  | { kind: 'delete'; keyId: string; subscriptionId: string }
  | { kind: 'reEnable'; subscriptionId: string; recoverSince?: string }
  | {
      kind: 'rotate';
      data: EventData<'SubscriptionSecretRotated'>;
      /**
       * The sealed secret the caller read as current: a rotation recorded since then (another
       * request's, whose caller holds the newest secret) is not overtaken (CONFLICT).
       */
      expected: SubscriptionRecord['secret'];
    }
  | {
      kind: 'reseal';
      data: EventData<'SubscriptionSecretResealed'>;
      /** The sealed secrets `data` re-seals, as read: anything else there now is left alone. */
      expected: {
        secret: SubscriptionRecord['secret'];
        previousSecret: SubscriptionRecord['previousSecret'];
      };
    }
  | { kind: 'disable'; subscriptionId: string; reason: string; consecutiveFailures: number }
  | {
      kind: 'update';
      data: EventData<'SubscriptionUpdated'>;
      /**
       * The settings `data` was made from (the caller's read, merged with its patch): another change
       * recorded since then is not overwritten (CONFLICT, retryable).
       */
      expected: EventData<'SubscriptionUpdated'>;
    };

export type SubscriptionEvent = DecidedEvent<
  | 'SubscriptionCreated'
  | 'SubscriptionDeleted'
  | 'SubscriptionReEnabled'
  | 'SubscriptionSecretRotated'
  | 'SubscriptionSecretResealed'
  | 'SubscriptionDisabled'
  | 'SubscriptionUpdated'
>;

function sameSealed(a: SubscriptionRecord['secret'] | null, b: SubscriptionRecord['secret'] | null): boolean {
  return a === b || (a !== null && b !== null && a.iv === b.iv && a.ciphertext === b.ciphertext);
}

/** The settings a SubscriptionUpdated carries, as the subscription has them now. */
export function settingsOf(sub: SubscriptionRecord): EventData<'SubscriptionUpdated'> {
  return {
    subscriptionId: sub.id,
    url: sub.url,
    events: sub.events,
    ...heldFilters(sub),
  };
}

/** Same settings, field by field (arrays in order: an order changed is a change the list shows). */
function sameSettings(a: EventData<'SubscriptionUpdated'>, b: EventData<'SubscriptionUpdated'>): boolean {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]) as Set<keyof typeof a>;
  for (const key of keys) if (JSON.stringify(a[key]) !== JSON.stringify(b[key])) return false;
  return true;
}

function existing(state: SubscriptionState, subscriptionId: string): SubscriptionRecord {
  const sub = findSubscription(state, subscriptionId);
  // Another key's subscription is indistinguishable from a missing one (404, never 403).
  if (!sub) throw new SubscriptionNotFoundError(subscriptionId);
  return sub;
}

export const subscriptionDecider: Decider<SubscriptionState, SubscriptionCommand, SubscriptionEvent> = {
  eventTypes: [
    'SubscriptionCreated',
    'SubscriptionDeleted',
    'SubscriptionReEnabled',
    'SubscriptionSecretRotated',
    'SubscriptionSecretResealed',
    'SubscriptionDisabled',
    'SubscriptionUpdated',
  ],
  initialState: initialSubscriptions,
  evolve(state: SubscriptionState, event: SubscriptionEvent, meta?: EventMeta): SubscriptionState {
    // The shared fold reads the recording time and position (createdAt, createdPosition, disabledAt);
    // a decided event has neither yet.
    const recorded = {
      ...event,
      recordedAt: meta?.recordedAt ?? new Date(0).toISOString(),
      position: meta?.position ?? 0,
    } as DomainEvent;
    return applySubscriptionEvent(state, recorded);
  },
  decide(command, state) {
    switch (command.kind) {
      case 'create':
        // Checked against the revision read: two creates at once cannot both pass the cap.
        if (Object.keys(state.subs).length >= command.maxPerKey) {
          throw new SubscriptionLimitError(command.maxPerKey);
        }
        return [{ type: 'SubscriptionCreated', data: command.data }];
      case 'delete':
        existing(state, command.subscriptionId);
        return [
          {
            type: 'SubscriptionDeleted',
            data: { subscriptionId: command.subscriptionId, keyId: command.keyId },
          },
        ];
      case 'reEnable':
        existing(state, command.subscriptionId);
        return [
          {
            type: 'SubscriptionReEnabled',
            data: {
              subscriptionId: command.subscriptionId,
              ...(command.recoverSince ? { recoverSince: command.recoverSince } : {}),
            },
          },
        ];
      case 'update': {
        const held = settingsOf(existing(state, command.data.subscriptionId));
        // A PATCH carries some fields and keeps the others as its caller read them: another
        // change recorded since would be undone by it, field by field.
        if (!sameSettings(held, command.expected)) throw new SubscriptionChangedError();
        // A PATCH that changes nothing records nothing: the answer is the subscription as it is.
        if (sameSettings(held, command.data)) return [];
        return [{ type: 'SubscriptionUpdated', data: command.data }];
      }
      case 'rotate':
        // Two rotations at once would each answer a new secret, and one of them would never sign
        // (or only for the other's overlap): the one decided second is refused instead.
        if (!sameSealed(existing(state, command.data.subscriptionId).secret, command.expected)) {
          throw new SecretRotatedError();
        }
        return [{ type: 'SubscriptionSecretRotated', data: command.data }];
      case 'reseal': {
        const sub = findSubscription(state, command.data.subscriptionId);
        // Deleted meanwhile, already re-sealed (a second run, a run restarted), or rotated since it
        // was read: re-sealing what was read would bring back a secret that is no longer current.
        if (
          !sub ||
          !sameSealed(sub.secret, command.expected.secret) ||
          !sameSealed(sub.previousSecret, command.expected.previousSecret)
        ) {
          return [];
        }
        return [{ type: 'SubscriptionSecretResealed', data: command.data }];
      }
      case 'disable': {
        const sub = findSubscription(state, command.subscriptionId);
        // Deleted or already disabled: nothing to tell anyone.
        if (sub?.status !== 'active') return [];
        return [
          {
            type: 'SubscriptionDisabled',
            data: {
              subscriptionId: sub.id,
              reason: command.reason,
              consecutiveFailures: command.consecutiveFailures,
            },
            // One disable per enabled period, however many workers decide it at once.
            id: deterministicId('webhook-disabled', sub.id, sub.generation),
          },
        ];
      }
    }
  },
};
