import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../contracts/config.ts';
import { EXCHANGES, type Exchange, TIMEFRAMES, type Timeframe } from '../../contracts/market.ts';
import { sourceTimeframe } from './aggregate.ts';
import { readFundingFile } from './csv.ts';
import { MarketDataError } from './errors.ts';
import type { MarketFeed } from './port.ts';
import { SHIPPED_MARKET_DIR } from './replay.ts';
import { CANDLE_FOLDERS, parseCandleFileName } from './replay-layout.ts';
import { feedOptionsFromConfig, selectFeed } from './select.ts';
import { defaultReplayData, SHARED_MARKET_DIR } from './shared-data.ts';

/**
 * The replay `npm start` serves with no MARKET_DATA_DIR: the full data set beside the checkout when
 * it is there (as in CI), else the shipped slice. Every coin × timeframe its files can build answers
 * on every venue that has them; everything else is refused with the code of what is missing and the
 * venues, coins or timeframes that are served instead, and never with a path of the server.
 */

const sharedPresent = existsSync(join(SHARED_MARKET_DIR, 'candles'));

/** What the files can build, worked out from the directory listing alone (not by the feed). */
function buildable(dir: string): Map<Exchange, Map<string, Timeframe[]>> {
  const out = new Map<Exchange, Map<string, Timeframe[]>>();
  for (const [folder, exchange] of Object.entries(CANDLE_FOLDERS)) {
    const path = join(dir, 'candles', folder);
    if (!existsSync(path)) continue;
    const files = new Map<string, Timeframe[]>();
    for (const name of readdirSync(path)) {
      const parsed = parseCandleFileName(name);
      if (parsed) files.set(parsed.coin, [...(files.get(parsed.coin) ?? []), parsed.timeframe]);
    }
    const coins = new Map<string, Timeframe[]>();
    for (const [coin, held] of files) {
      coins.set(
        coin,
        TIMEFRAMES.filter((tf) => sourceTimeframe(tf, held) !== undefined),
      );
    }
    out.set(exchange, coins);
  }
  return out;
}

async function refusal(call: Promise<unknown>): Promise<MarketDataError> {
  const error = await call.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(MarketDataError);
  return error as MarketDataError;
}

describe('the default replay data', () => {
  it('is the full data set beside the checkout when it is there, else the shipped slice', () => {
    const empty = mkdtempSync(join(tmpdir(), 'no-shared-'));
    try {
      expect(defaultReplayData(empty)).toEqual({ dir: SHIPPED_MARKET_DIR, source: 'shipped' });
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
    expect(defaultReplayData(SHIPPED_MARKET_DIR).source).toBe('shared');
    const expected = sharedPresent ? SHARED_MARKET_DIR : SHIPPED_MARKET_DIR;
    expect(defaultReplayData().dir).toBe(expected);
    expect(feedOptionsFromConfig(loadConfig({})).replay?.dir).toBe(expected);
    expect(feedOptionsFromConfig(loadConfig({ MARKET_DATA_DIR: '/elsewhere' })).replay?.dir).toBe(
      '/elsewhere',
    );
    // CI has the data set beside its clone: there the default must be the full set.
    if (process.env.CI === 'true') expect(sharedPresent).toBe(true);
  });
});

describe('on the default replay', () => {
  let feed: MarketFeed;
  let dir: string;
  let expected: Map<Exchange, Map<string, Timeframe[]>>;
  beforeAll(async () => {
    const options = feedOptionsFromConfig(loadConfig({ FEED: 'replay' }));
    dir = options.replay!.dir!;
    expected = buildable(dir);
    ({ feed } = await selectFeed({ ...options, replay: { ...options.replay, run: false } }));
  });
  afterAll(() => feed?.close());

  /** A refusal is for the caller: no path of this server, no data directory. */
  const expectNoServerPath = (message: string) => {
    expect(message).not.toContain(dir);
    expect(message).not.toMatch(/\/[A-Za-z0-9_.-]+\//);
  };

  it('answers every coin and timeframe the files build, and refuses the rest naming what is served', async () => {
    let answered = 0;
    let refused = 0;
    for (const [exchange, coins] of expected) {
      expect(coins.size).toBeGreaterThan(0);
      const markets = (await feed.markets(exchange)).filter((m) => m.hasCandles).map((m) => m.coin);
      expect(markets.sort()).toEqual([...coins.keys()].sort());
      for (const [coin, timeframes] of coins) {
        for (const timeframe of TIMEFRAMES) {
          if (timeframes.includes(timeframe)) {
            const candles = await feed.candles(exchange, coin, timeframe, { limit: 50 });
            expect(candles.length, `${exchange} ${coin} ${timeframe}`).toBe(50);
            answered++;
          } else {
            const error = await refusal(feed.candles(exchange, coin, timeframe, { limit: 50 }));
            expect(error.code).toBe('unsupported_timeframe');
            // Names the timeframes this venue builds for the coin.
            for (const tf of timeframes) expect(error.message).toContain(tf);
            expectNoServerPath(error.message);
            refused++;
          }
        }
      }
    }
    expect(answered).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    if (sharedPresent) {
      // The full set: 23 spot coins (10 of them with 5m), 6 perpetuals.
      expect(expected.get('BINANCE_SPOT')!.size).toBeGreaterThanOrEqual(20);
    }
  });

  it('refuses a venue or coin it has no candles of, naming the venues and coins served', async () => {
    const withCandles = [...expected.keys()];
    for (const exchange of EXCHANGES.filter((e) => !expected.has(e))) {
      const error = await refusal(feed.candles(exchange, 'BTC', '1h', { limit: 10 }));
      expect(error.code).toBe('unsupported_exchange');
      for (const served of withCandles) expect(error.message).toContain(served);
      expectNoServerPath(error.message);
    }
    const unknown = await refusal(feed.candles('BINANCE_SPOT', 'NOSUCHCOIN', '1h', { limit: 10 }));
    expect(unknown.code).toBe('unknown_coin');
    expect(unknown.message).toContain('BTC');
    expectNoServerPath(unknown.message);
  });

  it('answers the funding of every coin each venue has settlements of by then', async () => {
    let answered = 0;
    for (const exchange of EXCHANGES) {
      const markets = await feed.markets(exchange).catch(() => []);
      for (const { coin } of markets.filter((m) => m.hasFunding)) {
        const rates = await feed.funding(exchange, coin, { limit: 3 }).catch((e: unknown) => e);
        if (Array.isArray(rates)) {
          expect(rates.length, `${exchange} ${coin} funding`).toBeGreaterThan(0);
          answered++;
        } else {
          // A contract listed after the replay's now (Bybit's stock perpetuals): no settlement yet.
          expect(rates).toBeInstanceOf(MarketDataError);
          expect((rates as MarketDataError).code, `${exchange} ${coin}`).toBe('insufficient_history');
          expect((rates as Error).message).toContain(`none by ${new Date(feed.now()).toISOString()}`);
          expectNoServerPath((rates as Error).message);
        }
      }
    }
    expect(answered).toBeGreaterThanOrEqual(sharedPresent ? 40 : 18);
    const spot = await refusal(feed.funding('BINANCE_SPOT', 'BTC'));
    expect(spot.message).toContain('BINANCE');
    expectNoServerPath(spot.message);
  });
});

describe('a funding row without its stated interval', () => {
  it('covers the time since the previous settlement (the data set has one, Bybit INJUSDT)', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'funding-'));
    try {
      const file = join(tmp, 'INJUSDT.csv.gz');
      const H = 3_600_000;
      const rows = [
        'funding_time,rate,interval_hours',
        `${10 * H},0.0001,1`,
        `${16 * H},-0.0002,`,
        `${24 * H},0.0003,8`,
      ];
      writeFileSync(file, gzipSync(`${rows.join('\n')}\n`));
      expect((await readFundingFile(file)).map((f) => f.intervalHours)).toEqual([1, 6, 8]);
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
  });
});
