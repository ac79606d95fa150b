import ccxt, {
  BadSymbol,
  type Exchange as CcxtExchange,
  type FundingRateHistory,
  type MarketInterface as Market,
  NetworkError,
  type OHLCV,
  type Ticker,
} from 'ccxt';
import type { Logger } from 'pino';
import {
  type Candle,
  type CandleClose,
  EXCHANGES,
  type Exchange,
  type FundingRate,
  type MarketInfo,
  type NextFunding,
  TIMEFRAME_MS,
  TIMEFRAMES,
  type Timeframe,
  type VenueStatus,
} from '../../contracts/market.ts';
import { aggregateCandles, sourceTimeframe } from './aggregate.ts';
import { CandleCloseEmitter } from './candle-close.ts';
import { assertCandleLimit, closedCandles, lastBoundary, requestedTimeframe } from './candle-window.ts';
import {
  InsufficientHistoryError,
  MarketDataError,
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
  VenueUnavailableError,
} from './errors.ts';
import { intervalsFromGaps } from './funding-series.ts';
import { LIVE_VENUES, type LiveVenue, parseIntervalHours, unifiedSymbol } from './live-venues.ts';
import type { CandleQuery, FundingQuery, MarketFeed } from './port.ts';

/** A WHATWG-style fetch, as ccxt calls a user-supplied `fetchImplementation`. */
export type FetchImplementation = (
  url: string,
  init: { method?: string; body?: unknown; headers?: unknown },
) => Promise<Response>;

export interface LiveFeedOptions {
  /** Venues to serve; default all five. */
  exchanges?: readonly Exchange[];
  /** Attempts after the first on network, rate-limit and 5xx errors. Default 3. */
  retries?: number;
  /** First backoff, doubled per retry. Default 500 ms. */
  backoffMs?: number;
  /** Per-request timeout handed to ccxt. Default 10 s. */
  timeoutMs?: number;
  /** Replaces ccxt's HTTP client (tests answer from recorded venue responses). */
  fetchImplementation?: FetchImplementation;
  sleep?: (ms: number) => Promise<void>;
  /** Wall clock; injectable for tests. */
  now?: () => number;
  /** Delay after a boundary before a candle close is announced, so the venue has it. Default 2 s. */
  closeSettleMs?: number;
  logger?: Logger;
}

const CCXT_CLASSES = {
  binance: ccxt.binance,
  binanceusdm: ccxt.binanceusdm,
  bybit: ccxt.bybit,
  okx: ccxt.okx,
  hyperliquid: ccxt.hyperliquid,
} as const;

type VenueState = { ok: boolean; lastError?: string; lastOkAt?: number };

/**
 * Live venues through ccxt's public endpoints (no API keys). Each request is retried with
 * exponential backoff on network, rate-limit and 5xx errors; an unknown symbol fails at once.
 * A venue that stays unreachable is reported down and its requests fail with
 * VenueUnavailableError: its data is never replaced by another venue's.
 */
export class LiveFeed implements MarketFeed {
  readonly kind = 'live' as const;
  readonly #venues: Exchange[];
  readonly #clients = new Map<Exchange, CcxtExchange>();
  readonly #status = new Map<Exchange, VenueState>();
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #now: () => number;
  readonly #settleMs: number;
  readonly #emitter: CandleCloseEmitter;
  readonly #logger: Logger | undefined;
  #ticker: NodeJS.Timeout | undefined;
  #emittedTo = 0;

  constructor(options: LiveFeedOptions = {}) {
    this.#venues = EXCHANGES.filter((e) => (options.exchanges ?? EXCHANGES).includes(e));
    this.#retries = options.retries ?? 3;
    this.#backoffMs = options.backoffMs ?? 500;
    this.#sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.#now = options.now ?? Date.now;
    this.#settleMs = options.closeSettleMs ?? 2000;
    this.#logger = options.logger;
    this.#emitter = new CandleCloseEmitter((error, close) =>
      this.#logger?.error({ err: error, close }, 'candle-close listener failed'),
    );
    for (const exchange of this.#venues) {
      const venue = LIVE_VENUES[exchange];
      const client = new CCXT_CLASSES[venue.ccxtId]({
        enableRateLimit: true,
        timeout: options.timeoutMs ?? 10_000,
      });
      const marketOptions = (client.options.fetchMarkets ?? {}) as Record<string, unknown>;
      client.options.fetchMarkets = { ...marketOptions, types: venue.marketTypes };
      if (options.fetchImplementation) client.fetchImplementation = options.fetchImplementation;
      this.#clients.set(exchange, client);
      this.#status.set(exchange, { ok: false, lastError: 'not contacted yet' });
    }
  }

  now(): number {
    return this.#now();
  }

  exchanges(): Exchange[] {
    return [...this.#venues];
  }

  venues(): VenueStatus[] {
    return this.#venues.map((exchange) => ({ exchange, ...this.#status.get(exchange)! }));
  }

  /** Loads every venue's markets once; true when at least one venue answered. */
  async probe(): Promise<boolean> {
    const results = await Promise.allSettled(this.#venues.map((e) => this.#markets(e)));
    return results.some((r) => r.status === 'fulfilled');
  }

  onCandleClose(timeframe: Timeframe, listener: (close: CandleClose) => void): () => void {
    const off = this.#emitter.on(timeframe, listener);
    if (this.#ticker === undefined) {
      this.#emittedTo = this.#now() - this.#settleMs;
      this.#ticker = setInterval(() => {
        const to = this.#now() - this.#settleMs;
        const from = this.#emittedTo;
        this.#emittedTo = Math.max(from, to);
        this.#emitter.emitBetween(from, to);
      }, 1000);
      this.#ticker.unref();
    }
    return () => {
      off();
      if (this.#emitter.size === 0 && this.#ticker !== undefined) {
        clearInterval(this.#ticker);
        this.#ticker = undefined;
      }
    };
  }

  async close(): Promise<void> {
    if (this.#ticker !== undefined) clearInterval(this.#ticker);
    this.#ticker = undefined;
    await Promise.all([...this.#clients.values()].map((c) => c.close()));
  }

  async candles(
    exchange: Exchange,
    coin: string,
    timeframe: Timeframe,
    options: CandleQuery,
  ): Promise<Candle[]> {
    const client = this.#client(exchange);
    const target = requestedTimeframe(timeframe, exchange);
    assertCandleLimit(options.limit);
    const native = TIMEFRAMES.filter((t) => client.timeframes?.[t] !== undefined);
    const from = sourceTimeframe(target, native);
    if (from === undefined) {
      throw new UnsupportedTimeframeError(
        target,
        exchange,
        `${client.id} has no candles ${target} can be built from`,
      );
    }
    const symbol = await this.#symbol(exchange, coin);
    const now = this.#now();
    const until = Math.min(options.until ?? now, now);
    const fromMs = TIMEFRAME_MS[from];
    const ratio = TIMEFRAME_MS[target] / fromMs;
    // One spare bucket for alignment and one spare candle for the still-open one.
    const needed = (options.limit + 1) * ratio + 1;
    const end = lastBoundary(from, until);
    let since = end - needed * fromMs;
    const raw: OHLCV[] = [];
    const perRequest = LIVE_VENUES[exchange].maxCandlesPerRequest;
    while (since < end) {
      const chunk = Math.min(perRequest, Math.ceil((end - since) / fromMs) + 1);
      const page = await this.#call(exchange, `fetchOHLCV ${symbol} ${from}`, () =>
        client.fetchOHLCV(symbol, from, since, chunk),
      );
      const last = page[page.length - 1]?.[0];
      raw.push(...page);
      if (typeof last !== 'number' || last < since) break;
      since = last + fromMs;
    }
    const parsed = toCandles(raw);
    const closed = closedCandles(parsed, from, until, Number.MAX_SAFE_INTEGER);
    const series = from === target ? closed : aggregateCandles(closed, from, target);
    const out = closedCandles(series, target, until, options.limit);
    const min = options.min ?? 1;
    if (out.length < min) {
      throw new InsufficientHistoryError(
        exchange,
        coin.toUpperCase(),
        `${target} candles`,
        min,
        out.length,
        `from ${client.id}`,
      );
    }
    return out;
  }

  async funding(exchange: Exchange, coin: string, options: FundingQuery = {}): Promise<FundingRate[]> {
    const client = this.#perp(exchange);
    const symbol = await this.#symbol(exchange, coin);
    const limit = options.limit ?? 100;
    // One extra settlement so that even the oldest returned row has a gap to measure its interval by.
    const rows: FundingRateHistory[] = await this.#call(exchange, `fetchFundingRateHistory ${symbol}`, () =>
      client.fetchFundingRateHistory(symbol, options.since, limit + 1),
    );
    const times = rows
      .filter((r) => typeof r.timestamp === 'number' && typeof r.fundingRate === 'number')
      .map((r) => ({ fundingTime: r.timestamp!, rate: r.fundingRate as number }))
      .sort((a, b) => a.fundingTime - b.fundingTime);
    let stated: number | undefined;
    if (times.length === 1) stated = (await this.#currentFunding(exchange, client, symbol)).intervalHours;
    const now = this.#now();
    const since = options.since ?? Number.NEGATIVE_INFINITY;
    const settled = intervalsFromGaps(times, stated).filter(
      (f) => f.fundingTime <= now && f.fundingTime >= since,
    );
    return settled.slice(-limit);
  }

  async nextFunding(exchange: Exchange, coin: string): Promise<NextFunding> {
    const client = this.#perp(exchange);
    const symbol = await this.#symbol(exchange, coin);
    const current = await this.#currentFunding(exchange, client, symbol);
    let intervalHours = current.intervalHours;
    if (intervalHours === undefined) {
      const recent = await this.funding(exchange, coin, { limit: 2 });
      intervalHours = recent[recent.length - 1]?.intervalHours;
    }
    if (intervalHours === undefined || current.nextFundingTime === undefined) {
      throw new VenueUnavailableError(
        exchange,
        `${client.id} did not state the next funding time of ${symbol}`,
      );
    }
    return {
      exchange,
      coin: coin.toUpperCase(),
      nextFundingTime: current.nextFundingTime,
      intervalHours,
      predictedRate: current.rate ?? null,
    };
  }

  async markets(exchange: Exchange): Promise<MarketInfo[]> {
    const client = this.#client(exchange);
    const venue = LIVE_VENUES[exchange];
    const markets = (await this.#markets(exchange)).filter((m) => isServiceMarket(m, venue));
    const symbols = markets.map((m) => m.symbol);
    const tickers = await this.#call(exchange, 'fetchTickers', () =>
      // Spot venues list thousands of pairs: ask for all and keep ours rather than a URL that long.
      venue.kind === 'spot' ? client.fetchTickers() : client.fetchTickers(symbols),
    );
    return markets
      .map((m) => {
        const t = tickers[m.symbol];
        return {
          exchange,
          coin: m.base.toUpperCase(),
          symbol: m.symbol,
          quoteVolume24h: t === undefined ? null : quoteVolume(t),
          openInterest: t === undefined ? null : openInterest(t),
          hasCandles: true,
          hasFunding: venue.kind === 'swap',
        };
      })
      .sort((a, b) => (b.quoteVolume24h ?? -1) - (a.quoteVolume24h ?? -1));
  }

  #client(exchange: Exchange): CcxtExchange {
    const client = this.#clients.get(exchange);
    if (client === undefined) {
      const reason = (EXCHANGES as readonly string[]).includes(exchange)
        ? 'not enabled in this process'
        : 'unknown venue';
      throw new UnsupportedExchangeError(exchange, 'live', reason);
    }
    return client;
  }

  #perp(exchange: Exchange): CcxtExchange {
    if (LIVE_VENUES[exchange]?.kind === 'spot') {
      throw new UnsupportedExchangeError(
        exchange,
        'live',
        'a spot venue has no funding; use BINANCE for the perpetual',
      );
    }
    return this.#client(exchange);
  }

  async #markets(exchange: Exchange): Promise<Market[]> {
    const client = this.#client(exchange);
    const markets = await this.#call(exchange, 'loadMarkets', () => client.loadMarkets());
    return Object.values(markets).filter((m): m is Market => m !== undefined && m !== null);
  }

  async #symbol(exchange: Exchange, coin: string): Promise<string> {
    const venue = LIVE_VENUES[exchange];
    const wanted = coin.toUpperCase();
    const markets = await this.#markets(exchange);
    const exact = unifiedSymbol(venue, wanted);
    const market =
      markets.find((m) => m.symbol === exact && isServiceMarket(m, venue)) ??
      markets.find((m) => m.base.toUpperCase() === wanted && isServiceMarket(m, venue));
    if (market === undefined) throw new UnknownCoinError(exchange, wanted, `no ${exact} market`);
    return market.symbol;
  }

  async #currentFunding(
    exchange: Exchange,
    client: CcxtExchange,
    symbol: string,
  ): Promise<{ intervalHours?: number; nextFundingTime?: number; rate?: number }> {
    const fr = await this.#call(exchange, `fetchFundingRate ${symbol}`, () =>
      client.fetchFundingRate(symbol),
    );
    // ccxt: fundingTimestamp is the coming settlement, nextFundingTimestamp the one after it.
    const now = this.#now();
    const next = [fr.fundingTimestamp, fr.nextFundingTimestamp]
      .filter((t): t is number => typeof t === 'number' && t > now)
      .sort((a, b) => a - b)[0];
    const intervalHours = parseIntervalHours(fr.interval);
    return {
      ...(intervalHours !== undefined ? { intervalHours } : {}),
      ...(next !== undefined ? { nextFundingTime: next } : {}),
      ...(typeof fr.fundingRate === 'number' ? { rate: fr.fundingRate } : {}),
    };
  }

  /** Runs one venue request with retries, records the venue's health and maps ccxt errors. */
  async #call<T>(exchange: Exchange, what: string, request: () => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        const result = await request();
        this.#status.set(exchange, { ok: true, lastOkAt: this.#now() });
        return result;
      } catch (error) {
        if (error instanceof MarketDataError) throw error;
        if (error instanceof BadSymbol) {
          throw new UnknownCoinError(
            exchange,
            // `what` names the unified symbol: BTC/USDT:USDT → BTC.
            what.split(' ')[1]?.split('/')[0] ?? '',
            `${LIVE_VENUES[exchange].ccxtId}: ${error.message}`,
          );
        }
        const message =
          error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error);
        const transient = error instanceof NetworkError;
        if (transient && attempt < this.#retries) {
          const delay = this.#backoffMs * 2 ** attempt;
          this.#logger?.warn(
            { exchange, what, attempt: attempt + 1, delay, err: message },
            'venue request failed, retrying',
          );
          await this.#sleep(delay);
          continue;
        }
        if (transient)
          this.#status.set(exchange, { ...this.#status.get(exchange), ok: false, lastError: message });
        this.#logger?.error({ exchange, what, err: message }, 'venue request failed');
        throw new VenueUnavailableError(
          exchange,
          `${what} failed${transient ? ` after ${attempt + 1} attempts` : ''}: ${message}`,
          { cause: error },
        );
      }
    }
  }
}

function isServiceMarket(m: Market, venue: LiveVenue): boolean {
  if (m.active === false || m.quote !== venue.quote) return false;
  return venue.kind === 'spot'
    ? m.spot === true
    : m.swap === true && m.linear === true && m.settle === venue.quote;
}

function toCandles(rows: OHLCV[]): Candle[] {
  const byTime = new Map<number, Candle>();
  for (const [t, o, h, l, c, v] of rows) {
    if ([t, o, h, l, c, v].some((x) => typeof x !== 'number' || !Number.isFinite(x))) continue;
    byTime.set(t!, { openTime: t!, open: o!, high: h!, low: l!, close: c!, volume: v! });
  }
  return [...byTime.values()].sort((a, b) => a.openTime - b.openTime);
}

function quoteVolume(t: Ticker): number | null {
  if (typeof t.quoteVolume === 'number') return t.quoteVolume;
  if (typeof t.baseVolume === 'number' && typeof t.last === 'number') return t.baseVolume * t.last;
  return null;
}

/** Open interest in quote currency where the ticker carries it (Bybit, Hyperliquid). */
function openInterest(t: Ticker): number | null {
  const info = (t.info ?? {}) as Record<string, unknown>;
  const value = Number(info.openInterestValue);
  if (Number.isFinite(value) && info.openInterestValue !== undefined) return value;
  const contracts = Number(info.openInterest);
  const mark = Number(info.markPx ?? t.markPrice ?? t.last);
  if (info.openInterest !== undefined && Number.isFinite(contracts) && Number.isFinite(mark))
    return contracts * mark;
  return null;
}
