import { ServiceError } from '../../contracts/errors.ts';
import type { Exchange, FeedKind } from '../../contracts/market.ts';

/**
 * Errors of the market-data port (and the engine's too-little-history error, which extends it).
 * Each carries a stable `code` that the API maps to its error bodies. None of them is ever
 * answered by substituting other data (another venue, another timeframe, stale candles).
 */
export abstract class MarketDataError extends Error {
  abstract readonly code: string;
}

/**
 * A MarketDataError class: its name and code (written here, never read from the class name, which
 * a bundler may rename), its fields from the constructor's arguments, and its message from them.
 * A `cause` among the fields goes to Error's own option instead.
 */
export function marketDataError<const C extends string, A extends unknown[], F extends object>(
  name: string,
  code: C,
  fields: (...args: A) => F,
  message: (f: F) => string,
) {
  class Coded extends MarketDataError {
    override readonly name = name;
    readonly code = code;
    constructor(...args: A) {
      const f = fields(...args);
      const { cause, ...own } = f as F & { cause?: unknown };
      super(message(f), 'cause' in f ? { cause } : undefined);
      Object.assign(this, own);
    }
  }
  return Coded as unknown as new (
    ...args: A
  ) => Coded & Readonly<Omit<F, 'cause'>>;
}

const detailed = (detail: string | undefined) => (detail ? ` (${detail})` : '');

export class UnknownCoinError extends marketDataError(
  'UnknownCoinError',
  'unknown_coin',
  (exchange: Exchange, coin: string, detail?: string) => ({ exchange, coin, detail }),
  (f) => `${f.coin} is not listed on ${f.exchange}${detailed(f.detail)}`,
) {}

export class UnsupportedTimeframeError extends marketDataError(
  'UnsupportedTimeframeError',
  'unsupported_timeframe',
  (timeframe: string, exchange: Exchange, reason: string) => ({ timeframe, exchange, reason }),
  (f) => `timeframe ${f.timeframe} is not available for ${f.exchange}: ${f.reason}`,
) {}

/**
 * A timeframe asked of no venue in particular (a filter naming none means every venue) that none
 * of them serves: said of them all, with the timeframes they do serve, never of the one venue a
 * call naming none would be answered for. Timeframes the venues were asked about and gave no
 * answer on in time are named apart, with the venues that gave none: neither served nor refused.
 */
export class TimeframeServedNowhereError extends marketDataError(
  'TimeframeServedNowhereError',
  'unsupported_timeframe',
  (
    timeframe: string,
    venues: readonly Exchange[],
    served: readonly string[],
    unanswered?: TimeframesUnanswered,
  ) => ({ timeframe, venues, served, ...(unanswered ? { unanswered } : {}) }),
  (f) =>
    `timeframe ${f.timeframe} is not available on any venue here (${f.venues.join(', ')}): ` +
    (f.unanswered === undefined
      ? f.served.length > 0
        ? `they serve ${f.served.join(', ')}`
        : 'they serve no candles'
      : `${f.served.length > 0 ? `they serve ${f.served.join(', ')}` : 'none said it serves another'}; ` +
        `${f.unanswered.venues.join(', ')} gave no answer within ${f.unanswered.withinMs} ms about ` +
        `${f.unanswered.timeframes.join(', ')}, not listed`),
) {}

/** The timeframes a refusal asked the venues about and got no answer on in time: left out of what they serve. */
export interface TimeframesUnanswered {
  timeframes: readonly string[];
  /** The venues that did not answer about them (none of the others serves them). */
  venues: readonly Exchange[];
  withinMs: number;
}

export class UnsupportedExchangeError extends marketDataError(
  'UnsupportedExchangeError',
  'unsupported_exchange',
  (exchange: string, feed: FeedKind, reason: string) => ({ exchange, feed, reason }),
  (f) => `exchange ${f.exchange} is not served by the ${f.feed} feed: ${f.reason}`,
) {}

export class InsufficientHistoryError extends marketDataError(
  'InsufficientHistoryError',
  'insufficient_history',
  (exchange: Exchange, coin: string, what: string, required: number, available: number, detail?: string) => ({
    exchange,
    coin,
    what,
    required,
    available,
    detail,
  }),
  (f) =>
    `${f.exchange} ${f.coin} ${f.what}: ${f.available} available, ${f.required} required${detailed(f.detail)}`,
) {}

export class VenueUnavailableError extends marketDataError(
  'VenueUnavailableError',
  'venue_unavailable',
  (exchange: Exchange, reason: string, options?: { cause?: unknown }) => ({
    exchange,
    reason,
    ...(options && 'cause' in options ? { cause: options.cause } : {}),
  }),
  (f) => `${f.exchange} is unavailable: ${f.reason}`,
) {}

/**
 * The feed's refusal of a venue or timeframe (the engine's unservedVenue) as the answer a route
 * gives for it: the same code and words, naming the filter or field (`exchange`, `timeframe`);
 * null for anything else.
 */
export function unservedAnswer(err: unknown): ServiceError | null {
  if (err instanceof UnsupportedExchangeError) {
    return new ServiceError('unsupported_exchange', { detail: err.message }, 'exchange');
  }
  if (err instanceof UnsupportedTimeframeError || err instanceof TimeframeServedNowhereError) {
    return new ServiceError('unsupported_timeframe', { detail: err.message }, 'timeframe');
  }
  return null;
}
