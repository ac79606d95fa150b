/** Public API of the signal engine (pure: no I/O). */
export {
  calibratedProbability,
  callDirection,
  type Direction,
  fitCurve,
  fitDirection,
  parseCalibrationTable,
} from './calibration.ts';
export { defaultCalibration } from './default-calibration.ts';
export { CalibrationError, InsufficientHistoryError } from './errors.ts';
export { computeRegime } from './market-regime.ts';
export {
  createMarketState,
  MarketState,
  type MarketStateOptions,
  OutOfOrderCandleError,
  type Readings,
} from './market-state.ts';
export { perpLean } from './perp-context.ts';
export {
  classifyRegime,
  DEFAULT_REGIME_OPTIONS,
  type RegimeOptions,
  type RegimeState,
  regimeReading,
  scoreRegimes,
  stepRegime,
} from './regime.ts';
export {
  computeRiskHorizons,
  labelEvidenceText,
  riskEvidenceText,
} from './risk-forecast.ts';
export {
  callFor,
  computeScore,
  computeVerdict,
  DEFAULT_HOLD_BAND,
  ENGINE_VERSION,
  leanOf,
  recordedMeaning,
  recordedReasoning,
  type VerdictOptions,
} from './verdict.ts';
export { computeVotes } from './votes.ts';
