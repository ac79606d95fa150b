import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import {
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
} from '../../adapters/market/errors.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import type { EventData } from '../../contracts/events.ts';
import {
  RegimeReading,
  ScanFundingArbOutput,
  ScanTradeCallsOutput,
  TradeCall,
} from '../../contracts/tools.ts';
import { verifyVerdictChain } from '../../contracts/verdict-hash.ts';
import { SignalEngine } from './engine.ts';
import { describeFailure } from './operation-errors.ts';
import { verdictStream } from './verdict-recorder.ts';

const HOUR = 3_600_000;

describe('SignalEngine over the replayed real data', () => {
  let feed: ReplayFeed;
  let store: MemoryEventStore;
  let engine: SignalEngine;

  beforeEach(async () => {
    feed = await openReplayFeed({ run: false });
    store = new MemoryEventStore();
    engine = new SignalEngine({ feed, store, publicBaseUrl: 'https://signals.example' });
  });
  afterEach(async () => {
    await engine.close();
  });

  it('serves a trade call from closed candles, recorded before it is served', async () => {
    const call = TradeCall.parse(await engine.getTradeCall({ coin: 'btc', timeframe: '1h' }));
    expect(call).toMatchObject({ coin: 'BTC', timeframe: '1h', exchange: 'BINANCE', feed: 'replay' });
    expect(call.timestamp * 1000).toBeLessThanOrEqual(feed.now());
    expect(call.timestamp * 1000).toBeGreaterThan(feed.now() - HOUR);
    expect(call.reasoning).toBeTruthy();
    expect(call.verifyUrl).toBe('https://signals.example/verify/verdicts-BINANCE-BTC-1h/0');
    // Perpetual context: funding from the replayed Binance settlements, basis against spot.
    expect(call.indicators.funding_apr).not.toBeNull();
    expect(call.indicators.basis).not.toBeNull();

    const [event] = await store.readStream(
      verdictStream({ exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' }),
    );
    expect(event).toMatchObject({ id: call.verdictId, type: 'VerdictRecorded' });
    expect((event!.data as EventData<'VerdictRecorded'>).hash).toBe(call.signalHash);
    expect(event!.data).toMatchObject({ call: call.call, confidence: call.confidence, trigger: 'request' });
  });

  it('serves the same verdict until the next candle closes, then chains a new one', async () => {
    const first = await engine.getTradeCall({ coin: 'ETH', timeframe: '1h' });
    const again = await Promise.all(
      Array.from({ length: 10 }, () =>
        engine.getTradeCall({ coin: 'ETH', timeframe: '1h', includeReasoning: false }),
      ),
    );
    expect(new Set(again.map((c) => c.verdictId))).toEqual(new Set([first.verdictId]));
    expect(again[0]!.reasoning).toBeUndefined();
    expect(await store.headPosition()).toBe(1);

    for (let i = 0; i < 5; i++) {
      feed.clock.advance(HOUR);
      await engine.getTradeCall({ coin: 'ETH', timeframe: '1h' });
    }
    const events = await store.readStream(
      verdictStream({ exchange: 'BINANCE', coin: 'ETH', timeframe: '1h' }),
    );
    const verdicts = events
      .filter((e) => e.type === 'VerdictRecorded')
      .map((e) => e.data as EventData<'VerdictRecorded'>);
    expect(verdicts).toHaveLength(6);
    expect(verdicts.map((v) => v.candleCloseTime)).toEqual(
      verdicts.map((_, i) => verdicts[0]!.candleCloseTime + i * HOUR),
    );
    expect(verifyVerdictChain(verdicts)).toEqual({ ok: true });
    // Every regime change between consecutive verdicts appears as RegimeShifted.
    const changes = verdicts.slice(1).filter((v, i) => v.regime !== verdicts[i]!.regime).length;
    expect(events.filter((e) => e.type === 'RegimeShifted')).toHaveLength(changes);
  });

  it('reads the market regime with the metrics behind it', async () => {
    const reading = RegimeReading.parse(await engine.getMarketRegime({ coin: 'SOL' }));
    expect(reading).toMatchObject({ coin: 'SOL', timeframe: '4h', exchange: 'BINANCE', feed: 'replay' });
    expect(reading.metrics).toHaveProperty('adx');
    expect(reading.metrics).toHaveProperty('choppiness');
  });

  it('refuses what it cannot answer with typed errors, never a made-up verdict', async () => {
    await expect(engine.getTradeCall({ coin: 'DOGE', timeframe: '1h' })).rejects.toBeInstanceOf(
      UnknownCoinError,
    );
    await expect(engine.getTradeCall({ coin: 'BTC', timeframe: '1m' })).rejects.toBeInstanceOf(
      UnsupportedTimeframeError,
    );
    await expect(
      engine.getTradeCall({ coin: 'BTC', timeframe: '1h', exchange: 'OKX' }),
    ).rejects.toBeInstanceOf(UnsupportedExchangeError);
    // 42 daily candles in the shipped slice: not enough for the indicator set.
    const daily = await engine.getTradeCall({ coin: 'BTC', timeframe: '1d' }).catch((e: unknown) => e);
    expect(describeFailure(daily)).toMatchObject({ status: 422, code: 'insufficient_history' });
    await expect(engine.getTradeCall({ coin: 'BTC', timeframe: '7m' } as never)).rejects.toMatchObject({
      name: 'ZodError',
    });
    expect(await store.headPosition()).toBe(0);
  });

  it('scans the top markets and ranks the calls', async () => {
    const scan = ScanTradeCallsOutput.parse(
      await engine.scanTradeCalls({
        timeframe: '1h',
        exchange: 'BINANCE_SPOT',
        includeHolds: true,
        topN: 10,
      }),
    );
    expect(scan.scanned).toBe(3);
    expect(scan.calls.map((c) => c.coin).sort()).toEqual(['BTC', 'ETH', 'SOL']);
    expect(scan.calls.map((c) => c.rank)).toEqual([1, 2, 3]);
    const confidences = scan.calls.map((c) => c.confidence);
    expect(confidences).toEqual([...confidences].sort((a, b) => b - a));

    const strict = await engine.scanTradeCalls({
      timeframe: '1h',
      exchange: 'BINANCE_SPOT',
      minConfidence: 100,
    });
    expect(strict.calls.every((c) => c.confidence >= 100 && c.call !== 'HOLD')).toBe(true);
    const limited = await engine.scanTradeCalls({
      timeframe: '1h',
      exchange: 'BINANCE_SPOT',
      includeHolds: true,
      limit: 1,
    });
    expect(limited.calls).toHaveLength(1);
  });

  it('reports the markets a scan could not evaluate instead of dropping them', async () => {
    const scan = await engine.scanTradeCalls({
      timeframe: '1d',
      exchange: 'BINANCE_SPOT',
      includeHolds: true,
    });
    expect(scan.calls).toEqual([]);
    expect(scan.skipped.map((s) => s.coin)).toEqual(['BTC', 'ETH', 'SOL']);
  });

  it('scans funding across venues with each venue normalised by its own interval', async () => {
    const scan = ScanFundingArbOutput.parse(await engine.scanFundingArb({ minSpreadBps: 0, limit: 200 }));
    expect(scan.rows.length).toBeGreaterThan(0);
    for (const row of scan.rows) {
      expect(row.venues.length).toBeGreaterThanOrEqual(2);
      for (const v of row.venues) expect(v.hourlyRate).toBeCloseTo(v.rate / v.intervalHours, 15);
      const hourly = row.venues.map((v) => v.hourlyRate);
      expect(row.best.spreadBpsPerHour).toBeCloseTo((Math.max(...hourly) - Math.min(...hourly)) * 10_000, 9);
    }
    const spreads = scan.rows.map((r) => r.best.spreadBps);
    expect(spreads).toEqual([...spreads].sort((a, b) => b - a));
    expect(new Set(scan.venues.map((v) => v.exchange))).toContain('HYPERLIQUID');

    const none = await engine.scanFundingArb({ minSpreadBps: 10_000 });
    expect(none.rows).toEqual([]);
    const two = await engine.scanFundingArb({
      minSpreadBps: 0,
      exchanges: ['BINANCE', 'BYBIT'],
      coins: ['BTC'],
    });
    expect(
      two.rows.every(
        (r) => r.coin === 'BTC' && r.venues.every((v) => ['BINANCE', 'BYBIT'].includes(v.exchange)),
      ),
    ).toBe(true);
    // Replay has no volume for funding-only venues: a liquidity floor leaves them out.
    const liquid = await engine.scanFundingArb({ minSpreadBps: 0, minLiquidityUsd: 1 });
    expect(liquid.rows.every((r) => r.venues.every((v) => (v.quoteVolume24h ?? 0) >= 1))).toBe(true);
  });

  it('does not let the past change: a market state never sees a candle twice', async () => {
    const a = await engine.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    feed.clock.advance(4 * HOUR);
    const b = await engine.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    // A fresh engine, fresh state, same feed time: the same verdict.
    const other = new SignalEngine({ feed, store: new MemoryEventStore() });
    const c = await other.getTradeCall({ coin: 'BTC', timeframe: '4h' });
    expect(b.timestamp).toBe(a.timestamp + 4 * 3600);
    expect({ call: c.call, confidence: c.confidence, score: c.score }).toEqual({
      call: b.call,
      confidence: b.confidence,
      score: b.score,
    });
  });
});
