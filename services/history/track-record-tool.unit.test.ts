import { describe, expect, it } from 'vitest';
import type { TrackRecordResponse } from '../../contracts/history.ts';
import { defaultBaselines } from '../engine/signals/default-baselines.ts';
import { trackRecordForAgents } from './track-record-tool.ts';

/** The shipped baselines in an answer; the lines are the e2e suite's (test/track-record-tool.e2e.test.ts). */
const record = { lines: [], series: [], baselines: defaultBaselines } as unknown as TrackRecordResponse;

describe('trackRecordForAgents narrows every per-cell baseline table to the cell asked', () => {
  it('keeps every regime-label row when asked for neither a venue nor a timeframe', () => {
    const all = trackRecordForAgents(record, {});
    expect(all.baselines!.labels).toEqual(defaultBaselines.labels);
    expect(all.baselines!.labels.length).toBeGreaterThan(2);
  });

  it('keeps the label rows of the venue kind asked (BINANCE is the perpetual)', () => {
    const perp = trackRecordForAgents(record, { exchange: 'BINANCE' }).baselines!;
    expect(perp.labels.length).toBeGreaterThan(0);
    expect(perp.labels.length).toBeLessThan(defaultBaselines.labels.length);
    expect(perp.labels.every((l) => l.set === 'perp')).toBe(true);
    expect(perp.labels).toEqual(defaultBaselines.labels.filter((l) => l.set === 'perp'));
    // The same narrowing as the cells and risk rows beside it.
    expect(new Set(perp.cells.map((c) => c.cell.split(':')[0]))).toEqual(new Set(['perp']));
  });

  it('keeps the label rows of the timeframe asked, and of the cell when both are asked', () => {
    const twoHours = trackRecordForAgents(record, { timeframe: '2h' }).baselines!;
    expect(twoHours.labels.map((l) => `${l.set}:${l.timeframe}`).sort()).toEqual(['perp:2h', 'spot:2h']);
    const cell = trackRecordForAgents(record, { exchange: 'BINANCE_SPOT', timeframe: '5m' }).baselines!;
    expect(cell.labels.map((l) => `${l.set}:${l.timeframe}`)).toEqual(['spot:5m']);
    // A cell the evaluation scored no labels on: none, not every other cell's.
    expect(trackRecordForAgents(record, { timeframe: '1m' }).baselines!.labels).toEqual([]);
  });
});

describe('trackRecordForAgents says why a narrowed answer has no line', () => {
  const empty = {
    ...record,
    window: '7d',
    feedNote: 'No resolved verdict in the window.',
  } as TrackRecordResponse;

  it('names a timeframe whose outcome comes after the window can hold it', () => {
    const answer = trackRecordForAgents(empty, { exchange: 'BINANCE', timeframe: '12h' });
    expect(answer.lines).toEqual([]);
    expect(answer.feedNote).toBe(
      "No resolved verdict in the window. No line for BINANCE 12h in this window: no verdict of it has resolved there (each counts once its outcome, 24 candles after its close, is in). A 12h verdict's outcome comes 12 days after its close, so a 7d window never holds one: ask a longer window.",
    );
  });

  it('says only that none resolved where the window can hold one, and nothing when lines are there', () => {
    expect(trackRecordForAgents({ ...empty, window: '30d' }, { timeframe: '1h' }).feedNote).toBe(
      'No resolved verdict in the window. No line for 1h in this window: no verdict of it has resolved there (each counts once its outcome, 24 candles after its close, is in).',
    );
    expect(trackRecordForAgents(empty, {}).feedNote).toBe(empty.feedNote);
  });
});
