import { presentedCredential } from '../api/service-meta.ts';
import { isWellFormedKey } from '../keys/key-material.ts';
import type { KeyResolver } from '../keys/key-resolver.ts';

/**
 * Resolves `Authorization: Bearer <key>` to the key's id: null for a missing, malformed,
 * unknown or revoked key. Throws KeyUnverifiableError when the key cannot be checked right now.
 */
export type ResolveKey = (authorization: string | undefined) => Promise<{ keyId: string } | null>;

export function keyResolverAuth(keys: Pick<KeyResolver, 'resolve'>): ResolveKey {
  return async (authorization) => {
    const credential = presentedCredential({ authorization }, isWellFormedKey);
    if (credential.kind !== 'bearer') return null;
    const lookup = await keys.resolve(credential.token);
    return lookup.status === 'active' ? { keyId: lookup.record.keyId } : null;
  };
}
