import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed } from '../../adapters/market/replay.ts';
import type { EventData } from '../../contracts/events.ts';
import { outcomeStream, TrackRecordResponse } from '../../contracts/history.ts';
import type { Timeframe } from '../../contracts/market.ts';
import {
  HISTORY_CALIBRATION,
  HOUR,
  MARKETS,
  recordHistory,
  startHistoryServer,
} from '../../test/history-harness.ts';
import { createSignalEngine, type SignalEngine } from '../engine/engine.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';

const DAY = 24 * HOUR;

async function trackRecord(url: string): Promise<TrackRecordResponse> {
  const res = await fetch(`${url}/api/track-record?window=all`);
  expect(res.status).toBe(200);
  return TrackRecordResponse.parse(await res.json());
}

/**
 * Asks BTC perp on each of `timeframes` for a call every 8 hours from the replay's start (REPLAY_START
 * `start`, else the default) to the end of its data, each timeframe's closes in lap 0, then runs
 * the clock on into the loop until the last 1d outcome (24 days on) has come due; the history
 * server over it, settled.
 */
async function replayToLoop(timeframes: readonly Timeframe[], start?: (end: number) => number) {
  const markets = timeframes.map((timeframe) => ({ exchange: 'BINANCE' as const, coin: 'BTC', timeframe }));
  const store = new MemoryEventStore();
  const opened = await openReplayFeed({ run: false });
  const end = opened.laps!.end;
  const feed = start ? await openReplayFeed({ run: false, start: start(end) }) : opened;
  const engine = await createSignalEngine({ feed, store, calibration: HISTORY_CALIBRATION });
  while (feed.clock.now() < end) {
    for (const m of markets) await engine.getTradeCall(m);
    feed.clock.advance(8 * HOUR);
  }
  feed.clock.advance(25 * DAY);
  const server = await startHistoryServer({ store, feed });
  await server.settle();
  return { engine, server };
}

/**
 * The replay as `npm start` opens it (no REPLAY_START): an outcome comes due 24 candles after its
 * close, 24 days on 1d, and an outcome due past the end of the data falls in a looped lap, which
 * the track record counts in no figure. The default start must leave every timeframe closes whose
 * outcomes come due before the data ends, or 8h, 12h and 1d would never have a record (they had
 * none with the week's lead before).
 */
describe('the track record of the default replay start', () => {
  const TIMEFRAMES: Timeframe[] = ['4h', '8h', '12h', '1d'];
  let engine: SignalEngine;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;

  beforeAll(async () => {
    ({ engine, server } = await replayToLoop(TIMEFRAMES));
  }, 300_000);
  afterAll(async () => {
    await server?.close();
    await engine?.close();
  });

  it('counts resolved verdicts of every timeframe up to 1d, none of them in the training months', async () => {
    const tr = await trackRecord(server.url);
    for (const timeframe of TIMEFRAMES) {
      const line = tr.lines.find((l) => l.timeframe === timeframe);
      expect(line, timeframe).toBeDefined();
      expect(line!.calls + line!.holds, `${timeframe} verdicts counted`).toBeGreaterThan(0);
      expect(line!.feeds.replay, timeframe).toBe(line!.calls + line!.holds);
    }
    const oneDay = tr.lines.find((l) => l.timeframe === '1d')!;
    // A week of 1d closes before the data ends: 7 (8 with the start's own close).
    expect(oneDay.feeds.replay).toBeGreaterThanOrEqual(7);
    expect(tr.feed).toBe('replay');
    expect(tr.feedNote).toContain(
      `None of the ${tr.overall.feeds.replay} replayed closed inside the months the model was fitted on (before 2025-06-01)`,
    );
  });
});

/**
 * REPLAY_START a week before the data's end (the default before): no 8h, 12h or 1d outcome comes
 * due before the loop, so those lines count nothing, and the note says which and why.
 */
describe('a replay started a week before the end of its data', () => {
  let engine: SignalEngine;
  let server: Awaited<ReturnType<typeof startHistoryServer>>;

  beforeAll(async () => {
    ({ engine, server } = await replayToLoop(['4h', '8h', '1d'], (end) => end - 7 * DAY));
  }, 300_000);
  afterAll(async () => {
    await server?.close();
    await engine?.close();
  });

  it('names the lines that count nothing because each of their outcomes fell in a looped lap', async () => {
    const tr = await trackRecord(server.url);
    const line = (tf: Timeframe) => tr.lines.find((l) => l.timeframe === tf)!;
    expect(line('4h').feeds.replay).toBeGreaterThan(0);
    for (const tf of ['8h', '1d'] as const) {
      expect(line(tf).feeds, tf).toMatchObject({ live: 0, replay: 0 });
      expect(line(tf).feeds.replayLooped, tf).toBeGreaterThan(0);
    }
    expect(tr.feedNote).toContain(
      'No verdict of BINANCE 1d, BINANCE 8h is counted: each one resolved came due in a looped lap',
    );
    expect(tr.feedNote).toContain(
      'a replay started earlier gives them a record (REPLAY_START, read when the event log is new',
    );
  });
});

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
