import { TIMEFRAME_MS, type Timeframe } from '../../../contracts/market.ts';
import type { BaselinesTable, RiskHorizonKey, VolatilityTable } from '../../../contracts/signals.ts';
import { defaultBaselines } from './default-baselines.ts';
import { InsufficientHistoryError } from './errors.ts';
import type { MarketState } from './market-state.ts';
import { atPriceScale, bandFor, isPerpVenue } from './volatility.ts';

/**
 * The risk forecast as an answer of its own: expected move and band over the next candle, the
 * verdict's horizon and one UTC day (riskRows), each band's width scaled by its market's recent
 * misses (BandScale).
 */

export interface RiskHorizonValue {
  horizon: RiskHorizonKey;
  candles: number;
  hours: number;
  expected_move_pct: number;
  band_coverage: number;
  band_low: number;
  band_high: number;
  model_timeframe: Timeframe;
}

export function computeRiskHorizons(state: MarketState): RiskHorizonValue[] {
  const r = state.snapshot();
  if (r === null || r.volVariances === null) {
    throw new InsufficientHistoryError(state.key, state.candleCount, ['volatility']);
  }
  const table = state.volatility;
  const { timeframe: modelTf, rows } = state.riskRows;
  const perp = isPerpVenue(state.exchange);
  // σ and the band's scale as the state worked them out at the close (volRisk).
  return rows.map(({ key, model, candles }, i) => {
    const { sigma, scale } = r.volRisk[i]!;
    if (sigma === null) throw new InsufficientHistoryError(state.key, state.candleCount, ['volatility']);
    const band = bandFor(model, perp);
    return {
      horizon: key,
      candles,
      hours: (candles * TIMEFRAME_MS[state.timeframe]) / 3_600_000,
      expected_move_pct: 100 * sigma,
      band_coverage: table.bandCoverage,
      band_low: atPriceScale(r.close * Math.exp(band.low * sigma * scale), r.close),
      band_high: atPriceScale(r.close * Math.exp(band.high * sigma * scale), r.close),
      model_timeframe: modelTf,
    };
  });
}

const rho = (x: number | null) => (x === null ? '–' : x.toFixed(2));

/** What the regime labels are worth on this timeframe, from the evaluation's training months. */
export function labelEvidenceText(table: VolatilityTable, timeframe: Timeframe): string {
  const tf = table.labels?.[timeframe] ? timeframe : table.fallback[timeframe];
  const e = tf === undefined ? undefined : table.labels?.[tf];
  if (tf === undefined || e === undefined) {
    return `Regime labels on ${timeframe} were not evaluated against a free label: read them as descriptions, not forecasts.`;
  }
  const vol = e.volatilityLabelAddsInformation
    ? `volatile/squeeze ranked later volatility better than a free trailing-volatility label (rank correlation ${rho(e.rhoEngine)} vs ${rho(e.rhoFree)})`
    : `volatile/squeeze ranked later volatility no better than a free trailing-volatility label (rank correlation ${rho(e.rhoEngine)} vs ${rho(e.rhoFree)}): use expected_move_pct instead`;
  const trend = e.trendLabelsInformative
    ? `trending-up/down were followed by different mean returns (up − down ${rho(e.upMinusDownBps)} bps over the verdict horizon)`
    : 'trending-up/down carried no measured information about the next direction';
  return `On the ${tf} training months, ${vol}; ${trend}.`;
}

/**
 * Fewest resampled blocks a risk row's 95 % intervals are given on (the evaluation ships them null
 * below it): with one block the bootstrap returns the estimate itself (a zero-width interval), and
 * with a handful its percentiles say little.
 */
export const MIN_INTERVAL_BLOCKS = 20;

/** The figures the risk evidence quotes, counted from the baselines table's risk rows. */
export interface RiskEvidenceCounts {
  rows: number;
  /** Rows shipped without intervals (fewer than MIN_INTERVAL_BLOCKS blocks), by horizon. */
  withoutInterval: RiskHorizonKey[];
  /** σ served ÷ realised within 0.9–1.1. */
  level: number;
  coverageLow: number;
  coverageHigh: number;
  belowEwma: number;
  belowHarRv: number;
  belowGarch: number;
  /** QLIKE − GARCH(1,1)'s with its 95 % interval wholly below 0 (upper bound < 0), and above. */
  garchIntervalBelow: number;
  garchIntervalAbove: number;
  /** The largest upper bound of those below 0: how close the nearest comes to 0. */
  garchNearestUpper: number | null;
}

/**
 * Counts the desk's figures over the risk rows that carry them (the rows of
 * docs/evaluation-risk.md): every timeframe's, or `timeframe`'s alone.
 */
export function riskEvidenceCounts(baselines: BaselinesTable, timeframe?: Timeframe): RiskEvidenceCounts {
  const desk = baselines.risk.flatMap((r) =>
    r.desk === undefined || (timeframe !== undefined && r.timeframe !== timeframe)
      ? []
      : [{ row: r, desk: r.desk }],
  );
  const count = (ok: (d: (typeof desk)[number]) => boolean) => desk.filter(ok).length;
  const below = (l: { value: number | null }) => l.value !== null && l.value < 0;
  const coverage = desk.flatMap(({ row }) => (row.coverage.value === null ? [] : [row.coverage.value]));
  const uppers = desk.flatMap(({ desk: d }) => {
    const high = d.qlikeVs.garch.high;
    return high !== null && high < 0 ? [high] : [];
  });
  return {
    rows: desk.length,
    withoutInterval: desk.flatMap(({ row, desk: d }) =>
      d.sigmaRatio.value !== null && d.sigmaRatio.low === null ? [row.horizon] : [],
    ),
    level: count(
      ({ desk: d }) => d.sigmaRatio.value !== null && d.sigmaRatio.value >= 0.9 && d.sigmaRatio.value <= 1.1,
    ),
    coverageLow: Math.min(...coverage),
    coverageHigh: Math.max(...coverage),
    belowEwma: count(({ desk: d }) => below(d.qlikeVs.ewma)),
    belowHarRv: count(({ desk: d }) => below(d.qlikeVs.harRv)),
    belowGarch: count(({ desk: d }) => below(d.qlikeVs.garch)),
    garchIntervalBelow: uppers.length,
    garchIntervalAbove: count(({ desk: d }) => d.qlikeVs.garch.low !== null && d.qlikeVs.garch.low > 0),
    garchNearestUpper: uppers.length === 0 ? null : Math.max(...uppers),
  };
}

const HORIZON_WORDS: Record<RiskHorizonKey, string> = {
  next: 'next-candle',
  verdict: 'six-candle',
  day: 'day',
};

/** Which rows carry no interval, and why: a block lasts at least a day and two horizons. */
function noInterval(rows: RiskHorizonKey[]): string {
  if (rows.length === 0) return '';
  const names = [...new Set(rows)].map((h) => HORIZON_WORDS[h]).join(' and ');
  const they = rows.length === 1 ? `The ${names} row has` : `The ${rows.length} ${names} rows have`;
  return `${they} no 95 % interval: a resampled block lasts at least a day and two horizons, and the test months hold fewer than ${MIN_INTERVAL_BLOCKS} of them. `;
}

const share = (x: number) => `${(100 * x).toFixed(1)}`;
const times = (n: number) => (n === 0 ? 'none' : `${n}`);
const minus = (x: number) => (x < 0 ? `−${-x}` : `${x}`);

/**
 * The risk desk's evidence on `timeframe` in words: the figures of its own rows (venue ×
 * horizon), then the level and GARCH(1,1) counts over every timeframe's, each counted from
 * `baselines` (riskEvidenceCounts).
 */
export function riskDeskEvidence(baselines: BaselinesTable, timeframe: Timeframe): string {
  const c = riskEvidenceCounts(baselines, timeframe);
  const all = riskEvidenceCounts(baselines);
  const qlike =
    c.belowEwma === c.belowHarRv
      ? `QLIKE below EWMA and HAR-RV on ${c.belowEwma} of ${c.rows}`
      : `QLIKE below EWMA on ${c.belowEwma} and HAR-RV on ${c.belowHarRv} of ${c.rows}`;
  const nearest =
    c.garchNearestUpper === null ? '' : `, the closest to 0 ending at ${minus(c.garchNearestUpper)}`;
  return (
    'Fitted before the test months and scored on every closed candle of them against RiskMetrics EWMA, GARCH(1,1), HAR-RV and a free trailing band ' +
    '(those months were also read for a few method choices, so they are not wholly out of sample). ' +
    `On the ${c.rows} ${timeframe} rows (venue × horizon): σ served ÷ realised within 0.9–1.1 on ${c.level} of ${c.rows}, ` +
    `80 % band coverage ${share(c.coverageLow)}–${share(c.coverageHigh)} % (its width adapting to each market’s recent misses), ` +
    `${qlike} and below GARCH(1,1) on ${c.belowGarch} (its 95 % interval below 0 on ${times(c.garchIntervalBelow)}${nearest}; above 0 on ${times(c.garchIntervalAbove)}). ` +
    noInterval(c.withoutInterval) +
    `Over every timeframe's ${all.rows} rows: within 0.9–1.1 on ${all.level}, below GARCH(1,1) on ${all.belowGarch} ` +
    '(docs/evaluation-risk.md).'
  );
}

const deskEvidence = new WeakMap<BaselinesTable, Map<Timeframe, string>>();

/**
 * What the risk forecast on `timeframe` is worth, in words. A timeframe the table fits its own risk
 * models for quotes the evaluation's figures (`baselines`' risk rows, the shipped ones by default);
 * one that borrows another timeframe's models (1m and 3m run the 5m models on their own candles)
 * was never scored and says so, naming the models it runs.
 */
export function riskEvidenceText(
  table: VolatilityTable,
  timeframe: Timeframe,
  baselines: BaselinesTable = defaultBaselines,
): string {
  const own = table.risk?.[timeframe] !== undefined;
  const scored = baselines.risk.some((r) => r.timeframe === timeframe && r.desk !== undefined);
  if (own && scored) {
    let texts = deskEvidence.get(baselines);
    if (texts === undefined) {
      texts = new Map();
      deskEvidence.set(baselines, texts);
    }
    let text = texts.get(timeframe);
    if (text === undefined) {
      text = riskDeskEvidence(baselines, timeframe);
      texts.set(timeframe, text);
    }
    return text;
  }
  const borrowed = own ? undefined : table.fallback[timeframe];
  const runs =
    borrowed !== undefined && table.risk?.[borrowed] !== undefined
      ? `it runs the ${borrowed} models (fitted on ${borrowed} candles) on ${timeframe} candles`
      : own
        ? `its models were fitted on ${timeframe} candles but not scored on the test months`
        : `it serves the ${table.horizonCandles}-candle volatility model on the verdict horizon alone`;
  return `The risk forecast on ${timeframe} was not evaluated: ${runs}, and no figure of docs/evaluation-risk.md was measured on ${timeframe}. Treat its σ and band as unscored.`;
}
