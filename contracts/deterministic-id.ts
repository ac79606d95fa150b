import { hash } from 'node:crypto';

/**
 * A UUID derived from a name (version-5 layout over sha256): the same fact always gets the same
 * event id, so recording it twice is an idempotent re-append instead of a duplicate.
 */
export function deterministicId(...parts: (string | number)[]): string {
  // One-shot: a Hash object (a stream underneath) per id cost twice the digest on the delivery path.
  const hex = hash('sha256', parts.join('\u0000'), 'hex');
  const variant = ((Number.parseInt(hex[16]!, 16) & 0x3) | 0x8).toString(16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-5${hex.slice(13, 16)}-${variant}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}
