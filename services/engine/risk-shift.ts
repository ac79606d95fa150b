import type { VolatilityDecile } from '../../contracts/events.ts';

/** The percentile at or above which a forecast is in its market's top decile. */
export const TOP_DECILE = 90;
/** The percentile at or below which a forecast is in its market's bottom decile. */
export const BOTTOM_DECILE = 10;

export function volatilityDecile(percentile: number): VolatilityDecile {
  if (percentile >= TOP_DECILE) return 'top';
  if (percentile <= BOTTOM_DECILE) return 'bottom';
  return 'middle';
}

/**
 * Whether a verdict's forecast percentile shifts its market's volatility decile from the previous
 * verdict's: entering or leaving the top or the bottom decile is a shift (top → bottom included);
 * staying in the same band is not. A market's first verdict, or one after a verdict recorded
 * without a forecast, has no band to shift from, so it is no shift: a subscriber hears of a
 * market's band only when it changes, not when the service (re)starts recording it.
 */
export function riskShiftOf(
  priorPercentile: number | null,
  percentile: number | null,
): { from: VolatilityDecile; to: VolatilityDecile } | null {
  if (priorPercentile === null || percentile === null) return null;
  const from = volatilityDecile(priorPercentile);
  const to = volatilityDecile(percentile);
  return from === to ? null : { from, to };
}
