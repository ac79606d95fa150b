import type { Call, Exchange, Timeframe } from '../../../contracts/market.ts';
import type {
  CalibrationTable,
  Lean,
  PerpContext,
  Verdict,
  VolatilityForecast,
  Votes,
} from '../../../contracts/signals.ts';
import { type CellDecision, cellDecision, type Direction, netWords } from './calibration.ts';
import { InsufficientHistoryError } from './errors.ts';
import { stateVolatility } from './market-regime.ts';
import type { MarketState, Readings } from './market-state.ts';
import { perpLean } from './perp-context.ts';
import { regimeReading } from './regime.ts';
import { atPriceScaleText } from './volatility.ts';
import { computeVotes } from './votes.ts';

/**
 * signals-4: BUY/SELL only in cells (venue kind × timeframe) whose calls showed timing skill and
 * beat the fee (net bound above 0) in every fold and era before the test months; HOLD elsewhere,
 * with the lean and its expected net, and a confidence that says what it claims; every verdict
 * carries a volatility forecast and band.
 */
export const ENGINE_VERSION = 'signals-4';

/** TradingView treats |rating| < 0.1 as neutral; the same band is the default HOLD band. */
export const DEFAULT_HOLD_BAND = 0.1;
/** Weight of the perpetual lean in the composite when perp context is given. */
export const PERP_WEIGHT = 0.2;

export interface VerdictOptions {
  holdBand?: number;
  includeReasoning?: boolean;
}

export interface Score {
  score: number;
  votes: Votes;
  perpLean: number;
  fundingApr: number | null;
  basis: number | null;
  readings: Readings;
}

/** The composite score alone (the evaluation fits calibration on it). Throws when not ready. */
export function computeScore(state: MarketState, context?: PerpContext): Score {
  const missing = state.missingForVerdict();
  const readings = state.snapshot();
  if (missing.length > 0 || readings === null) {
    throw new InsufficientHistoryError(state.key, state.candleCount, missing);
  }
  const votes = computeVotes(readings);
  const perp = perpLean(context);
  const hasPerp = perp.fundingApr !== null || perp.basis !== null;
  const raw = hasPerp
    ? (1 - PERP_WEIGHT) * votes.technical_rating + PERP_WEIGHT * perp.lean
    : votes.technical_rating;
  const score = Math.max(-1, Math.min(1, raw));
  return { score, votes, perpLean: perp.lean, fundingApr: perp.fundingApr, basis: perp.basis, readings };
}

export function callFor(score: number, holdBand: number): Call {
  if (score === 0 || Math.abs(score) < holdBand) return 'HOLD';
  return score > 0 ? 'BUY' : 'SELL';
}

/**
 * The verdict for the last closed candle fed to `state`. The call points the way the table's
 * fitted direction says: with the score (follow) or against it (fade, where the training months
 * showed mean reversion over the horizon). BUY/SELL confidence is the calibrated probability
 * (×100) that the call's direction beats the fee over the table's horizon. HOLD confidence is
 * the share of the cell's leans, measured out of fold, whose direction did not beat the fee: one
 * figure per cell, because finer ones did not hold on later months. `confidence_meaning` says
 * which, in words.
 */
export function computeVerdict(
  state: MarketState,
  context: PerpContext | undefined,
  calibration: CalibrationTable,
  options: VerdictOptions = {},
): Verdict {
  const holdBand = options.holdBand ?? calibration.holdBand;
  const s = computeScore(state, context);
  const regimeState = state.regimeState!;
  const regime = regimeReading(regimeState);
  const decision = cellDecision(calibration, state.exchange, state.timeframe, Math.abs(s.score));
  const direction = decision.direction;
  const call = decision.emit ? callFor(direction * s.score, holdBand) : 'HOLD';
  const cal = { timeframe: decision.curveTimeframe, probability: decision.probability };
  const directional = Math.round(100 * cal.probability);
  const volatility = stateVolatility(state);
  const confidence = call === 'HOLD' ? Math.round(100 * decision.hold.probability) : directional;
  const lean = leanOf(decision, s.score);
  const r = s.readings;
  return {
    call,
    confidence,
    score: s.score,
    regime: regime.regime,
    regime_reading: regime,
    votes: s.votes,
    perp_lean: s.perpLean,
    indicators: indicatorSummary(r, s),
    price: r.close,
    candle_close_time: r.closeTime,
    calibration: { timeframe: cal.timeframe, probability: cal.probability },
    stance: direction === 1 ? 'follow' : 'fade',
    edge: { cell: decision.cell, measured: decision.emit, reason: decision.reason },
    volatility,
    lean,
    confidence_meaning: confidenceMeaning(call, confidence, decision, calibration, lean),
    reasoning:
      options.includeReasoning === false
        ? ''
        : reasoningText({
            call,
            confidence,
            score: s.score,
            holdBand,
            regime: regime.regime,
            maRating: s.votes.ma_mean,
            oscillatorRating: s.votes.oscillator_mean,
            counts: { ma: count(s.votes.ma), oscillators: count(s.votes.oscillators) },
            fundingApr: s.fundingApr,
            basis: s.basis,
            perpLean: s.perpLean,
            adx: r.adx,
            plusDi: r.plusDi,
            minusDi: r.minusDi,
            close: r.close,
            vol: volatility,
            lean,
            noEdge: decision.emit ? null : decision.reason,
            table: calibration,
            fit: { curveTimeframe: cal.timeframe, direction },
          }),
  };
}

/** The direction the score leans in this cell (as its table follows or fades it), and what such leans earned. */
export function leanOf(decision: CellDecision, score: number): Lean | null {
  const sign = decision.direction * Math.sign(score);
  if (sign === 0) return null;
  return {
    direction: sign > 0 ? 'BUY' : 'SELL',
    timing_skill: decision.timingSkill,
    measurable: decision.net.measurable,
    expected_net_bps: decision.net.meanBps,
    expected_net_bps_low: decision.net.lowBps,
    expected_net_bps_high: decision.net.highBps,
  };
}

/** What following such leans earned, in words: a figure only where measurable, else the interval. */
function leanNetWords(lean: Lean): string {
  return `following such leans ${netWords({
    meanBps: lean.expected_net_bps,
    lowBps: lean.expected_net_bps_low,
    highBps: lean.expected_net_bps_high,
    measurable: lean.measurable,
  })} after the fee before the test months`;
}

/** What a verdict as the log holds it says of its market, its call and the engine that made it. */
interface RecordedVerdictFigures {
  exchange: Exchange;
  timeframe: Timeframe;
  call: Call;
  confidence: number;
  score: number;
  engineVersion: string;
}

/**
 * The lean and the words for the confidence of a verdict as the log holds it (an answer rebuilt
 * from the record, a scan or digest row, a webhook payload): the same as when it was computed,
 * because both come from the recorded score and the table of the engine that recorded it. A
 * verdict of an older engine, whose table is not this one, gets no lean and says so in words.
 */
export function recordedMeaning(
  verdict: RecordedVerdictFigures,
  table: CalibrationTable,
): { lean: Lean | null; confidence_meaning: string } {
  if (verdict.engineVersion !== table.engineVersion) {
    const fee = `the ${table.feeBps} bps round-trip fee over the next ${table.horizonCandles} candles`;
    return {
      lean: null,
      confidence_meaning:
        verdict.call === 'HOLD'
          ? `${verdict.confidence} = the number engine ${verdict.engineVersion} gave this HOLD; that engine's HOLD confidence did not measure how often standing aside was right, and no lean is restated for it. It is not a chance that price stays flat.`
          : `${verdict.confidence} = the chance that this ${verdict.call} beats ${fee}, as engine ${verdict.engineVersion}'s calibration fitted it on its training months.`,
    };
  }
  const decision = cellDecision(table, verdict.exchange, verdict.timeframe, Math.abs(verdict.score));
  const lean = leanOf(decision, verdict.score);
  return {
    lean,
    confidence_meaning: confidenceMeaning(verdict.call, verdict.confidence, decision, table, lean),
  };
}

/** What the confidence number claims, in words a buyer can check against the track record. */
export function confidenceMeaning(
  call: Call,
  confidence: number,
  decision: CellDecision,
  table: CalibrationTable,
  lean: Lean | null,
): string {
  const horizon = `the ${table.feeBps} bps round-trip fee over the next ${table.horizonCandles} candles`;
  if (call !== 'HOLD') {
    return `${confidence} = the calibrated chance that this ${call} beats ${horizon} (${decision.cell} calls with a similar |score| on the training months).`;
  }
  const what = lean === null ? 'a trade in either direction' : `a ${lean.direction} like the lean here`;
  return `${confidence} = how often standing aside was right: in ${confidence} % of comparable moments ${what} did not beat ${horizon} (${decision.hold.source}). It is not a chance that price stays flat.`;
}

function indicatorSummary(r: Readings, s: Score): Record<string, number | null> {
  return {
    rsi: r.rsi,
    stoch_k: r.stochK,
    stoch_d: r.stochD,
    cci: r.cci,
    adx: r.adx,
    plus_di: r.plusDi,
    minus_di: r.minusDi,
    ao: r.ao,
    momentum: r.mom,
    macd: r.macd,
    macd_signal: r.macdSignal,
    stoch_rsi_k: r.stochRsiK,
    williams_r: r.williamsR,
    bull_power: r.bullPower,
    bear_power: r.bearPower,
    ultimate: r.ultimate,
    ema20: r.ema.p20,
    ema50: r.ema.p50,
    ema200: r.ema.p200,
    sma200: r.sma.p200,
    ma_rating: s.votes.ma_mean,
    oscillator_rating: s.votes.oscillator_mean,
    technical_rating: s.votes.technical_rating,
    funding_apr: s.fundingApr,
    basis: s.basis,
  };
}

function count(votes: Record<string, number | null>): { buy: number; sell: number; n: number } {
  let buy = 0;
  let sell = 0;
  let n = 0;
  for (const k in votes) {
    const v = votes[k]!;
    if (v === null) continue;
    n++;
    if (v > 0) buy++;
    else if (v < 0) sell++;
  }
  return { buy, sell, n };
}

/**
 * Number formatting is most of what the reasoning costs, and several of its numbers come from
 * small sets (a vote mean is k/n with n ≤ 15, a rank is a multiple of 100/(2·window), the hold
 * band is a constant): those go through a bounded memo. Same strings, formatted once.
 */
function memoFormat(format: (x: number) => string): (x: number) => string {
  const memo = new Map<number, string>();
  return (x) => {
    let text = memo.get(x);
    if (text === undefined) {
      text = format(x);
      if (memo.size >= 4096) memo.clear();
      memo.set(x, text);
    }
    return text;
  };
}

const f2 = memoFormat((x) => (x >= 0 ? '+' : '') + x.toFixed(2));
const fixed2 = memoFormat((x) => x.toFixed(2));
const fixed0 = memoFormat((x) => x.toFixed(0));

/** Votes counted: how many voted buy, how many sell, and how many voted at all. */
interface VoteCount {
  buy: number;
  sell: number;
  n: number;
}

/**
 * What the reasoning says, from a verdict just computed or from one as the log holds it (the
 * recorded inputs are the computed verdict's indicator summary, its perp lean and its forecast).
 */
export interface ReasoningFacts {
  call: Call;
  confidence: number;
  score: number;
  holdBand: number;
  regime: string;
  maRating: number;
  oscillatorRating: number;
  /** The votes counted; null for a recorded verdict, whose inputs hold the two ratings only. */
  counts: { ma: VoteCount; oscillators: VoteCount } | null;
  fundingApr: number | null;
  basis: number | null;
  perpLean: number;
  adx: number | null;
  plusDi: number | null;
  minusDi: number | null;
  close: number;
  /** Absent on a recorded verdict older than the forecast (before signals-3). */
  vol: VolatilityForecast | undefined;
  lean: Lean | null;
  /** Why the cell emits no BUY/SELL; null where it does. */
  noEdge: string | null;
  table: CalibrationTable;
  /**
   * The table's fit for the cell: its curve's timeframe and direction. A verdict of another engine
   * version has none in this table: its confidence is said by its confidence_meaning instead.
   */
  fit: { curveTimeframe: string; direction: Direction } | { confidenceMeaning: string };
}

/** The call explained in words: the one builder of the reasoning, for computed and recorded verdicts. */
export function reasoningText(x: ReasoningFacts): string {
  const { table } = x;
  // Sentences joined by single spaces, appended rather than collected and joined: no array, and
  // the rope is flattened once, by whoever reads it.
  let text: string;
  if (x.counts !== null) {
    const { ma, oscillators: osc } = x.counts;
    text =
      `${ma.buy} of ${ma.n} moving averages are below the close and ${ma.sell} above (MA rating ${f2(x.maRating)}); ` +
      `oscillators ${osc.buy} buy / ${osc.sell} sell of ${osc.n} (rating ${f2(x.oscillatorRating)}).`;
  } else {
    text = `MA rating ${f2(x.maRating)}; oscillator rating ${f2(x.oscillatorRating)}.`;
  }
  if (x.fundingApr !== null || x.basis !== null) {
    const funding = x.fundingApr === null ? '' : `funding ${(x.fundingApr * 100).toFixed(1)}% APR`;
    const basis = x.basis === null ? '' : `basis ${(x.basis * 100).toFixed(2)}%`;
    text += ` Perp context (${[funding, basis].filter(Boolean).join(', ')}) leans ${f2(x.perpLean)} (contrarian).`;
  }
  text += ` Composite score ${f2(x.score)}; |score| ${Math.abs(x.score) < x.holdBand ? 'below' : 'at or above'} the HOLD band ${fixed2(x.holdBand)}.`;
  const { fit } = x;
  if ('direction' in fit && fit.direction === -1) {
    text += ` On ${fit.curveTimeframe} the training months favoured fading the score (mean reversion over ${table.horizonCandles} candles), so the call points against it.`;
  }
  text += ` Regime ${x.regime} (ADX ${x.adx?.toFixed(1)}, +DI ${x.plusDi?.toFixed(1)} / −DI ${x.minusDi?.toFixed(1)}).`;
  const vol = x.vol;
  if (vol !== undefined) {
    text += ` Expected move over ${vol.horizon_candles} candles ±${vol.expected_move_pct.toFixed(2)}% (one σ of the log return; forecast rank ${fixed0(vol.percentile)} of 100); ${Math.round(100 * vol.band_coverage)}% band ${atPriceScaleText(vol.band_low, x.close)}–${atPriceScaleText(vol.band_high, x.close)}.`;
  }
  const horizon = `${table.horizonCandles} candles after a ${table.feeBps} bps fee`;
  const confidence =
    'confidenceMeaning' in fit
      ? ` ${fit.confidenceMeaning}`
      : x.call !== 'HOLD'
        ? ` Confidence ${x.confidence}: share of training-period ${fit.curveTimeframe} calls with a similar |score| whose direction beat the fee over ${horizon}.`
        : ` HOLD confidence ${x.confidence}: share of comparable leans that did not beat the fee over ${horizon}.`;
  if (x.call !== 'HOLD') return `${text}${confidence}`;
  const leaning =
    x.lean === null
      ? ' The score leans neither way.'
      : ` The score leans ${x.lean.direction}; ${leanNetWords(x.lean)}.`;
  const why = x.noEdge ?? `|score| is inside the HOLD band`;
  return `${text}${leaning} HOLD: ${why}.${confidence}`;
}

/**
 * The reasoning of a verdict as the log holds it (a trade call served from a verdict recorded for
 * another close), in the words a computed one has, from its recorded figures: its inputs (the
 * indicator summary, perp lean), its forecast, its edge and its lean and confidence_meaning
 * (recordedMeaning). The votes were not recorded one by one: their two ratings stand for them.
 */
export function recordedReasoning(
  verdict: RecordedVerdictFigures & { regime: string; price: number; inputs: Record<string, unknown> },
  recorded: {
    volatility: VolatilityForecast | undefined;
    edge: { measured: boolean; reason: string } | undefined;
    lean: Lean | null;
    confidence_meaning: string;
  },
  table: CalibrationTable,
): string {
  const n = (k: string) => (typeof verdict.inputs[k] === 'number' ? (verdict.inputs[k] as number) : null);
  const decision =
    verdict.engineVersion === table.engineVersion
      ? cellDecision(table, verdict.exchange, verdict.timeframe, Math.abs(verdict.score))
      : null;
  return reasoningText({
    call: verdict.call,
    confidence: verdict.confidence,
    score: verdict.score,
    holdBand: table.holdBand,
    regime: verdict.regime,
    maRating: n('ma_rating') ?? 0,
    oscillatorRating: n('oscillator_rating') ?? 0,
    counts: null,
    fundingApr: n('funding_apr'),
    basis: n('basis'),
    perpLean: n('perp_lean') ?? 0,
    adx: n('adx'),
    plusDi: n('plus_di'),
    minusDi: n('minus_di'),
    close: verdict.price,
    vol: recorded.volatility,
    lean: recorded.lean,
    noEdge: recorded.edge === undefined || recorded.edge.measured ? null : recorded.edge.reason,
    table,
    fit:
      decision === null
        ? { confidenceMeaning: recorded.confidence_meaning }
        : { curveTimeframe: decision.curveTimeframe, direction: decision.direction },
  });
}
