import type { Regime } from '../../../contracts/market.ts';
import type { RegimeMetrics, RegimeReading } from '../../../contracts/signals.ts';

/**
 * The one regime classifier, used by verdicts and regime readings alike. Each label gets a
 * score in [0, 1] from the metrics; the best score is the candidate. Hysteresis: the held label
 * only changes when a candidate beats it by `margin` on `persist` consecutive closed candles, so
 * a reading that wobbles around a threshold does not flicker (and does not spam regime_shift).
 */
export interface RegimeOptions {
  /** Score lead a challenger needs over the held label. */
  margin: number;
  /** Consecutive closed candles the same challenger must lead before the label switches. */
  persist: number;
}

export const DEFAULT_REGIME_OPTIONS: RegimeOptions = { margin: 0.1, persist: 3 };

export type RegimeScores = Record<Regime, number>;

export interface RegimeState {
  regime: Regime;
  candidate: Regime;
  /** Consecutive candles the current challenger has led by at least the margin. */
  challengerRuns: number;
  /** Closed candles the current label has been held (0 on the candle it was adopted). */
  held: number;
  scores: RegimeScores;
  metrics: RegimeMetrics;
}

const ORDER: readonly Regime[] = ['trending-up', 'trending-down', 'volatile', 'squeeze', 'ranging'];

/** Linear ramp: 0 at or below `from`, 1 at or above `to`. */
function ramp(x: number, from: number, to: number): number {
  if (x <= from) return 0;
  if (x >= to) return 1;
  return (x - from) / (to - from);
}

/**
 * Label scores. Trend: ADX around the classic 25 line (ramp 18→32), damped when Choppiness
 * passes 61.8 (ramp 55→68), direction from +DI/−DI. Volatile: the volatility forecast in the top
 * decile of its window. Squeeze: the forecast in the bottom decile. Ranging is the floor every other
 * label has to beat, raised by choppiness and a weak ADX.
 */
export function scoreRegimes(m: RegimeMetrics): RegimeScores {
  const trend = ramp(m.adx, 18, 32) * (1 - ramp(m.choppiness, 55, 68));
  const up = m.plus_di >= m.minus_di;
  // volatile / squeeze follow the forecast of the next candles' volatility (its rank in the
  // market's recent forecasts), which ranks future volatility better than trailing ATR alone.
  const volatile = ramp(m.vol_forecast_percentile, 80, 97) * (0.6 + 0.4 * ramp(m.volatility_ratio, 1, 1.6));
  const squeeze = ramp(20 - m.vol_forecast_percentile, 8, 18) * (1 - 0.5 * trend);
  const ranging = 0.3 + 0.4 * Math.max(ramp(m.choppiness, 50, 65), 1 - ramp(m.adx, 15, 25)) * (1 - trend);
  return {
    'trending-up': up ? trend : 0,
    'trending-down': up ? 0 : trend,
    volatile,
    squeeze,
    ranging,
  };
}

function best(scores: RegimeScores): Regime {
  let top: Regime = 'ranging';
  for (const r of ORDER) if (scores[r] > scores[top]) top = r;
  return top;
}

/** Pure state machine: previous state + this candle's metrics → next state. */
export function stepRegime(
  prev: RegimeState | null,
  metrics: RegimeMetrics,
  options: Partial<RegimeOptions> = {},
): RegimeState {
  return stepRegimeWith(prev, metrics, { ...DEFAULT_REGIME_OPTIONS, ...options });
}

/** `stepRegime` with the options already merged over the defaults (a market state does it once). */
export function stepRegimeWith(
  prev: RegimeState | null,
  metrics: RegimeMetrics,
  { margin, persist }: RegimeOptions,
): RegimeState {
  const scores = scoreRegimes(metrics);
  const candidate = best(scores);
  if (prev === null) return { regime: candidate, candidate, challengerRuns: 0, held: 0, scores, metrics };
  if (candidate === prev.regime || scores[candidate] - scores[prev.regime] < margin) {
    return { regime: prev.regime, candidate, challengerRuns: 0, held: prev.held + 1, scores, metrics };
  }
  const runs = candidate === prev.candidate ? prev.challengerRuns + 1 : 1;
  if (runs >= persist) return { regime: candidate, candidate, challengerRuns: 0, held: 0, scores, metrics };
  return { regime: prev.regime, candidate, challengerRuns: runs, held: prev.held + 1, scores, metrics };
}

// What each label measures, in words a caller can act on without a direction: the evaluation found
// no label whose later returns differ by direction (trending-up against trending-down on 0 of 13
// rows), so no text here favours a side; label_evidence beside it says what the label was worth.
const SUGGESTIONS: Record<Regime, string> = {
  'trending-up':
    'Directional strength upward over the recent candles (ADX, +DI above −DI): it describes the move so far, not where the price goes next.',
  'trending-down':
    'Directional strength downward over the recent candles (ADX, −DI above +DI): it describes the move so far, not where the price goes next.',
  ranging:
    'No directional strength (weak ADX or a choppy path): the price has moved sideways over the recent candles.',
  volatile:
    'Forecast volatility is in the top of its recent range: larger swings than usual ahead; size smaller for the same risk (the risk forecast sizes for a budget) and widen stops.',
  squeeze:
    'Forecast volatility is in the bottom of its recent range: prices tend to swing less than usual, though a quiet stretch can end abruptly, in either direction.',
};

/**
 * Reading for the api: confidence is a heuristic of how clearly the held label leads the other
 * labels (50 = level, 100 = leads by ≥ 0.5); it is not a calibrated probability.
 */
export function regimeReading(state: RegimeState): RegimeReading {
  let otherBest = 0;
  for (const r of ORDER) if (r !== state.regime) otherBest = Math.max(otherBest, state.scores[r]);
  const lead = state.scores[state.regime] - otherBest;
  const confidence = Math.round(100 * Math.min(1, Math.max(0, 0.5 + lead)));
  return {
    regime: state.regime,
    confidence,
    metrics: state.metrics,
    suggestion: SUGGESTIONS[state.regime],
    candidate: state.candidate,
    held_candles: state.held,
  };
}

const two = (x: number) => x.toFixed(2);

/** What each label's score follows (scoreRegimes), as a held label's words name it. */
const FOLLOWS: Record<Regime, (m: RegimeMetrics) => string> = {
  'trending-up': (m) => `ADX with +DI above −DI, now ADX ${two(m.adx)}`,
  'trending-down': (m) => `ADX with −DI above +DI, now ADX ${two(m.adx)}`,
  volatile: (m) => `the top of vol_forecast_percentile, now ${two(m.vol_forecast_percentile)}`,
  squeeze: (m) => `the bottom of vol_forecast_percentile, now ${two(m.vol_forecast_percentile)}`,
  ranging: (m) => `a weak ADX or high choppiness, now ADX ${two(m.adx)}, choppiness ${two(m.choppiness)}`,
};

/**
 * A reading's confidence, in words: what the number is and what it is not. While hysteresis holds
 * a label the metrics of this close no longer favour (candidate ≠ regime), the number is below 50
 * and says how far the held label trails: the words then say the label is held from an earlier
 * close and why, rather than that it leads.
 */
export function regimeConfidenceMeaning(
  state: RegimeState,
  { margin, persist }: RegimeOptions = DEFAULT_REGIME_OPTIONS,
): string {
  const { confidence } = regimeReading(state);
  const scale = '50 = level with the next, 100 = ahead by 0.5 or more; a heuristic, not a probability';
  if (state.candidate === state.regime) {
    return `${confidence} = how clearly ${state.regime} leads the other labels on the metrics (${scale}).`;
  }
  const trails = state.scores[state.candidate] - state.scores[state.regime];
  const since = `held ${state.held} closed candle${state.held === 1 ? '' : 's'}`;
  const challenge =
    state.challengerRuns > 0
      ? `${state.candidate} has led it by ${margin} or more on ${state.challengerRuns} of the ${persist} consecutive closes a switch needs`
      : `${state.candidate} leads it by less than the ${margin} a switch needs`;
  return (
    `${state.regime} is held from an earlier close (${since}), not led on this one: the label changes only when another leads it by ${margin} on ${persist} consecutive closed candles, and on this close's metrics ${challenge}. ` +
    `${confidence} = how clearly ${state.regime} leads the other labels on the metrics, below 50 as it trails ${state.candidate} by ${two(trails)} (${scale}); ` +
    `the metrics are this close's and need not meet ${state.regime}'s own conditions (it follows ${FOLLOWS[state.regime](state.metrics)}).`
  );
}

/** Regime from metrics alone (no hysteresis history), e.g. for a one-off reading. */
export function classifyRegime(
  metrics: RegimeMetrics,
  prev: RegimeState | null = null,
  options: Partial<RegimeOptions> = {},
): { state: RegimeState; reading: RegimeReading } {
  const state = stepRegime(prev, metrics, options);
  return { state, reading: regimeReading(state) };
}
