import { handleCommand } from '../../adapters/event-store/command.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { Plan } from '../../contracts/events.ts';
import { type KeyCommand, KeyRuleError, keyDecider } from './key-decider.ts';
import { generateApiKey } from './key-material.ts';

/**
 * Runs key commands against the event store: read the key's stream, decide, append with the
 * revision that was read. A concurrent change to the same key fails the append
 * (WrongExpectedRevisionError) instead of being overwritten.
 */

async function execute(
  store: EventStore,
  stream: string,
  command: KeyCommand,
  options: { retry?: number } = {},
): Promise<number> {
  const { position } = await handleCommand(store, stream, keyDecider, command, options);
  // Every key command decides at least one event or throws, so something was written.
  return position as number;
}

/**
 * A plan change or revocation that lost the append to another change of the key is decided again
 * on the key as it then stands: a revocation racing another answers key_revoked (which the
 * operator's revoke reports as already revoked), a plan change racing one to the same plan answers
 * plan_unchanged (which the operator's plan reports as already on it), a plan change racing a
 * revocation is refused as revoked, and either applies over a plan change to another plan. An issue is not retried: its stream must not
 * exist (one key per wallet).
 */
const CHANGE_RETRIES = 3;

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
  return execute(store, stream, { kind: 'changePlan', keyId, to }, { retry: CHANGE_RETRIES });
}

export async function revokeKey(
  store: EventStore,
  stream: string,
  keyId: string,
  reason: string,
): Promise<number> {
  return execute(store, stream, { kind: 'revoke', keyId, reason }, { retry: CHANGE_RETRIES });
}

export { KeyRuleError };
