import { existsSync } from 'node:fs';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import type { Logger } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CandleClose, TIMEFRAME_MS } from '../../contracts/market.ts';
import { aggregateCandles } from './aggregate.ts';
import { readCandleFile } from './csv.ts';
import {
  InsufficientHistoryError,
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
  VenueUnavailableError,
} from './errors.ts';
import { openReplayFeed, SHIPPED_MARKET_DIR } from './replay.ts';
import { SHARED_MARKET_DIR } from './shared-data.ts';

const SHARED_DIR = SHARED_MARKET_DIR;
const M = 60_000;
const H = 3_600_000;
/** 5m candles and funding start here; 1h candles (spot and perpetual) reach back to HOURLY_START. */
const DATA_START = Date.UTC(2025, 8, 20);
const HOURLY_START = Date.UTC(2025, 2, 1);
const COINS = ['BNB', 'BTC', 'DOGE', 'ETH', 'SOL', 'XRP'];
const DATA_END = Date.UTC(2025, 10, 1);

/** The decimals a price is written with (the data's, as text: 103538.01 has 2). */
const decimalsOf = (p: number) => (String(p).split('.')[1] ?? '').length;
/** The most decimals a data file's prices carry: the venue's tick for the coin (2 for BTCUSDT spot). */
const tickDecimals = (candles: readonly { open: number; high: number; low: number; close: number }[]) =>
  Math.max(...candles.flatMap((c) => [c.open, c.high, c.low, c.close].map(decimalsOf)));
const T = Date.UTC(2025, 9, 25, 10, 32); // 2025-10-25 10:32 UTC

/** A replay feed on the shipped slice whose clock only moves when the test moves it. */
const manualFeed = (start = T, dir = SHIPPED_MARKET_DIR) => openReplayFeed({ dir, start, run: false });

const temps: string[] = [];
async function tempCopy(files: string[]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'replay-'));
  temps.push(dir);
  for (const f of files) await cp(join(SHIPPED_MARKET_DIR, f), join(dir, f), { recursive: true });
  return dir;
}
/** Rewrites a gzip CSV in place keeping the header and the rows `keep` accepts. */
async function filterRows(path: string, keep: (line: string) => boolean): Promise<void> {
  const [header, ...rows] = gunzipSync(await readFile(path))
    .toString('utf8')
    .trim()
    .split('\n');
  await writeFile(path, gzipSync(`${[header, ...rows.filter(keep)].join('\n')}\n`));
}
afterAll(async () => {
  for (const dir of temps) await rm(dir, { recursive: true, force: true });
});

describe('replay feed: candles', () => {
  it('opens by default 31 days before the end of the data (1d outcomes due in it), as a replay feed', async () => {
    const feed = await openReplayFeed({ run: false });
    expect(feed.kind).toBe('replay');
    // A week of 1d closes whose outcomes, 24 candles on, come due before the data ends.
    expect(feed.now()).toBe(DATA_END - 31 * 24 * H);
    // It loops at the end of the data rather than stopping: the clock has no end.
    expect(feed.clock.end).toBe(Number.POSITIVE_INFINITY);
    expect(feed.laps?.end).toBe(DATA_END);
    expect(feed.exchanges()).toEqual(['BINANCE', 'BINANCE_SPOT', 'BYBIT', 'HYPERLIQUID']);
    expect(feed.venues().every((v) => v.ok)).toBe(true);
  });

  it('returns only candles closed by now, oldest first', async () => {
    const feed = await manualFeed();
    const h1 = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 });
    expect(h1.map((c) => c.openTime)).toEqual([7, 8, 9].map((h) => Date.UTC(2025, 9, 25, h)));
    const m5 = await feed.candles('BINANCE_SPOT', 'btc', '5m', { limit: 2 });
    expect(m5.map((c) => c.openTime)).toEqual([Date.UTC(2025, 9, 25, 10, 20), Date.UTC(2025, 9, 25, 10, 25)]);
    // At exactly 11:00 the 10:00 candle has closed.
    feed.clock.setTime(Date.UTC(2025, 9, 25, 11));
    const [last] = (await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1 })).slice(-1);
    expect(last!.openTime).toBe(Date.UTC(2025, 9, 25, 10));
    const perp = await feed.candles('BINANCE', 'BTC', '1h', { limit: 1 });
    expect(perp[0]!.openTime).toBe(Date.UTC(2025, 9, 25, 10));
    // Perp and spot are different markets: their prices differ.
    expect(perp[0]!.close).not.toBe(last!.close);
  });

  it('honours until (never beyond now) and limit', async () => {
    const feed = await manualFeed();
    const until = Date.UTC(2025, 9, 20, 0, 30);
    const h1 = await feed.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 500, until });
    expect(h1).toHaveLength(500);
    expect(h1.at(-1)!.openTime).toBe(Date.UTC(2025, 9, 19, 23));
    const future = await feed.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 1, until: DATA_END });
    expect(future[0]!.openTime).toBe(Date.UTC(2025, 9, 25, 9));
    // All history there is: from the first hour of the data.
    const all = await feed.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 10_000 });
    expect(all[0]!.openTime).toBe(HOURLY_START);
    expect(all).toHaveLength((Date.UTC(2025, 9, 25, 10) - HOURLY_START) / H);
  });

  it('builds 15m/30m from 5m and 2h…1d from 1h, closed buckets only', async () => {
    const feed = await manualFeed();
    const h4 = await feed.candles('BINANCE_SPOT', 'SOL', '4h', { limit: 2 });
    expect(h4.map((c) => c.openTime)).toEqual([Date.UTC(2025, 9, 25, 0), Date.UTC(2025, 9, 25, 4)]);
    const source = await readCandleFile(join(SHIPPED_MARKET_DIR, 'candles/binance-spot/SOLUSDT-1h.csv.gz'));
    const expected = aggregateCandles(source, '1h', '4h').filter((c) => c.openTime + 4 * H <= T);
    expect(h4).toEqual(expected.slice(-2));
    const m30 = await feed.candles('BINANCE_SPOT', 'SOL', '30m', { limit: 1 });
    expect(m30[0]!.openTime).toBe(Date.UTC(2025, 9, 25, 10));
    const d1 = await feed.candles('BINANCE', 'SOL', '1d', { limit: 1000 });
    expect(d1).toHaveLength((Date.UTC(2025, 9, 25) - HOURLY_START) / (24 * H));
    expect(d1.at(-1)!.openTime).toBe(Date.UTC(2025, 9, 24));
    const h8 = await feed.candles('BINANCE', 'SOL', '8h', { limit: 1 });
    expect(h8[0]!.openTime).toBe(Date.UTC(2025, 9, 25, 0));
  });

  it('refuses 1m and 3m: the replay data has no 1m candles', async () => {
    const feed = await manualFeed();
    for (const tf of ['1m', '3m'] as const) {
      const error = await feed.candles('BINANCE_SPOT', 'BTC', tf, { limit: 10 }).catch((e) => e);
      expect(error).toBeInstanceOf(UnsupportedTimeframeError);
      expect(error.message).toBe(
        `timeframe ${tf} is not available for BINANCE_SPOT: the replay data holds 5m, 1h candles of every coin here, ` +
          `which build 5m, 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d; ${tf} is served by no replayed venue (or on the live feed)`,
      );
      expect(error.code).toBe('unsupported_timeframe');
    }
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '2w' as never, { limit: 1 })).rejects.toThrow(
      UnsupportedTimeframeError,
    );
  });

  it('names unknown coins and venues without substituting other data', async () => {
    const feed = await manualFeed();
    await expect(feed.candles('BINANCE_SPOT', 'NOPE', '1h', { limit: 1 })).rejects.toThrow(UnknownCoinError);
    // BINANCE is the perpetual: no file for a coin there is unknown, never spot data instead.
    const dir = await tempCopy(['candles/binance-spot', 'candles/binance-usdm/BTCUSDT-1h.csv.gz']);
    const partial = await manualFeed(T, dir);
    const error = await partial.candles('BINANCE', 'ETH', '1h', { limit: 1 }).catch((e) => e);
    expect(error).toBeInstanceOf(UnknownCoinError);
    expect(error.message).toBe(
      'ETH is not listed on BINANCE (the replay data has no BINANCE candles of it; coins served there: BTC)',
    );
    await expect(feed.candles('BYBIT', 'BTC', '1h', { limit: 1 })).rejects.toThrow(/no BYBIT candles/);
    const okx = await feed.candles('OKX', 'BTC', '1h', { limit: 1 }).catch((e) => e);
    expect(okx).toBeInstanceOf(UnsupportedExchangeError);
    // What is served instead, and never where the server keeps its data.
    expect(okx.message).toMatch(
      /^exchange OKX is not served by the replay feed: the replay data has no OKX files; served: /,
    );
    expect(okx.message).toContain('BINANCE_SPOT (candles)');
    expect(okx.message).not.toContain(SHIPPED_MARKET_DIR);
    expect(okx.message).not.toMatch(/\//);
    // 15m cannot be built from BINANCE's 1h candles: the refusal says so, and where 15m is served.
    const m15 = await feed.candles('BINANCE', 'BTC', '15m', { limit: 1 }).catch((e) => e);
    expect(m15).toBeInstanceOf(UnsupportedTimeframeError);
    expect(m15.message).toBe(
      'timeframe 15m is not available for BINANCE: the replay data holds 1h candles of every coin here, which build ' +
        '1h, 2h, 4h, 8h, 12h, 1d; 15m is served on BINANCE_SPOT (or on the live feed)',
    );
    // Where the coins of a venue differ in their files, the refusal names the coin it is about.
    const uneven = await manualFeed(
      T,
      await tempCopy([
        'candles/binance-spot/BTCUSDT-1h.csv.gz',
        'candles/binance-spot/BTCUSDT-5m.csv.gz',
        'candles/binance-spot/ETHUSDT-1h.csv.gz',
      ]),
    );
    const eth = await uneven.candles('BINANCE_SPOT', 'ETH', '15m', { limit: 1 }).catch((e) => e);
    expect(eth).toBeInstanceOf(UnsupportedTimeframeError);
    expect(eth.message).toBe(
      'timeframe 15m is not available for BINANCE_SPOT: the replay data holds 1h candles of ETH here, which build ' +
        '1h, 2h, 4h, 8h, 12h, 1d; 15m is served by no replayed venue (or on the live feed)',
    );
    const unknown = await feed.candles('BINANCE_SPOT', 'NOPE', '1h', { limit: 1 }).catch((e) => e);
    expect(unknown.message).toMatch(/coins served there: BNB, BTC, DOGE, ETH, SOL, XRP\)$/);
    await expect(feed.funding('BINANCE_SPOT', 'BTC')).rejects.toThrow(/spot venue has no funding/);
    // A perpetual venue with candles and no funding: refused naming the venues that hold funding.
    const candlesOnly = await manualFeed(
      T,
      await tempCopy(['candles/binance-usdm/BTCUSDT-1h.csv.gz', 'funding/bybit']),
    );
    const noFunding = await candlesOnly.funding('BINANCE', 'BTC').catch((e) => e);
    expect(noFunding).toBeInstanceOf(UnsupportedExchangeError);
    expect(noFunding.message).toBe(
      'exchange BINANCE is not served by the replay feed: the replay data has no BINANCE funding; funding is served for BYBIT',
    );
    await expect(feed.funding('HYPERLIQUID', 'PEPE')).rejects.toThrow(UnknownCoinError);
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 0 })).rejects.toThrow(RangeError);
  });

  it('reports too little history, and data that ends before the clock', async () => {
    const feed = await manualFeed(HOURLY_START + 3 * H + 5 * M);
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 10 })).toHaveLength(3);
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 10, min: 5 }).catch((e) => e);
    expect(error).toBeInstanceOf(InsufficientHistoryError);
    expect(error).toMatchObject({ required: 5, available: 3 });
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '4h', { limit: 10 })).rejects.toThrow(
      InsufficientHistoryError,
    );

    const dir = await tempCopy(['candles/binance-spot']);
    await filterRows(
      join(dir, 'candles/binance-spot/ETHUSDT-1h.csv.gz'),
      (l) => Number(l.split(',')[0]) < Date.UTC(2025, 9, 24),
    );
    const stale = await manualFeed(T, dir);
    await expect(stale.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 5 })).rejects.toThrow(
      /replay data ends at 2025-10-24T00:00:00.000Z/,
    );
    // Before the data ended, the same file answers.
    expect(
      await stale.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 1, until: Date.UTC(2025, 9, 23) }),
    ).toHaveLength(1);
  });

  it('marks the venue down when a file is unreadable', async () => {
    const dir = await tempCopy(['candles/binance-spot']);
    await writeFile(join(dir, 'candles/binance-spot/SOLUSDT-5m.csv.gz'), gzipSync('open_time,open\n1,2\n'));
    const feed = await manualFeed(T, dir);
    await expect(feed.candles('BINANCE_SPOT', 'SOL', '5m', { limit: 1 })).rejects.toThrow(
      VenueUnavailableError,
    );
    expect(feed.venues()).toEqual([
      { exchange: 'BINANCE_SPOT', ok: false, lastError: expect.stringMatching(/unexpected candle header/) },
    ]);
    await feed.candles('BINANCE_SPOT', 'BTC', '5m', { limit: 1 });
    expect(feed.venues()[0]).toMatchObject({ ok: true, lastOkAt: expect.any(Number) });
  });

  it("times a venue's last good read on the feed's clock (Unix ms), not the wall clock", async () => {
    const feed = await manualFeed();
    await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1 });
    await feed.funding('BINANCE', 'BTC', { limit: 1 });
    // What an answer's `timestamp` (seconds) is taken from: the replay's now, here T.
    expect(feed.now()).toBe(T);
    const status = Object.fromEntries(feed.venues().map((v) => [v.exchange, v.lastOkAt]));
    expect(status).toMatchObject({ BINANCE_SPOT: T, BINANCE: T });
  });
});

describe('replay feed: funding and markets', () => {
  it('gives each venue its own interval, settled by now only', async () => {
    const feed = await manualFeed();
    const hl = await feed.funding('HYPERLIQUID', 'BTC', { limit: 5 });
    expect(hl).toHaveLength(5);
    expect(hl.every((f) => f.intervalHours === 1 && f.fundingTime <= T)).toBe(true);
    expect(hl.at(-1)!.fundingTime).toBeGreaterThan(T - H);
    const by = await feed.funding('BYBIT', 'ETH', { limit: 3 });
    expect(by.map((f) => [f.fundingTime, f.intervalHours])).toEqual([
      [Date.UTC(2025, 9, 24, 16), 8],
      [Date.UTC(2025, 9, 25, 0), 8],
      [Date.UTC(2025, 9, 25, 8), 8],
    ]);
    expect(by[2]!.rate).toBe(7.603e-5);
    const since = await feed.funding('BYBIT', 'ETH', { since: Date.UTC(2025, 9, 25) });
    expect(since).toHaveLength(2);
  });

  it('merges the two Binance sources into one row per settlement', async () => {
    const feed = await manualFeed(DATA_END);
    const all = await feed.funding('BINANCE', 'SOL', { limit: 1000 });
    expect(all).toHaveLength(126);
    const gaps = all.slice(1).map((f, i) => Math.round((f.fundingTime - all[i]!.fundingTime) / H));
    expect(new Set(gaps)).toEqual(new Set([8]));
    expect(all[0]).toEqual({ fundingTime: DATA_START, rate: -3.324e-5, intervalHours: 8 });
  });

  it('reads hours_since_previous files alone', async () => {
    const dir = await tempCopy(['candles/binance-spot/BTCUSDT-1h.csv.gz', 'funding/binance-usdm']);
    const feed = await manualFeed(T, dir);
    const rows = await feed.funding('BINANCE', 'BTC', { limit: 1000 });
    expect(rows[0]).toMatchObject({ fundingTime: DATA_START, intervalHours: 8 });
    expect(rows.every((f) => f.intervalHours === 8)).toBe(true);
  });

  it('follows interval changes in hours_since_previous data (ORCA 4h → 2h → 4h, full shared set)', async () => {
    if (!existsSync(SHARED_DIR)) {
      if (process.env.CI === 'true') throw new Error(`shared market data not found at ${SHARED_DIR}`);
      process.emitWarning(`shared market data not found at ${SHARED_DIR}: interval-change check not run`);
      return;
    }
    const feed = await openReplayFeed({ dir: SHARED_DIR, start: Date.UTC(2025, 2, 24, 14), run: false });
    const rows = await feed.funding('BINANCE', 'ORCA', { since: Date.UTC(2025, 2, 21, 8) });
    expect(rows.map((f) => f.intervalHours).join('')).toMatch(/^4+2+4+$/);
    expect(await feed.nextFunding('BINANCE', 'ORCA')).toMatchObject({
      nextFundingTime: Date.UTC(2025, 2, 24, 16),
      intervalHours: 4,
    });
  });

  it('states the next settlement and never predicts its rate', async () => {
    const feed = await manualFeed();
    expect(await feed.nextFunding('HYPERLIQUID', 'SOL')).toEqual({
      exchange: 'HYPERLIQUID',
      coin: 'SOL',
      nextFundingTime: Date.UTC(2025, 9, 25, 11),
      intervalHours: 1,
      predictedRate: null,
    });
    expect(await feed.nextFunding('BINANCE', 'BTC')).toMatchObject({
      nextFundingTime: Date.UTC(2025, 9, 25, 16),
      intervalHours: 8,
    });
  });

  it('reports funding data that ends before the clock', async () => {
    const dir = await tempCopy(['candles/binance-spot/BTCUSDT-1h.csv.gz', 'funding/bybit']);
    await filterRows(join(dir, 'funding/bybit/BTCUSDT.csv.gz'), (l) => {
      const t = Number(l.split(',')[0]);
      return t >= Date.UTC(2025, 9, 1) && t < Date.UTC(2025, 9, 10);
    });
    const feed = await manualFeed(T, dir);
    await expect(feed.funding('BYBIT', 'BTC')).rejects.toThrow(
      /replay funding data ends at 2025-10-09T16:00/,
    );
    await expect(feed.nextFunding('BYBIT', 'BTC')).rejects.toThrow(InsufficientHistoryError);
    const early = await manualFeed(Date.UTC(2025, 8, 25), dir);
    await expect(early.funding('BYBIT', 'BTC')).rejects.toThrow(/none by/);
  });

  it('ranks markets by 24h quote volume of feed time', async () => {
    const feed = await manualFeed();
    const spot = await feed.markets('BINANCE_SPOT');
    expect(spot.map((m) => m.coin)).toEqual(COINS);
    const btc = spot.find((m) => m.coin === 'BTC')!;
    const day = await feed.candles('BINANCE_SPOT', 'BTC', '5m', { limit: 288 });
    expect(btc).toEqual({
      exchange: 'BINANCE_SPOT',
      coin: 'BTC',
      symbol: 'BTCUSDT',
      quoteVolume24h: expect.closeTo(
        day.reduce((s, c) => s + c.volume * c.close, 0),
        3,
      ),
      openInterest: null,
      hasCandles: true,
      hasFunding: false,
    });
    expect(btc.quoteVolume24h).toBeGreaterThan(1e8);
    const hl = await feed.markets('HYPERLIQUID');
    expect(hl.map((m) => [m.coin, m.quoteVolume24h, m.hasFunding])).toEqual(
      COINS.map((c) => [c, null, true]),
    );
    const early = await manualFeed(HOURLY_START + 2 * H);
    expect((await early.markets('BINANCE'))[0]!.quoteVolume24h).toBeNull();
  });

  it('stops a listing at an abort: no coin file is read past the one under way, and nothing of it is kept', async () => {
    const dir = await tempCopy(['candles']);
    const feed = await manualFeed(T, dir);
    const spot = () => feed.venues().find((v) => v.exchange === 'BINANCE_SPOT')!;
    const stop = new AbortController();
    const listing = feed.markets('BINANCE_SPOT', { signal: stop.signal });
    // Aborted once the first coin's file is read (the venue's last good read is set by it).
    while (spot().lastOkAt === undefined) await new Promise((resolve) => setImmediate(resolve));
    stop.abort(new Error('stopping'));
    const outcome = await listing.then(
      () => 'listed',
      (err: unknown) => err,
    );
    // Which files the listing read: with the files gone, only a coin whose file was read (and
    // kept) still answers. The first, and at most the one under way at the abort.
    await rm(join(dir, 'candles', 'binance-spot'), { recursive: true });
    const read: string[] = [];
    for (const coin of COINS) {
      const answered = await feed.candles('BINANCE_SPOT', coin, '5m', { limit: 1 }).then(
        () => true,
        (err: unknown) => {
          expect(err).toBeInstanceOf(VenueUnavailableError);
          return false;
        },
      );
      if (answered) read.push(coin);
    }
    expect(read.length).toBeGreaterThanOrEqual(1);
    expect(read.length).toBeLessThanOrEqual(2);
    expect(outcome).toEqual(new Error('stopping'));
    // The next listing lists every coin, with the figures of a listing never cut short.
    await cp(join(SHIPPED_MARKET_DIR, 'candles', 'binance-spot'), join(dir, 'candles', 'binance-spot'), {
      recursive: true,
    });
    const again = await feed.markets('BINANCE_SPOT');
    expect(again).toEqual(await (await manualFeed()).markets('BINANCE_SPOT'));
    expect(again.map((m) => m.coin)).toEqual(COINS);
    // Aborted before it begins, a listing reads nothing.
    await expect(
      feed.markets('BINANCE_SPOT', { signal: AbortSignal.abort(new Error('stopped')) }),
    ).rejects.toThrow('stopped');
  });
});

describe('replay feed: candles given a stop signal', () => {
  it('reads no file once aborted, and a read cut short leaves what another caller shares whole', async () => {
    const dir = await tempCopy(['candles']);
    const feed = await manualFeed(T, dir);
    const spot = () => feed.venues().find((v) => v.exchange === 'BINANCE_SPOT')!;
    // Aborted before it begins: no file read.
    await expect(
      feed.candles('BINANCE_SPOT', 'BTC', '1h', {
        limit: 3,
        signal: AbortSignal.abort(new Error('stopped')),
      }),
    ).rejects.toThrow('stopped');
    expect(spot().lastOkAt).toBeUndefined();
    // Aborted while its file is read, beside a caller without a signal sharing that read: the
    // stopped one throws the reason, the other gets the candles a read never stopped gives.
    const stop = new AbortController();
    const stopped = feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3, signal: stop.signal });
    const shared = feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 });
    stop.abort(new Error('stopping'));
    await expect(stopped).rejects.toThrow('stopping');
    const fresh = await (await manualFeed()).candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 });
    expect(await shared).toEqual(fresh);
    // The file read under way at the abort was kept whole: with the files gone, it still answers.
    await rm(join(dir, 'candles', 'binance-spot'), { recursive: true });
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toEqual(fresh);
  });
});

describe('replay clock', () => {
  let wall = 0;
  const wallNow = () => wall;
  beforeAll(() => {
    wall = 1_000_000;
  });

  it('runs at wall speed × acceleration and, told not to loop, stops at the end of the data', async () => {
    const feed = await openReplayFeed({ start: DATA_END - 2 * H, speed: 3600, wallNow, loop: false });
    try {
      expect(feed.now()).toBe(DATA_END - 2 * H);
      wall += 1000;
      expect(feed.now()).toBe(DATA_END - H);
      wall += 10_000;
      expect(feed.now()).toBe(DATA_END);
      expect(feed.clock.ended).toBe(true);
      const last = await feed.candles('BINANCE_SPOT', 'BTC', '1d', { limit: 1 });
      expect(last[0]!.openTime).toBe(Date.UTC(2025, 9, 31));
      feed.clock.pause();
      wall += 10_000;
      expect(feed.now()).toBe(DATA_END);
    } finally {
      await feed.close();
    }
  });

  it('loops at the end of the data with a clock that keeps moving forward', async () => {
    const logged: Array<{ obj: Record<string, unknown>; msg: string }> = [];
    const logger = {
      info: (obj: Record<string, unknown>, msg: string) => logged.push({ obj, msg }),
      error: () => undefined,
      warn: () => undefined,
      debug: () => undefined,
    } as unknown as Logger;
    const feed = await openReplayFeed({ start: DATA_END - 2 * H, speed: 0, run: false, logger });
    try {
      const before = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 24 });
      const period = feed.laps!.period;
      feed.clock.setTime(DATA_END + 5 * H);
      const after = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 24 });
      const times = after.map((c) => c.openTime);
      // Unique, strictly increasing, hourly, and continuing past the end of the data.
      expect(times.every((t, i) => i === 0 || t - times[i - 1]! === H)).toBe(true);
      expect(times[times.length - 1]).toBe(DATA_END + 4 * H);
      expect(times[0]).toBeGreaterThan(before[0]!.openTime);
      // The candle after the seam is the data's first looped candle, shifted by one period and
      // re-based to open where the data ended.
      const source = await readCandleFile(join(SHIPPED_MARKET_DIR, 'candles/binance-spot/BTCUSDT-1h.csv.gz'));
      const first = source.find((c) => c.openTime === DATA_END - period)!;
      const last = source.find((c) => c.openTime === DATA_END - H)!;
      const seam = after.find((c) => c.openTime === DATA_END)!;
      // Its prices are on the data's tick (2 decimals for BTCUSDT spot): the seam's open is the close the
      // data ended on, and its return the data's but for that rounding.
      const unit = 10 ** -tickDecimals(source);
      expect(seam.open).toBe(last.close);
      expect(Math.abs(seam.close / seam.open - first.close / first.open)).toBeLessThan(unit / seam.open);
      expect(seam.volume).toBe(first.volume);
      // 5m, aggregated timeframes and funding follow the same clock.
      const m5 = await feed.candles('BINANCE_SPOT', 'BTC', '5m', { limit: 3 });
      expect(m5[2]!.openTime).toBe(DATA_END + 5 * H - 5 * M);
      const funding = await feed.funding('BINANCE', 'BTC', { limit: 5 });
      expect(funding[funding.length - 1]!.fundingTime).toBeLessThanOrEqual(DATA_END + 5 * H);
      expect(funding[funding.length - 1]!.fundingTime).toBeGreaterThanOrEqual(DATA_END);
      const next = await feed.nextFunding('HYPERLIQUID', 'BTC');
      expect(next.nextFundingTime).toBeGreaterThanOrEqual(DATA_END + 5 * H);
      expect(next.nextFundingTime).toBeLessThanOrEqual(DATA_END + 6 * H);
      // Looping is logged, once per lap.
      expect(logged.filter((l) => l.msg.includes('loops'))).toHaveLength(1);
      expect(logged.find((l) => l.msg.includes('loops'))!.obj).toMatchObject({ lap: 1 });
    } finally {
      await feed.close();
    }
  });

  it("re-bases each lap to carry on where the one before ended, on the venue's tick: no jump at the seam, returns the data's, one factor per coin", async () => {
    const feed = await openReplayFeed({ start: DATA_END, speed: 0, run: false });
    try {
      const period = feed.laps!.period;
      const seam = DATA_END + period; // where lap 2 starts
      feed.clock.setTime(seam + 5 * H);
      const read = (venue: string, file: string) =>
        readCandleFile(join(SHIPPED_MARKET_DIR, 'candles', venue, file));
      const rel = (a: number, b: number) => Math.abs(a / b - 1);
      for (const coin of COINS) {
        const data = await read('binance-spot', `${coin}USDT-5m.csv.gz`);
        const at = new Map(data.map((c) => [c.openTime, c]));
        // The venue's tick for the coin, as its data writes prices: no lapped price carries more
        // decimals (a product's float tail, 103538.00062195644, is no price a venue quotes).
        const decimals = tickDecimals(data.filter((c) => c.openTime < DATA_END).slice(-1000));
        const unit = 10 ** -decimals;
        const served = await feed.candles('BINANCE_SPOT', coin, '5m', { limit: 200 });
        const i = served.findIndex((c) => c.openTime === seam);
        expect(i, coin).toBeGreaterThan(100);
        expect(tickDecimals(served), coin).toBeLessThanOrEqual(decimals);
        // The first candle of lap 2 opens at lap 1's last close: the seam moves the price by nothing.
        expect(served[i]!.open, coin).toBe(served[i - 1]!.close);
        for (let k = 1; k < served.length; k++) {
          const c = served[k]!;
          const lap = c.openTime >= seam ? 2 : 1;
          const d = at.get(c.openTime - lap * period)!;
          // Inside a lap every return is the data's but for rounding to the tick (half of it on
          // each price); volume is the data's.
          expect(c.volume, coin).toBe(d.volume);
          expect(rel(c.high / c.low, d.high / d.low), coin).toBeLessThan(unit / c.low);
          if (k === i) continue;
          const p = at.get(served[k - 1]!.openTime - lap * period)!;
          expect(rel(c.close / served[k - 1]!.close, d.close / p.close), coin).toBeLessThan(
            unit / Math.min(c.close, served[k - 1]!.close),
          );
        }
        // Every timeframe of the coin gets the same factor: the 1h close (1h file), the 15m close
        // (built from 5m) and the 4h close (built from 1h) agree where they end together.
        const h1 = (await feed.candles('BINANCE_SPOT', coin, '1h', { limit: 8 })).at(-1)!;
        const m15 = (await feed.candles('BINANCE_SPOT', coin, '15m', { limit: 4 })).at(-1)!;
        const h4 = (await feed.candles('BINANCE_SPOT', coin, '4h', { limit: 2 })).at(-1)!;
        expect(h1.openTime + H).toBe(m15.openTime + 15 * M);
        expect(rel(h1.close, m15.close), coin).toBeLessThan(1e-12);
        expect(rel(h1.close, served.at(-1)!.close), coin).toBeLessThan(1e-12);
        const h1at4 = (
          await feed.candles('BINANCE_SPOT', coin, '1h', { limit: 8, until: h4.openTime + 4 * H })
        ).at(-1)!;
        expect(rel(h4.close, h1at4.close), coin).toBeLessThan(1e-12);
        // Spot and perpetual share the factor: the basis in lap 2 is the data's.
        const perp = (await feed.candles('BINANCE', coin, '1h', { limit: 1 }))[0]!;
        expect(perp.openTime).toBe(h1.openTime);
        const dPerp = (await read('binance-usdm', `${coin}USDT-1h.csv.gz`)).find(
          (c) => c.openTime === perp.openTime - 2 * period,
        )!;
        const dSpot = at.get(h1.openTime - 2 * period + 55 * M)!;
        // The perpetual on its own venue's tick.
        const perpData = await read('binance-usdm', `${coin}USDT-1h.csv.gz`);
        const perpDecimals = tickDecimals(perpData.filter((c) => c.openTime < DATA_END).slice(-1000));
        const perpUnit = 10 ** -perpDecimals;
        expect(decimalsOf(perp.close), coin).toBeLessThanOrEqual(perpDecimals);
        expect(rel(perp.close / h1.close, dPerp.close / dSpot.close), coin).toBeLessThan(
          perpUnit / perp.close + unit / h1.close,
        );
      }
      // Funding is served as it is: lap 2's rates are the data's.
      const rates = await feed.funding('BINANCE', 'BTC', { limit: 1 });
      const inData = await manualFeed(seam + 5 * H - 2 * period);
      try {
        const dataRates = await inData.funding('BINANCE', 'BTC', { limit: 1 });
        expect(rates).toEqual(dataRates.map((f) => ({ ...f, fundingTime: f.fundingTime + 2 * period })));
      } finally {
        await inData.close();
      }
    } finally {
      await feed.close();
    }
  });

  it('carries every timeframe across the seam: before a lap closes its first 8h, 12h or 1d candle, the lap before holds the latest', async () => {
    const feed = await openReplayFeed({ start: DATA_END, speed: 0, run: false });
    try {
      const long = ['8h', '12h', '1d'] as const;
      const atEnd = new Map<string, number[]>();
      for (const tf of long)
        atEnd.set(
          tf,
          (await feed.candles('BINANCE_SPOT', 'BTC', tf, { limit: 30 })).map((c) => c.openTime),
        );
      // Five hours into the next lap, no candle of these timeframes has closed in it yet.
      feed.clock.setTime(DATA_END + 5 * H);
      for (const tf of long) {
        const times = (await feed.candles('BINANCE_SPOT', 'BTC', tf, { limit: 30 })).map((c) => c.openTime);
        expect(times, tf).toEqual(atEnd.get(tf));
      }
      // Once one has, it follows the last of the lap before, one timeframe later.
      feed.clock.setTime(DATA_END + 24 * H);
      for (const tf of long) {
        const times = (await feed.candles('BINANCE_SPOT', 'BTC', tf, { limit: 30 })).map((c) => c.openTime);
        expect(times, tf).toHaveLength(30);
        const step = TIMEFRAME_MS[tf];
        expect(
          times.every((t, i) => i === 0 || t - times[i - 1]! === step),
          tf,
        ).toBe(true);
        expect(times.at(-1), tf).toBe(DATA_END + 24 * H - step);
      }
    } finally {
      await feed.close();
    }
  });

  it('shares one clock between processes given the same anchor, and a restart does not rewind', async () => {
    const anchor = wall - 30 * 60_000;
    const start = DATA_END - 7 * 24 * H;
    const a = await openReplayFeed({ start, speed: 60, wallNow, anchor });
    wall += 1000;
    const b = await openReplayFeed({ start, speed: 60, wallNow, anchor });
    try {
      expect(a.now()).toBe(b.now());
      expect(a.now()).toBe(start + (wall - anchor) * 60);
      const seenByA = a.now();
      await a.close();
      // "Restart": a new feed on the same anchor resumes at the shared time, later than before.
      wall += 5000;
      const again = await openReplayFeed({ start, speed: 60, wallNow, anchor });
      expect(again.now()).toBeGreaterThan(seenByA);
      expect(again.now()).toBe(b.now());
      await again.close();
    } finally {
      await b.close();
    }
  });

  it('steps by hand, only forward, and emits each candle close once, in order', async () => {
    const feed = await manualFeed(Date.UTC(2025, 9, 25, 10, 50));
    const seen: CandleClose[] = [];
    const off5 = feed.onCandleClose('5m', (c) => seen.push(c));
    feed.onCandleClose('1h', (c) => seen.push(c));
    feed.onCandleClose('4h', (c) => seen.push(c));
    feed.clock.advance(15 * M);
    expect(seen.map((c) => `${c.timeframe}@${new Date(c.closeTime).toISOString().slice(11, 16)}`)).toEqual([
      '5m@10:55',
      '5m@11:00',
      '1h@11:00',
      '5m@11:05',
    ]);
    expect(seen[2]).toEqual({
      timeframe: '1h',
      openTime: Date.UTC(2025, 9, 25, 10),
      closeTime: Date.UTC(2025, 9, 25, 11),
    });
    off5();
    seen.length = 0;
    feed.clock.setTime(Date.UTC(2025, 9, 25, 12));
    feed.clock.advance(0);
    expect(seen.map((c) => c.timeframe)).toEqual(['1h', '4h']);
    expect(() => feed.clock.setTime(Date.UTC(2025, 9, 25, 11))).toThrow(/only moves forward/);
    // A close announced by the clock is served by the feed at that moment.
    const [h] = await feed.candles('BINANCE_SPOT', 'BTC', '4h', { limit: 1 });
    expect(h!.openTime + 4 * H).toBe(Date.UTC(2025, 9, 25, 12));
  });

  it('keeps ticking other listeners when one throws', async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on('warning', onWarning);
    try {
      const feed = await manualFeed(Date.UTC(2025, 9, 25, 10));
      const seen: number[] = [];
      feed.onCandleClose('1h', () => {
        throw new Error('boom');
      });
      feed.onCandleClose('1h', (c) => seen.push(c.closeTime));
      feed.clock.advance(2 * H);
      expect(seen).toHaveLength(2);
      await new Promise((r) => setImmediate(r));
      expect(warnings.filter((w) => w.includes('boom'))).toHaveLength(2);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('emits closes on its own while running', async () => {
    const feed = await openReplayFeed({ start: Date.UTC(2025, 9, 25, 10, 59, 59), speed: 60 });
    try {
      const close = await new Promise<CandleClose>((resolve) => feed.onCandleClose('1h', resolve));
      expect(close.closeTime).toBe(Date.UTC(2025, 9, 25, 11));
      expect(feed.now()).toBeGreaterThanOrEqual(close.closeTime);
    } finally {
      await feed.close();
    }
  });
});
