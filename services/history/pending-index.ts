import { firstIndex } from '../../adapters/first-index.ts';
import type { Call, FeedKind, Timeframe } from '../../contracts/market.ts';

/** A verdict waiting for its outcome, as the pending-outcomes projection (projections.ts) keeps it. */
export interface PendingVerdict {
  verdictId: string;
  stream: string;
  revision: number;
  exchange: string;
  coin: string;
  timeframe: Timeframe;
  call: Call;
  candleCloseTime: number;
  feed: 'live' | 'replay';
  dueAt: number;
}

export interface PendingOutcomes {
  pending: Record<string, PendingVerdict>;
  /** Verdict stream → hash of its last chained outcome: what the next outcome of the stream links to. */
  heads: Record<string, string>;
}

/** The market whose candles a verdict's outcome is read from (one feed, venue, coin, timeframe). */
export function marketKey(p: PendingVerdict): string {
  return `${p.feed}|${p.exchange}|${p.coin}|${p.timeframe}`;
}

interface Entry {
  readonly verdict: PendingVerdict;
  /** Order of recording: the order the pending view's record lists them in. */
  readonly seq: number;
}

interface MarketQueue {
  readonly feed: FeedKind;
  /** Sorted by due time, then by `seq`. */
  readonly entries: Entry[];
}

/**
 * The pending view's verdicts by market, each market's by due time: a resolver tick looks at each
 * market's earliest (a market whose candles are refused is passed over whole while it backs off)
 * and at the verdicts due, not at every pending one. On a 1M-event log 50,560 verdicts of 1,100
 * markets the replay cannot serve stay pending for good, and a scan of them all took 46–72 ms
 * of CPU a tick.
 *
 * Derived from the state, never stored with it: built from the record on first use (so also
 * after a snapshot load or a rebuild, which give the runner a new state object) and kept by the
 * projection's fold from then on.
 */
export class PendingIndex {
  private seq = 0;
  private readonly markets = new Map<string, MarketQueue>();

  constructor(pending: Record<string, PendingVerdict>) {
    for (const p of Object.values(pending)) this.add(p);
  }

  /** A verdict recorded; `replaced` is the one the record held under the same id, if any. */
  add(p: PendingVerdict, replaced?: PendingVerdict): void {
    // A replaced verdict keeps its place in the record, so its order too.
    const seq = (replaced && this.remove(replaced)) ?? this.seq++;
    const key = marketKey(p);
    let queue = this.markets.get(key);
    if (!queue) {
      queue = { feed: p.feed, entries: [] };
      this.markets.set(key, queue);
    }
    const { entries } = queue;
    // Almost always at the end: a market's verdicts are recorded in order of their closes.
    const at = firstIndex(entries.length, (i) => after(entries[i]!, p.dueAt, seq));
    if (at === entries.length) entries.push({ verdict: p, seq });
    else entries.splice(at, 0, { verdict: p, seq });
  }

  /** A verdict no longer pending; returns its order, undefined when it was not indexed. */
  remove(p: PendingVerdict): number | undefined {
    const key = marketKey(p);
    const queue = this.markets.get(key);
    if (!queue) return undefined;
    const { entries } = queue;
    for (
      let i = firstIndex(entries.length, (j) => entries[j]!.verdict.dueAt >= p.dueAt);
      i < entries.length;
      i++
    ) {
      const e = entries[i]!;
      if (e.verdict.dueAt !== p.dueAt) break;
      if (e.verdict.verdictId !== p.verdictId) continue;
      if (entries.length === 1) this.markets.delete(key);
      // Almost always the first: outcomes are resolved in order of due time.
      else if (i === 0) entries.shift();
      else entries.splice(i, 1);
      return e.seq;
    }
    return undefined;
  }

  /**
   * The verdicts of `feed` due at `now`, in the order the record lists them, leaving out whole the
   * markets `skip` names.
   */
  due(feed: FeedKind, now: number, skip: (market: string) => boolean): PendingVerdict[] {
    const found: Entry[] = [];
    for (const [key, queue] of this.markets) {
      if (queue.feed !== feed || queue.entries[0]!.verdict.dueAt > now || skip(key)) continue;
      for (const e of queue.entries) {
        if (e.verdict.dueAt > now) break;
        found.push(e);
      }
    }
    found.sort((a, b) => a.seq - b.seq);
    return found.map((e) => e.verdict);
  }

  /** Whether any verdict of the market is pending. */
  hasMarket(key: string): boolean {
    return this.markets.has(key);
  }
}

function after(e: Entry, dueAt: number, seq: number): boolean {
  return e.verdict.dueAt > dueAt || (e.verdict.dueAt === dueAt && e.seq > seq);
}

const indexes = new WeakMap<PendingOutcomes, PendingIndex>();

/** The index of a pending view's state, built on first use. */
export function pendingIndex(state: PendingOutcomes): PendingIndex {
  let index = indexes.get(state);
  if (!index) {
    index = new PendingIndex(state.pending);
    indexes.set(state, index);
  }
  return index;
}

/** The index of the state if one was built (the fold keeps it; none is built for a fold no resolver reads). */
export function builtIndex(state: PendingOutcomes): PendingIndex | undefined {
  return indexes.get(state);
}
