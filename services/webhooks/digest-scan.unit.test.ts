import { describe, expect, it, vi } from 'vitest';
import { ScanTradeCallsOutput } from '../../contracts/tools.ts';
import type { LatestVerdict, LatestVerdicts } from '../../projections/latest-verdicts.ts';
import { defaultCalibration, recordedMeaning } from '../engine/signals/index.ts';
import { projectedScan, rankedDigestScan } from './digest-scan.ts';

function verdict(coin: string, patch: Partial<LatestVerdict> = {}): LatestVerdict {
  return {
    exchange: 'BINANCE',
    coin,
    timeframe: '1h',
    verdictId: '00000000-0000-4000-8000-000000000001',
    call: 'BUY',
    confidence: 60,
    score: 0.4,
    regime: 'trending-up',
    price: 100,
    candleCloseTime: 0,
    feed: 'replay',
    hash: 'a'.repeat(64),
    expectedMovePct: 1.5,
    engineVersion: 'signals-4',
    regimeShifts: 0,
    ...patch,
  };
}

describe('digest scan from projected verdicts', () => {
  it('takes the venue top-N, ranks by confidence then |score|, HOLDs included, and names every market it does not list', () => {
    const verdicts: LatestVerdicts = {
      'BINANCE:BTC:1h': verdict('BTC', { confidence: 55 }),
      'BINANCE:ETH:1h': verdict('ETH', { confidence: 70, score: 0.2 }),
      'BINANCE:SOL:1h': verdict('SOL', { confidence: 70, score: -0.6, candleCloseTime: 1_699_999_200_000 }),
      'BINANCE:XRP:1h': verdict('XRP', { call: 'HOLD' }),
      'BINANCE:DOGE:1h': verdict('DOGE', { confidence: 99 }),
    };
    const scan = projectedScan(
      { exchange: 'BINANCE', timeframe: '1h', topN: 5, limit: 5, minConfidence: 56 },
      {
        verdicts,
        ranked: ['BTC', 'ETH', 'SOL', 'XRP', 'ADA', 'DOGE'],
        volumeOf: (coin) => (coin === 'XRP' ? 1e9 : null),
        feed: 'replay',
        now: 1_700_000_000_500,
      },
    );
    expect(scan).toMatchObject({
      exchange: 'BINANCE',
      timeframe: '1h',
      scanned: 5,
      timestamp: 1_700_000_000,
    });
    expect(scan.calls.map((c) => [c.rank, c.coin, c.call])).toEqual([
      [1, 'SOL', 'BUY'],
      [2, 'ETH', 'BUY'],
      [3, 'XRP', 'HOLD'],
    ]);
    expect(scan.calls[2]).toMatchObject({ quoteVolume24h: 1e9, expectedMovePct: 1.5, regime: 'trending-up' });
    // A row's timestamp is its verdict's candle close in Unix seconds, not the scan's time.
    expect(scan.calls[0]).toMatchObject({ coin: 'SOL', timestamp: 1_699_999_200 });
    // DOGE is beyond the top 5; of the top 5, each market not listed is named with its reason.
    expect(scan.skipped).toEqual([
      { coin: 'ADA', reason: 'no verdict recorded for ADA 1h on BINANCE' },
      { coin: 'BTC', reason: 'confidence 55 below the minimum asked, 56' },
    ]);
    expect(scan.note).toBeUndefined();
    // Each row says what its confidence means, from its recorded score and its engine's table.
    for (const row of scan.calls) {
      const v = verdicts[`BINANCE:${row.coin}:1h`]!;
      expect({ lean: row.lean, confidence_meaning: row.confidence_meaning }).toEqual(
        recordedMeaning(v, defaultCalibration),
      );
    }
  });

  it('with no verdict on record for any top-N market: no row, each market named, and a note', () => {
    const scan = projectedScan(
      { exchange: 'BINANCE', timeframe: '4h', topN: 2 },
      { verdicts: {}, ranked: ['BTC', 'ETH'], volumeOf: () => null, feed: 'replay', now: 0 },
    );
    expect(scan.calls).toEqual([]);
    expect(scan.skipped).toEqual([
      { coin: 'BTC', reason: 'no verdict recorded for BTC 4h on BINANCE' },
      { coin: 'ETH', reason: 'no verdict recorded for ETH 4h on BINANCE' },
    ]);
    expect(scan.note).toBe(
      'none of the 2 markets scanned is listed (each is named in skipped): 2 could not be evaluated',
    );
  });

  it('with a top_n past the markets the venue ranks: a note says the digest covers all it lists', () => {
    const ranked = ['BTC', 'ETH', 'SOL'];
    const verdicts: LatestVerdicts = Object.fromEntries(ranked.map((c) => [`BINANCE:${c}:1h`, verdict(c)]));
    const scan = projectedScan(
      { exchange: 'BINANCE', timeframe: '1h', topN: 5, limit: 5 },
      { verdicts, ranked, volumeOf: () => null, feed: 'replay', now: 0 },
    );
    expect(scan.calls).toHaveLength(3);
    expect(scan.skipped).toEqual([]);
    expect(scan.note).toBe('BINANCE ranks 3 markets, fewer than top_n 5: this digest covers all 3');
    // With no row either, both are said.
    const none = projectedScan(
      { exchange: 'BINANCE', timeframe: '1h', topN: 5 },
      { verdicts: {}, ranked: ['BTC'], volumeOf: () => null, feed: 'replay', now: 0 },
    );
    expect(none.note).toBe(
      'BINANCE ranks 1 market, fewer than top_n 5: this digest covers it; the 1 market scanned is not listed (it is named in skipped): 1 could not be evaluated',
    );
    // A top_n the venue fills: no note.
    const full = projectedScan(
      { exchange: 'BINANCE', timeframe: '1h', topN: 3, limit: 3 },
      { verdicts, ranked, volumeOf: () => null, feed: 'replay', now: 0 },
    );
    expect(full.note).toBeUndefined();
  });

  it('a HOLD row says how often standing aside was right, and what it leans', () => {
    const scan = projectedScan(
      { exchange: 'BINANCE_SPOT', timeframe: '15m', topN: 1 },
      {
        verdicts: {
          'BINANCE_SPOT:BTC:15m': verdict('BTC', {
            exchange: 'BINANCE_SPOT',
            timeframe: '15m',
            call: 'HOLD',
            confidence: 58,
            score: 0.3,
          }),
        },
        ranked: ['BTC'],
        volumeOf: () => null,
        feed: 'replay',
        now: 0,
      },
    );
    const [row] = ScanTradeCallsOutput.parse(scan).calls;
    // spot:15m fades the score: a positive score leans SELL, with timing skill that did not pay.
    expect(row!.lean).toMatchObject({ direction: 'SELL', timing_skill: true });
    expect(row!.lean!.expected_net_bps!).toBeLessThan(0);
    expect(row!.confidence_meaning).toContain('58 = how often standing aside was right');
  });
});

describe('the dispatcher digest scan', () => {
  const input = { exchange: 'BINANCE' as const, timeframe: '1h' as const, topN: 2, limit: 2 };
  const feed = { kind: 'replay' as const, now: () => 1_700_000_000_500 };
  const ranking = (coins: string[]) => ({
    prepare: async () => {},
    ranked: () => coins.map((coin) => ({ coin, quoteVolume24h: null })),
  });

  it('throws, so the digest is retried, while no venue ranking is loaded', async () => {
    const waited: number[] = [];
    const scan = rankedDigestScan({
      ranking: ranking([]),
      verdicts: { state: {}, checkpoint: 0, waitFor: async (p) => void waited.push(p) },
      headPosition: async () => 7,
      feed,
    });
    await expect(scan(input)).rejects.toThrow('no market ranking for BINANCE loaded yet');
  });

  it('reads the verdicts only once their projection reached the log head', async () => {
    const verdicts = {
      state: {} as LatestVerdicts,
      checkpoint: 0,
      waitFor: vi.fn(async (_position: number, _timeoutMs?: number) => {
        // Catching up folds the verdicts a rebuild from position 0 had not reached yet.
        verdicts.state = { 'BINANCE:ETH:1h': verdict('ETH'), 'BINANCE:BTC:1h': verdict('BTC') };
      }),
    };
    const scan = rankedDigestScan({
      ranking: ranking(['ETH', 'BTC', 'SOL']),
      verdicts,
      headPosition: async () => 42,
      feed,
      catchUpMs: 1_000,
    });
    const result = await scan(input);
    expect(verdicts.waitFor).toHaveBeenCalledWith(42, 1_000);
    expect(result.skipped).toEqual([]);
    expect(result.calls.map((c) => c.coin).sort()).toEqual(['BTC', 'ETH']);
  });

  it("names a market whose latest verdict is of an earlier close than the digest's, instead of listing it as now", async () => {
    const hour = 3_600_000;
    const start = 1_760_040_000_000; // 2025-10-09T20:00:00Z, a period's start and a 1h close
    // ETH's verdict is of the digest's close; BTC's latest, days before it: the engine records every
    // close only for the markets it schedules, and BTC was not among them since.
    const state: LatestVerdicts = {
      'BINANCE:ETH:1h': verdict('ETH', { candleCloseTime: start }),
      'BINANCE:BTC:1h': verdict('BTC', { candleCloseTime: start - 76 * hour }),
    };
    const scan = rankedDigestScan({
      ranking: ranking(['ETH', 'BTC']),
      verdicts: { state, checkpoint: 0, waitFor: () => new Promise((r) => setTimeout(r, 1)) },
      headPosition: async () => 0,
      feed,
      catchUpMs: 20,
    });
    const result = await scan(input, { start: start + 10 * 60_000 });
    expect(result.calls.map((c) => [c.coin, c.timestamp])).toEqual([['ETH', start / 1000]]);
    expect(result.skipped).toEqual([
      {
        coin: 'BTC',
        reason:
          "no verdict recorded for BTC 1h on BINANCE at this digest's close, 2025-10-09T20:00:00.000Z: the latest on record is of 2025-10-06T16:00:00.000Z",
      },
    ]);
    // Without a period (not a digest), the latest on record is listed whatever its close.
    expect((await scan(input)).calls.map((c) => c.coin).sort()).toEqual(['BTC', 'ETH']);
  });

  it('waits for the close only on the markets the engine schedules, not on those past them', async () => {
    const hour = 3_600_000;
    const start = 1_760_040_000_000; // 2025-10-09T20:00:00Z
    // The engine records every close of its top 1 (ETH) only: BTC, second, has a verdict days old
    // and none coming, so the digest does not spend its catch-up budget on it.
    const state: LatestVerdicts = {
      'BINANCE:ETH:1h': verdict('ETH', { candleCloseTime: start }),
      'BINANCE:BTC:1h': verdict('BTC', { candleCloseTime: start - 76 * hour }),
    };
    let waits = 0;
    const scan = rankedDigestScan({
      ranking: ranking(['ETH', 'BTC']),
      verdicts: {
        state,
        checkpoint: 0,
        waitFor: () => {
          waits++;
          return new Promise((r) => setTimeout(r, 1));
        },
      },
      headPosition: async () => 0,
      feed,
      catchUpMs: 1_000,
      scheduledTopN: 1,
    });
    const result = await scan(input, { start });
    // The head's wait only, no turn of the close's.
    expect(waits).toBe(1);
    expect(result.calls.map((c) => c.coin)).toEqual(['ETH']);
    expect(result.skipped.map((s) => s.coin)).toEqual(['BTC']);
  });

  it('throws when the verdicts do not catch up in time', async () => {
    const scan = rankedDigestScan({
      ranking: ranking(['ETH']),
      verdicts: {
        state: {},
        checkpoint: 0,
        waitFor: () => Promise.reject(new Error('did not reach position 9')),
      },
      headPosition: async () => 9,
      feed,
    });
    await expect(scan(input)).rejects.toThrow('did not reach position 9');
  });
});
