import { createHash } from 'node:crypto';
import type { EventData } from './events.ts';

/**
 * The verdict hash chain, usable by anyone holding the exported events: each verdict's hash
 * covers its content and the previous verdict's hash for the same market, so a verdict cannot
 * be rewritten or back-dated after its outcome is known without breaking every later link.
 */
export type VerdictContent = Omit<EventData<'VerdictRecorded'>, 'hash'>;

/** JSON with object keys sorted at every depth: one byte string per value. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

export function verdictHash(content: VerdictContent): string {
  return createHash('sha256').update(canonicalJson(content)).digest('hex');
}

export type ChainCheck = { ok: true } | { ok: false; index: number; reason: string };

/** Checks a market's verdicts, oldest first: every hash matches and every link points back. */
export function verifyVerdictChain(verdicts: EventData<'VerdictRecorded'>[]): ChainCheck {
  let prev: string | null = null;
  for (const [index, verdict] of verdicts.entries()) {
    const { hash, ...content } = verdict;
    if (verdict.prevHash !== prev)
      return { ok: false, index, reason: 'prevHash does not link to the previous verdict' };
    if (verdictHash(content) !== hash) return { ok: false, index, reason: 'hash does not match the content' };
    prev = hash;
  }
  return { ok: true };
}
