import type { RegimeReading } from '../../../contracts/signals.ts';
import { InsufficientHistoryError } from './errors.ts';
import type { MarketState } from './market-state.ts';
import { regimeReading } from './regime.ts';

/** The regime reading after the last closed candle (get_market_regime); same classifier as verdicts. */
export function computeRegime(state: MarketState): RegimeReading {
  const regime = state.regimeState;
  if (regime === null) {
    throw new InsufficientHistoryError(state.key, state.candleCount, ['regime_metrics']);
  }
  return regimeReading(regime);
}
