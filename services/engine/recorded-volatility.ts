import type { Timeframe } from '../../contracts/market.ts';
import type { VolatilityForecast } from '../../contracts/signals.ts';

/** The volatility forecast as recorded with the verdict (absent on verdicts before signals-3). */
export function recordedVolatility(
  inputs: Record<string, unknown>,
  timeframe: Timeframe,
): VolatilityForecast | undefined {
  const n = (k: string) => (typeof inputs[k] === 'number' ? (inputs[k] as number) : null);
  const move = n('vol_expected_move_pct');
  const low = n('vol_band_low');
  const high = n('vol_band_high');
  const horizon = n('vol_horizon_candles');
  if (move === null || low === null || high === null || horizon === null) return undefined;
  return {
    horizon_candles: horizon,
    expected_move_pct: move,
    band_coverage: n('vol_band_coverage') ?? 0.8,
    band_low: low,
    band_high: high,
    percentile: n('vol_percentile') ?? 50,
    model_timeframe: timeframe,
  };
}
