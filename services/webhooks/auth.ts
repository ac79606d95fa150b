import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ServiceError } from '../../contracts/errors.ts';
import { isWellFormedKey } from '../keys/key-material.ts';
import type { KeyResolver } from '../keys/key-resolver.ts';
import { presentedCredential } from '../metering/service-meta.ts';

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

declare module 'fastify' {
  interface FastifyRequest {
    /** The live key a keyed route was called with, set by its `requireKey` preHandler. */
    apiKeyId: string;
  }
}

/**
 * The hook of every keyed route (preValidation): resolves the caller's key once and puts its id on the
 * request, or refuses (401 UNAUTHORIZED, 503 KEY_UNVERIFIABLE) before the handler runs.
 */
export function requireKey(app: FastifyInstance, resolveKey: ResolveKey) {
  app.decorateRequest('apiKeyId', '');
  return async (request: FastifyRequest): Promise<void> => {
    let resolved: { keyId: string } | null;
    try {
      resolved = await resolveKey(request.headers.authorization);
    } catch (err) {
      throw new ServiceError('KEY_UNVERIFIABLE', { detail: (err as Error).message });
    }
    if (!resolved) throw new ServiceError('UNAUTHORIZED');
    request.apiKeyId = resolved.keyId;
  };
}
