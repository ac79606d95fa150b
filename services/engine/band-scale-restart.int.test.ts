import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LmdbProjectionStore } from '../../adapters/event-store/lmdb-snapshots.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { openPostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { openReplayFeed, type ReplayFeed } from '../../adapters/market/replay.ts';
import { SHARED_MARKET_DIR } from '../../adapters/market/shared-data.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import type { StoredProjection } from '../../adapters/projection-store/port.ts';
import { marketKey, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { startPrivatePostgres } from '../../test/postgres-private.ts';
import { shouldRunPostgresSuite, uniqueSchema } from '../../test/postgres-probe.ts';
import { SignalEngine, scheduledCoins } from './engine.ts';
import { BAND_SCALES_VERSION, bandScalesName, MarketStates, warmupCandles } from './market-states.ts';
import { VerdictScheduler } from './scheduler.ts';
import { createMarketState } from './signals/index.ts';
import { stateVolatility } from './signals/market-regime.ts';
import type { MarketState, SavedBandScales } from './signals/market-state.ts';
import { verdictStream } from './verdict-recorder.ts';

/**
 * The band scale a market state serves after a restart (BandScale, adaptive conformal inference on
 * the band's width) is the one its predecessor would serve at the same close, not one started
 * again at 1 at the rebuilt state's warm-up: the engine saves each market's scales in the snapshot
 * store and a rebuilt state goes on from them. Real spot candles of the shared data through the
 * replay feed, saved in and read back from an LMDB snapshot store.
 */

const H = 3_600_000;
const runPostgres = await shouldRunPostgresSuite('band scales across a PostgreSQL outage');
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

  /**
   * The two outage cases' start: a private PostgreSQL (the projection snapshots' store), an ETH
   * 8h replay and a running state advanced ten days and saved at `saveAt`.
   */
  async function savedBeforeOutage() {
    const server = await startPrivatePostgres();
    const log = await openPostgresEventStore({ url: server.url, schema: uniqueSchema('band_scales') });
    const step = 8 * H;
    const start = Date.UTC(2025, 9, 1);
    const saveAt = start + 10 * 24 * H;
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start, run: false, loop: false });
    feeds.push(feed);
    const store = log.projectionStore();
    const running = new MarketStates(feed, undefined, store);
    try {
      for (let t = start; t <= saveAt; t += step) {
        feed.clock.setTime(t);
        await running.advance('BINANCE', 'ETH', '8h');
      }
      expect(await running.saveBandScales()).toBe(1);
    } catch (err) {
      await log.close();
      await server.stop();
      throw err;
    }
    return { server, log, step, saveAt, feed, store, running };
  }

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

  it('go on in the verdicts a restarted engine backfills for the closes it missed', async () => {
    // BTC 4h spot: a market whose verdict horizon's scale a restart moves (on ETH 8h perp the
    // verdict row's paths have met again by then; only its other rows differ).
    const step = 4 * H;
    const start = Date.UTC(2025, 9, 1);
    const saveAt = start + 40 * step; // forty scheduled runs, each saving the scales
    const restartAt = saveAt + 3 * step; // two closes missed while no engine ran
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start, run: false, loop: false });
    feeds.push(feed);
    const store = LmdbProjectionStore.open(join(dir, 'backfill'));
    const log = new MemoryEventStore();
    try {
      const running = new SignalEngine({ feed, store: log, bandScales: store });
      const scheduler = new VerdictScheduler({
        engine: running,
        feed,
        timeframes: ['4h'],
        exchange: 'BINANCE_SPOT',
        topN: 1,
      });
      for (let t = start; t <= saveAt; t += step) {
        feed.clock.setTime(t);
        await scheduler.tick('4h');
      }
      await scheduler.stop();
      const { coin } = scheduledCoins(await feed.markets('BINANCE_SPOT'), 1)[0]!;
      const market = { exchange: 'BINANCE_SPOT', coin, timeframe: '4h' } as const;
      const saved = (await store.load<SavedBandScales>(
        bandScalesName(marketKey('BINANCE_SPOT', coin, '4h')),
      ))!.state;
      expect(saved.closeTime).toBe(saveAt);

      feed.clock.setTime(restartAt);
      const restarted = new SignalEngine({ feed, store: log, bandScales: store });
      expect(await restarted.backfill(market)).toBe(2);
      const events = await log.readStream(verdictStream(market), { fromRevision: 0 });
      const last = events.filter((e) => e.type === 'VerdictRecorded').at(-1)!.data as {
        candleCloseTime: number;
        inputs: Record<string, unknown>;
      };
      expect(last.candleCloseTime).toBe(restartAt - step);

      // The same candles the backfill read, folded up to that close: with the saved scales resumed
      // at their close, and started at 1.
      const candles = await feed.candles('BINANCE_SPOT', coin, '4h', { limit: warmupCandles('4h') + 3 });
      const band = (resume: boolean) => {
        const state = createMarketState(market);
        for (const candle of candles) {
          const close = candle.openTime + step;
          if (close > last.candleCloseTime) break;
          state.update(candle);
          if (resume && close === saved.closeTime) expect(state.resumeBandScales(saved)).toBe(true);
        }
        const v = stateVolatility(state);
        return [v.band_low, v.band_high];
      };
      expect([last.inputs.vol_band_low, last.inputs.vol_band_high]).toEqual(band(true));
      // Started at 1 the band is another: the case is one where the restart showed.
      expect(band(false)).not.toEqual(band(true));
    } finally {
      await store.close();
    }
  }, 120_000);

  it.runIf(runPostgres)(
    'go on from the last save once the store answers again, when a state was rebuilt while it did not',
    async () => {
      // PostgreSQL (the projection snapshots' store) away while a market's state is rebuilt: its
      // saved scales cannot be read. Kept, that state served scales started at 1 after the store came
      // back, until a restart, and its next save replaced the saved ones with them.
      const { server, log, step, saveAt, feed, store, running } = await savedBeforeOutage();
      try {
        feed.clock.setTime(saveAt + step);
        const ongoing = scales(await running.advance('BINANCE', 'ETH', '8h'));

        const restarted = new MarketStates(feed, pino({ level: 'silent' }), store);
        await server.pause();
        try {
          await restarted.advance('BINANCE', 'ETH', '8h');
        } finally {
          await server.start();
        }
        const after = scales(await restarted.advance('BINANCE', 'ETH', '8h'));
        for (const [row, s] of after.entries()) expect(s / ongoing[row]!).toBeCloseTo(1, 6);
      } finally {
        await log.close();
        await server.stop();
      }
    },
    300_000,
  );

  it.runIf(runPostgres)(
    'are read again, alone, on each advance of a state built while the store was out of reach, then resumed and saved',
    async () => {
      // Not kept, such a state was built again from its warm-up's candles (a venue read of 1,800
      // here, a fold, the read of its scales) on every advance for as long as the store was away.
      const { server, log, step, saveAt, feed, store, running } = await savedBeforeOutage();
      // The restarted process's venue reads (timeframe and limit), through the same replay feed.
      const reads: { tf: Timeframe; limit: number }[] = [];
      const counted = new Proxy(feed, {
        get(target, prop) {
          if (prop === 'candles') {
            return (...args: Parameters<ReplayFeed['candles']>) => {
              reads.push({ tf: args[2], limit: args[3]?.limit ?? 0 });
              return target.candles(...args);
            };
          }
          const value = Reflect.get(target, prop, target);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
      try {
        const name = bandScalesName(marketKey('BINANCE', 'ETH', '8h'));
        const restarted = new MarketStates(counted, pino({ level: 'silent' }), store);
        const closes = 4;
        const served: MarketState[] = [];
        await server.pause();
        try {
          for (let i = 1; i <= closes; i++) {
            feed.clock.setTime(saveAt + i * step);
            served.push(await restarted.advance('BINANCE', 'ETH', '8h'));
            served.push(await restarted.advance('BINANCE', 'ETH', '8h')); // asked again at the close
          }
          expect(await restarted.saveBandScales()).toBe(0);
        } finally {
          await server.start();
        }
        // One state, built once and advanced close after close: one read of its warm-up.
        const eights = reads.filter((r) => r.tf === '8h');
        expect(new Set(served).size).toBe(1);
        expect(eights.filter((r) => r.limit === warmupCandles('8h'))).toHaveLength(1);
        expect(eights).toHaveLength(closes);
        // The store back: the state's own scales are not saved over the saved ones.
        expect(await restarted.saveBandScales()).toBe(0);
        expect((await store.load<SavedBandScales>(name))!.state.closeTime).toBe(saveAt);

        // The next advance reads them and goes on from them, as the running state does.
        feed.clock.setTime(saveAt + (closes + 1) * step);
        const ongoing = scales(await running.advance('BINANCE', 'ETH', '8h'));
        const after = scales(await restarted.advance('BINANCE', 'ETH', '8h'));
        expect(after).toHaveLength(3);
        for (const [row, s] of after.entries()) expect(s / ongoing[row]!).toBeCloseTo(1, 6);
        // Its own scales were another path's: the case is one where the resume showed.
        const own = scales(served[0]!);
        expect(Math.max(...own.map((s, row) => Math.abs(s / ongoing[row]! - 1)))).toBeGreaterThan(0.01);
        expect(await restarted.saveBandScales()).toBe(1);
        expect((await store.load<SavedBandScales>(name))!.state.closeTime).toBe(saveAt + (closes + 1) * step);
      } finally {
        await log.close();
        await server.stop();
      }
    },
    300_000,
  );

  it('start afresh and are kept when the saved ones fail to read for good (not an outage)', async () => {
    // A save that does not parse: the state starts its scales at 1 and is kept (its next save
    // replaces the bad one), rather than rebuilt from its warm-up on every advance as in an outage.
    const start = Date.UTC(2025, 9, 1);
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start, run: false, loop: false });
    feeds.push(feed);
    const store = new MemoryProjectionStore();
    const key = marketKey('BINANCE', 'ETH', '8h');
    await store.save(bandScalesName(key), { version: BAND_SCALES_VERSION, checkpoint: 0, state: null });
    const states = new MarketStates(feed, pino({ level: 'silent' }), store);
    const first = await states.advance('BINANCE', 'ETH', '8h');
    expect(states.size).toBe(1);
    expect(await states.advance('BINANCE', 'ETH', '8h')).toBe(first);
  });

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
  it('are saved one save after another, so the last save stored is the newest close', async () => {
    // A save held up in the store (a slow commit) while the next close's save starts: run
    // together, the older close's save would land last and a restart would resume from it.
    const start = Date.UTC(2025, 9, 20, 12);
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start, run: false, loop: false });
    feeds.push(feed);
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const store = new (class extends MemoryProjectionStore {
      holdNext = true;
      override async save<S>(name: string, snapshot: StoredProjection<S>) {
        if (this.holdNext) {
          this.holdNext = false;
          await held;
        }
        return super.save(name, snapshot);
      }
    })();
    const states = new MarketStates(feed, undefined, store);
    await states.advance('BINANCE_SPOT', 'BTC', '1h');
    const first = states.saveBandScales();
    feed.clock.setTime(start + H);
    await states.advance('BINANCE_SPOT', 'BTC', '1h');
    const second = states.saveBandScales();
    release();
    expect([await first, await second]).toEqual([1, 1]);
    const kept = await store.load<SavedBandScales>(bandScalesName(marketKey('BINANCE_SPOT', 'BTC', '1h')));
    expect(kept?.state.closeTime).toBe(start + H);
  }, 120_000);

  it("are saved for every other market when one market's save fails, and that one at the next save", async () => {
    const at = Date.UTC(2025, 9, 20, 12);
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start: at, run: false, loop: false });
    feeds.push(feed);
    const failing = bandScalesName(marketKey('BINANCE_SPOT', 'BTC', '1h'));
    const store = new (class extends MemoryProjectionStore {
      fail = true;
      override async save<S>(name: string, snapshot: StoredProjection<S>) {
        if (this.fail && name === failing) throw new Error('disk error');
        return super.save(name, snapshot);
      }
    })();
    const states = new MarketStates(feed, undefined, store);
    await states.advance('BINANCE_SPOT', 'BTC', '1h');
    await states.advance('BINANCE_SPOT', 'ETH', '1h');
    expect(await states.saveBandScales()).toBe(1);
    expect(await store.load(failing)).toBeNull();
    expect(await store.load(bandScalesName(marketKey('BINANCE_SPOT', 'ETH', '1h')))).not.toBeNull();
    store.fail = false;
    expect(await states.saveBandScales()).toBe(1);
    expect((await store.load<SavedBandScales>(failing))?.state.closeTime).toBe(at);
  }, 120_000);

  it('are one warning per save when the store fails every market, naming how many', async () => {
    const at = Date.UTC(2025, 9, 20, 12);
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start: at, run: false, loop: false });
    feeds.push(feed);
    const lines: { level: number; msg: string; markets?: number; failed?: string[] }[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const store = new (class extends MemoryProjectionStore {
      override async save(): Promise<void> {
        throw new Error('store out of reach');
      }
    })();
    const states = new MarketStates(feed, logger, store);
    for (const coin of ['BTC', 'ETH', 'SOL']) await states.advance('BINANCE_SPOT', coin, '1h');
    expect(await states.saveBandScales()).toBe(0);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ level: 40, markets: 3 });
    expect(lines[0]!.failed).toHaveLength(3);
  }, 120_000);
});
