import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, TrackRecordResponse } from '../../contracts/history.ts';
import { HOUR, MARKETS, recordHistory, startHistoryServer } from '../../test/history-harness.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';

async function trackRecord(url: string): Promise<TrackRecordResponse> {
  const res = await fetch(`${url}/api/track-record?window=all`);
  expect(res.status).toBe(200);
  return TrackRecordResponse.parse(await res.json());
}

/**
 * REPLAY_START inside the months the models were fitted on (they end 2025-06-01): the replayed
 * verdicts before then are scored on data the model saw, and the note says how many.
 */
describe('a replay started inside the training months', () => {
  const TRAINED_UNTIL = Date.parse('2025-06-01T00:00:00Z');
  let fx: Awaited<ReturnType<typeof recordHistory>>;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;

  beforeAll(async () => {
    // Twenty hours before the end of training and twenty after (1h markets: the slice's 5m start in September).
    fx = await recordHistory({
      steps: 40,
      start: TRAINED_UNTIL - 20 * HOUR,
      settleHours: 30,
      markets: MARKETS.filter((m) => m.timeframe === '1h'),
    });
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
  }, 300_000);
  afterAll(async () => {
    await server?.close();
    await fx?.engine.close();
  });

  it('says how many of the counted verdicts closed inside them', async () => {
    let inside = 0;
    let resolved = 0;
    for (const m of MARKETS.filter((x) => x.timeframe === '1h')) {
      for (const e of await fx.store.readStream(verdictStream(m))) {
        if (e.type !== 'VerdictRecorded') continue;
        if ((await fx.store.readStream(outcomeStream(e.id))).length === 0) continue;
        resolved++;
        if ((e.data as EventData<'VerdictRecorded'>).candleCloseTime < TRAINED_UNTIL) inside++;
      }
    }
    expect(inside).toBeGreaterThan(0);
    expect(resolved).toBeGreaterThan(inside);
    const tr = await trackRecord(server.url);
    expect(tr.overall.feeds.replay).toBe(resolved);
    expect(tr.feed).toBe('replay');
    expect(tr.feedNote).toContain(
      `${inside} of the ${resolved} replayed closed before 2025-06-01, inside the months the model was fitted on`,
    );
    expect(tr.feedNote).toContain('in-sample');
  });
});
