import { createPublicClient, type Hex, http, type PublicClient } from 'viem';
import { firstIndex } from '../../adapters/first-index.ts';
import type { HistoryRow } from '../../contracts/history.ts';
import { anchorLeaf, merkleRoot } from '../../contracts/verdict-hash.ts';
import { readAnchorData } from './anchor.ts';

/** An anchor as the chain holds it: a transaction from the anchoring wallet to itself. */
export interface ChainAnchor {
  txHash: string;
  blockNumber: number;
  /** The block's time. */
  at: string;
  address: string;
  root: string;
  position: number;
}

export interface AnchorLine extends ChainAnchor {
  /**
   * true: the root made from the file equals the anchored one (and no covered row is late or
   * left out);
   * false: it differs, or a covered row is late or left out; null: not checked, the anchor lies beyond the
   * file (`beyond`).
   */
  ok: boolean | null;
  /**
   * The anchor's position is past the file's last log position and the root the file gives there
   * differs: the file ends before the anchor (an early export, or one cut short: the two look the
   * same). The root covers every stream's head at its position, and a head that moved after the
   * file's last row is not in the file, so the root cannot be made again from it: not checked.
   * Its rows in the file count as `uncovered` and the report's `unverified` names them. (Past the file's end with the root matching: checked, ok, since then
   * every head it pins is in the file.)
   */
  beyond: boolean;
  /** The root made from the file's rows: each stream's last verdict and last chained outcome at `position`. */
  recomputedRoot: string | null;
  /**
   * The streams the file holds at `position` (the leaves of `recomputedRoot`). The anchor itself
   * covers every stream the service held there; the chain does not hold that count (the log's
   * HistoryAnchored and the readiness check's `lastAnchor.streams` do).
   */
  streams: number;
  /** The rows this anchor is the first to cover: verdicts and chained outcomes recorded after the previous anchor's position up to its own. */
  covers: { rows: number; firstPosition: number | null; lastPosition: number | null; outcomes: number };
  /**
   * The covered rows recorded after the block that holds this anchor was mined (by more than
   * ANCHOR_CLOCK_TOLERANCE_MS): an anchor cannot cover what did not exist yet, so each was moved
   * later. The first is named.
   */
  late: { rows: number; first: LateRow } | null;
  /**
   * A stream whose first row in the file falls in this anchor's range and links to an earlier
   * verdict (`prev_hash` set): that verdict lies in the same range (a head an earlier anchor pins
   * would be missing there, and that anchor fails), so a row this anchor covers is not in the file.
   * The first such stream is named; null when none.
   */
  leftOut: LeftOut | null;
  /** Why the anchor is beyond the file, what a root that differs can mean, or which row is left out; null when ok. */
  note: string | null;
}

/** The first row of a stream in the file, linking to a verdict of the same anchor's range that the file lacks. */
export interface LeftOut {
  streams: number;
  first: { stream: string; verdictId: string; revision: number; position: number; reason: string };
}

/** A row whose recorded_at is after the block time of the anchor that covers it. */
export interface LateRow {
  stream: string;
  verdictId: string;
  position: number;
  recordedAt: string;
  txHash: string;
  anchorAt: string;
  reason: string;
}

/**
 * How far a row's recorded_at may be after the block time of its anchor: recorded_at is the
 * service's clock, the block time the chain's (a validator's clock, whole seconds), and the two
 * may disagree by a little. Five minutes: far below a day's anchor interval, far above the drift
 * of clocks kept by NTP and the chains' allowance for a block's timestamp.
 */
export const ANCHOR_CLOCK_TOLERANCE_MS = 5 * 60_000;

export interface AnchorReport {
  /**
   * No anchor failed (`ok: false`) and the file holds rows. One beyond the file (`ok: null`) is no
   * failure of what was checked, but leaves rows unverified: see `unverified`.
   */
  ok: boolean;
  /** Why the check failed as a whole (a file with no rows: nothing to check); null otherwise. */
  note: string | null;
  anchors: AnchorLine[];
  /**
   * Set when an anchor lies beyond the file: the file's rows after `after` (the last checked
   * anchor's position; null when none was checked) are verified by no anchor. A file cut short,
   * its tail rewritten and rehashed, looks exactly like an export taken before that anchor.
   */
  unverified: { after: number | null; rows: number; outcomes: number; note: string } | null;
  /** The last log position the file shows (of a verdict, or of a chained outcome); null when empty. */
  lastPosition: number | null;
  /**
   * Rows (and chained outcomes) recorded after the last anchor the file can be checked against
   * (after the last anchor, or in the range of an anchor beyond the file): no anchor covers them
   * in this file.
   */
  uncovered: { rows: number; outcomes: number };
  /** The first row (in file order) recorded after the block time of its anchor; null when none is. */
  firstLate: LateRow | null;
}

/**
 * Finds the anchors on chain: the transactions named, or every transaction from `address` to
 * itself in blocks `fromBlock` onwards whose input is an anchor (anchor.ts `anchorData`).
 */
export async function readChainAnchors(options: {
  rpcUrl: string;
  address?: string;
  fromBlock?: bigint;
  txs?: string[];
}): Promise<ChainAnchor[]> {
  const client = createPublicClient({ transport: http(options.rpcUrl) }) as PublicClient;
  const address = options.address?.toLowerCase();
  const found: ChainAnchor[] = [];
  const times = new Map<bigint, string>();
  const timeOf = async (blockNumber: bigint) => {
    let at = times.get(blockNumber);
    if (at === undefined) {
      const block = await client.getBlock({ blockNumber });
      at = new Date(Number(block.timestamp) * 1000).toISOString();
      times.set(blockNumber, at);
    }
    return at;
  };
  const take = async (tx: {
    hash: Hex;
    from: string;
    to: string | null;
    input: Hex;
    blockNumber: bigint | null;
  }) => {
    const from = tx.from.toLowerCase();
    if (tx.to?.toLowerCase() !== from || (address && from !== address) || tx.blockNumber === null)
      return false;
    const data = readAnchorData(tx.input);
    if (!data) return false;
    found.push({
      txHash: tx.hash,
      blockNumber: Number(tx.blockNumber),
      at: await timeOf(tx.blockNumber),
      address: tx.from,
      ...data,
    });
    return true;
  };
  if (options.txs?.length) {
    // One anchor named twice (as copied from an explorer, in either case) is read once.
    for (const hash of new Set(options.txs.map((tx) => tx.toLowerCase()))) {
      const tx = await client.getTransaction({ hash: hash as Hex });
      if (!(await take(tx)))
        throw new Error(
          `transaction ${hash} is not an anchor (a self-transfer whose input is "history-anchor v1 <root> <position>")`,
        );
    }
  } else {
    const latest = await client.getBlockNumber();
    for (let n = options.fromBlock ?? 0n; n <= latest; n++) {
      const block = await client.getBlock({ blockNumber: n, includeTransactions: true });
      times.set(n, new Date(Number(block.timestamp) * 1000).toISOString());
      for (const tx of block.transactions) await take(tx);
    }
  }
  return found.sort((a, b) => a.position - b.position || a.blockNumber - b.blockNumber);
}

interface Bucket {
  /** The row (in file order) of `late.first`, to name the file's first late row among checked anchors. */
  lateOrdinal: number;
  rows: number;
  firstPosition: number | null;
  lastPosition: number | null;
  outcomes: number;
  /** Stream → its last verdict hash among this bucket's rows. */
  verdicts: Map<string, string>;
  /** Stream → its chained outcome of the highest position in this bucket. */
  outcomeHeads: Map<string, { position: number; hash: string }>;
  late: { rows: number; first: LateRow } | null;
  leftOut: LeftOut | null;
  /** The anchor's block time plus the clock tolerance: a row recorded after it was moved later. */
  lateAfter: number;
}

/**
 * Checks an export against anchors, row by row as verify reads it: each row (and each chained
 * outcome) falls in the bucket of the first anchor at or after its log position; at the end the
 * heads of every stream at each anchor's position are carried forward bucket by bucket and the
 * root is made again. Memory: one hash per stream per anchor.
 */
export class AnchorCheck {
  private readonly buckets: Bucket[];
  private readonly uncovered = { rows: 0, outcomes: 0 };

  constructor(private readonly anchors: ChainAnchor[]) {
    this.buckets = anchors.map((anchor) => ({
      lateOrdinal: -1,
      rows: 0,
      firstPosition: null,
      lastPosition: null,
      outcomes: 0,
      verdicts: new Map(),
      outcomeHeads: new Map(),
      late: null,
      leftOut: null,
      lateAfter: Date.parse(anchor.at) + ANCHOR_CLOCK_TOLERANCE_MS,
    }));
  }

  /** Rows read, in file order. */
  private ordinal = 0;
  /** The last log position the file shows, of a verdict or of a chained outcome. */
  private lastPosition: number | null = null;
  /** Streams seen, and how many start mid-chain (their first row in the file links to one before it). */
  private readonly seen = new Set<string>();
  private midChain = 0;

  private indexOf(position: number): number {
    return firstIndex(this.anchors.length, (i) => this.anchors[i]!.position >= position);
  }

  private bucketOf(position: number): Bucket | null {
    return this.buckets[this.indexOf(position)] ?? null;
  }

  onRow(row: HistoryRow): void {
    const ordinal = this.ordinal++;
    this.lastPosition = Math.max(this.lastPosition ?? 0, row.position, row.outcome_position ?? 0);
    const index = this.indexOf(row.position);
    const bucket = this.buckets[index] ?? null;
    if (!this.seen.has(row.stream)) {
      this.seen.add(row.stream);
      if (row.prev_hash !== null) {
        this.midChain++;
        if (bucket)
          bucket.leftOut = {
            streams: (bucket.leftOut?.streams ?? 0) + 1,
            first: bucket.leftOut?.first ?? {
              stream: row.stream,
              verdictId: row.verdict_id,
              revision: row.revision,
              position: row.position,
              reason: `the first row of ${row.stream} in the file (revision ${row.revision}, position ${row.position}) links to an earlier verdict (prev_hash ${row.prev_hash}) that is not in the file: with every earlier anchor matched, that verdict lies in this anchor's range, so a row it covers was left out (or the file starts part way: an after= or from= export, which anchors cannot check)`,
            },
          };
      }
    }
    if (bucket) {
      // The anchor's block time bounds the row's: a row recorded after it was moved later.
      const anchor = this.anchors[index]!;
      if (Date.parse(row.recorded_at) > bucket.lateAfter) {
        const first: LateRow = bucket.late?.first ?? {
          stream: row.stream,
          verdictId: row.verdict_id,
          position: row.position,
          recordedAt: row.recorded_at,
          txHash: anchor.txHash,
          anchorAt: anchor.at,
          reason: `the row at position ${row.position} (verdict ${row.verdict_id}) is recorded at ${row.recorded_at}, after the block time ${anchor.at} of the anchor that covers it (transaction ${anchor.txHash}); ${ANCHOR_CLOCK_TOLERANCE_MS / 60_000} min of clock difference are allowed`,
        };
        if (bucket.late === null) bucket.lateOrdinal = ordinal;
        bucket.late = { rows: (bucket.late?.rows ?? 0) + 1, first };
      }
      bucket.rows++;
      bucket.firstPosition ??= row.position;
      bucket.lastPosition = row.position;
      bucket.verdicts.set(row.stream, row.hash);
    } else this.uncovered.rows++;
    if (row.outcome_hash === null || row.outcome_position === null) return;
    const at = this.bucketOf(row.outcome_position);
    if (!at) {
      this.uncovered.outcomes++;
      return;
    }
    at.outcomes++;
    const head = at.outcomeHeads.get(row.stream);
    if (!head || head.position < row.outcome_position)
      at.outcomeHeads.set(row.stream, { position: row.outcome_position, hash: row.outcome_hash });
  }

  finish(): AnchorReport {
    const verdicts = new Map<string, string>();
    const outcomes = new Map<string, string>();
    const last = this.lastPosition;
    const uncovered = { ...this.uncovered };
    const firstLate: { ordinal: number; row: LateRow | null } = { ordinal: -1, row: null };
    const lines = this.anchors.map((anchor, k): AnchorLine => {
      const bucket = this.buckets[k]!;
      for (const [stream, hash] of bucket.verdicts) verdicts.set(stream, hash);
      for (const [stream, head] of bucket.outcomeHeads) outcomes.set(stream, head.hash);
      const leaves = [...verdicts].map(([stream, hash]) => ({
        stream,
        leaf: anchorLeaf(stream, hash, outcomes.get(stream) ?? null),
      }));
      const recomputedRoot = leaves.length > 0 ? merkleRoot(leaves) : null;
      const matches = recomputedRoot === anchor.root;
      if (!matches && (last === null || anchor.position > last)) {
        // Past the file's end: a head that moved after its last row is not in it.
        uncovered.rows += bucket.rows;
        uncovered.outcomes += bucket.outcomes;
        return {
          ...anchor,
          ok: null,
          beyond: true,
          recomputedRoot: null,
          streams: leaves.length,
          covers: { rows: 0, firstPosition: null, lastPosition: null, outcomes: 0 },
          late: null,
          leftOut: null,
          note: `beyond the export: this anchor is at log position ${anchor.position}, past the file's last position ${last ?? '(none: the file is empty)'}, and the file does not give its root: the root pins every stream's head at ${anchor.position}, and a head that moved after ${last ?? 'the file'} is not in the file, so not one stream of it can be checked here. An export taken before the anchor and a file cut short (its tail rewritten and rehashed) look the same: its ${bucket.rows} rows in the file are unverified (uncovered); export again (without filters) to check them against it.${this.midChainWords(" A head on a row before the file's first (an earlier verdict's outcome) is not in it either.")}`,
        };
      }
      if (bucket.late && (firstLate.row === null || bucket.lateOrdinal < firstLate.ordinal)) {
        firstLate.ordinal = bucket.lateOrdinal;
        firstLate.row = bucket.late.first;
      }
      return {
        ...anchor,
        ok: matches && bucket.late === null && bucket.leftOut === null,
        beyond: false,
        recomputedRoot,
        streams: leaves.length,
        covers: {
          rows: bucket.rows,
          firstPosition: bucket.firstPosition,
          lastPosition: bucket.lastPosition,
          outcomes: bucket.outcomes,
        },
        late: bucket.late,
        leftOut: bucket.leftOut,
        note: matches ? (bucket.leftOut?.first.reason ?? null) : this.mismatch(anchor, leaves.length),
      };
    });
    const beyond = lines.filter((l) => l.beyond);
    const checked = lines.filter((l) => !l.beyond).at(-1) ?? null;
    const after = checked?.position ?? null;
    const rows = `${uncovered.rows} rows and ${uncovered.outcomes} outcomes`;
    return {
      ok: last !== null && lines.every((l) => l.ok !== false),
      note:
        last === null
          ? 'the file holds no rows: nothing to check against the anchors (an empty or cut file proves nothing)'
          : null,
      anchors: lines,
      unverified:
        beyond.length === 0 || last === null
          ? null
          : {
              after,
              rows: uncovered.rows,
              outcomes: uncovered.outcomes,
              note: `partly verified: the file's rows after ${after === null ? 'its start' : `position ${after}`} (${rows}) are not covered by a checked anchor. ${beyond.length === 1 ? 'An anchor' : `${beyond.length} anchors`} (from position ${beyond[0]!.position}) ${beyond.length === 1 ? 'lies' : 'lie'} beyond the file's last position ${last}, and a file cut short, its tail rewritten and rehashed, cannot be told from an export taken before ${beyond.length === 1 ? 'it' : 'them'}: those rows are unverified. Export again (without filters) and verify the fresh file to cover them; --allow-uncovered accepts the file as partly verified.`,
            },
      lastPosition: last,
      uncovered,
      firstLate: firstLate.row,
    };
  }

  /** The file's streams that start mid-chain, with `then` after; empty when none does. */
  private midChainWords(then: string): string {
    return this.midChain > 0
      ? ` ${this.midChain} of the file's streams start mid-chain (their first row links to one before the file: a from= or after= export, or one cut at the front).${then}`
      : '';
  }

  /** What a root that differs means, and what else it can mean: a file that is not the whole history. */
  private mismatch(anchor: ChainAnchor, streams: number): string {
    const midChain = this.midChainWords('');
    return `the root made from the file's ${streams} streams at position ${anchor.position} differs from the anchored one. An anchor covers every stream the service held at its position (how many is not on the chain: the log's HistoryAnchored and the readiness check's lastAnchor.streams say), so only an export without filters (no coin, exchange, timeframe, call, from or to) can be checked against it: a filtered export fails every anchor.${midChain} With an unfiltered export, a verdict or outcome up to this anchor was changed, added or left out, or the anchors read are another deployment's (check that --rpc is the chain and --address the wallet that /readyz shows under processor:history-anchor, lastAnchor.chainId and address).`;
  }
}
