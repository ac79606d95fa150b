import type { Exchange, FeedKind } from '../../contracts/market.ts';

/**
 * Errors of the market-data port (and the engine's too-little-history error, which extends it).
 * Each carries a stable `code` that the API maps to its error bodies. None of them is ever
 * answered by substituting other data (another venue, another timeframe, stale candles).
 */
export abstract class MarketDataError extends Error {
  abstract readonly code: string;
}

export class UnknownCoinError extends MarketDataError {
  override readonly name = 'UnknownCoinError';
  readonly code = 'unknown_coin';
  constructor(
    readonly exchange: Exchange,
    readonly coin: string,
    detail?: string,
  ) {
    super(`${coin} is not listed on ${exchange}${detail ? ` (${detail})` : ''}`);
  }
}

export class UnsupportedTimeframeError extends MarketDataError {
  override readonly name = 'UnsupportedTimeframeError';
  readonly code = 'unsupported_timeframe';
  constructor(
    readonly timeframe: string,
    readonly exchange: Exchange,
    readonly reason: string,
  ) {
    super(`timeframe ${timeframe} is not available for ${exchange}: ${reason}`);
  }
}

export class UnsupportedExchangeError extends MarketDataError {
  override readonly name = 'UnsupportedExchangeError';
  readonly code = 'unsupported_exchange';
  constructor(
    readonly exchange: string,
    readonly feed: FeedKind,
    readonly reason: string,
  ) {
    super(`exchange ${exchange} is not served by the ${feed} feed: ${reason}`);
  }
}

export class InsufficientHistoryError extends MarketDataError {
  override readonly name = 'InsufficientHistoryError';
  readonly code = 'insufficient_history';
  constructor(
    readonly exchange: Exchange,
    readonly coin: string,
    readonly what: string,
    readonly required: number,
    readonly available: number,
    detail?: string,
  ) {
    super(
      `${exchange} ${coin} ${what}: ${available} available, ${required} required${detail ? ` (${detail})` : ''}`,
    );
  }
}

export class VenueUnavailableError extends MarketDataError {
  override readonly name = 'VenueUnavailableError';
  readonly code = 'venue_unavailable';
  constructor(
    readonly exchange: Exchange,
    readonly reason: string,
    options?: { cause?: unknown },
  ) {
    super(`${exchange} is unavailable: ${reason}`, options);
  }
}
