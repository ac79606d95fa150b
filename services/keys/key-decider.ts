import type { DecidedEvent, Decider } from '../../adapters/event-store/command.ts';
import type { Plan } from '../../contracts/events.ts';

/**
 * The rules of one key's life, as a decider: `decide(command, state)` returns the events to
 * append or throws KeyRuleError, `evolve(state, event)` folds them. No I/O, no clock.
 */

export interface KeyState {
  keyId: string;
  plan: Plan;
  owner: string;
  revoked: boolean;
}

export type KeyEvent = DecidedEvent<'ApiKeyIssued' | 'ApiKeyPlanChanged' | 'ApiKeyRevoked'>;

export type KeyCommand =
  | { kind: 'issue'; data: Extract<KeyEvent, { type: 'ApiKeyIssued' }>['data'] }
  | { kind: 'changePlan'; keyId: string; to: Plan }
  | { kind: 'revoke'; keyId: string; reason: string };

export class KeyRuleError extends Error {
  override readonly name = 'KeyRuleError';
  constructor(
    readonly code: 'key_exists' | 'key_not_found' | 'key_revoked' | 'plan_unchanged',
    message: string,
  ) {
    super(message);
  }
}

export function evolveKey(state: KeyState | null, event: KeyEvent): KeyState | null {
  switch (event.type) {
    case 'ApiKeyIssued':
      return { keyId: event.data.keyId, plan: event.data.plan, owner: event.data.owner, revoked: false };
    case 'ApiKeyPlanChanged':
      return state && state.keyId === event.data.keyId ? { ...state, plan: event.data.to } : state;
    case 'ApiKeyRevoked':
      return state && state.keyId === event.data.keyId ? { ...state, revoked: true } : state;
  }
}

export function decideKey(command: KeyCommand, state: KeyState | null): KeyEvent[] {
  if (command.kind === 'issue') {
    if (state !== null)
      throw new KeyRuleError('key_exists', `key ${state.keyId} already exists in this stream`);
    return [{ type: 'ApiKeyIssued', data: command.data }];
  }
  if (state === null || state.keyId !== command.keyId) {
    throw new KeyRuleError('key_not_found', `no key ${command.keyId}`);
  }
  if (state.revoked) throw new KeyRuleError('key_revoked', `key ${command.keyId} is revoked`);
  if (command.kind === 'changePlan') {
    if (state.plan === command.to) {
      throw new KeyRuleError('plan_unchanged', `key ${command.keyId} is already on ${command.to}`);
    }
    return [{ type: 'ApiKeyPlanChanged', data: { keyId: command.keyId, from: state.plan, to: command.to } }];
  }
  return [{ type: 'ApiKeyRevoked', data: { keyId: command.keyId, reason: command.reason } }];
}

export const keyDecider: Decider<KeyState | null, KeyCommand, KeyEvent> = {
  eventTypes: ['ApiKeyIssued', 'ApiKeyPlanChanged', 'ApiKeyRevoked'],
  initialState: () => null,
  evolve: evolveKey,
  decide: decideKey,
};
