import { hash, randomBytes } from 'node:crypto';
import { LIVE_KEY_PREFIX } from '../shared/credential-params.ts';

/** Every live key starts with this (defined beside the rule that finds key text in URLs). */
export { LIVE_KEY_PREFIX };

/** 32 random bytes (256 bits) in base64url: 43 characters after the prefix. */
const KEY_BODY_BYTES = 32;
const KEY_PATTERN = /^sk_live_[A-Za-z0-9_-]{43}$/;

export interface KeyMaterial {
  /** The key itself: shown once to its owner, never stored. */
  key: string;
  keyId: string;
  keyHash: string;
  /** The first characters, safe to show in listings so an owner can tell keys apart. */
  prefix: string;
}

/**
 * A presented key's hash, the registry's look-up key: the one-shot `crypto.hash` costs about a
 * third of a `createHash` context (0.7 against 1.9 µs here). A key is never written anywhere;
 * the resolver keeps the look-ups of the last 4,096 keys presented in this process's memory only
 * (KeyResolver.recent), so a key presented again is not hashed again: a heap snapshot or core
 * dump of the api can hold them, as it can the request headers they came in.
 */
export function hashApiKey(key: string): string {
  return hash('sha256', key, 'hex');
}

/** True for a string shaped like one of our keys; says nothing about whether it was issued. */
export function isWellFormedKey(token: string): boolean {
  return KEY_PATTERN.test(token);
}

/** How many characters follow the prefix in every live key. */
const KEY_BODY_CHARS = Math.ceil((KEY_BODY_BYTES * 4) / 3);

/**
 * Why a token that starts like a live key is not one (cut when copied, run on into other text, a
 * character no key has), in words that show nothing of the token but its length; null when it
 * does not start like one, or is one.
 */
export function liveKeyShapeProblem(token: string): string | null {
  if (!token.startsWith(LIVE_KEY_PREFIX) || isWellFormedKey(token)) return null;
  const body = token.slice(LIVE_KEY_PREFIX.length);
  const shape = `${LIVE_KEY_PREFIX} then ${KEY_BODY_CHARS} characters of A–Z, a–z, 0–9, _ and -`;
  if (body.length !== KEY_BODY_CHARS) {
    return `the Bearer token starts like a live key but has ${body.length} characters after ${LIVE_KEY_PREFIX}, not ${KEY_BODY_CHARS} (a live key is ${shape}): send the key whole, as it was shown`;
  }
  return `the Bearer token starts like a live key but holds a character no key has (a live key is ${shape}): send the key whole, as it was shown`;
}

export function generateApiKey(): KeyMaterial {
  const key = LIVE_KEY_PREFIX + randomBytes(KEY_BODY_BYTES).toString('base64url');
  return {
    key,
    // The id is independent of the key, so logging or listing it reveals nothing about the key.
    keyId: `key_${randomBytes(9).toString('base64url')}`,
    keyHash: hashApiKey(key),
    prefix: key.slice(0, LIVE_KEY_PREFIX.length + 4),
  };
}
