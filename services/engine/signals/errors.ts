import { MarketDataError } from '../../../adapters/market/errors.ts';

/**
 * A verdict was asked for before the indicators had enough closed candles to be stable. It shares
 * the feed's `insufficient_history` code, so every channel answers it like too little market data.
 */
export class InsufficientHistoryError extends MarketDataError {
  override readonly name = 'InsufficientHistoryError';
  readonly code = 'insufficient_history';
  constructor(
    readonly market: string,
    readonly candles: number,
    readonly missing: readonly string[],
  ) {
    super(`${market}: not enough closed candles (${candles}); not stable yet: ${missing.join(', ')}`);
  }
}

export class CalibrationError extends Error {
  override readonly name = 'CalibrationError';
}
