import type { Plan } from '../../contracts/events.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';

export interface KeyRecord {
  keyId: string;
  keyHash: string;
  prefix: string;
  plan: Plan;
  owner: string;
  via: 'operator' | 'siwe';
  /** The stream holding this key's events: `apikey-<keyId>`, or `wallet-<address>` for sign-ins. */
  stream: string;
  issuedAt: string;
  revoked: boolean;
  revokedAt: string | null;
  revokeReason: string | null;
}

/** Keys by hash (the request path asks "who is this key") and hashes by id (operators ask by id). */
export interface KeyRegistry {
  byHash: Record<string, KeyRecord>;
  byId: Record<string, string>;
}

export function findByHash(registry: KeyRegistry, keyHash: string): KeyRecord | undefined {
  return Object.hasOwn(registry.byHash, keyHash) ? registry.byHash[keyHash] : undefined;
}

export function findById(registry: KeyRegistry, keyId: string): KeyRecord | undefined {
  const hash = Object.hasOwn(registry.byId, keyId) ? registry.byId[keyId] : undefined;
  return hash === undefined ? undefined : registry.byHash[hash];
}

export const keyRegistryProjection: Projection<KeyRegistry> = defineProjection({
  name: 'key-registry',
  version: 1,
  eventTypes: ['ApiKeyIssued', 'ApiKeyPlanChanged', 'ApiKeyRevoked'],
  initial: (): KeyRegistry => ({ byHash: {}, byId: {} }),
  evolve(state, event) {
    switch (event.type) {
      case 'ApiKeyIssued': {
        const d = event.data;
        state.byHash[d.keyHash] = {
          keyId: d.keyId,
          keyHash: d.keyHash,
          prefix: d.prefix,
          plan: d.plan,
          owner: d.owner,
          via: d.via,
          stream: event.stream,
          issuedAt: event.recordedAt,
          revoked: false,
          revokedAt: null,
          revokeReason: null,
        };
        state.byId[d.keyId] = d.keyHash;
        break;
      }
      case 'ApiKeyPlanChanged': {
        const record = findById(state, event.data.keyId);
        if (record) record.plan = event.data.to;
        break;
      }
      case 'ApiKeyRevoked': {
        const record = findById(state, event.data.keyId);
        if (record) {
          record.revoked = true;
          record.revokedAt = event.recordedAt;
          record.revokeReason = event.data.reason;
        }
        break;
      }
    }
    return state;
  },
});
