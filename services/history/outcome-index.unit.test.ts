import { describe, expect, it } from 'vitest';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { HISTORY_COLUMNS, outcomeStream } from '../../contracts/history.ts';
import { verdictHash } from '../../contracts/verdict-hash.ts';
import { foldEvents } from '../../projections/projection.ts';
import { addRevision, hasRevision, labelledVerdictsProjection } from './projections.ts';
import { fillColumns, historyRow, rowRef } from './rows.ts';
import { splitColumns } from './writers.ts';

const HOUR = 3_600_000;
const T0 = Date.parse('2025-10-01T00:00:00Z');
const VERDICT_ID = '00000000-0000-4000-8000-000000000001';

function verdictEvent(): RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'> {
  const content = {
    exchange: 'BINANCE' as const,
    coin: 'BTC',
    timeframe: '1h' as const,
    call: 'BUY' as const,
    confidence: 55,
    score: 0.3,
    regime: 'ranging' as const,
    price: 100,
    candleCloseTime: T0,
    feed: 'replay' as const,
    engineVersion: 'test',
    inputs: { rsi: 61.5 },
    prevHash: null,
    trigger: 'schedule' as const,
  };
  return {
    id: VERDICT_ID,
    type: 'VerdictRecorded',
    stream: 'verdicts-BINANCE-BTC-1h',
    revision: 7,
    position: 8,
    recordedAt: new Date(T0).toISOString(),
    correlationId: VERDICT_ID,
    causationId: null,
    data: { ...content, hash: verdictHash(content) },
  };
}

function outcomeEvent(
  verdictHashValue: string,
  over: Partial<{ stream: string; verdictRevision: number; position: number }> = {},
): RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'> {
  return {
    id: '00000000-0000-4000-8000-0000000000aa',
    type: 'VerdictOutcomeResolved',
    stream: over.stream ?? outcomeStream(VERDICT_ID),
    revision: 0,
    position: over.position ?? 40,
    recordedAt: new Date(T0 + 24 * HOUR).toISOString(),
    correlationId: VERDICT_ID,
    causationId: VERDICT_ID,
    data: {
      exchange: 'BINANCE',
      coin: 'BTC',
      timeframe: '1h',
      verdictId: VERDICT_ID,
      verdictStream: 'verdicts-BINANCE-BTC-1h',
      verdictRevision: over.verdictRevision ?? 7,
      verdictHash: verdictHashValue,
      call: 'BUY',
      confidence: 55,
      candleCloseTime: T0,
      feed: 'replay',
      price: 100,
      return1: 0.001,
      return6: 0.004,
      return24: 0.01,
      result: 'hit',
      feeBps: 10,
      horizonCandles: 6,
      netCentiBps: 3000,
      maeBps: -5,
      mfeBps: 45,
      realisedVol: 0.003,
    },
  };
}

describe('revision runs of the labelled-verdicts index', () => {
  it('merges revisions into disjoint sorted runs, whatever the order they come in', () => {
    const runs: number[] = [];
    for (const r of [0, 1, 2, 5, 4, 9, 3, 7, 2, 8]) addRevision(runs, r);
    expect(runs).toEqual([0, 5, 7, 9]);
    for (const r of [0, 3, 5, 7, 8, 9]) expect(hasRevision(runs, r)).toBe(true);
    for (const r of [-1, 6, 10, 100]) expect(hasRevision(runs, r)).toBe(false);
    expect(hasRevision(undefined, 0)).toBe(false);
    addRevision(runs, 6);
    expect(runs).toEqual([0, 9]);
  });

  it('agrees with a plain set on random insertions', () => {
    const runs: number[] = [];
    const set = new Set<number>();
    let x = 12345;
    for (let i = 0; i < 2_000; i++) {
      x = (x * 1103515245 + 12345) % 2 ** 31;
      const r = x % 500;
      addRevision(runs, r);
      set.add(r);
    }
    for (let r = -1; r <= 501; r++) expect(hasRevision(runs, r)).toBe(set.has(r));
    for (let i = 2; i < runs.length; i += 2) expect(runs[i]!).toBeGreaterThan(runs[i - 1]! + 1);
  });

  it('indexes an outcome under the verdict it names, only from the verdict’s own outcome stream', () => {
    const v = verdictEvent();
    const state = foldEvents(labelledVerdictsProjection, [
      outcomeEvent(v.data.hash),
      outcomeEvent(v.data.hash, { stream: 'verdict-outcome-elsewhere', verdictRevision: 3, position: 41 }),
    ]);
    expect(state.runs).toEqual({ 'verdicts-BINANCE-BTC-1h': [7, 7] });
  });
});

describe('history row', () => {
  it('attaches an outcome whose hash names the verdict’s content, and drops a forged one', () => {
    const v = verdictEvent();
    const revealed = T0 + 30 * HOUR;
    const labelled = historyRow(v, outcomeEvent(v.data.hash), revealed);
    expect(labelled).toMatchObject({ revealed: true, result: 'hit', return_6: 0.004, net_centi_bps: 3000 });
    const forged = historyRow(v, outcomeEvent('f'.repeat(64)), revealed);
    expect(forged.revealed).toBe(true);
    expect(forged.call).toBe('BUY');
    for (const field of [
      'outcome_id',
      'return_1',
      'return_6',
      'return_24',
      'result',
      'net_centi_bps',
      'mae_bps',
      'mfe_bps',
      'realised_vol',
    ] as const) {
      expect(forged[field]).toBeNull();
    }
    // Before the reveal even a genuine outcome stays out, with the content.
    const early = historyRow(v, outcomeEvent(v.data.hash), T0 + HOUR);
    expect(early).toMatchObject({ revealed: false, call: null, outcome_id: null, result: null });
  });
});

describe('history columns', () => {
  it('hold what the rows hold, column by column: commitment, revealed, labelled, forged label', () => {
    const v = verdictEvent();
    const revealed = T0 + 30 * HOUR;
    const cases = [
      rowRef(v, null, T0 + HOUR),
      rowRef(v, outcomeEvent(v.data.hash), T0 + HOUR),
      rowRef(v, null, revealed),
      rowRef(v, outcomeEvent(v.data.hash), revealed),
      rowRef(v, outcomeEvent('f'.repeat(64)), revealed),
    ];
    const direct = HISTORY_COLUMNS.map(() => new Array<unknown>(cases.length));
    fillColumns(cases.slice(0, 2), direct);
    fillColumns(cases.slice(2), direct, 2);
    const viaRows = HISTORY_COLUMNS.map(() => new Array<unknown>(cases.length));
    splitColumns(
      cases.map((r) => historyRow(r.verdict, r.outcome, r.now)),
      viaRows,
      0,
    );
    expect(direct).toEqual(viaRows);
    // The commitment's content columns are empty whatever outcome came with it.
    expect(HISTORY_COLUMNS.filter((_c, k) => direct[k]![1] !== null)).toEqual([
      'position',
      'verdict_id',
      'stream',
      'revision',
      'recorded_at',
      'exchange',
      'coin',
      'timeframe',
      'hash',
      'reveal_at',
      'revealed',
      'cursor',
    ]);
  });
});
