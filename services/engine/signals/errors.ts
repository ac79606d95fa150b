import { marketDataError } from '../../../adapters/market/errors.ts';

/**
 * A verdict was asked for before the indicators had enough closed candles to be stable. It shares
 * the feed's `insufficient_history` code, so every channel answers it like too little market data.
 */
export class InsufficientHistoryError extends marketDataError(
  'InsufficientHistoryError',
  'insufficient_history',
  (market: string, candles: number, missing: readonly string[]) => ({ market, candles, missing }),
  (f) => `${f.market}: not enough closed candles (${f.candles}); not stable yet: ${f.missing.join(', ')}`,
) {}

export class CalibrationError extends Error {
  override readonly name = 'CalibrationError';
}
