import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import type { EventData } from '../../contracts/events.ts';
import { EXCHANGES, type MarketKey, TIMEFRAMES } from '../../contracts/market.ts';
import { verifyVerdictChain } from '../../contracts/verdict-hash.ts';
import { latestVerdictsProjection } from '../../projections/latest-verdicts.ts';
import { foldEvents } from '../../projections/projection.ts';
import { describeFailure } from './operation-errors.ts';
import { parseVerdictStream, recordVerdict, type VerdictDraft, verdictStream } from './verdict-recorder.ts';

const HOUR = 3_600_000;
function draft(i: number, regime: VerdictDraft['regime'] = 'ranging'): VerdictDraft {
  return {
    exchange: 'BINANCE',
    coin: 'ETH',
    timeframe: '1h',
    call: 'BUY',
    confidence: 61,
    score: 0.42,
    regime,
    price: 2500 + i,
    candleCloseTime: 1_756_000_000_000 + i * HOUR,
    feed: 'replay',
    engineVersion: 'e1',
    inputs: { rsi: 55.5 },
    trigger: 'schedule',
  };
}

describe('recordVerdict', () => {
  it('chains verdicts per market and appends RegimeShifted when the regime changes', async () => {
    const store = new MemoryEventStore();
    await recordVerdict(store, draft(0, 'ranging'));
    await recordVerdict(store, draft(1, 'ranging'));
    const third = await recordVerdict(store, draft(2, 'trending-up'));
    const events = await store.readStream(verdictStream(draft(0)));
    expect(events.map((e) => e.type)).toEqual([
      'VerdictRecorded',
      'VerdictRecorded',
      'VerdictRecorded',
      'RegimeShifted',
    ]);
    expect(events[3]!.data).toMatchObject({ from: 'ranging', to: 'trending-up', verdictEventId: third.id });
    expect(events[3]!.causationId).toBe(third.id);
    const verdicts = events
      .filter((e) => e.type === 'VerdictRecorded')
      .map((e) => e.data as EventData<'VerdictRecorded'>);
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });

    // The chain continues after a regime shift (expected revision counts the shift event).
    await recordVerdict(store, draft(3, 'trending-up'));
    const all = await store.readStream(verdictStream(draft(0)));
    expect(all).toHaveLength(5);
    const state = foldEvents(latestVerdictsProjection, await store.readAll());
    expect(state['BINANCE:ETH:1h']).toMatchObject({ regime: 'trending-up', regimeShifts: 1, price: 2503 });
  });

  it('appends RiskShifted after the verdict (and its regime shift) when the forecast enters or leaves an outer decile', async () => {
    const store = new MemoryEventStore();
    const withForecast = (i: number, percentile: number, regime: VerdictDraft['regime'] = 'ranging') => ({
      ...draft(i, regime),
      inputs: {
        rsi: 55.5,
        vol_expected_move_pct: 1.2,
        vol_band_low: 2400,
        vol_band_high: 2600,
        vol_band_coverage: 0.8,
        vol_horizon_candles: 6,
        vol_percentile: percentile,
      },
    });
    // The first verdict of a market is no shift, even in the top decile.
    await recordVerdict(store, withForecast(0, 95));
    await recordVerdict(store, withForecast(1, 97));
    // Leaving the top decile, with a regime shift in the same append.
    const third = await recordVerdict(store, withForecast(2, 50, 'volatile'));
    // A verdict recorded without a forecast has no band: neither it nor the next one shifts.
    await recordVerdict(store, draft(3, 'volatile'));
    await recordVerdict(store, withForecast(4, 4, 'volatile'));
    const fifth = await recordVerdict(store, withForecast(5, 50, 'volatile'));
    const events = await store.readStream(verdictStream(draft(0)));
    expect(events.map((e) => e.type)).toEqual([
      'VerdictRecorded',
      'VerdictRecorded',
      'VerdictRecorded',
      'RegimeShifted',
      'RiskShifted',
      'VerdictRecorded',
      'VerdictRecorded',
      'VerdictRecorded',
      'RiskShifted',
    ]);
    expect(events[4]!.data).toEqual({
      exchange: 'BINANCE',
      coin: 'ETH',
      timeframe: '1h',
      from: 'top',
      to: 'middle',
      percentile: 50,
      priorPercentile: 97,
      expectedMovePct: 1.2,
      bandLow: 2400,
      bandHigh: 2600,
      bandCoverage: 0.8,
      horizonCandles: 6,
      price: 2502,
      candleCloseTime: draft(2).candleCloseTime,
      feed: 'replay',
      verdictEventId: third.id,
    });
    expect(events[4]!.causationId).toBe(third.id);
    expect(events[8]!.data).toMatchObject({ from: 'bottom', to: 'middle', verdictEventId: fifth.id });
    // Same append as the verdict: one position apart, and the chain still verifies.
    expect(events[4]!.position).toBe(events[2]!.position + 2);
    const verdicts = events
      .filter((e) => e.type === 'VerdictRecorded')
      .map((e) => e.data as EventData<'VerdictRecorded'>);
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });
    // Asked again for a recorded candle, the verdict on record is served, nothing appended.
    expect((await recordVerdict(store, withForecast(5, 99, 'volatile'))).id).toBe(fifth.id);
    expect(await store.readStream(verdictStream(draft(0)))).toHaveLength(9);
  });

  it('records one verdict per candle however many callers race for it', async () => {
    const store = new MemoryEventStore();
    await recordVerdict(store, draft(0));
    const results = await Promise.all(
      Array.from({ length: 20 }, () => recordVerdict(store, draft(1, 'volatile'))),
    );
    expect(new Set(results.map((r) => r.id)).size).toBe(1);
    const events = await store.readStream(verdictStream(draft(0)));
    expect(events.map((e) => e.type)).toEqual(['VerdictRecorded', 'VerdictRecorded', 'RegimeShifted']);
  });

  it('records every candle when recorders of one process write at once, with no lost race', async () => {
    const store = new MemoryEventStore();
    await recordVerdict(store, draft(0));
    // A scheduler and on-demand calls of one process, each on a newer candle than the last: with a
    // single try each, any two that read the same revision would fail the later one.
    const results = await Promise.all(
      Array.from({ length: 20 }, (_, i) => recordVerdict(store, draft(i + 1), { maxAttempts: 1 })),
    );
    expect(results.map((r) => r.data.candleCloseTime)).toEqual(
      Array.from({ length: 20 }, (_, i) => draft(i + 1).candleCloseTime),
    );
    const verdicts = (await store.readStream(verdictStream(draft(0)))).map(
      (e) => e.data as EventData<'VerdictRecorded'>,
    );
    expect(verdicts).toHaveLength(21);
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });
  });

  it('serves the recorded verdict when asked again for an older candle', async () => {
    const store = new MemoryEventStore();
    const newer = await recordVerdict(store, draft(5));
    const again = await recordVerdict(store, draft(4));
    expect(again.id).toBe(newer.id);
    expect(await store.headPosition()).toBe(1);
  });

  it('never chains an older candle after a later one, whatever engine version recorded the later one', async () => {
    // An upgrade that changes the engine version, on a log whose replay clock was not kept, starts
    // the replay again at its data's start: the new engine's candles are older than the chain's last.
    const store = new MemoryEventStore();
    const later = await recordVerdict(store, draft(5));
    const older = await recordVerdict(store, { ...draft(4), engineVersion: 'e2' });
    expect(older.id).toBe(later.id);
    expect(await store.headPosition()).toBe(1);
    // The candle on record may be recorded again by the new engine version, and the chain goes on.
    const again = await recordVerdict(store, { ...draft(5), engineVersion: 'e2' });
    const next = await recordVerdict(store, { ...draft(6), engineVersion: 'e2' });
    expect([again.id, next.id]).not.toContain(later.id);
    const verdicts = (await store.readStream(verdictStream(draft(0))))
      .filter((e) => e.type === 'VerdictRecorded')
      .map((e) => e.data as EventData<'VerdictRecorded'>);
    expect(verdicts.map((v) => [v.candleCloseTime - draft(0).candleCloseTime, v.engineVersion])).toEqual([
      [5 * HOUR, 'e1'],
      [5 * HOUR, 'e2'],
      [6 * HOUR, 'e2'],
    ]);
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });
  });

  it('refuses a malformed verdict before writing anything', async () => {
    const store = new MemoryEventStore();
    await expect(recordVerdict(store, { ...draft(0), confidence: 140 })).rejects.toThrow();
    await expect(recordVerdict(store, { ...draft(0), price: -1 })).rejects.toThrow();
    expect(await store.headPosition()).toBe(0);
  });

  it('loses the race on every try as a retryable 503, having written nothing', async () => {
    const store = new MemoryEventStore();
    let appends = 0;
    // Another writer moves the stream between every read and append of this one.
    const contested = Object.assign(Object.create(store), {
      append: async (stream: string) => {
        appends++;
        throw new WrongExpectedRevisionError(stream, 0, 1);
      },
    }) as MemoryEventStore;
    const lost = await recordVerdict(contested, draft(0), { maxAttempts: 3 }).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(WrongExpectedRevisionError);
    expect(appends).toBe(3);
    expect(describeFailure(lost)).toMatchObject({
      status: 503,
      code: 'event_store_unavailable',
      retryable: true,
    });
    expect(await store.headPosition()).toBe(0);
  });
});

describe('parseVerdictStream', () => {
  it('reads back the market of every venue and timeframe verdictStream names', () => {
    for (const exchange of EXCHANGES)
      for (const timeframe of TIMEFRAMES)
        for (const coin of ['BTC', '1000PEPE', 'K-PEPE']) {
          const market: MarketKey = { exchange, coin, timeframe };
          expect(parseVerdictStream(verdictStream(market))).toEqual(market);
        }
  });

  it('tells BINANCE_SPOT from BINANCE', () => {
    expect(parseVerdictStream('verdicts-BINANCE_SPOT-ETH-4h')).toEqual({
      exchange: 'BINANCE_SPOT',
      coin: 'ETH',
      timeframe: '4h',
    });
  });

  it('refuses streams that are not verdict streams', () => {
    for (const stream of [
      '',
      'verdicts-',
      'outcomes-BINANCE-ETH-1h',
      'verdicts-BINANCE-ETH',
      'verdicts-BINANCE-1h',
      'verdicts-BINANCE--1h',
      'verdicts-KRAKEN-ETH-1h',
      'verdicts-binance-ETH-1h',
      'verdicts-BINANCE-ETH-1w',
      'verdicts-BINANCE-ETH-1h-',
      'verdicts-BINANCE_SPOTX-ETH-1h',
    ])
      expect(parseVerdictStream(stream), stream).toBeUndefined();
  });
});
