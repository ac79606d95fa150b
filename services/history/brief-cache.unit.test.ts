import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { BriefCache } from './brief-cache.ts';
import { trackRecordProjection } from './projections.ts';
import { type TrackRecordState, trackRecordBrief } from './track-record.ts';

const HOUR = 3_600_000;
const T0 = Date.parse('2025-10-01T00:00:00Z');
const CALL = { exchange: 'BINANCE', timeframe: '1h', confidence: 47 } as const;

function outcome(result: 'hit' | 'miss', confidence = 45) {
  return newEvent('VerdictOutcomeResolved', {
    exchange: 'BINANCE',
    coin: 'BTC',
    timeframe: '1h',
    verdictId: randomUUID(),
    verdictStream: 'verdicts-BINANCE-BTC-1h',
    verdictRevision: 0,
    verdictHash: 'a'.repeat(64),
    call: 'BUY',
    confidence,
    candleCloseTime: T0,
    feed: 'replay',
    price: 100,
    return1: 0.01,
    return6: 0.02,
    return24: 0.03,
    result,
    feeBps: 10,
    horizonCandles: 6,
    netCentiBps: 1000,
    maeBps: 0,
    mfeBps: 0,
    realisedVol: 0.1,
  });
}

async function running() {
  const store = new MemoryEventStore();
  const runner = new ProjectionRunner<TrackRecordState>(
    store,
    new MemoryProjectionStore(),
    trackRecordProjection,
  );
  await runner.start();
  const settle = async () => runner.waitFor(await store.headPosition());
  return { store, runner, settle };
}

/** A running track record that has folded one hit, and a cache on it. */
async function withOneHit() {
  const started = await running();
  await started.store.append('verdict-outcome-1', [outcome('hit')]);
  await started.settle();
  return { ...started, cache: new BriefCache(started.runner) };
}

describe('BriefCache', () => {
  it('hands out one line per market and bucket until an outcome resolves, then the new line', async () => {
    const { store, runner, settle, cache } = await withOneHit();
    try {
      const first = cache.brief(CALL, T0 + HOUR);
      expect(first).toEqual(trackRecordBrief(runner.state, CALL, T0 + HOUR));
      expect(first).toMatchObject({ calls: 1, hits: 1, confidenceBucket: '40-49' });
      // Same market and bucket: the very same line, and it cannot be changed by whoever holds it.
      expect(cache.brief({ ...CALL, confidence: 41 }, T0 + 2 * HOUR)).toBe(first);
      expect(Object.isFrozen(first)).toBe(true);
      // Another bucket has a line of its own.
      expect(cache.brief({ ...CALL, confidence: 55 }, T0 + HOUR)).toMatchObject({ calls: 0 });

      // Events the track record does not fold leave the lines as they are.
      const revision = runner.revision;
      await store.append('quota-x', [
        newEvent('QuotaDebitsRecorded', {
          subject: 'x',
          subjectKind: 'key',
          plan: 'pro',
          tool: 'get_trade_call',
          units: 1,
          day: '2025-10-01',
          month: '2025-10',
          generation: 'g',
        }),
      ]);
      await settle();
      expect(runner.revision).toBe(revision);
      expect(cache.brief(CALL, T0 + HOUR)).toBe(first);

      // An outcome resolves: the next call gets a line that counts it.
      await store.append('verdict-outcome-2', [outcome('miss', 48)]);
      await settle();
      expect(runner.revision).toBeGreaterThan(revision);
      const second = cache.brief(CALL, T0 + HOUR);
      expect(second).not.toBe(first);
      expect(second).toMatchObject({ calls: 2, hits: 1, hitRate: 0.5 });
      expect(second).toEqual(trackRecordBrief(runner.state, CALL, T0 + HOUR));
    } finally {
      await runner.stop();
    }
  });

  it('computes the line afresh on another UTC day (the window starts a day later)', async () => {
    const { runner, cache } = await withOneHit();
    try {
      expect(cache.brief(CALL, T0 + HOUR)).toMatchObject({ calls: 1 });
      // 90 days on, the outcome has left the window though the state has not moved.
      const later = T0 + 90 * 24 * HOUR;
      expect(cache.brief(CALL, later)).toMatchObject({ calls: 0 });
      expect(cache.brief(CALL, later)).toEqual(trackRecordBrief(runner.state, CALL, later));
    } finally {
      await runner.stop();
    }
  });
});
