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

/** Issues a single-use sign-in nonce that lapses after `ttlMs`; it holds its expiry (restoreNonce). */
export async function issueNonce(cache: Cache, ttlMs: number): Promise<{ nonce: string; expiresAt: number }> {
  const nonce = newNonce();
  const expiresAt = Date.now() + ttlMs;
  await cache.set(issuedKey(nonce), String(expiresAt), { ttlMs });
  return { nonce, expiresAt };
}

/**
 * Consumes a nonce: true for exactly one caller, however many replicas race with the same
 * signed message. The "used" marker is set with set-if-absent, the cache's atomic primitive; it
 * keeps the nonce's expiry, so that restoreNonce can give it back no longer than it had.
 */
export async function consumeNonce(cache: Cache, nonce: string, ttlMs: number): Promise<boolean> {
  const issued = await cache.get(issuedKey(nonce));
  if (issued === null) return false;
  if (!(await cache.setIfAbsent(usedKey(nonce), issued, { ttlMs }))) return false;
  await cache.delete(issuedKey(nonce));
  return true;
}

/**
 * Makes a consumed nonce usable again until its own expiry: its sign-in was refused before
 * anything was written (the free-key budget of the caller's network), so the same signed message
 * may be sent again once the refusal lifts. A nonce whose expiry is unknown or past stays spent.
 */
export async function restoreNonce(cache: Cache, nonce: string): Promise<void> {
  const expiresAt = Number(await cache.get(usedKey(nonce)));
  const ttlMs = expiresAt - Date.now();
  if (!Number.isFinite(ttlMs) || ttlMs <= 0) return;
  await cache.set(issuedKey(nonce), String(expiresAt), { ttlMs });
  await cache.delete(usedKey(nonce));
}
