import type { EventStore } from '../../adapters/event-store/port.ts';
import type { Plan } from '../../contracts/events.ts';
import { newEvent, parseDomainEvent } from '../../contracts/events.ts';
import { decideKey, evolveKey, type KeyCommand, KeyRuleError, type KeyState } from './key-decider.ts';
import { generateApiKey } from './key-material.ts';

/**
 * Runs key commands against the event store: read the key's stream, decide, append with the
 * revision that was read. A concurrent change to the same key fails the append
 * (WrongExpectedRevisionError) instead of being overwritten.
 */

async function loadKey(
  store: EventStore,
  stream: string,
): Promise<{ state: KeyState | null; revision: number | null }> {
  let state: KeyState | null = null;
  let revision: number | null = null;
  for (const recorded of await store.readStream(stream)) {
    revision = recorded.revision;
    const event = parseDomainEvent(recorded);
    if (
      event?.type === 'ApiKeyIssued' ||
      event?.type === 'ApiKeyPlanChanged' ||
      event?.type === 'ApiKeyRevoked'
    ) {
      state = evolveKey(state, event);
    }
  }
  return { state, revision };
}

async function execute(store: EventStore, stream: string, command: KeyCommand): Promise<number> {
  const { state, revision } = await loadKey(store, stream);
  const events = decideKey(command, state).map((e) => newEvent(e.type, e.data));
  const result = await store.append(stream, events, {
    expectedRevision: revision === null ? 'no_stream' : revision,
  });
  return result.position;
}

export interface IssuedKey {
  key: string;
  keyId: string;
  prefix: string;
  plan: Plan;
  owner: string;
  /** Log position of the ApiKeyIssued event: wait for it before resolving the key. */
  position: number;
}

/**
 * Issues a key. Sign-ins pass `stream: wallet-<address>`: appending there with "no stream"
 * is what makes the key one per address, on any number of replicas.
 */
export async function issueKey(
  store: EventStore,
  input: { plan: Plan; owner: string; via: 'operator' | 'siwe'; stream?: string },
): Promise<IssuedKey> {
  const material = generateApiKey();
  const stream = input.stream ?? `apikey-${material.keyId}`;
  const position = await execute(store, stream, {
    kind: 'issue',
    data: {
      keyId: material.keyId,
      keyHash: material.keyHash,
      prefix: material.prefix,
      plan: input.plan,
      owner: input.owner,
      via: input.via,
    },
  });
  return {
    key: material.key,
    keyId: material.keyId,
    prefix: material.prefix,
    plan: input.plan,
    owner: input.owner,
    position,
  };
}

export async function changeKeyPlan(
  store: EventStore,
  stream: string,
  keyId: string,
  to: Plan,
): Promise<number> {
  return execute(store, stream, { kind: 'changePlan', keyId, to });
}

export async function revokeKey(
  store: EventStore,
  stream: string,
  keyId: string,
  reason: string,
): Promise<number> {
  return execute(store, stream, { kind: 'revoke', keyId, reason });
}

export { KeyRuleError };
