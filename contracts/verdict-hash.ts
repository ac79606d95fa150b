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

/**
 * What an outcome's chain hash covers: the labels every export carries (the row's outcome
 * columns), the hash of the verdict it labels, and the previous chained outcome of the same
 * verdict stream. The rest of the event (the verdict's fields, the served forecast) is a copy of
 * the verdict's content, which the verdict's own hash covers; fee and horizon are the
 * methodology's (contracts/history.ts).
 */
export interface OutcomeContent {
  verdictHash: string;
  prevHash: string | null;
  return1: number;
  return6: number;
  return24: number;
  result: 'hit' | 'miss' | 'no-call';
  netCentiBps: number | null;
  maeBps: number | null;
  mfeBps: number | null;
  realisedVol: number;
  lean: 'BUY' | 'SELL' | null;
  leanNetCentiBps: number | null;
}

export function outcomeContent(o: Omit<EventData<'VerdictOutcomeResolved'>, 'hash'>): OutcomeContent {
  return {
    verdictHash: o.verdictHash,
    prevHash: o.prevHash ?? null,
    return1: o.return1,
    return6: o.return6,
    return24: o.return24,
    result: o.result,
    netCentiBps: o.netCentiBps,
    maeBps: o.maeBps,
    mfeBps: o.mfeBps,
    realisedVol: o.realisedVol,
    lean: o.lean ?? null,
    leanNetCentiBps: o.leanNetCentiBps ?? null,
  };
}

export function outcomeHash(content: OutcomeContent): string {
  return createHash('sha256').update(canonicalJson(content)).digest('hex');
}

// ---- anchors ------------------------------------------------------------------------------------

/**
 * One leaf of an anchor: a verdict stream's heads at the anchored log position, its last verdict's
 * hash and its last chained outcome's hash ('' when none), as sha256 of
 * `<stream>\n<verdict hash>\n<outcome hash>` in UTF-8.
 */
export function anchorLeaf(stream: string, verdictHead: string, outcomeHead: string | null): Buffer {
  return createHash('sha256')
    .update(`${stream}\n${verdictHead}\n${outcomeHead ?? ''}`)
    .digest();
}

/**
 * The anchored root: the leaves sorted by stream name, then paired level by level, each parent
 * sha256(left ‖ right) over the 32-byte digests; a last leaf without a partner goes up unchanged.
 */
export function merkleRoot(leaves: { stream: string; leaf: Buffer }[]): string {
  if (leaves.length === 0) throw new Error('an anchor needs at least one stream');
  let level = [...leaves]
    .sort((a, b) => (a.stream < b.stream ? -1 : a.stream > b.stream ? 1 : 0))
    .map((l) => l.leaf);
  while (level.length > 1) {
    const next: Buffer[] = [];
    for (let i = 0; i < level.length; i += 2) {
      const right = level[i + 1];
      next.push(right ? createHash('sha256').update(level[i]!).update(right).digest() : level[i]!);
    }
    level = next;
  }
  return level[0]!.toString('hex');
}
