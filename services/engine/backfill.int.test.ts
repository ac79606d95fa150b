import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { openPostgresEventStore, type PostgresEventStore } from '../../adapters/event-store/postgres.ts';
import { readCandleFile } from '../../adapters/market/csv.ts';
import { fixtureFetch } from '../../adapters/market/fixture-fetch.ts';
import { type FetchImplementation, LiveFeed } from '../../adapters/market/live.ts';
import { SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import type { EventData } from '../../contracts/events.ts';
import type { Candle, MarketKey } from '../../contracts/market.ts';
import { verifyVerdictChain } from '../../contracts/verdict-hash.ts';
import { type PrivatePostgres, startPrivatePostgres } from '../../test/postgres-private.ts';
import { shouldRunPostgresSuite, uniqueSchema } from '../../test/postgres-probe.ts';
import { SignalEngine, type SignalEngineOptions } from './engine.ts';
import { VerdictScheduler } from './scheduler.ts';
import { ENGINE_VERSION } from './signals/verdict.ts';
import { recordVerdict, verdictStream } from './verdict-recorder.ts';

/**
 * The live adapter with the fixture approach of adapters/market/live.test.ts: ccxt's fetch
 * answers from recorded venue responses, and Binance spot klines from the real shipped candles,
 * sliced by the request's startTime and limit as the venue would.
 */
const BINANCE_SPOT = 'https://api.binance.com/api/v3';
const H = 3_600_000;
const MARKET = { exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: '1h' } as const;

/** The venue's 24 h ticker list (the ranking the scheduler's top N comes from): its reads, and down or not. */
interface Tickers {
  reads: number;
  down: boolean;
}

function venue(candles: Candle[], tickers: Tickers = { reads: 0, down: false }): FetchImplementation {
  const recorded = fixtureFetch([
    { method: 'GET', url: `${BINANCE_SPOT}/exchangeInfo`, reply: 'binance-spot/exchangeInfo.json' },
    { method: 'GET', url: `${BINANCE_SPOT}/ticker/24hr`, reply: 'binance-spot/ticker-24hr.json' },
  ]).fetch;
  return async (rawUrl, init) => {
    const url = new URL(rawUrl);
    if (`${url.origin}${url.pathname}` === `${BINANCE_SPOT}/ticker/24hr`) {
      tickers.reads += 1;
      if (tickers.down) return new Response('{"code":-1003,"msg":"down"}', { status: 503 });
    }
    if (`${url.origin}${url.pathname}` !== `${BINANCE_SPOT}/klines`) return recorded(rawUrl, init);
    const start = Number(url.searchParams.get('startTime') ?? 0);
    const limit = Number(url.searchParams.get('limit') ?? 500);
    const rows = candles
      .filter((c) => c.openTime >= start)
      .slice(0, limit)
      .map((c) => [
        c.openTime,
        String(c.open),
        String(c.high),
        String(c.low),
        String(c.close),
        String(c.volume),
        c.openTime + H - 1,
        '0',
        0,
        '0',
        '0',
        '0',
      ]);
    return new Response(JSON.stringify(rows), {
      status: 200,
      headers: { 'content-type': 'application/json' },
    });
  };
}

const feeds: LiveFeed[] = [];
afterEach(async () => {
  for (const f of feeds.splice(0)) await f.close();
});

/**
 * One market's verdict log on a store that outlives engines: `open()` starts an engine on a
 * fresh live feed reading the shared clock, as a restart would.
 */
async function restartable(start: number, store: EventStore = new MemoryEventStore()) {
  const candles = await readCandleFile(join(SHIPPED_MARKET_DIR, 'candles/binance-spot/BTCUSDT-1h.csv.gz'));
  const clock = { now: start };
  const tickers: Tickers = { reads: 0, down: false };
  return {
    store,
    clock,
    tickers,
    open(options: Pick<SignalEngineOptions, 'schedule' | 'logger'> = {}) {
      const feed = new LiveFeed({
        exchanges: ['BINANCE_SPOT'],
        now: () => clock.now,
        fetchImplementation: venue(candles, tickers),
      });
      feeds.push(feed);
      return new SignalEngine({ feed, store, ...options });
    },
    async verdicts(market: MarketKey = MARKET) {
      return (await store.readStream(verdictStream(market)))
        .filter((e) => e.type === 'VerdictRecorded')
        .map((e) => e.data as EventData<'VerdictRecorded'>);
    },
  };
}

const schedule = (engine: SignalEngine, topN: number) =>
  new VerdictScheduler({ engine, feed: engine.feed, timeframes: ['1h'], exchange: 'BINANCE_SPOT', topN });
const hours = (day: number, ...h: number[]) => h.map((x) => Date.UTC(2025, 9, day, x));
/** The engine version before the running one, as an upgrade finds it on the log. */
const PREVIOUS_VERSION = `signals-${Number(ENGINE_VERSION.split('-')[1]) - 1}`;

describe('live feed restart: candles that closed while the engine was down', () => {
  it('are backfilled in order on restart, leaving no hole in the verdict chain', async () => {
    const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
    const before = open();
    const first = await before.scheduledTradeCall({ ...MARKET });
    expect(first.timestamp * 1000).toBe(Date.UTC(2025, 9, 20, 10));
    await before.close();

    // Down for five hours; on restart the scheduler's first run records the missed closes first.
    clock.now += 5 * H;
    const after = open();
    const scheduler = schedule(after, 100);
    await scheduler.tick('1h');
    await scheduler.stop();

    const recorded = await verdicts();
    expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
    expect(recorded.slice(1, 5).every((v) => v.inputs.backfilled === true && v.trigger === 'schedule')).toBe(
      true,
    );
    expect(recorded[5]!.inputs.backfilled).toBeUndefined();
    expect(verifyVerdictChain(recorded)).toEqual({ ok: true });

    // Nothing missed, nothing added: a second backfill is a no-op.
    expect(await after.backfill(MARKET)).toBe(0);
  });

  it("gives way to the scheduler's stop between records, leaving an unbroken run the next start completes", async () => {
    // The fault drill's unclean stop: SIGTERM came while a restart backfilled ~190 closes per
    // market on a loaded host, and the stop waited for every one past the shutdown timeout.
    const { store, clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 1, 10, 30));
    await open().scheduledTradeCall({ ...MARKET });
    clock.now += 300 * H; // down for 300 hours: 299 closes to backfill, then the scheduled one
    const unbroken = (rows: { candleCloseTime: number }[]) =>
      expect(rows.map((v) => v.candleCloseTime)).toEqual(
        rows.map((_, i) => Date.UTC(2025, 9, 1, 10) + i * H),
      );

    const first = schedule(open(), 1);
    // The store's own subscription sees each record as it lands: the stop comes after the fifth.
    const subscription = store.subscribeToAll();
    let seen = 0;
    let stopped: Promise<void> | undefined;
    const watcher = (async () => {
      for await (const event of subscription) {
        if (event.type === 'VerdictRecorded' && ++seen === 5) {
          stopped = first.stop();
          return;
        }
      }
    })();
    first.start();
    await watcher;
    await stopped;
    await first.firstRound;
    await subscription.close();

    const partial = await verdicts();
    expect(partial.length).toBeGreaterThanOrEqual(5);
    expect(partial.length).toBeLessThan(50);
    // An unbroken run of backfilled closes after the first verdict, and no scheduled record past it.
    unbroken(partial);
    expect(partial.slice(1).every((v) => v.inputs.backfilled === true)).toBe(true);

    const second = schedule(open(), 1);
    await second.tick('1h');
    await second.stop();
    const all = await verdicts();
    unbroken(all);
    expect(all).toHaveLength(301);
    expect(all.at(-1)!.inputs.backfilled).toBeUndefined();
    expect(verifyVerdictChain(all)).toEqual({ ok: true });
  });

  it('a scheduled verdict records the closes that passed since the backfill, so none slips between them', async () => {
    // The fault drill's hole: a restart's backfill filled up to the close it saw, another close
    // passed before the scheduled verdict, and that verdict (for the newer close) left the one in
    // between unrecorded for good, since a chain only grows forward.
    const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
    const engine = open();
    await engine.scheduledTradeCall({ ...MARKET });

    clock.now += 3 * H;
    expect(await engine.backfill(MARKET)).toBe(2); // 11:00 and 12:00; 13:00 is left to the call
    clock.now += 2 * H; // 13:00, 14:00 and 15:00 have closed by the time the scheduled call runs
    const call = await engine.scheduledTradeCall({ ...MARKET });
    expect(call.timestamp * 1000).toBe(Date.UTC(2025, 9, 20, 15));

    const recorded = await verdicts();
    expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
    expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
  });

  it('after an upgrade that changed the engine version, are backfilled by the new engine and labelled with its version', async () => {
    // An in-place upgrade (deploy/README.md, Upgrades): the older engine's last verdict is at
    // 10:00, the new version starts on the same LMDB log five hours on. Before, a backfill behind
    // another engine version's verdict recorded nothing, and the chain went from 10:00 to 15:00.
    const dir = mkdtempSync(join(tmpdir(), 'backfill-upgrade-'));
    try {
      const start = Date.UTC(2025, 9, 20, 10, 30);
      // The older engine's verdict: this close's, as an engine of an earlier version recorded it.
      const scratch = await restartable(start);
      await scratch.open().scheduledTradeCall({ ...MARKET });
      const { hash: _hash, prevHash: _prevHash, ...older } = (await scratch.verdicts())[0]!;
      const before = await openLmdbEventStore({ path: dir });
      await recordVerdict(before, { ...older, engineVersion: PREVIOUS_VERSION });
      await before.close();

      const store = await openLmdbEventStore({ path: dir });
      try {
        const { open, verdicts } = await restartable(start + 5 * H, store);
        const scheduler = schedule(open(), 100);
        await scheduler.tick('1h');
        await scheduler.stop();

        const recorded = await verdicts();
        expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
        expect(recorded.map((v) => v.engineVersion)).toEqual([
          PREVIOUS_VERSION,
          ...Array<string>(5).fill(ENGINE_VERSION),
        ]);
        expect(
          recorded.slice(1, 5).every((v) => v.inputs.backfilled === true && v.trigger === 'schedule'),
        ).toBe(true);
        expect(recorded[5]!.inputs.backfilled).toBeUndefined();
        expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
      } finally {
        await store.close();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  describe('a request that comes before the restarted scheduler has backfilled', () => {
    // What the scheduler of the tests below holds: BINANCE_SPOT's top 1 on 1h, BTC (the fixture's
    // tickers rank BTC first, ETH second).
    const scheduled = {
      schedule: { exchanges: ['BINANCE_SPOT' as const], timeframes: ['1h' as const], topN: 1 },
    };

    it("records the missed closes before its own, so the scheduler's backfill finds no hole behind it", async () => {
      // get_trade_call recorded the latest close without backfilling: the chain then ran on from
      // it, and the scheduler's backfill (bounded by the close after the last on record) had
      // nothing left to fill, leaving 11:00 to 14:00 missing for good.
      const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
      await open(scheduled).scheduledTradeCall({ ...MARKET });
      clock.now += 5 * H;

      const after = open(scheduled);
      const call = await after.getTradeCall({ ...MARKET });
      expect(call.timestamp * 1000).toBe(Date.UTC(2025, 9, 20, 15));
      const scheduler = schedule(after, 1);
      await scheduler.tick('1h');
      await scheduler.stop();

      const recorded = await verdicts();
      expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
      expect(recorded.slice(1, 5).every((v) => v.inputs.backfilled === true)).toBe(true);
      expect(recorded[5]!.trigger).toBe('request');
      expect(recorded[5]!.inputs.backfilled).toBeUndefined();
      expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
    });

    it('and the scheduler backfilling at the same time record each close once', async () => {
      const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
      await open(scheduled).scheduledTradeCall({ ...MARKET });
      clock.now += 5 * H;

      const after = open(scheduled);
      const scheduler = schedule(after, 1);
      await Promise.all([
        after.getTradeCall({ ...MARKET }),
        scheduler.tick('1h'),
        after.getTradeCall({ ...MARKET }),
      ]);
      await scheduler.stop();

      const recorded = await verdicts();
      expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
      expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
    });

    it("is served and recorded when the venue's ranking cannot be read, the closes before it left unrecorded as before", async () => {
      const { clock, open, verdicts, tickers } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
      await open(scheduled).scheduledTradeCall({ ...MARKET });
      clock.now += 5 * H;
      tickers.down = true;
      const call = await open(scheduled).getTradeCall({ ...MARKET });
      expect(call.timestamp * 1000).toBe(Date.UTC(2025, 9, 20, 15));
      const recorded = await verdicts();
      expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 15));
      expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
    });

    it("reads the venue's ranking once for repeated requests on a coin outside the top N", async () => {
      const { clock, open, tickers } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
      const engine = open(scheduled);
      const eth = { ...MARKET, coin: 'ETH' }; // the venue's second: outside the top 1
      await engine.getTradeCall(eth);
      clock.now += 3 * H;
      await engine.getTradeCall(eth); // a gap: the ranking is read
      const reads = tickers.reads;
      expect(reads).toBeGreaterThan(0);
      clock.now += 3 * H;
      await engine.getTradeCall(eth); // another gap: the ranking read is reused
      expect(tickers.reads).toBe(reads);
    });

    it('on a market no scheduler holds records only the closes asked for, as before', async () => {
      const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30));
      for (const market of [
        { ...MARKET, coin: 'ETH' }, // the venue's second: outside the top 1
        { ...MARKET, timeframe: '4h' as const }, // a timeframe not scheduled
      ]) {
        await open(scheduled).getTradeCall(market);
        clock.now += 8 * H;
        await open(scheduled).getTradeCall(market);
        const [first, second] = await verdicts(market);
        expect(second!.candleCloseTime - first!.candleCloseTime).toBe(8 * H);
        expect(await verdicts(market)).toHaveLength(2);
        clock.now -= 8 * H;
      }
    });
  });
});

const runPostgres = await shouldRunPostgresSuite('a requested verdict while PostgreSQL is down');

/**
 * A request on a scheduled market whose backfill meets the event store out of reach (PostgreSQL
 * restarting, a failover): refused as unavailable, retryable. Before, it logged 'backfill before a
 * requested verdict failed; the closes before it stay unrecorded' (seven times in an 8 s outage
 * of the walk on a scaled-out deployment) and went on to record its own close, which failed too
 * while the store was down, or left the closes before it a hole for good had the store answered
 * again in between.
 */
describe.runIf(runPostgres)('a request whose backfill meets the event store down', () => {
  let server: PrivatePostgres;
  let store: PostgresEventStore;

  beforeAll(async () => {
    server = await startPrivatePostgres();
    store = await openPostgresEventStore({
      url: server.url,
      schema: uniqueSchema('backfill_outage'),
      pollMs: 200,
    });
  }, 180_000);

  afterAll(async () => {
    await store?.close();
    await server?.stop();
  });

  it('is refused as unavailable; once the store is back a request backfills, leaving no hole', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'warn' }, { write: (line: string) => void lines.push(line) });
    const scheduled = {
      schedule: { exchanges: ['BINANCE_SPOT' as const], timeframes: ['1h' as const], topN: 1 },
      logger,
    };
    const { clock, open, verdicts } = await restartable(Date.UTC(2025, 9, 20, 10, 30), store);
    await open(scheduled).scheduledTradeCall({ ...MARKET });
    clock.now += 5 * H;
    const after = open(scheduled);

    await server.pause();
    await expect(after.getTradeCall({ ...MARKET })).rejects.toMatchObject({
      code: 'event_store_unavailable',
    });
    expect(lines.filter((l) => l.includes('stay unrecorded'))).toEqual([]);

    await server.start();
    const call = await after.getTradeCall({ ...MARKET });
    expect(call.timestamp * 1000).toBe(Date.UTC(2025, 9, 20, 15));
    const recorded = await verdicts();
    expect(recorded.map((v) => v.candleCloseTime)).toEqual(hours(20, 10, 11, 12, 13, 14, 15));
    expect(verifyVerdictChain(recorded)).toEqual({ ok: true });
  }, 240_000);
});
