import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { KnownCoins } from '../../adapters/market/known-coins.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { openReplayFeed, SHIPPED_MARKET_DIR } from '../../adapters/market/replay.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { runHistoryCommand, UsageError } from './cli-commands.ts';
import { holdsCoin, ServedVenues } from './served-venues.ts';

let feed: MarketFeed & { close?: () => Promise<void> };
beforeAll(async () => {
  feed = await openReplayFeed({ run: false });
});
afterAll(async () => {
  await feed?.close?.();
});

/** What a check answers: 'served', or the refusal's code. */
async function judged(venues: ServedVenues, ask: { exchange?: Exchange; timeframe?: Timeframe }) {
  return venues.check(ask).then(
    () => 'served',
    (err: { code?: string }) => err.code ?? String(err),
  );
}

describe('ServedVenues (the history’s venue and timeframe filters)', () => {
  it('refuses what the replay serves no market of, and keeps what the history holds readable', async () => {
    const held: { exchange?: Exchange; timeframe?: Timeframe }[] = [
      { exchange: 'BYBIT', timeframe: '4h' },
      { exchange: 'BINANCE', timeframe: '1m' },
    ];
    const venues = new ServedVenues(() => feed, {
      has: (ask) =>
        held.some(
          (h) =>
            (ask.exchange === undefined || h.exchange === ask.exchange) &&
            (ask.timeframe === undefined || h.timeframe === ask.timeframe),
        ),
    });
    const cases: [{ exchange?: Exchange; timeframe?: Timeframe }, string][] = [
      [{}, 'served'],
      [{ exchange: 'OKX' }, 'unsupported_exchange'],
      [{ exchange: 'OKX', timeframe: '1h' }, 'unsupported_exchange'],
      [{ exchange: 'HYPERLIQUID', timeframe: '1h' }, 'unsupported_exchange'],
      [{ exchange: 'BINANCE', timeframe: '5m' }, 'unsupported_timeframe'],
      [{ exchange: 'BINANCE_SPOT', timeframe: '1m' }, 'unsupported_timeframe'],
      [{ exchange: 'BINANCE_SPOT' }, 'served'],
      [{ exchange: 'BINANCE', timeframe: '4h' }, 'served'],
      [{ timeframe: '15m' }, 'served'],
      // Held: a venue the feed serves no candles of, a timeframe no venue serves.
      [{ exchange: 'BYBIT' }, 'served'],
      [{ exchange: 'BYBIT', timeframe: '4h' }, 'served'],
      [{ exchange: 'BYBIT', timeframe: '1h' }, 'unsupported_exchange'],
      [{ timeframe: '1m' }, 'served'],
      [{ exchange: 'BINANCE', timeframe: '1m' }, 'served'],
      [{ exchange: 'BINANCE_SPOT', timeframe: '1m' }, 'unsupported_timeframe'],
    ];
    for (const [ask, expected] of cases)
      expect(await judged(venues, ask), JSON.stringify(ask)).toBe(expected);
    // Nothing held: a timeframe no venue serves is refused.
    const bare = new ServedVenues(() => feed, { has: () => false });
    expect(await judged(bare, { timeframe: '1m' })).toBe('unsupported_timeframe');
    expect(await judged(bare, { exchange: 'BYBIT' })).toBe('unsupported_exchange');
    // No feed in this process: nothing to judge by, nothing refused.
    expect(await judged(new ServedVenues(() => null, { has: () => false }), { exchange: 'OKX' })).toBe(
      'served',
    );
  });
});

describe('KnownCoins with what the history holds (the coin filter)', () => {
  it('judges a coin held on one venue on the venue asked, as get_trade_call does', async () => {
    // ZEC held on BINANCE_SPOT only (a delisted coin's record); the replay lists it nowhere.
    const streams = ['verdicts-BINANCE_SPOT-ZEC-1h', 'verdicts-BINANCE-BTC-1h'];
    const coins = new KnownCoins(() => feed, {
      has: (coin, exchange) => holdsCoin(streams, coin, exchange),
      missing: (coin, exchange) =>
        `the history holds no verdict of ${coin}${exchange ? ` on ${exchange}` : ''}`,
    });
    const judge = (coin: string, exchange?: Exchange) =>
      coins.check(coin, exchange, 'coin').then(
        () => 'known',
        (err: { code?: string; field?: string; message: string }) =>
          `${err.code} ${err.field} ${err.message}`,
      );
    expect(await judge('ZEC')).toBe('known');
    expect(await judge('ZEC', 'BINANCE_SPOT')).toBe('known');
    // Was served as an empty history: held elsewhere says nothing of BINANCE.
    const refused = await judge('ZEC', 'BINANCE');
    expect(refused).toMatch(/^unknown_coin coin /);
    expect(refused).toContain('the history holds no verdict of ZEC on BINANCE');
    expect(await judge('BTC', 'BINANCE_SPOT')).toBe('known');
  });
});

/**
 * A replay feed of BINANCE_SPOT's BTC 1h candles (it serves 1h to 1d), BINANCE's ETH 5m candles
 * and its ETH 15m candles on a FIFO no one writes to, whose read waits as one on a hung disk or
 * mount does (open blocks until a writer comes). BINANCE answers 5m (the finest, which its
 * listing reads too); 15m and 30m it builds from the 15m file, which never answers. 1m no venue
 * builds. The healthy files are read once, so that only the hung one can miss a deadline; the
 * folder is removed when the test finishes.
 */
async function feedWithHungVenue(): Promise<{ dir: string; feed: MarketFeed }> {
  const dir = mkdtempSync(join(tmpdir(), 'served-venues-'));
  const shipped = join(SHIPPED_MARKET_DIR, 'candles', 'binance-spot');
  const [spot, perp] = ['binance-spot', 'binance-usdm'].map((folder) => join(dir, 'candles', folder));
  for (const folder of [spot!, perp!]) mkdirSync(folder, { recursive: true });
  copyFileSync(join(shipped, 'BTCUSDT-1h.csv.gz'), join(spot!, 'BTCUSDT-1h.csv.gz'));
  copyFileSync(join(shipped, 'ETHUSDT-5m.csv.gz'), join(perp!, 'ETHUSDT-5m.csv.gz'));
  const hung = join(perp!, 'ETHUSDT-15m.csv.gz');
  execFileSync('mkfifo', [hung]);
  const feed = await openReplayFeed({ dir, run: false });
  onTestFinished(async () => {
    // A writer that closes at once: the hung read ends (with nothing: an error it drops).
    await writeFile(hung, '');
    await feed.close?.();
    rmSync(dir, { recursive: true, force: true });
  });
  for (const [exchange, coin] of [
    ['BINANCE_SPOT', 'BTC'],
    ['BINANCE', 'ETH'],
  ] as const) {
    await feed.markets(exchange);
    await feed.candles(exchange, coin, exchange === 'BINANCE' ? '5m' : '1h', { limit: 1 });
  }
  return { dir, feed };
}

describe('ServedVenues with a venue whose candles never come (a read hung on its disk)', () => {
  it('refuses a timeframe served nowhere by its deadline, naming what the venue gave no answer about', async () => {
    const { feed: slow } = await feedWithHungVenue();
    const withinMs = 2_000;
    const venues = new ServedVenues(() => slow, { has: () => false }, Date.now, withinMs);
    const said = (ask: { exchange?: Exchange; timeframe?: Timeframe }) =>
      venues.check(ask).then(
        () => 'served',
        (err: { code?: string; message: string }) => `${err.code}: ${err.message}`,
      );
    // Refused, in words that list what the venues answered they serve and name what BINANCE
    // gave no answer about: neither listed as served nor said to be served nowhere.
    expect(await said({ timeframe: '1m' })).toBe(
      `unsupported_timeframe: timeframe 1m is not available on any venue here (BINANCE_SPOT, BINANCE): they serve 5m, 1h, 2h, 4h, 8h, 12h, 1d; BINANCE gave no answer within ${withinMs} ms about 15m, 30m, not listed`,
    );
    // A filter on a timeframe a venue gives no answer about is not judged, so not refused: let
    // through as a feed fault is (the history answers what it holds).
    expect(await said({ exchange: 'BINANCE', timeframe: '30m' })).toBe('served');
    expect(await said({ timeframe: '30m' })).toBe('served');
    // What the venues answered is judged as ever.
    expect(await said({ exchange: 'BINANCE_SPOT', timeframe: '30m' })).toMatch(/^unsupported_timeframe: /);
  }, 60_000);
});

describe('npm run history export --store: the filter check waits FEED_PROBE_TIMEOUT_MS for the venues', () => {
  it("names the configured wait in a 'served nowhere' refusal, not the built-in 3 s", async () => {
    const { dir, feed } = await feedWithHungVenue();
    const withinMs = 1_000;
    const out = join(dir, 'export.ndjson');
    // A log of no verdict: the filter is judged by the feed.
    const refused = await runHistoryCommand(['export', '--store', '--timeframe', '1m', '--out', out], {
      progress: null,
      openStore: async () => new MemoryEventStore(),
      openFeed: async () => feed,
      feedProbeTimeoutMs: async () => withinMs,
    }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(UsageError);
    expect((refused as Error).message).toMatch(
      new RegExp(
        `^--timeframe: timeframe 1m is not available on any venue here .* gave no answer within ${withinMs} ms about .*, not listed \\(unsupported_timeframe\\)$`,
      ),
    );
    expect(existsSync(out)).toBe(false);
  }, 60_000);
});
