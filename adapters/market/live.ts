import ccxt, {
  BadSymbol,
  type Exchange as CcxtExchange,
  DDoSProtection,
  type FundingRateHistory,
  type MarketInterface as Market,
  NetworkError,
  type OHLCV,
  RequestTimeout,
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
import type { CandleQuery, FundingQuery, ListingQuery, MarketFeed } from './port.ts';

/** A WHATWG-style fetch, as ccxt calls a user-supplied `fetchImplementation`. */
export type FetchImplementation = (
  url: string,
  init: { method?: string; body?: unknown; headers?: unknown; signal?: AbortSignal },
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
  /**
   * Longest Retry-After of a 429 that a request waits out before asking again. Default 5 s. A
   * longer one (and any 418, an IP ban) fails the request at once, and every request to that
   * venue fails without being sent until the venue's time has passed.
   */
  maxRetryAfterMs?: number;
  /** Least time between two background checks of a venue that is not up (venues()). Default 30 s. */
  recheckMs?: number;
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

/** A 418 without a Retry-After: Binance's shortest IP ban is two minutes. */
const DEFAULT_BAN_MS = 120_000;

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
  readonly #maxRetryAfterMs: number;
  /** Per venue, the feed time before which it asked not to be called again (429/418 Retry-After). */
  readonly #pausedUntil = new Map<Exchange, number>();
  /**
   * Venue endpoints (`BINANCE_SPOT fetchOHLCV`) failing now: the first request to fail retries,
   * the others fail after one attempt until a request to that endpoint succeeds, so a scan's
   * markets (run side by side) or callers retrying do not each send four to a venue that is down.
   */
  readonly #failing = new Set<string>();
  readonly #recheckMs: number;
  /** Per venue, the feed time before which venues() does not ask a venue that is not up again. */
  readonly #recheckAt = new Map<Exchange, number>();
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
    this.#maxRetryAfterMs = options.maxRetryAfterMs ?? 5_000;
    this.#recheckMs = options.recheckMs ?? 30_000;
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

  /**
   * Each venue's health as last seen. A venue not up (never contacted, or its last request
   * failed) is asked again in the background, at most every `recheckMs` and never before its
   * Retry-After: readiness reads this, and a replica out of its load balancer gets no request
   * that would otherwise find the venue back (FEED=live starts with no venue contacted).
   */
  venues(): VenueStatus[] {
    for (const exchange of this.#venues) {
      if (!this.#status.get(exchange)!.ok) this.#recheck(exchange);
    }
    return this.#venues.map((exchange) => ({ exchange, ...this.#status.get(exchange)! }));
  }

  #recheck(exchange: Exchange): void {
    const now = this.#now();
    if ((this.#recheckAt.get(exchange) ?? Number.NEGATIVE_INFINITY) > now) return;
    if ((this.#pausedUntil.get(exchange) ?? 0) > now) return;
    this.#recheckAt.set(exchange, now + this.#recheckMs);
    const client = this.#client(exchange);
    const loaded = client.markets !== undefined;
    const check = async () => {
      const markets = await this.#markets(exchange);
      // Markets loaded before say nothing of the venue now: one daily candle of a market asks it.
      const symbol = markets.find((m) => isServiceMarket(m, LIVE_VENUES[exchange]))?.symbol;
      if (loaded && symbol !== undefined) {
        await this.#call(exchange, `fetchOHLCV ${symbol} 1d`, () =>
          client.fetchOHLCV(symbol, '1d', undefined, 1),
        );
      }
    };
    // A failure is recorded in the venue's status like any request's.
    void check().catch(() => undefined);
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
    // Stopped: no request at all, the markets' load (for the symbol) included.
    options.signal?.throwIfAborted();
    const symbol = await this.#symbol(exchange, coin);
    const now = this.#now();
    const until = Math.min(options.until ?? now, now);
    const fromMs = TIMEFRAME_MS[from];
    const ratio = TIMEFRAME_MS[target] / fromMs;
    // One spare bucket for alignment and one spare candle for the still-open one.
    const needed = (options.limit + 1) * ratio + 1;
    const end = lastBoundary(from, until);
    const perRequest = LIVE_VENUES[exchange].maxCandlesPerRequest;
    const read = async (): Promise<Candle[]> => {
      let since = end - needed * fromMs;
      const raw: OHLCV[] = [];
      while (since < end) {
        // Stopped: no page (nor a retry of one) is asked for after it.
        options.signal?.throwIfAborted();
        const chunk = Math.min(perRequest, Math.ceil((end - since) / fromMs) + 1);
        const page = await this.#call(
          exchange,
          `fetchOHLCV ${symbol} ${from}`,
          () => client.fetchOHLCV(symbol, from, since, chunk),
          options.signal,
        );
        const last = page[page.length - 1]?.[0];
        raw.push(...page);
        if (typeof last !== 'number' || last < since) break;
        since = last + fromMs;
      }
      return closedCandles(toCandles(raw), from, until, Number.MAX_SAFE_INTEGER);
    };
    const what = `fetchOHLCV ${symbol} ${from}`;
    // A page that came back empty, cut short or unparsable ends the read early (ccxt reads a body
    // that is not JSON as no candles): candles that stop before the last close are not the market
    // now, and would be served, or warm a state, as if they were. Read once more, then refuse.
    const lastClose = (candles: Candle[]) => (candles.at(-1)?.openTime ?? Number.NEGATIVE_INFINITY) + fromMs;
    const endsEarly = (candles: Candle[]) =>
      new VenueUnavailableError(
        exchange,
        candles.length === 0
          ? `${what} gave no closed candles up to ${iso(end)}`
          : `${what}: its candles end at ${iso(lastClose(candles))}, before the close at ${iso(end)}`,
      );
    let closed = await read();
    if (lastClose(closed) < end) closed = await read();
    if (lastClose(closed) < end) throw endsEarly(closed);
    // A candle missing between two others (a venue dropping one from a page) would be bridged
    // into a single move by every indicator and the variance. Read again: a dropped candle comes
    // back. One missing from both reads is the venue's own record (an outage on its side, which
    // the evaluated histories carry too): served, with a warning. Different gaps in the two
    // reads are a venue answering at random: refused.
    const missing = missingOpenTimes(closed, fromMs);
    if (missing.length > 0) {
      const again = await read();
      if (lastClose(again) < end) throw endsEarly(again);
      const missingAgain = missingOpenTimes(again, fromMs);
      if (missingAgain.length > 0 && missingAgain.join() !== missing.join()) {
        throw new VenueUnavailableError(
          exchange,
          `${what}: candles missing at ${missing.slice(0, 5).map(iso).join(', ')} in one read and at ${missingAgain.slice(0, 5).map(iso).join(', ')} in the next`,
        );
      }
      if (missingAgain.length > 0) {
        this.#logger?.warn(
          {
            exchange,
            coin: coin.toUpperCase(),
            timeframe: from,
            missing: missingAgain.slice(0, 20).map(iso),
          },
          "venue's candles have the same gap in two reads: served as the venue records them",
        );
      }
      closed = again;
    }
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

  async markets(exchange: Exchange, options: ListingQuery = {}): Promise<MarketInfo[]> {
    const client = this.#client(exchange);
    const venue = LIVE_VENUES[exchange];
    // Stopped: neither the markets nor the tickers (nor a retry of them) are asked for after it.
    options.signal?.throwIfAborted();
    const markets = (await this.#markets(exchange)).filter((m) => isServiceMarket(m, venue));
    options.signal?.throwIfAborted();
    const symbols = markets.map((m) => m.symbol);
    const tickers = await this.#call(
      exchange,
      'fetchTickers',
      // Spot venues list thousands of pairs: ask for all and keep ours rather than a URL that long.
      () => (venue.kind === 'spot' ? client.fetchTickers() : client.fetchTickers(symbols)),
      options.signal,
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
    // ccxt keeps its first loadMarkets promise, a rejected one too: every later call (each retry
    // here, every request after the venue healed) would get that same failure without asking the
    // venue. Until markets are loaded, each attempt asks for a load of its own (reload: a load
    // already in flight is shared, a failed one is not). Loaded markets are read without a
    // request, which says nothing of the venue's health now.
    const markets =
      client.markets !== undefined
        ? client.markets
        : await this.#call(exchange, 'loadMarkets', () => client.loadMarkets(true));
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

  /**
   * Runs one venue request with retries, records the venue's health and maps ccxt errors. An
   * aborted `signal` (a read nobody waits for any more) sends no retry: it throws the reason.
   */
  async #call<T>(
    exchange: Exchange,
    what: string,
    request: () => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    const endpoint = `${exchange} ${what.split(' ')[0]}`;
    let retries: number | undefined;
    for (let attempt = 0; ; attempt++) {
      const pausedUntil = this.#pausedUntil.get(exchange) ?? 0;
      if (this.#now() < pausedUntil) {
        // The venue said when to call again (a rate limit, a ban): asking before then would
        // only lengthen it. Nothing is sent.
        throw new VenueUnavailableError(
          exchange,
          `${what} not sent: the venue asked for no requests until ${new Date(pausedUntil).toISOString()} (${this.#status.get(exchange)?.lastError ?? 'rate limited'})`,
        );
      }
      try {
        const result = await request();
        this.#status.set(exchange, { ok: true, lastOkAt: this.#now() });
        this.#failing.delete(endpoint);
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
        // A 429 or 418 (ccxt: RateLimitExceeded, DDoSProtection): the venue's Retry-After, when it
        // gives one, is the wait; a 418 is an IP ban, never asked again before it ends.
        const limited = error instanceof DDoSProtection;
        const banned = limited && /\b418\b/.test(message);
        const retryAfter = limited ? retryAfterMs(this.#clients.get(exchange), this.#now()) : undefined;
        let delay = this.#backoffMs * 2 ** attempt;
        let paused: number | undefined;
        if (retryAfter !== undefined || banned) {
          delay = retryAfter ?? DEFAULT_BAN_MS;
          paused = this.#now() + delay;
          // A longer pause already set (another request's ban) is kept.
          if (paused > (this.#pausedUntil.get(exchange) ?? 0)) this.#pausedUntil.set(exchange, paused);
        }
        const waits = !banned && delay <= (retryAfter !== undefined ? this.#maxRetryAfterMs : delay);
        if (transient) {
          retries ??= this.#failing.has(endpoint) ? 0 : this.#retries;
          this.#failing.add(endpoint);
          // A venue that let a request time out is tried once more, not three times: four timeouts
          // held the caller over 40 s (past the 30 s most clients wait) for the same 503.
          if (error instanceof RequestTimeout) retries = Math.min(retries, 1);
        }
        if (transient && waits && attempt < (retries ?? 0)) {
          this.#logger?.warn(
            { exchange, what, attempt: attempt + 1, delay, err: message },
            'venue request failed, retrying',
          );
          await this.#sleep(delay);
          // Lifts only its own pause: a longer one another request met meanwhile (a 418) stays.
          if (paused !== undefined && this.#pausedUntil.get(exchange) === paused)
            this.#pausedUntil.delete(exchange);
          signal?.throwIfAborted();
          continue;
        }
        if (transient) {
          this.#status.set(exchange, { ...this.#status.get(exchange), ok: false, lastError: message });
        }
        this.#logger?.error({ exchange, what, err: message }, 'venue request failed');
        const pause = this.#pausedUntil.get(exchange);
        const until =
          pause !== undefined && pause > this.#now()
            ? `; no requests to it until ${new Date(pause).toISOString()} (Retry-After)`
            : '';
        throw new VenueUnavailableError(
          exchange,
          `${what} failed${transient ? ` after ${attempt + 1} attempts` : ''}: ${message}${until}`,
          { cause: error },
        );
      }
    }
  }
}

/**
 * The wait a rate-limited answer asked for, in ms: its Retry-After (seconds or an HTTP date), as
 * ccxt keeps the last answer's headers. Undefined when it gave none.
 */
function retryAfterMs(client: CcxtExchange | undefined, now: number): number | undefined {
  const headers = (client?.last_response_headers ?? {}) as Record<string, unknown>;
  const raw = headers['Retry-After'] ?? headers['retry-after'];
  if (typeof raw !== 'string' || raw.trim() === '') return undefined;
  const seconds = Number(raw);
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const at = Date.parse(raw);
  return Number.isFinite(at) ? Math.max(0, at - now) : undefined;
}

function isServiceMarket(m: Market, venue: LiveVenue): boolean {
  if (m.active === false || m.quote !== venue.quote) return false;
  return venue.kind === 'spot'
    ? m.spot === true
    : m.swap === true && m.linear === true && m.settle === venue.quote;
}

const iso = (t: number) => new Date(t).toISOString();

/** Open times missing between consecutive candles of a series `stepMs` apart. */
function missingOpenTimes(candles: readonly Candle[], stepMs: number): number[] {
  const out: number[] = [];
  for (let i = 1; i < candles.length; i++) {
    for (let t = candles[i - 1]!.openTime + stepMs; t < candles[i]!.openTime; t += stepMs) {
      out.push(t);
      if (out.length > 100) return out;
    }
  }
  return out;
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
