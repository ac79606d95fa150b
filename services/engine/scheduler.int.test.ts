import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { EventData } from '../../contracts/events.ts';
import { type Candle, marketKey } from '../../contracts/market.ts';
import { onFirstRead } from '../../test/first-read.ts';
import { SignalEngine } from './engine.ts';
import { bandScalesName } from './market-states.ts';
import { VerdictScheduler } from './scheduler.ts';
import { verdictStream } from './verdict-recorder.ts';

describe('VerdictScheduler over the replayed real data', () => {
  let feed: ReplayFeed;
  afterEach(async () => {
    await feed?.close();
  });

  it('schedules several venues in one process, every market of each with its own verdict, concurrently', async () => {
    feed = await openReplayFeed({ run: false });
    const store = new MemoryEventStore();
    const engine = new SignalEngine({ feed, store });
    const scheduler = new VerdictScheduler({
      engine,
      feed,
      timeframes: ['1h'],
      exchange: 'BINANCE_SPOT',
      exchanges: ['BINANCE_SPOT', 'BINANCE'],
      topN: 3,
      concurrency: 4,
    });
    await scheduler.tick('1h');
    await scheduler.stop();
    const recorded = (await store.readAll()).filter((e) => e.type === 'VerdictRecorded');
    const markets = new Set(
      recorded.map((e) => {
        const d = e.data as EventData<'VerdictRecorded'>;
        return `${d.exchange}:${d.coin}`;
      }),
    );
    expect([...markets].filter((m) => m.startsWith('BINANCE_SPOT:'))).toHaveLength(3);
    expect([...markets].filter((m) => m.startsWith('BINANCE:'))).toHaveLength(3);
    expect(scheduler.stats).toMatchObject({ verdicts: 6, skipped: 0, lastError: null });
    // Each market's verdict went to its own stream, one each.
    for (const e of recorded) {
      const d = e.data as EventData<'VerdictRecorded'>;
      expect(e.stream).toBe(verdictStream({ exchange: d.exchange, coin: d.coin, timeframe: '1h' }));
    }
    expect(new Set(recorded.map((e) => e.stream)).size).toBe(6);
  });

  it("stops its first round inside a market state's warm-up: no candle is fed after the stop, the state cut short is neither recorded nor saved, and the next round records it", async () => {
    // A SIGTERM soon after the start waited for every warm-up under way (1,800 candles a state,
    // 4,320 on 5m), checked for only between verdicts: ~9 s of the stop beside a busy CPU.
    feed = await openReplayFeed({ run: false });
    const replay = feed;
    // The replay's own candles, each counted (per market) the first time a state reads its close.
    const fed = new Map<string, { read: number; of: number }>();
    let total = 0;
    let fedAtStop: number | null = null;
    let stopped: Promise<void> | undefined;
    const counted = (market: string, candle: Candle): Candle =>
      onFirstRead(candle, 'close', () => {
        fed.get(market)!.read += 1;
        // The stop comes in the middle of the first warm-up.
        if (++total === 100) {
          fedAtStop = total;
          stopped = scheduler.stop();
        }
      });
    const counting = overriding(replay, 'candles', async (...args) => {
      const market = marketKey(args[0], args[1], args[2]);
      const candles = await replay.candles(...args);
      fed.set(market, { read: 0, of: candles.length });
      return candles.map((c) => counted(market, c));
    });
    const store = new MemoryEventStore();
    const bandScales = new MemoryProjectionStore();
    const engine = new SignalEngine({ feed: counting, store, bandScales });
    const options = {
      engine,
      feed: counting,
      timeframes: ['1h' as const],
      exchange: 'BINANCE_SPOT' as const,
      topN: 3,
    };
    const scheduler = new VerdictScheduler(options);
    scheduler.start();
    await scheduler.firstRound;
    await stopped;
    expect(fedAtStop).toBe(100);
    // The warm-ups the stop came in (one, or more where the first gave way to the next) ended at the
    // candle they were on, and no other began.
    expect(total - fedAtStop!).toBe(0);
    const cutShort = [...fed].filter(([, f]) => f.read > 0 && f.read < f.of).map(([market]) => market);
    expect(cutShort.length).toBeGreaterThan(0);
    const verdicts = async () =>
      (await store.readAll())
        .filter((e) => e.type === 'VerdictRecorded')
        .map((e) => {
          const d = e.data as EventData<'VerdictRecorded'>;
          return marketKey(d.exchange, d.coin, d.timeframe);
        });
    const recorded = await verdicts();
    // The engine slice's stop saves the band scales of the states it holds: none of a state cut short.
    await engine.saveBandScales();
    for (const market of cutShort) {
      expect(recorded).not.toContain(market);
      expect(await bandScales.load(bandScalesName(market))).toBeNull();
    }

    // The next round (the same engine) warms those markets up again and records each, once.
    const next = new VerdictScheduler(options);
    await next.tick('1h');
    await next.stop();
    expect(next.stats).toMatchObject({ verdicts: 3, skipped: 0, lastError: null });
    await engine.saveBandScales();
    const after = await verdicts();
    for (const market of cutShort) {
      expect(after.filter((m) => m === market)).toHaveLength(1);
      expect(await bandScales.load(bandScalesName(market))).not.toBeNull();
    }
  });

  it("does not wait for the venue's listing once stopped: the run ends without it, and without a failure", async () => {
    // The replay ranks a venue's coins by reading each one's finest candle file: seconds of a
    // stop beside a busy CPU, for a listing the stopped run would not use.
    feed = await openReplayFeed({ run: false });
    const replay = feed;
    let listed = 0;
    const counting = overriding(replay, 'markets', async (...args) => {
      const markets = await replay.markets(...args);
      listed += 1;
      return markets;
    });
    const store = new MemoryEventStore();
    const engine = new SignalEngine({ feed: counting, store });
    const options = {
      engine,
      feed: counting,
      timeframes: ['1h' as const],
      exchange: 'BINANCE_SPOT' as const,
      topN: 3,
    };
    const scheduler = new VerdictScheduler(options);
    scheduler.start();
    await scheduler.stop();
    await scheduler.firstRound;
    expect(listed).toBe(0);
    expect(scheduler.lastFailure).toBeNull();
    expect((await store.readAll()).filter((e) => e.type === 'VerdictRecorded')).toEqual([]);

    const next = new VerdictScheduler(options);
    await next.tick('1h');
    await next.stop();
    expect(next.stats).toMatchObject({ verdicts: 3, skipped: 0, lastError: null });
  });

  it('tells a wait for a close once a run begun at or after it has ended, and ends the waits it cannot serve', async () => {
    feed = await openReplayFeed({ run: false });
    const engine = new SignalEngine({ feed, store: new MemoryEventStore() });
    const scheduler = new VerdictScheduler({
      engine,
      feed,
      timeframes: ['1h'],
      exchange: 'BINANCE_SPOT',
      topN: 3,
    });
    const HOUR = 3_600_000;
    const close = Math.floor(feed.now() / HOUR) * HOUR;
    // Longer than the test may run: only what the scheduler tells ends these waits.
    const long = { timeoutMs: 600_000 };
    // A venue or timeframe it does not record: at once.
    expect(await scheduler.closeEvaluated('BINANCE_SPOT', '4h', close, long)).toBe('unscheduled');
    expect(await scheduler.closeEvaluated('OKX', '1h', close, long)).toBe('unscheduled');
    const waiting = scheduler.closeEvaluated('BINANCE_SPOT', '1h', close, long);
    await scheduler.tick('1h');
    expect(await waiting).toBe('evaluated');
    expect(await scheduler.closeEvaluated('BINANCE_SPOT', '1h', close, long)).toBe('evaluated');
    // The next close has not been run: its wait ends on the caller's abort, or on the stop.
    const aborting = new AbortController();
    const aborted = scheduler.closeEvaluated('BINANCE_SPOT', '1h', close + HOUR, {
      ...long,
      signal: aborting.signal,
    });
    aborting.abort();
    expect(await aborted).toBe('timeout');
    const stopped = scheduler.closeEvaluated('BINANCE_SPOT', '1h', close + HOUR, long);
    await scheduler.stop();
    expect(await stopped).toBe('stopped');
    expect(await scheduler.closeEvaluated('BINANCE_SPOT', '1h', close + HOUR, long)).toBe('stopped');
  });
});

/** The replay feed with one of its methods replaced, the others its own (bound to it). */
function overriding<K extends 'candles' | 'markets'>(
  replay: ReplayFeed,
  name: K,
  method: ReplayFeed[K],
): ReplayFeed {
  return new Proxy(replay, {
    get(target, property) {
      if (property === name) return method;
      const value = Reflect.get(target, property);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
