import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import { TRACK_RECORD_WINDOWS } from '../../contracts/history.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { trackRecordProjection } from './projections.ts';
import { RecordCache } from './record-cache.ts';
import { addPoint, currentTrackRecord, type ScoredPoint, type TrackRecordState } from './track-record.ts';

const DAY = 86_400_000;
const T0 = Date.parse('2025-10-01T00:00:00Z');
const DAYS = 30;
const MARKETS: [Exchange, Timeframe][] = [
  ['BINANCE_SPOT', '5m'],
  ['BINANCE', '4h'],
];

function point(exchange: Exchange, timeframe: Timeframe, closeTime: number, i: number): ScoredPoint {
  const x = Math.sin(i * 7.1);
  return {
    exchange,
    timeframe,
    call: x > 0.2 ? 'BUY' : x < -0.2 ? 'SELL' : 'HOLD',
    confidence: 40 + Math.floor(Math.abs(x) * 50),
    candleCloseTime: closeTime,
    return6: x / 100,
    result: x > 0.2 ? 'hit' : 'miss',
    netCentiBps: Math.round(x * 1000),
    price: 100,
    return1: x / 300,
    return24: x / 50,
    feed: 'replay',
    volatility: {
      horizonCandles: 6,
      bandLow: 99,
      bandHigh: 100.5 + x,
      bandCoverage: 0.8,
      expectedMovePct: 1,
    },
  };
}

/** DAYS days of four scored points a day on each market: enough blocks for the risk intervals. */
function record() {
  const state: TrackRecordState = {};
  let position = 0;
  for (let d = 0; d < DAYS; d++)
    for (const [exchange, timeframe] of MARKETS)
      for (let k = 0; k < 4; k++)
        addPoint(state, point(exchange, timeframe, T0 + d * DAY + k * 6 * 3_600_000, ++position), position);
  return { state, position };
}

const NOW = T0 + (DAYS + 5) * DAY;

describe('RecordCache', () => {
  it('answers byte for byte what the record made fresh answers, for every window', () => {
    const { state } = record();
    const cache = new RecordCache({ state });
    for (const window of TRACK_RECORD_WINDOWS) {
      const fresh = currentTrackRecord(state, window, NOW);
      expect(JSON.stringify(cache.current(window, NOW))).toBe(JSON.stringify(fresh));
      expect(JSON.stringify(cache.current(window, NOW))).toBe(JSON.stringify(fresh));
    }
    // The intervals (the resampling the cache saves) are in what was compared.
    expect(
      cache.current('all', NOW).lines.find((l) => l.timeframe === '5m')!.risk.sigmaRatioInterval,
    ).not.toBeNull();
  });

  it('hands out the same answer while the record stays at the same position, a new one once an outcome is folded', () => {
    const { state, position } = record();
    const cache = new RecordCache({ state });
    const first = cache.current('30d', NOW);
    expect(cache.current('30d', NOW)).toBe(first);
    // A later clock past the latest due outcome: the same asOf, the same record.
    expect(cache.current('30d', NOW + DAY)).toBe(first);
    expect(Object.isFrozen(first.lines[0]!.risk)).toBe(true);

    addPoint(state, point('BINANCE', '4h', T0 + (DAYS - 1) * DAY, 1), position + 1);
    const second = cache.current('30d', NOW);
    expect(second).not.toBe(first);
    expect(second.asOfPosition).toBe(position + 1);
    expect(JSON.stringify(second)).toBe(JSON.stringify(currentTrackRecord(state, '30d', NOW)));
    expect(JSON.stringify(second)).not.toBe(JSON.stringify(first));
    expect(cache.current('30d', NOW)).toBe(second);

    // A looped lap's outcome moves only the position (no figure, nor asOf): a new answer still.
    addPoint(state, { ...point('BINANCE', '4h', T0, 2), replayLap: 1 }, position + 2);
    const third = cache.current('30d', NOW);
    expect(third).not.toBe(second);
    expect(JSON.stringify(third)).toBe(JSON.stringify(currentTrackRecord(state, '30d', NOW)));
  });

  it('follows asOf: a clock before the latest due outcome is the record as of that clock', () => {
    const { state } = record();
    const cache = new RecordCache({ state });
    const early = T0 + 10 * DAY;
    expect(JSON.stringify(cache.current('7d', early))).toBe(
      JSON.stringify(currentTrackRecord(state, '7d', early)),
    );
    expect(JSON.stringify(cache.current('7d', NOW))).toBe(
      JSON.stringify(currentTrackRecord(state, '7d', NOW)),
    );
    expect(cache.current('7d', NOW).asOf).not.toBe(cache.current('7d', early).asOf);
  });

  it("on the projection's runner: the same answer until an outcome is folded, then the new record", async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner<TrackRecordState>(
      store,
      new MemoryProjectionStore(),
      trackRecordProjection,
    );
    await runner.start();
    const fold = async (i: number) => {
      const p = point('BINANCE', '1h', T0 + i * 3_600_000, i);
      await store.append(`verdict-outcome-${i}`, [
        newEvent('VerdictOutcomeResolved', {
          ...p,
          coin: 'BTC',
          verdictId: randomUUID(),
          verdictStream: 'verdicts-BINANCE-BTC-1h',
          verdictRevision: i,
          verdictHash: 'a'.repeat(64),
          feeBps: 10,
          horizonCandles: 6,
          maeBps: 0,
          mfeBps: 0,
          realisedVol: 0.1,
        }),
      ]);
      await runner.waitFor(await store.headPosition());
    };
    try {
      const cache = new RecordCache(runner);
      await fold(1);
      const first = cache.current('all', NOW);
      expect(cache.current('all', NOW)).toBe(first);
      expect(first.overall.calls + first.overall.holds).toBe(1);
      await fold(2);
      const second = cache.current('all', NOW);
      expect(second).not.toBe(first);
      expect(second.overall.calls + second.overall.holds).toBe(2);
      expect(JSON.stringify(second)).toBe(JSON.stringify(currentTrackRecord(runner.state, 'all', NOW)));
    } finally {
      await runner.stop();
    }
  });
});
