import type { RegimeReading, VolatilityForecast } from '../../../contracts/signals.ts';
import { InsufficientHistoryError } from './errors.ts';
import type { MarketState, Readings } from './market-state.ts';
import { regimeConfidenceMeaning, regimeReading } from './regime.ts';
import { forecastFromVariance } from './volatility.ts';

/** The regime reading after the last closed candle (get_market_regime); same classifier as verdicts. */
export function computeRegime(
  state: MarketState,
): RegimeReading & { volatility: VolatilityForecast; confidence_meaning: string } {
  const regime = state.regimeState;
  const r = state.snapshot();
  if (regime === null || r === null || r.volVariances === null || r.volPercentile === null) {
    throw new InsufficientHistoryError(state.key, state.candleCount, ['regime_metrics']);
  }
  return {
    ...regimeReading(regime),
    volatility: stateVolatility(state),
    confidence_meaning: regimeConfidenceMeaning(regime, state.regimeOptions),
  };
}

/**
 * The verdict horizon's band scale: its risk row's (the evaluator's withRisk makes that row this
 * model), or none when the risk rows are another timeframe's model.
 */
function verdictBandScale(state: MarketState, risk: Readings['volRisk']): number {
  const { timeframe, rows } = state.riskRows;
  if (timeframe !== state.volatilityModel.timeframe) return 1;
  return risk[rows.findIndex((row) => row.key === 'verdict')]?.scale ?? 1;
}

/** The volatility forecast after the last closed candle; throws while the model warms up. */
export function stateVolatility(state: MarketState): VolatilityForecast {
  const r = state.snapshot();
  const variance = state.volForecastVariance;
  if (r === null || r.volVariances === null || r.volPercentile === null || variance === null) {
    throw new InsufficientHistoryError(state.key, state.candleCount, ['volatility']);
  }
  // The state computed this forecast when it folded the candle in (for its percentile window).
  return forecastFromVariance(
    state.volatility,
    state.volatilityModel,
    variance,
    r.close,
    r.volPercentile,
    state.exchange,
    verdictBandScale(state, r.volRisk),
  );
}
