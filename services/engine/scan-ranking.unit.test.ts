import { describe, expect, it } from 'vitest';
import { ScanTradeCallsInput, type ScanTradeCallsOutput } from '../../contracts/tools.ts';
import { belowLimit, HOLD_LEFT_OUT, rankedScan, type ScanRow } from './scan-ranking.ts';

function row(coin: string, patch: Partial<ScanRow> = {}): ScanRow {
  return {
    rank: 0,
    coin,
    call: 'HOLD',
    confidence: 60,
    score: 0.2,
    regime: 'ranging',
    price: 100,
    timestamp: 0,
    quoteVolume24h: 1,
    verdictId: '00000000-0000-4000-8000-000000000001',
    expectedMovePct: 1,
    // Only carried through here; its shape is the lean contract's.
    lean: { direction: 'BUY' } as ScanRow['lean'],
    confidence_meaning: 'sample',
    volume: 1,
    ...patch,
  };
}

// Each key puts a different market first: A by confidence, B by lean, C by move, D by volume.
const rows = [
  row('A', { confidence: 90, score: 0.1, expectedMovePct: 1, volume: 10 }),
  row('B', { confidence: 50, score: -0.9, expectedMovePct: 2, volume: 20 }),
  row('C', { confidence: 50, score: 0.3, expectedMovePct: 5, volume: 30 }),
  row('D', { confidence: 50, score: 0.3, expectedMovePct: null, volume: 40 }),
];
const scan = (input: ScanTradeCallsInput, from = rows, notEvaluated: ScanTradeCallsOutput['skipped'] = []) =>
  rankedScan(from, notEvaluated, ScanTradeCallsInput.parse(input), from.length + notEvaluated.length);
const coins = (input: ScanTradeCallsInput) => scan(input).calls.map((c) => c.coin);

describe('scan ranking', () => {
  it('ranks by each key the caller asks, numbering the rows from 1', () => {
    expect(coins({ rankBy: 'confidence' })).toEqual(['A', 'B', 'C', 'D']);
    // Lean strength: |score| first (B leans hardest, SELL-ward), then confidence, then the coin.
    expect(coins({ rankBy: 'lean' })).toEqual(['B', 'C', 'D', 'A']);
    // A market without a forecast comes after every one with one.
    expect(coins({ rankBy: 'expectedMove' })).toEqual(['C', 'B', 'A', 'D']);
    expect(coins({ rankBy: 'volume' })).toEqual(['D', 'C', 'B', 'A']);
    expect(scan({ rankBy: 'volume', limit: 2 }).calls.map((c) => [c.rank, c.coin])).toEqual([
      [1, 'D'],
      [2, 'C'],
    ]);
    expect(ScanTradeCallsInput.safeParse({ rankBy: 'score' }).success).toBe(false);
  });

  it('lists HOLDs by default, with their lean, expected move and regime, and no note', () => {
    const result = scan({});
    expect(result.calls).toHaveLength(4);
    expect(result.calls[0]).toMatchObject({ call: 'HOLD', regime: 'ranging', expectedMovePct: 1 });
    expect(result.calls[0]!.lean).toMatchObject({ direction: 'BUY' });
    expect(result.calls[0]).not.toHaveProperty('volume');
    expect(result.skipped).toEqual([]);
    expect(result.note).toBeUndefined();
  });

  it('calls only, where every market answered HOLD: no row, each market named, and a note says why', () => {
    const result = scan({ includeHolds: false });
    expect(result.calls).toEqual([]);
    expect(result.skipped).toEqual(['A', 'B', 'C', 'D'].map((coin) => ({ coin, reason: HOLD_LEFT_OUT })));
    expect(result.note).toBe(
      'none of the 4 markets scanned is listed (each is named in skipped): 4 answered HOLD and calls only was asked (includeHolds: false)',
    );
    // Calls only still lists the calls.
    const mixed = scan({ includeHolds: false }, [...rows, row('E', { call: 'SELL', score: -0.5 })]);
    expect(mixed.calls.map((c) => c.coin)).toEqual(['E']);
    expect(mixed.note).toBeUndefined();
  });

  it('a minimum confidence above every row, and markets that could not be evaluated, are named and counted', () => {
    const result = scan({ minConfidence: 95 }, rows, [{ coin: 'Z', reason: 'no candles for Z on BINANCE' }]);
    expect(result.calls).toEqual([]);
    expect(result.skipped).toContainEqual({ coin: 'A', reason: 'confidence 90 below the minimum asked, 95' });
    expect(result.skipped).toContainEqual({ coin: 'Z', reason: 'no candles for Z on BINANCE' });
    expect(result.skipped.map((s) => s.coin)).toEqual(['A', 'B', 'C', 'D', 'Z']);
    expect(result.note).toBe(
      'none of the 5 markets scanned is listed (each is named in skipped): 4 had a confidence below the minimum asked, 95; 1 could not be evaluated',
    );
  });

  it('a scan of one market words its note in the singular', () => {
    const result = scan({ minConfidence: 95 }, rows.slice(0, 1));
    expect(result.calls).toEqual([]);
    expect(result.note).toBe(
      'the 1 market scanned is not listed (it is named in skipped): 1 had a confidence below the minimum asked, 95',
    );
  });

  it('names every market the limit cuts, with where it ranked, so each market scanned is listed or named', () => {
    const result = scan({ limit: 2, rankBy: 'volume' }, rows, [
      { coin: 'Z', reason: 'no candles for Z on BINANCE' },
    ]);
    expect(result.calls.map((c) => c.coin)).toEqual(['D', 'C']);
    expect(result.skipped).toEqual([
      { coin: 'A', reason: 'ranked 4 by volume, below the limit asked (limit: 2)' },
      { coin: 'B', reason: 'ranked 3 by volume, below the limit asked (limit: 2)' },
      { coin: 'Z', reason: 'no candles for Z on BINANCE' },
    ]);
    expect(result.skipped[0]!.reason).toBe(belowLimit(4, 'volume', 2));
    expect(result.note).toBeUndefined();
    // Ranks continue past the filters: a row a filter left out takes no rank.
    const filtered = scan({ limit: 1, minConfidence: 60 }, [...rows, row('E', { confidence: 95 })]);
    expect(filtered.calls.map((c) => c.coin)).toEqual(['E']);
    expect(filtered.skipped.find((s) => s.coin === 'A')).toEqual({
      coin: 'A',
      reason: 'ranked 2 by confidence, below the limit asked (limit: 1)',
    });
    expect(filtered.skipped.find((s) => s.coin === 'B')!.reason).toBe(
      'confidence 50 below the minimum asked, 60',
    );
    // Every market scanned is either a row or named once in skipped.
    const named = [...filtered.calls.map((c) => c.coin), ...filtered.skipped.map((s) => s.coin)];
    expect(named.sort()).toEqual(['A', 'B', 'C', 'D', 'E']);
  });

  it('an empty venue ranking says so', () => {
    expect(rankedScan([], [], ScanTradeCallsInput.parse({}), 0)).toEqual({
      calls: [],
      skipped: [],
      note: 'no market scanned: the venue ranking listed none',
    });
  });
});
