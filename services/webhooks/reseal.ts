import { handleCommand } from '../../adapters/event-store/command.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { defineProjection, foldLog } from '../../projections/projection.ts';
import type { SecretBox } from './secret-box.ts';
import { subscriptionDecider } from './subscription-decider.ts';
import {
  applySubscriptionEvent,
  initialSubscriptions,
  SUBSCRIPTION_EVENT_TYPES,
  type SubscriptionRecord,
  subscriptionStream,
} from './subscription-fold.ts';

/** The subscriptions alone, folded from the log for a one-shot reader. */
const subscriptionsProjection = defineProjection({
  name: 'webhook-subscriptions',
  version: 1,
  eventTypes: [...SUBSCRIPTION_EVENT_TYPES],
  initial: initialSubscriptions,
  evolve: applySubscriptionEvent,
});

export interface ResealOutcome {
  /** The version of the master key every secret is now sealed under. */
  keyVersion: string;
  resealed: number;
  already: number;
  /** Subscriptions whose secrets open under no configured key: still sealed under another. */
  unopened: { subscriptionId: string; keyVersion: string }[];
}

/**
 * Whether the previous secret must move too: only while the rotation's overlap lasts (after it,
 * nothing opens it) and when a configured key opens it (one that does not is already left out of
 * signatures by the dispatcher).
 */
function previousToReseal(sub: SubscriptionRecord, secrets: SecretBox, now: number): boolean {
  const prev = sub.previousSecret;
  if (!prev || !sub.previousSecretValidUntil || now >= Date.parse(sub.previousSecretValidUntil)) return false;
  return !secrets.isCurrent(prev) && secrets.keyVersions.includes(prev.keyVersion);
}

/**
 * Re-seals every subscription's secret (disabled ones too: a re-enable signs with it) under the
 * master key that seals now, one SubscriptionSecretResealed per subscription through its key's
 * stream, so the keys before it can be removed. The secrets themselves do not change. Idempotent:
 * a subscription already under the sealing key gets no event, so a run stopped halfway is run
 * again; one rotated or deleted between the read and the append is left as the log has it (the
 * decider compares what it read), and the next pass reads it afresh.
 */
export async function resealSecrets(
  store: EventStore,
  secrets: SecretBox,
  now = Date.now(),
): Promise<ResealOutcome> {
  const outcome: ResealOutcome = { keyVersion: secrets.keyVersion, resealed: 0, already: 0, unopened: [] };
  for (let pass = 0; pass < 3; pass++) {
    const { state } = await foldLog(store, subscriptionsProjection);
    const subs = Object.values(state.subs).sort((a, b) => a.id.localeCompare(b.id));
    let raced = 0;
    outcome.unopened = [];
    for (const sub of subs) {
      const previous = previousToReseal(sub, secrets, now);
      if (secrets.isCurrent(sub.secret) && !previous) {
        if (pass === 0) outcome.already++;
        continue;
      }
      let data: Parameters<typeof subscriptionDecider.decide>[0] & { kind: 'reseal' };
      try {
        data = {
          kind: 'reseal',
          expected: { secret: sub.secret, previousSecret: sub.previousSecret },
          data: {
            subscriptionId: sub.id,
            secret: secrets.seal(secrets.open(sub.secret, sub.id), sub.id),
            ...(previous
              ? { previousSecret: secrets.seal(secrets.open(sub.previousSecret!, sub.id), sub.id) }
              : {}),
          },
        };
      } catch {
        outcome.unopened.push({ subscriptionId: sub.id, keyVersion: sub.secret.keyVersion });
        continue;
      }
      const { events } = await handleCommand(
        store,
        subscriptionStream(sub.keyId),
        subscriptionDecider,
        data,
        {
          retry: 3,
        },
      );
      if (events.length > 0) outcome.resealed++;
      else raced++;
    }
    if (raced === 0) return outcome;
  }
  return outcome;
}

/**
 * What `npm run keys -- reseal-webhook-secrets` prints: `done`, what it did (stdout), and `left`,
 * null when every secret is under the sealing key, else the subscriptions whose secrets no
 * configured key opens, by id and the digest prefix of the key each is sealed under (never a
 * secret), with what that means for their deliveries (stderr; the command then exits 1, so a
 * rotation scripted as reseal-then-drop stops before the key they need is dropped).
 */
export function describeReseal(o: ResealOutcome): { done: string; left: string | null } {
  const done = `webhook secrets: ${o.resealed} re-sealed under master key ${o.keyVersion}, ${o.already} already under it`;
  if (o.unopened.length === 0) {
    return {
      done: `${done}\nevery secret is sealed under WEBHOOK_MASTER_KEY: WEBHOOK_MASTER_KEYS_PREVIOUS can be emptied`,
      left: null,
    };
  }
  const n = o.unopened.length;
  const left =
    `${n} webhook subscription${n === 1 ? '' : 's'} not re-sealed: no configured master key opens ` +
    `${n === 1 ? 'its secret' : 'their secrets'}, left sealed as before: ` +
    o.unopened.map((u) => `${u.subscriptionId} (sealed under ${u.keyVersion})`).join(', ') +
    '. Do not empty WEBHOOK_MASTER_KEYS_PREVIOUS: add the key each names to it and run again. ' +
    'Until then a dispatcher holds their deliveries (recorded held, not sent, not failed); a ' +
    'rotate-secret of the subscription seals a new secret under WEBHOOK_MASTER_KEY and they go out under it';
  return { done, left };
}
