import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import type { Candle, Exchange } from '../../contracts/market.ts';
import { aggregateCandles } from './aggregate.ts';
import { readCandleFile, readFundingFile } from './csv.ts';
import {
  InsufficientHistoryError,
  UnknownCoinError,
  UnsupportedExchangeError,
  VenueUnavailableError,
} from './errors.ts';
import { type FixtureRoute, fixtureFetch } from './fixture-fetch.ts';
import { LiveFeed, type LiveFeedOptions } from './live.ts';
import { type LocalVenue, startLocalVenue } from './local-venue.ts';
import { SHIPPED_MARKET_DIR } from './replay.ts';

const T = Date.UTC(2025, 9, 25, 10, 32); // the moment the fixtures were cut at
const DATA = SHIPPED_MARKET_DIR;

const BINANCE_SPOT = 'https://api.binance.com/api/v3';
const BINANCE_USDM = 'https://fapi.binance.com/fapi/v1';
const BYBIT = 'https://api.bybit.com/v5/market';
const OKX = 'https://www.okx.com/api/v5';
const HL = 'https://api.hyperliquid.xyz/info';

const hl = (type: string, file: string): FixtureRoute => ({
  method: 'POST',
  url: HL,
  when: (_q, body) => body.type === type,
  reply: file,
});

/** The venues' recorded answers, as each venue's REST API sends them. */
const ROUTES: FixtureRoute[] = [
  { method: 'GET', url: `${BINANCE_SPOT}/exchangeInfo`, reply: 'binance-spot/exchangeInfo.json' },
  {
    method: 'GET',
    url: `${BINANCE_SPOT}/klines`,
    when: (q) => q.get('symbol') === 'BTCUSDT' && q.get('interval') === '1h',
    reply: 'binance-spot/klines-BTCUSDT-1h.json',
  },
  { method: 'GET', url: `${BINANCE_SPOT}/ticker/24hr`, reply: 'binance-spot/ticker-24hr.json' },
  { method: 'GET', url: `${BINANCE_USDM}/exchangeInfo`, reply: 'binance-usdm/exchangeInfo.json' },
  {
    method: 'GET',
    url: `${BINANCE_USDM}/klines`,
    when: (q) => q.get('symbol') === 'BTCUSDT' && q.get('interval') === '1h',
    reply: 'binance-usdm/klines-BTCUSDT-1h.json',
  },
  { method: 'GET', url: `${BINANCE_USDM}/fundingRate`, reply: 'binance-usdm/fundingRate-BTCUSDT.json' },
  { method: 'GET', url: `${BINANCE_USDM}/premiumIndex`, reply: 'binance-usdm/premiumIndex-BTCUSDT.json' },
  { method: 'GET', url: `${BINANCE_USDM}/ticker/24hr`, reply: 'binance-usdm/ticker-24hr.json' },
  {
    method: 'GET',
    url: `${BYBIT}/instruments-info`,
    when: (q) => q.get('status') === 'PreLaunch',
    reply: 'bybit/instruments-info-linear-prelaunch.json',
  },
  { method: 'GET', url: `${BYBIT}/instruments-info`, reply: 'bybit/instruments-info-linear.json' },
  {
    method: 'GET',
    url: `${BYBIT}/kline`,
    when: (q) => q.get('interval') === '60',
    reply: 'bybit/kline-BTCUSDT-60.json',
  },
  {
    method: 'GET',
    url: `${BYBIT}/kline`,
    when: (q) => q.get('interval') === '240',
    reply: 'bybit/kline-BTCUSDT-240.json',
  },
  { method: 'GET', url: `${BYBIT}/funding/history`, reply: 'bybit/funding-history-BTCUSDT.json' },
  { method: 'GET', url: `${OKX}/public/instruments`, reply: 'okx/instruments-SWAP.json' },
  { method: 'GET', url: `${OKX}/market/candles`, reply: 'okx/candles-BTC-USDT-SWAP-1H.json' },
  { method: 'GET', url: `${OKX}/market/history-candles`, reply: 'okx/candles-BTC-USDT-SWAP-1H.json' },
  {
    method: 'GET',
    url: `${OKX}/public/funding-rate-history`,
    reply: 'okx/funding-rate-history-BTC-USDT-SWAP.json',
  },
  { method: 'GET', url: `${OKX}/public/funding-rate`, reply: 'okx/funding-rate-BTC-USDT-SWAP.json' },
  hl('spotMeta', 'hyperliquid/spotMeta.json'),
  hl('metaAndAssetCtxs', 'hyperliquid/metaAndAssetCtxs.json'),
  hl('candleSnapshot', 'hyperliquid/candleSnapshot-BTC-1h.json'),
  hl('fundingHistory', 'hyperliquid/fundingHistory-BTC.json'),
];

const feeds: LiveFeed[] = [];
afterEach(async () => {
  for (const feed of feeds.splice(0)) await feed.close();
});

function liveFeed(routes: FixtureRoute[] = ROUTES, options: LiveFeedOptions = {}) {
  const { fetch, requests } = fixtureFetch(routes);
  const sleeps: number[] = [];
  const feed = new LiveFeed({
    now: () => T,
    fetchImplementation: fetch,
    sleep: async (ms) => {
      sleeps.push(ms);
    },
    ...options,
  });
  feeds.push(feed);
  return { feed, requests, sleeps };
}

const hours = (candles: Candle[]) => candles.map((c) => new Date(c.openTime).toISOString().slice(11, 16));
const only = (candles: Candle[], from: number, to: number) =>
  candles.filter((c) => c.openTime >= from && c.openTime < to);

describe('live feed: candles from each venue', () => {
  it('parses Binance spot klines and drops the still-open candle', async () => {
    const { feed, requests } = liveFeed();
    expect(feed.kind).toBe('live');
    const candles = await feed.candles('BINANCE_SPOT', 'btc', '1h', { limit: 3 });
    expect(hours(candles)).toEqual(['07:00', '08:00', '09:00']);
    const file = await readCandleFile(join(DATA, 'candles/binance-spot/BTCUSDT-1h.csv.gz'));
    expect(candles).toEqual(only(file, Date.UTC(2025, 9, 25, 7), Date.UTC(2025, 9, 25, 10)));
    const klines = requests.find((r) => r.url.includes('/klines'))!;
    expect(new URL(klines.url).searchParams.get('interval')).toBe('1h');
  });

  it.each([
    ['BINANCE', 'Binance USDT-M'],
    ['BYBIT', 'Bybit v5'],
    ['OKX', 'OKX v5'],
    ['HYPERLIQUID', 'Hyperliquid candleSnapshot'],
  ] as [Exchange, string][])('parses %s perpetual candles (%s format)', async (exchange) => {
    const { feed } = liveFeed();
    const candles = await feed.candles(exchange, 'BTC', '1h', { limit: 3 });
    const file = await readCandleFile(join(DATA, 'candles/binance-usdm/BTCUSDT-1h.csv.gz'));
    const expected = only(file, Date.UTC(2025, 9, 25, 7), Date.UTC(2025, 9, 25, 10));
    expect(hours(candles)).toEqual(['07:00', '08:00', '09:00']);
    for (const [i, c] of candles.entries()) {
      const e = expected[i]!;
      expect([c.openTime, c.open, c.high, c.low, c.close]).toEqual([
        e.openTime,
        e.open,
        e.high,
        e.low,
        e.close,
      ]);
      // OKX counts volume in contracts and Bybit in base units; each is converted by ccxt.
      expect(c.volume).toBeGreaterThan(0);
    }
  });

  it('builds 8h from 4h where the venue has no 8h candles (Bybit)', async () => {
    const { feed, requests } = liveFeed();
    const candles = await feed.candles('BYBIT', 'BTC', '8h', { limit: 2 });
    expect(candles.map((c) => new Date(c.openTime).toISOString())).toEqual([
      '2025-10-24T16:00:00.000Z',
      '2025-10-25T00:00:00.000Z',
    ]);
    const file = await readCandleFile(join(DATA, 'candles/binance-usdm/BTCUSDT-1h.csv.gz'));
    const expected = aggregateCandles(file, '1h', '8h').filter(
      (c) => c.openTime >= Date.UTC(2025, 9, 24, 16),
    );
    expect(candles[1]).toMatchObject({
      openTime: expected[1]!.openTime,
      high: expected[1]!.high,
      low: expected[1]!.low,
    });
    expect(requests.some((r) => new URL(r.url).searchParams.get('interval') === '240')).toBe(true);
  });

  it('serves 1m natively (asks the venue for 1m candles)', async () => {
    const routes: FixtureRoute[] = [
      {
        method: 'GET',
        url: `${BINANCE_SPOT}/klines`,
        when: (q) => q.get('interval') === '1m',
        reply: { status: 200, text: '[]' },
      },
      ...ROUTES,
    ];
    const { feed, requests } = liveFeed(routes);
    // No candles at all up to the last close: the venue failed to answer, not a market without history.
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1m', { limit: 5 })).rejects.toThrow(
      VenueUnavailableError,
    );
    const klines = requests.find((r) => r.url.includes('/klines'))!;
    expect(new URL(klines.url).searchParams.get('interval')).toBe('1m');
  });
});

describe('live feed: funding', () => {
  it.each([
    ['BINANCE', 'funding/binance/BTCUSDT.csv.gz', 8],
    ['BYBIT', 'funding/bybit/BTCUSDT.csv.gz', 8],
    ['HYPERLIQUID', 'funding/hyperliquid/BTC.csv.gz', 1],
  ] as [Exchange, string, number][])(
    'parses %s funding with its real interval',
    async (exchange, path, interval) => {
      const { feed } = liveFeed();
      const rates = await feed.funding(exchange, 'BTC', { limit: 3 });
      const file = (await readFundingFile(join(DATA, path))).filter((f) => f.fundingTime <= T).slice(-3);
      expect(rates.map((f) => f.intervalHours)).toEqual([interval, interval, interval]);
      expect(rates.map((f) => f.rate)).toEqual(file.map((f) => f.rate));
      for (const [i, f] of rates.entries())
        expect(Math.abs(f.fundingTime - file[i]!.fundingTime)).toBeLessThan(60_000);
    },
  );

  it('parses OKX funding history', async () => {
    const { feed } = liveFeed();
    const rates = await feed.funding('OKX', 'BTC', { limit: 2 });
    expect(rates.map((f) => [new Date(f.fundingTime).toISOString(), f.intervalHours])).toEqual([
      ['2025-10-25T00:00:00.000Z', 8],
      ['2025-10-25T08:00:00.000Z', 8],
    ]);
  });

  it('states the next settlement: Binance interval from the settlement gaps, OKX from the venue', async () => {
    const { feed } = liveFeed();
    const binance = await feed.nextFunding('BINANCE', 'BTC');
    expect(binance).toMatchObject({
      exchange: 'BINANCE',
      coin: 'BTC',
      nextFundingTime: Date.UTC(2025, 9, 25, 16),
      intervalHours: 8,
    });
    expect(typeof binance.predictedRate).toBe('number');
    const okx = await feed.nextFunding('OKX', 'BTC');
    expect(okx).toMatchObject({ nextFundingTime: Date.UTC(2025, 9, 25, 16), intervalHours: 8 });
  });

  it('refuses funding on a spot venue', async () => {
    const { feed, requests } = liveFeed();
    await expect(feed.funding('BINANCE_SPOT', 'BTC')).rejects.toThrow(UnsupportedExchangeError);
    expect(requests).toHaveLength(0);
  });
});

describe('live feed: markets for ranking', () => {
  it('lists the venue markets the service trades with 24h quote volume, largest first', async () => {
    const { feed } = liveFeed();
    const spot = await feed.markets('BINANCE_SPOT');
    expect(spot.map((m) => m.symbol)).toEqual(['BTC/USDT', 'ETH/USDT', 'SOL/USDT']);
    const volumes = spot.map((m) => m.quoteVolume24h!);
    expect([...volumes].sort((a, b) => b - a)).toEqual(volumes);
    expect(spot[0]).toMatchObject({
      exchange: 'BINANCE_SPOT',
      coin: 'BTC',
      hasCandles: true,
      hasFunding: false,
    });
    const perp = await feed.markets('HYPERLIQUID');
    expect(perp.map((m) => m.symbol).sort()).toEqual(['BTC/USDC:USDC', 'ETH/USDC:USDC', 'SOL/USDC:USDC']);
    expect(perp.every((m) => m.hasFunding && (m.quoteVolume24h ?? 0) > 0)).toBe(true);
  });
});

describe('live feed: failures', () => {
  const failing = (
    status: number,
    times: number,
    file?: string,
  ): { routes: FixtureRoute[]; hits: () => number } => {
    let hits = 0;
    const route: FixtureRoute = {
      method: 'GET',
      url: `${BINANCE_SPOT}/klines`,
      when: () => hits++ < times,
      reply: file ? { status, file } : { status, text: '<html>Service Unavailable</html>' },
    };
    return { routes: [route, ...ROUTES], hits: () => hits };
  };

  it('retries 429 with exponential backoff, then reports the venue down', async () => {
    const { routes } = failing(429, 100, 'errors/binance-rate-limit.json');
    const { feed, requests, sleeps } = liveFeed(routes, { retries: 3, backoffMs: 100 });
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 }).catch((e) => e);
    expect(error).toBeInstanceOf(VenueUnavailableError);
    expect(error.message).toMatch(
      /BINANCE_SPOT is unavailable: fetchOHLCV BTC\/USDT 1h failed after 4 attempts/,
    );
    expect(requests.filter((r) => r.url.includes('/klines'))).toHaveLength(4);
    expect(sleeps).toEqual([100, 200, 400]);
    expect(feed.venues().find((v) => v.exchange === 'BINANCE_SPOT')).toMatchObject({
      ok: false,
      lastError: expect.stringMatching(/RateLimitExceeded|DDoSProtection/),
    });
    // Other venues are not touched by one venue's outage.
    expect(feed.venues().find((v) => v.exchange === 'BYBIT')).toMatchObject({
      ok: false,
      lastError: 'not contacted yet',
    });
  });

  it('recovers when a 5xx clears within the retries', async () => {
    const { routes } = failing(503, 2);
    const { feed, sleeps } = liveFeed(routes, { retries: 3, backoffMs: 10 });
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toHaveLength(3);
    expect(sleeps).toEqual([10, 20]);
    expect(feed.venues().find((v) => v.exchange === 'BINANCE_SPOT')).toEqual({
      exchange: 'BINANCE_SPOT',
      ok: true,
      lastOkAt: T,
    });
  });

  it('fails an unknown coin at once, without asking for candles', async () => {
    const { feed, requests, sleeps } = liveFeed();
    const error = await feed.candles('BINANCE', 'NOPE', '1h', { limit: 3 }).catch((e) => e);
    expect(error).toBeInstanceOf(UnknownCoinError);
    expect(error.message).toBe('NOPE is not listed on BINANCE (no NOPE/USDT:USDT market)');
    expect(requests.map((r) => new URL(r.url).pathname)).toEqual(['/fapi/v1/exchangeInfo']);
    expect(sleeps).toEqual([]);
  });

  it('maps a venue-side invalid symbol to UnknownCoinError without retrying', async () => {
    const { routes, hits } = failing(400, 100, 'errors/binance-invalid-symbol.json');
    const { feed, sleeps } = liveFeed(routes);
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 }).catch((e) => e);
    expect(error).toBeInstanceOf(UnknownCoinError);
    expect(error.message).toMatch(/^BTC is not listed on BINANCE_SPOT \(binance: .*Invalid symbol/s);
    expect(hits()).toBe(1);
    expect(sleeps).toEqual([]);
  });

  it('fails loudly on any request no fixture answers (no test reaches the network)', async () => {
    const { feed } = liveFeed([]);
    await expect(feed.markets('OKX')).rejects.toThrow(
      /unexpected request in a test: GET https:\/\/www.okx.com/,
    );
  });

  it('refuses venues it was not configured for', async () => {
    const { feed } = liveFeed(ROUTES, { exchanges: ['BINANCE'] });
    expect(feed.exchanges()).toEqual(['BINANCE']);
    await expect(feed.candles('OKX', 'BTC', '1h', { limit: 1 })).rejects.toThrow(
      /not enabled in this process/,
    );
  });
});

/**
 * A misbehaving venue over a real socket: Binance spot's API on a local server (local-venue.ts),
 * so the status lines, Retry-After headers and broken bodies reach ccxt as a venue sends them.
 */
describe('live feed: a flaky venue (local server)', () => {
  const NOW = Date.UTC(2025, 9, 25, 10, 32);
  const HOUR = 3_600_000;
  let venue: LocalVenue;
  beforeAll(async () => {
    venue = await startLocalVenue(() => NOW);
  });
  afterAll(async () => {
    await venue.close();
  });
  beforeEach(() => {
    venue.hits.clear();
    venue.fault = undefined;
  });

  function flakyFeed(options: LiveFeedOptions = {}) {
    const sleeps: number[] = [];
    const feed = new LiveFeed({
      exchanges: ['BINANCE_SPOT'],
      now: () => NOW,
      fetchImplementation: venue.fetch,
      backoffMs: 10,
      sleep: async (ms) => {
        sleeps.push(ms);
      },
      ...options,
    });
    feeds.push(feed);
    return { feed, sleeps };
  }
  const hits = (path: string) => venue.hits.get(`/api/v3/${path}`) ?? 0;
  const reply = (res: import('node:http').ServerResponse, status: number, body: string, headers = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(body);
    return true;
  };
  const contiguous = (candles: Candle[]) =>
    candles.every((c, i) => i === 0 || c.openTime - candles[i - 1]!.openTime === HOUR);

  it('serves 1,800 closed 1h candles in two pages, contiguous, the still-open one left out', async () => {
    const { feed } = flakyFeed();
    const candles = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800 });
    expect(candles).toHaveLength(1800);
    expect(contiguous(candles)).toBe(true);
    expect(candles.at(-1)!.openTime).toBe(Date.UTC(2025, 9, 25, 9));
    expect(hits('klines')).toBe(2);
  });

  it('asks nothing after an abort: no markets, page or tickers past it, and its reason thrown', async () => {
    const { feed } = flakyFeed();
    const stopped = () => AbortSignal.abort(new Error('stopped'));
    // Aborted before the read: not even the markets' load its symbol needs.
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3, signal: stopped() })).rejects.toThrow(
      'stopped',
    );
    await expect(feed.markets('BINANCE_SPOT', { signal: stopped() })).rejects.toThrow('stopped');
    expect([...venue.hits.keys()]).toEqual([]);
    // Aborted while its first page is asked: the second page is never asked for.
    const stop = new AbortController();
    venue.fault = (req) => {
      if (req.path === '/api/v3/klines') stop.abort(new Error('stopping'));
      return false;
    };
    await expect(
      feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800, signal: stop.signal }),
    ).rejects.toThrow('stopping');
    expect(hits('klines')).toBe(1);
    // Aborted while the markets load: the tickers are never asked for.
    const { feed: other } = flakyFeed();
    const listing = new AbortController();
    venue.fault = (req) => {
      if (req.path === '/api/v3/exchangeInfo') listing.abort(new Error('stopping'));
      return false;
    };
    await expect(other.markets('BINANCE_SPOT', { signal: listing.signal })).rejects.toThrow('stopping');
    expect(hits('ticker/24hr')).toBe(0);
    // Aborted while a page fails: no retry of it is sent.
    venue.hits.clear();
    const retried = new AbortController();
    venue.fault = (req, res) => {
      if (req.path !== '/api/v3/klines') return false;
      retried.abort(new Error('stopping'));
      return reply(res, 503, '{}');
    };
    const { feed: third } = flakyFeed({ retries: 3 });
    await expect(
      third.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3, signal: retried.signal }),
    ).rejects.toThrow('stopping');
    expect(hits('klines')).toBe(1);
    // Without a signal, the same reads answer whole.
    venue.fault = undefined;
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800 })).toHaveLength(1800);
    expect((await other.markets('BINANCE_SPOT')).map((m) => m.coin)).toEqual(['BTC', 'ETH', 'SOL']);
  });

  it('asks for the markets again after a failed load, within the retries and after the venue heals', async () => {
    venue.fault = (req, res) =>
      req.path === '/api/v3/exchangeInfo' && (req.n <= 4 || req.n === 6) && reply(res, 503, '{}');
    const { feed } = flakyFeed({ retries: 3 });
    // ccxt keeps a failed load's promise: without asking again, every attempt and every later
    // request got that one failure and the feed stayed down after the venue came back.
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(
      /loadMarkets failed after 4 attempts/,
    );
    expect(hits('exchangeInfo')).toBe(4);
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toHaveLength(3);
    expect(hits('exchangeInfo')).toBe(5);
    expect(feed.venues()[0]).toMatchObject({ exchange: 'BINANCE_SPOT', ok: true });
    const { feed: another } = flakyFeed({ retries: 3 });
    expect(await another.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toHaveLength(3);
    expect(hits('exchangeInfo')).toBe(7);
  });

  it('tries a venue that stayed down once per request, and retries again once it has answered', async () => {
    let down = true;
    venue.fault = (req, res) => req.path === '/api/v3/klines' && down && reply(res, 503, '<html>down</html>');
    const { feed } = flakyFeed({ retries: 3 });
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(/after 4 attempts/);
    expect(hits('klines')).toBe(4);
    // A scan's next markets: one request each, not four.
    for (const coin of ['ETH', 'SOL']) {
      await expect(feed.candles('BINANCE_SPOT', coin, '1h', { limit: 3 })).rejects.toThrow(
        /after 1 attempts/,
      );
    }
    expect(hits('klines')).toBe(6);
    down = false;
    expect(await feed.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 3 })).toHaveLength(3);
    down = true;
    await expect(feed.candles('BINANCE_SPOT', 'SOL', '1h', { limit: 3 })).rejects.toThrow(/after 4 attempts/);
    expect(hits('klines')).toBe(11);
    // Markets read side by side (a scan) while the venue is down: one of them retries.
    const side = await Promise.allSettled(
      ['BTC', 'ETH', 'SOL'].map((coin) => feed.candles('BINANCE_SPOT', coin, '1h', { limit: 3 })),
    );
    expect(side.every((r) => r.status === 'rejected')).toBe(true);
    expect(hits('klines')).toBe(14);
    // Another endpoint answering does not make the candles endpoint look up.
    expect((await feed.markets('BINANCE_SPOT')).map((m) => m.coin)).toEqual(['BTC', 'ETH', 'SOL']);
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(/after 1 attempts/);
  });

  it('tries a request that timed out once more, not three times', async () => {
    venue.fault = (req) => req.path === '/api/v3/klines' && req.n <= 2;
    const { feed } = flakyFeed({ retries: 3, timeoutMs: 300 });
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(
      /failed after 2 attempts: RequestTimeout/,
    );
    expect(hits('klines')).toBe(2);
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toHaveLength(3);
  });

  it('asks a venue that is not up again when its health is read, at most every recheckMs', async () => {
    let now = NOW;
    let down = false;
    venue.fault = (req, res) => down && req.path !== '/api/v3/exchangeInfo' && reply(res, 503, '{}');
    const { feed } = flakyFeed({ now: () => now, recheckMs: 30_000 });
    // FEED=live starts with no venue contacted: readiness reading this must not wait for a call
    // that a load balancer holding the replica out would never send.
    expect(feed.venues()[0]).toMatchObject({ ok: false, lastError: 'not contacted yet' });
    await vi.waitFor(() => expect(feed.venues()[0]!.ok).toBe(true));
    expect(hits('exchangeInfo')).toBe(1);
    down = true;
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(
      VenueUnavailableError,
    );
    const sent = hits('klines');
    now += 30_000;
    for (let i = 0; i < 10; i++) expect(feed.venues()[0]!.ok).toBe(false);
    await vi.waitFor(() => expect(hits('klines')).toBe(sent + 1));
    down = false;
    for (let i = 0; i < 10; i++) expect(feed.venues()[0]!.ok).toBe(false);
    expect(hits('klines')).toBe(sent + 1);
    now += 30_000;
    feed.venues();
    await vi.waitFor(() => expect(feed.venues()[0]!.ok).toBe(true));
    expect(hits('klines')).toBe(sent + 2);
  });

  it("waits out a 429's short Retry-After instead of its own backoff", async () => {
    venue.fault = (req, res) =>
      req.path === '/api/v3/klines' &&
      req.n === 1 &&
      reply(res, 429, '{"code":-1003}', { 'retry-after': '2' });
    const { feed, sleeps } = flakyFeed();
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).toHaveLength(3);
    expect(sleeps).toEqual([2000]);
    expect(hits('klines')).toBe(2);
  });

  it('fails at once on a long Retry-After and sends nothing to the venue until it has passed', async () => {
    venue.fault = (req, res) =>
      req.path === '/api/v3/klines' && reply(res, 429, '{"code":-1003}', { 'retry-after': '30' });
    const { feed, sleeps } = flakyFeed();
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 }).catch((e) => e);
    expect(error).toBeInstanceOf(VenueUnavailableError);
    expect(error.message).toMatch(/no requests to it until 2025-10-25T10:32:30.000Z/);
    expect(hits('klines')).toBe(1);
    expect(sleeps).toEqual([]);
    const again = await feed.candles('BINANCE_SPOT', 'ETH', '1h', { limit: 3 }).catch((e) => e);
    expect(again).toBeInstanceOf(VenueUnavailableError);
    expect(again.message).toMatch(/not sent: the venue asked for no requests until 2025-10-25T10:32:30/);
    expect(hits('klines')).toBe(1);
  });

  it.each([
    ['while the other waits it out', false],
    ['before the other gets its 429', true],
  ])(
    'keeps the ban a request met alongside a short Retry-After: the 418 answered %s',
    async (_, banFirst) => {
      // Both in flight: the candles read gets a 429 asking for 2 s, the markets read a 418 banning
      // the venue for a minute; the shorter pause neither replaces the ban nor lifts it.
      let answerTicker!: () => void;
      let tickerAsked!: () => void;
      const tickerArrived = new Promise<void>((resolve) => {
        tickerAsked = resolve;
      });
      let answerKlines!: () => void;
      let klinesAsked!: () => void;
      const klinesArrived = new Promise<void>((resolve) => {
        klinesAsked = resolve;
      });
      venue.fault = (req, res) => {
        if (req.path === '/api/v3/ticker/24hr') {
          answerTicker = () => reply(res, 418, '{"code":-1003,"msg":"IP banned"}', { 'retry-after': '60' });
          tickerAsked();
          return true;
        }
        if (req.path === '/api/v3/klines' && req.n === 1) {
          answerKlines = () => reply(res, 429, '{"code":-1003}', { 'retry-after': '2' });
          klinesAsked();
          return true;
        }
        return false;
      };
      let asleep!: () => void;
      const sleeping = new Promise<void>((resolve) => {
        asleep = resolve;
      });
      let wake!: () => void;
      const woken = new Promise<void>((resolve) => {
        wake = resolve;
      });
      const { feed } = flakyFeed({
        sleep: async () => {
          asleep();
          await woken;
        },
      });
      await feed.probe();
      const markets = feed.markets('BINANCE_SPOT').catch((e) => e);
      const candles = feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 }).catch((e) => e);
      await Promise.all([tickerArrived, klinesArrived]);
      if (banFirst) {
        answerTicker();
        expect(await markets).toBeInstanceOf(VenueUnavailableError);
        answerKlines();
        await sleeping;
      } else {
        answerKlines();
        await sleeping;
        answerTicker();
        expect(await markets).toBeInstanceOf(VenueUnavailableError);
      }
      wake();
      const error = await candles;
      expect(error).toBeInstanceOf(VenueUnavailableError);
      expect(error.message).toMatch(/not sent: the venue asked for no requests until 2025-10-25T10:33:00/);
      expect(hits('klines')).toBe(1);
    },
  );

  it('never retries a 418 (an IP ban)', async () => {
    venue.fault = (req, res) =>
      req.path === '/api/v3/klines' &&
      reply(res, 418, '{"code":-1003,"msg":"IP banned"}', { 'retry-after': '3' });
    const { feed, sleeps } = flakyFeed();
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 })).rejects.toThrow(
      VenueUnavailableError,
    );
    expect(hits('klines')).toBe(1);
    expect(sleeps).toEqual([]);
  });

  it.each([
    ['empty', '[]'],
    ['cut short', '[[1761'],
  ])('refuses a warm-up whose second page comes back %s, rather than serving the first', async (_, body) => {
    venue.fault = (req, res) =>
      req.path === '/api/v3/klines' &&
      Number(req.query.get('startTime')) > NOW - 900 * HOUR &&
      reply(res, 200, body);
    const { feed } = flakyFeed();
    // Served, the first page's 1,000 candles ended 800 hours ago: a verdict and σ of the past.
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800 }).catch((e) => e);
    expect(error).toBeInstanceOf(VenueUnavailableError);
    expect(error.message).toMatch(/candles end at 2025-09-\d\dT.*, before the close at 2025-10-25T10:00/);
    // Read once more (two pages each time) before refusing.
    expect(hits('klines')).toBe(4);
    venue.fault = undefined;
    expect(await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800 })).toHaveLength(1800);
  });

  it('reads again when a candle is missing mid-page, and serves the complete read', async () => {
    const dropped = Date.UTC(2025, 9, 20, 5);
    venue.fault = (req, res, rows) =>
      req.path === '/api/v3/klines' &&
      req.n <= 2 &&
      reply(res, 200, JSON.stringify(rows.filter((r) => r[0] !== dropped)));
    const { feed } = flakyFeed();
    const candles = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 1800 });
    expect(candles).toHaveLength(1800);
    expect(contiguous(candles)).toBe(true);
    expect(candles.some((c) => c.openTime === dropped)).toBe(true);
    expect(hits('klines')).toBe(4);
  });

  it('refuses candles whose gaps differ from one read to the next', async () => {
    venue.fault = (req, res, rows) =>
      req.path === '/api/v3/klines' &&
      rows.length > 10 &&
      reply(res, 200, JSON.stringify(rows.filter((_, i) => i !== req.n)));
    const { feed } = flakyFeed();
    await expect(feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 500 })).rejects.toThrow(
      /candles missing at .* in one read and at .* in the next/,
    );
  });

  it('serves a gap the venue shows in both reads, as the venue records it', async () => {
    const dropped = Date.UTC(2025, 9, 24, 5);
    venue.fault = (req, res, rows) =>
      req.path === '/api/v3/klines' && reply(res, 200, JSON.stringify(rows.filter((r) => r[0] !== dropped)));
    const { feed } = flakyFeed();
    const candles = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 100 });
    expect(candles).toHaveLength(100);
    expect(candles.some((c) => c.openTime === dropped)).toBe(false);
    expect(hits('klines')).toBe(2);
  });

  it('still calls a market listed 50 hours ago short of history, not unavailable', async () => {
    const listed = NOW - 50 * HOUR;
    venue.fault = (req, res, rows) =>
      req.path === '/api/v3/klines' &&
      reply(res, 200, JSON.stringify(rows.filter((r) => (r[0] as number) >= listed)));
    const { feed } = flakyFeed();
    const error = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 500, min: 200 }).catch((e) => e);
    expect(error).toBeInstanceOf(InsufficientHistoryError);
    expect(error.message).toMatch(/49 available, 200 required/);
  });

  it('never serves the candle still open at now, even when the venue marks it closed', async () => {
    venue.fault = (req, res, rows) =>
      req.path === '/api/v3/klines' &&
      reply(
        res,
        200,
        JSON.stringify(rows.map((r) => [...r.slice(0, 6), (r[0] as number) + 1, ...r.slice(7)])),
      );
    const { feed } = flakyFeed();
    const candles = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 3 });
    expect(candles.at(-1)!.openTime + HOUR).toBeLessThanOrEqual(NOW);
  });
});
