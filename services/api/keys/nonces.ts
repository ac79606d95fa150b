import { randomBytes } from 'node:crypto';
import type { Cache } from '../../../adapters/cache/port.ts';

const issuedKey = (nonce: string) => `siwe:nonce:${nonce}`;
const usedKey = (nonce: string) => `siwe:used:${nonce}`;

/** 16 bytes from the operating system's CSPRNG: 128 bits, 32 hex characters. */
const NONCE_BYTES = 16;

/**
 * A fresh sign-in nonce: 32 lowercase hex characters, alphanumeric as EIP-4361 requires (8 or
 * more), each drawn independently from `crypto.randomBytes`. Not viem's `generateSiweNonce`:
 * that one slides a window over one shared Math.random buffer, so each nonce is the one
 * before it shifted by a character plus one new one, and the next is all but known.
 */
export function newNonce(): string {
  return randomBytes(NONCE_BYTES).toString('hex');
}

/** Issues a single-use sign-in nonce that lapses after `ttlMs`. */
export async function issueNonce(cache: Cache, ttlMs: number): Promise<{ nonce: string; expiresAt: number }> {
  const nonce = newNonce();
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
