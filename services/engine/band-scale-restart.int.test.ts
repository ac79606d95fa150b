import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LmdbProjectionStore } from '../../adapters/event-store/lmdb-snapshots.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { SHARED_MARKET_DIR } from '../../adapters/market/shared-data.ts';
import { marketKey, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { SignalEngine, scheduledCoins } from './engine.ts';
import { bandScalesName, MarketStates } from './market-states.ts';
import { VerdictScheduler } from './scheduler.ts';
import type { MarketState } from './signals/market-state.ts';

/**
 * The band scale a market state serves after a restart (BandScale, adaptive conformal inference on
 * the band's width) is the one its predecessor would serve at the same close, not one started
 * again at 1 at the rebuilt state's warm-up: the engine saves each market's scales in the snapshot
 * store and a rebuilt state goes on from them. Real spot candles of the shared data through the
 * replay feed, saved in and read back from an LMDB snapshot store.
 */

const H = 3_600_000;
const scales = (state: MarketState) => state.snapshot()!.volRisk.map((r) => r.scale);

describe('band scales across a restart', () => {
  let dir: string;
  const feeds: ReplayFeed[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'band-scales-'));
  });

  afterAll(async () => {
    for (const feed of feeds) await feed.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [timeframe, coin, exchange, step] of [
    ['5m', 'BTC', 'BINANCE_SPOT', H],
    ['8h', 'ETH', 'BINANCE', 8 * H],
  ] as const) {
    it(`go on from the last save on ${exchange} ${coin} ${timeframe}, as the running state's do`, async () => {
      const tf: Timeframe = timeframe;
      const start = Date.UTC(2025, 9, 1);
      const saveAt = start + 10 * 24 * H; // ten days of closes on the running state
      const restartAt = saveAt + 3 * step; // stopped after the save, started again later
      const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start, run: false, loop: false });
      feeds.push(feed);
      const store = LmdbProjectionStore.open(join(dir, tf));
      try {
        // The running engine, advanced close after close and saving as the scheduler does.
        const running = new MarketStates(feed, undefined, store);
        for (let t = start; t <= saveAt; t += step) {
          feed.clock.setTime(t);
          await running.advance(exchange, coin, tf);
        }
        expect(await running.saveBandScales()).toBe(1);
        expect(await running.saveBandScales()).toBe(0); // nothing closed since
        feed.clock.setTime(restartAt);
        const ongoing = scales(await running.advance(exchange, coin, tf));

        // A restart: every state rebuilt from the feed's warm-up candles.
        const restarted = scales(await new MarketStates(feed, undefined, store).advance(exchange, coin, tf));
        const afresh = scales(await new MarketStates(feed).advance(exchange, coin, tf));

        expect(restarted).toHaveLength(3);
        for (const [row, s] of restarted.entries()) expect(s / ongoing[row]!).toBeCloseTo(1, 6);
        // Without the save, the rebuilt state's scales are another path's: the case is one where
        // the restart showed.
        expect(Math.max(...afresh.map((s, row) => Math.abs(s / ongoing[row]! - 1)))).toBeGreaterThan(0.01);
        expect(restartAt % TIMEFRAME_MS[tf]).toBe(0);
      } finally {
        await store.close();
      }
    }, 120_000);
  }

  it("are saved by the scheduler's run for every market it advanced", async () => {
    const at = Date.UTC(2025, 9, 20, 12);
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start: at, run: false, loop: false });
    feeds.push(feed);
    const store = LmdbProjectionStore.open(join(dir, 'scheduled'));
    try {
      const engine = new SignalEngine({ feed, store: new MemoryEventStore(), bandScales: store });
      const scheduler = new VerdictScheduler({
        engine,
        feed,
        timeframes: ['1h'],
        exchange: 'BINANCE_SPOT',
        topN: 2,
      });
      await scheduler.tick('1h');
      await scheduler.stop();
      expect(scheduler.stats.verdicts).toBe(2);
      const names = scheduledCoins(await feed.markets('BINANCE_SPOT'), 2).map((m) =>
        bandScalesName(marketKey('BINANCE_SPOT', m.coin, '1h')),
      );
      expect(names).toHaveLength(2);
      for (const name of names) {
        const saved = await store.load<{ closeTime: number; rows: unknown[] }>(name);
        expect(saved?.state.closeTime).toBe(at);
        expect(saved?.state.rows).toHaveLength(3);
      }
    } finally {
      await store.close();
    }
  }, 120_000);
});
