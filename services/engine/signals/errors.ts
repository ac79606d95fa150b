/** A verdict was asked for before the indicators had enough closed candles to be stable. */
export class InsufficientHistoryError extends Error {
  override readonly name = 'InsufficientHistoryError';
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
