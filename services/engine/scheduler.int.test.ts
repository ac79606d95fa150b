import { afterEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import type { EventData } from '../../contracts/events.ts';
import { SignalEngine } from './engine.ts';
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
});
