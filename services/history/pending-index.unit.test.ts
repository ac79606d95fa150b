import { describe, expect, it } from 'vitest';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { outcomeStream } from '../../contracts/history.ts';
import { type FeedKind, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { foldEvents } from '../../projections/projection.ts';
import { syntheticOutcome, syntheticVerdict } from '../../test/history-harness.ts';
import { marketKey, PendingIndex, pendingIndex } from './pending-index.ts';
import { type PendingOutcomes, type PendingVerdict, pendingOutcomesProjection } from './projections.ts';

const T0 = Date.parse('2025-10-01T00:00:00Z');
const COINS = ['BTC', 'ETH', 'SOL', 'NOPE'];
const TIMEFRAMES: Timeframe[] = ['5m', '1h', '4h'];

function pendingVerdict(n: number, over: Partial<PendingVerdict> = {}): PendingVerdict {
  const timeframe = TIMEFRAMES[n % TIMEFRAMES.length]!;
  const candleCloseTime = T0 + (n % 97) * TIMEFRAME_MS[timeframe];
  return {
    verdictId: deterministicId('pending-index', n),
    stream: `verdicts-BINANCE-${COINS[n % COINS.length]}-${timeframe}`,
    revision: n,
    exchange: 'BINANCE',
    coin: COINS[n % COINS.length]!,
    timeframe,
    call: 'BUY',
    candleCloseTime,
    feed: n % 5 === 0 ? 'live' : 'replay',
    dueAt: candleCloseTime + 24 * TIMEFRAME_MS[timeframe],
    ...over,
  };
}

/** What the resolver read before the index: every pending verdict, filtered, in the record's order. */
function scanned(
  record: Record<string, PendingVerdict>,
  feed: FeedKind,
  now: number,
  skip: (market: string) => boolean,
): PendingVerdict[] {
  return Object.values(record).filter((p) => p.dueAt <= now && p.feed === feed && !skip(marketKey(p)));
}

describe('pending verdicts by market and due time', () => {
  it('gives a tick over 50,000 pending verdicts exactly the 3 due, in the order they were recorded', () => {
    const record: Record<string, PendingVerdict> = {};
    const far = T0 + 365 * 86_400_000;
    for (let n = 0; n < 50_000; n++) {
      const p = pendingVerdict(n, { dueAt: far + n });
      record[p.verdictId] = p;
    }
    const due = [50_002, 50_000, 50_001].map((n) => pendingVerdict(n, { feed: 'replay', dueAt: T0 + n }));
    for (const p of due) record[p.verdictId] = p;
    const index = new PendingIndex(record);
    expect(index.due('replay', T0 + 60_000, () => false)).toEqual(due);
    expect(index.due('live', T0 + 60_000, () => false)).toEqual([]);
    // A market backing off is left out whole.
    expect(index.due('replay', T0 + 60_000, (m) => m === marketKey(due[1]!))).toEqual([due[0], due[2]]);
  });

  it('agrees with a scan of the record through random recordings and resolutions', () => {
    const record: Record<string, PendingVerdict> = {};
    let index: PendingIndex | null = null;
    let x = 987_654_321;
    const rand = (k: number) => {
      x = (x * 1_103_515_245 + 12_345) % 2 ** 31;
      return x % k;
    };
    let recorded = 0;
    for (let step = 0; step < 6_000; step++) {
      const ids = Object.keys(record);
      if (ids.length > 0 && rand(3) === 0) {
        const p = record[ids[rand(ids.length)]!]!;
        delete record[p.verdictId];
        index?.remove(p);
      } else if (recorded > 0 && rand(50) === 0) {
        // The same id recorded again keeps its place in the record (and so in the order).
        const p = pendingVerdict(rand(recorded), { call: 'SELL' });
        const replaced = record[p.verdictId];
        record[p.verdictId] = p;
        index?.add(p, replaced);
      } else {
        const p = pendingVerdict(recorded++);
        record[p.verdictId] = p;
        index?.add(p);
      }
      // Built part way, as a resolver does on its first tick over a loaded snapshot.
      if (step === 1_500) index = new PendingIndex(record);
      if (index && step % 250 === 0) {
        for (const feed of ['live', 'replay'] as const) {
          for (const now of [T0, T0 + 30 * 3_600_000, T0 + 10 * 86_400_000]) {
            const skip = (m: string) => m.endsWith('|NOPE|1h');
            expect(index.due(feed, now, skip)).toEqual(scanned(record, feed, now, skip));
          }
        }
        for (const p of Object.values(record)) expect(index.hasMarket(marketKey(p))).toBe(true);
      }
    }
  });

  it('is kept by the pending view’s fold once built, and built afresh for a state loaded from a snapshot', () => {
    const events: RecordedEvent[] = [];
    const verdicts: { id: string; stream: string; data: ReturnType<typeof syntheticVerdict> }[] = [];
    for (let n = 0; n < 60; n++) {
      const data = syntheticVerdict(n % 8, n, 60, null);
      const v = { id: deterministicId('pending-index-fold', n), stream: `verdicts-${n % 8}`, data };
      verdicts.push(v);
      events.push(recorded('VerdictRecorded', v.id, v.stream, n, events.length + 1, data));
      // Every third verdict's outcome follows a little later.
      if (n % 3 === 2) {
        const o = verdicts[n - 2]!;
        const outcome = syntheticOutcome(o.data, o.id, o.stream, n - 2);
        const id = deterministicId('pending-index-outcome', n);
        events.push(
          recorded('VerdictOutcomeResolved', id, outcomeStream(o.id), 0, events.length + 1, outcome),
        );
      }
    }
    const half = Math.floor(events.length / 2);
    const state = foldEvents(pendingOutcomesProjection, events.slice(0, half));
    const index = pendingIndex(state);
    let folded = state;
    for (const e of events.slice(half)) folded = pendingOutcomesProjection.evolve(folded, e);
    expect(folded).toBe(state);
    expect(pendingIndex(state)).toBe(index);
    const all = (s: PendingOutcomes) => pendingIndex(s).due('replay', Date.now(), () => false);
    expect(Object.keys(state.pending)).toHaveLength(40);
    expect(all(state)).toEqual(scanned(state.pending, 'replay', Date.now(), () => false));
    expect(all(state)).toHaveLength(40);
    // A snapshot's state is another object: its index is built from its record.
    const loaded = structuredClone(state);
    expect(pendingIndex(loaded)).not.toBe(index);
    expect(all(loaded)).toEqual(Object.values(loaded.pending));
  });
});

function recorded(
  type: 'VerdictRecorded' | 'VerdictOutcomeResolved',
  id: string,
  stream: string,
  revision: number,
  position: number,
  data: unknown,
): RecordedEvent {
  return {
    id,
    type,
    stream,
    revision,
    position,
    recordedAt: new Date(T0).toISOString(),
    correlationId: id,
    causationId: null,
    data,
  } as RecordedEvent;
}
