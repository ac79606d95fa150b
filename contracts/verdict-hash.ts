import { createHash } from 'node:crypto';
import { canonicalJson } from './canonical-json.ts';
import type { EventData } from './events.ts';

/**
 * The verdict hash chain, usable by anyone holding the exported events: each verdict's hash
 * covers its content and the previous verdict's hash for the same market, so a verdict cannot
 * be rewritten or back-dated after its outcome is known without breaking every later link.
 */
export type VerdictContent = Omit<EventData<'VerdictRecorded'>, 'hash'>;

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
