import { generateSiweNonce } from 'viem/siwe';
import type { Cache } from '../../../adapters/cache/port.ts';

const issuedKey = (nonce: string) => `siwe:nonce:${nonce}`;
const usedKey = (nonce: string) => `siwe:used:${nonce}`;

/** Issues a single-use sign-in nonce that lapses after `ttlMs`. */
export async function issueNonce(cache: Cache, ttlMs: number): Promise<{ nonce: string; expiresAt: number }> {
  const nonce = generateSiweNonce();
  await cache.set(issuedKey(nonce), '1', { ttlMs });
  return { nonce, expiresAt: Date.now() + ttlMs };
}

/**
 * Consumes a nonce: true for exactly one caller, however many replicas race with the same
 * signed message. The "used" marker is set with set-if-absent, the cache's atomic primitive.
 */
export async function consumeNonce(cache: Cache, nonce: string, ttlMs: number): Promise<boolean> {
  if ((await cache.get(issuedKey(nonce))) === null) return false;
  if (!(await cache.setIfAbsent(usedKey(nonce), '1', { ttlMs }))) return false;
  await cache.delete(issuedKey(nonce));
  return true;
}
