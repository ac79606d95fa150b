import type { EventData } from '../../contracts/events.ts';
import {
  type CarryRecord,
  FEE_BPS,
  HORIZON_CANDLES,
  OUTCOME_AFTER_CANDLES,
  type RiskRecord,
  TRADE_CALL_TRACK_RECORD_WINDOW,
  type TrackRecordBrief,
  type TrackRecordFeed,
  type TrackRecordLine,
  type TrackRecordResponse,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import {
  type Call,
  type Exchange,
  type FeedKind,
  TIMEFRAME_MS,
  type Timeframe,
} from '../../contracts/market.ts';
import { BOOTSTRAP_SEED, percentileInterval, seededRandom } from '../engine/evaluate/bootstrap.ts';
import { wilson } from '../engine/evaluate/stats.ts';
import { defaultCarry } from '../engine/funding/default-carry.ts';
import { defaultBaselines } from '../engine/signals/default-baselines.ts';
import { defaultCalibration } from '../engine/signals/default-calibration.ts';
import { defaultVolatility } from '../engine/signals/default-volatility.ts';
import { MIN_INTERVAL_BLOCKS } from '../engine/signals/risk-forecast.ts';
import { outcomeDueAt } from './outcome.ts';

/**
 * The track record as integer sufficient statistics per (exchange, timeframe, UTC day): sums of
 * integers are exact in any order, so the service's live fold and `history score` over an export
 * file reach the same figures to the last digit.
 */
export interface Cell {
  calls: number;
  holds: number;
  buys: number;
  sells: number;
  hits: number;
  /** Points where the price beat the fee upward / downward (always-BUY / always-SELL hits). */
  ups: number;
  downs: number;
  netCentiBps: number;
  /** Sum of the 6-candle return over call points, hundredths of a bp. */
  retCentiBps: number;
  sumConf: number;
  sumConf2: number;
  sumConfHit: number;
  /** Per confidence bucket of 10 points: [calls, hits, sum of confidence]. */
  buckets: number[][];
  /**
   * The risk forecast, over every resolved verdict (HOLD included): points scored, closes inside
   * the band, the bands' stated coverage in thousandths, the σ served and the realised log return
   * over the horizon squared in hundredths of bps², and verdicts with nothing to score.
   */
  riskPoints: number;
  riskCovered: number;
  riskNominalMilli: number;
  sigma2: number;
  realised2: number;
  riskUnscored: number;
  /**
   * The latest time an outcome counted here became due (its verdict's close plus
   * OUTCOME_AFTER_CANDLES candles, feed time): what the record is as of (recordAsOf).
   */
  lastDueAt: number;
  /** The log position of the latest outcome counted here (0: none): what the record is folded to (recordPosition). */
  lastPosition: number;
  /** Resolved verdicts counted, by feed; and replay verdicts of a looped lap, counted in no figure. */
  live: number;
  replay: number;
  looped: number;
}

export type TrackRecordState = Record<string, Cell>;

/** The labels a track record needs, from an outcome event or an export row alike. */
export interface ScoredPoint {
  exchange: Exchange;
  timeframe: Timeframe;
  call: Call;
  confidence: number;
  candleCloseTime: number;
  return6: number;
  result: 'hit' | 'miss' | 'no-call';
  netCentiBps: number | null;
  price: number;
  return1: number;
  return24: number;
  /** The risk forecast the verdict served; null or absent when it served none. */
  volatility?: ServedForecast | null | undefined;
  feed: FeedKind;
  /** The looped replay lap its verdict or labels fell in (contracts/history.ts REPLAY_LAP_INPUT); absent or 0: none. */
  replayLap?: number | undefined;
}

export type ServedForecast = NonNullable<EventData<'VerdictOutcomeResolved'>['volatility']>;

const round = (x: number, digits: number) => Number(x.toFixed(digits));

export const DAY_MS = 86_400_000;
const BUCKETS = 10;
/** A window's UTC days (null: every day). */
export const WINDOW_DAYS: Record<TrackRecordWindow, number | null> = {
  '7d': 7,
  '30d': 30,
  '90d': 90,
  all: null,
};

function emptyCell(): Cell {
  return {
    calls: 0,
    holds: 0,
    buys: 0,
    sells: 0,
    hits: 0,
    ups: 0,
    downs: 0,
    netCentiBps: 0,
    retCentiBps: 0,
    sumConf: 0,
    sumConf2: 0,
    sumConfHit: 0,
    buckets: Array.from({ length: BUCKETS }, () => [0, 0, 0]),
    riskPoints: 0,
    riskCovered: 0,
    riskNominalMilli: 0,
    sigma2: 0,
    realised2: 0,
    riskUnscored: 0,
    lastDueAt: 0,
    lastPosition: 0,
    live: 0,
    replay: 0,
    looped: 0,
  };
}

/** The return over the forecast's horizon, for the horizons an outcome labels. */
function returnOver(p: ScoredPoint, candles: number): number | null {
  if (candles === 1) return p.return1;
  if (candles === HORIZON_CANDLES) return p.return6;
  if (candles === 24) return p.return24;
  return null;
}

/** Scores the forecast a verdict served against the close that followed, as integers. */
function addRisk(cell: Cell, p: ScoredPoint): void {
  const v = p.volatility;
  const r = v ? returnOver(p, v.horizonCandles) : null;
  if (!v || r === null) {
    cell.riskUnscored += 1;
    return;
  }
  const close = p.price * (1 + r);
  cell.riskPoints += 1;
  if (close >= v.bandLow && close <= v.bandHigh) cell.riskCovered += 1;
  cell.riskNominalMilli += Math.round(v.bandCoverage * 1000);
  cell.sigma2 += Math.round((v.expectedMovePct * 100) ** 2 * 100);
  cell.realised2 += Math.round((Math.log1p(r) * 10_000) ** 2 * 100);
}

export function bucketOf(confidence: number): number {
  return Math.min(BUCKETS - 1, Math.floor(confidence / 10));
}

function bucketLabel(index: number): string {
  return index === BUCKETS - 1 ? '90-100' : `${index * 10}-${index * 10 + 9}`;
}

function cellKey(exchange: string, timeframe: string, day: number): string {
  return `${exchange}|${timeframe}|${day}`;
}

export function addPoint(state: TrackRecordState, p: ScoredPoint, position: number): void {
  const day = Math.floor(p.candleCloseTime / DAY_MS);
  const key = cellKey(p.exchange, p.timeframe, day);
  let cell = state[key];
  if (!cell) {
    cell = emptyCell();
    state[key] = cell;
  }
  cell.lastPosition = Math.max(cell.lastPosition, position);
  // A looped lap's verdict is the replay's data served again after its end: no track record. It
  // still moves what the record is folded to (asOfPosition: a score at it counts the same looped
  // outcomes apart), and is counted apart so the answer says it left it out; it does not move the
  // time the figures are as of, which names the latest outcome they count.
  if ((p.replayLap ?? 0) > 0) {
    cell.looped += 1;
    return;
  }
  cell.lastDueAt = Math.max(cell.lastDueAt, outcomeDueAt(p));
  if (p.feed === 'live') cell.live += 1;
  else cell.replay += 1;
  addRisk(cell, p);
  if (p.call === 'HOLD') {
    cell.holds += 1;
    return;
  }
  const fee = FEE_BPS / 10_000;
  const hit = p.result === 'hit' ? 1 : 0;
  cell.calls += 1;
  if (p.call === 'BUY') cell.buys += 1;
  else cell.sells += 1;
  cell.hits += hit;
  if (p.return6 > fee) cell.ups += 1;
  if (-p.return6 > fee) cell.downs += 1;
  cell.netCentiBps += p.netCentiBps ?? 0;
  cell.retCentiBps += Math.round(p.return6 * 1_000_000);
  cell.sumConf += p.confidence;
  cell.sumConf2 += p.confidence * p.confidence;
  cell.sumConfHit += p.confidence * hit;
  const b = cell.buckets[bucketOf(p.confidence)]!;
  b[0]! += 1;
  b[1]! += hit;
  b[2]! += p.confidence;
}

function merge(into: Cell, c: Cell): Cell {
  into.calls += c.calls;
  into.holds += c.holds;
  into.buys += c.buys;
  into.sells += c.sells;
  into.hits += c.hits;
  into.ups += c.ups;
  into.downs += c.downs;
  into.netCentiBps += c.netCentiBps;
  into.retCentiBps += c.retCentiBps;
  into.sumConf += c.sumConf;
  into.sumConf2 += c.sumConf2;
  into.sumConfHit += c.sumConfHit;
  c.buckets.forEach((b, i) => {
    const t = into.buckets[i]!;
    t[0]! += b[0]!;
    t[1]! += b[1]!;
    t[2]! += b[2]!;
  });
  into.riskPoints += c.riskPoints;
  into.riskCovered += c.riskCovered;
  into.riskNominalMilli += c.riskNominalMilli;
  into.sigma2 += c.sigma2;
  into.realised2 += c.realised2;
  into.riskUnscored += c.riskUnscored;
  into.lastDueAt = Math.max(into.lastDueAt, c.lastDueAt);
  into.lastPosition = Math.max(into.lastPosition, c.lastPosition);
  into.live += c.live;
  into.replay += c.replay;
  into.looped += c.looped;
  return into;
}

/** The risk sums of one resampled block: every scored point of its UTC days, of every market it holds. */
export interface RiskBlock {
  points: number;
  covered: number;
  sigma2: number;
  realised2: number;
}

/**
 * The UTC days of one resampled block on `timeframe`: at least a day and two verdict horizons, as
 * the evaluation's blocks (docs/evaluation-risk.md), so that overlapping outcomes of one close
 * stay inside one block: 1 up to 2h, 2 on 4h, 4 on 8h, 6 on 12h, 12 on 1d.
 */
export function blockDaysOf(timeframe: Timeframe): number {
  return Math.max(1, Math.ceil((2 * HORIZON_CANDLES * TIMEFRAME_MS[timeframe]) / DAY_MS));
}

/**
 * The risk sums of `cells` per block of `blockDays` UTC days (UTC-aligned, as the evaluation's),
 * in day order, blocks without a scored point left out.
 */
export function riskBlocks(cells: readonly { day: number; cell: Cell }[], blockDays: number): RiskBlock[] {
  const blocks = new Map<number, RiskBlock>();
  for (const { day, cell } of cells) {
    if (cell.riskPoints === 0) continue;
    const key = Math.floor(day / blockDays);
    const b = blocks.get(key) ?? { points: 0, covered: 0, sigma2: 0, realised2: 0 };
    b.points += cell.riskPoints;
    b.covered += cell.riskCovered;
    b.sigma2 += cell.sigma2;
    b.realised2 += cell.realised2;
    blocks.set(key, b);
  }
  return [...blocks.entries()].sort((a, b) => a[0] - b[0]).map(([, b]) => b);
}

/** Resamples of the risk intervals: the evaluation's count (docs/evaluation-risk.md). */
const RISK_RESAMPLES = 200;

type Interval = { low: number; high: number };

/** The 95 % percentile interval of the first `n` of `values`, as the evaluation's; null for none. */
function percentiles(values: Float64Array, n: number): Interval | null {
  if (n === 0) return null;
  const { low, high } = percentileInterval(values.subarray(0, n));
  return { low: round(low, 6), high: round(high, 6) };
}

/**
 * The 95 % block-bootstrap intervals of σ served ÷ realised and of the coverage over `blocks`,
 * both from the same resamples (whole blocks drawn with replacement, seeded); null on fewer than
 * MIN_INTERVAL_BLOCKS blocks, where a resample says little (one block resamples to the estimate).
 */
function riskIntervals(blocks: readonly RiskBlock[]): {
  sigmaRatio: Interval | null;
  coverage: Interval | null;
} {
  const m = blocks.length;
  if (m < MIN_INTERVAL_BLOCKS) return { sigmaRatio: null, coverage: null };
  // Seeded as the evaluation's: a record gives the same intervals wherever it is computed (live,
  // `history score`).
  const rnd = seededRandom(BOOTSTRAP_SEED);
  const ratios = new Float64Array(RISK_RESAMPLES);
  const coverages = new Float64Array(RISK_RESAMPLES);
  let nr = 0;
  let nc = 0;
  for (let i = 0; i < RISK_RESAMPLES; i++) {
    let served = 0;
    let realised = 0;
    let covered = 0;
    let points = 0;
    for (let k = 0; k < m; k++) {
      const b = blocks[Math.floor(rnd() * m)]!;
      served += b.sigma2;
      realised += b.realised2;
      covered += b.covered;
      points += b.points;
    }
    if (realised > 0) ratios[nr++] = Math.sqrt(served / realised);
    if (points > 0) coverages[nc++] = covered / points;
  }
  return { sigmaRatio: percentiles(ratios, nr), coverage: percentiles(coverages, nc) };
}

/** The risk record of `c`, its intervals resampled over `blocks` (c's points, per block). */
function riskOf(c: Cell, blocks: readonly RiskBlock[]): RiskRecord {
  const n = c.riskPoints;
  const intervals = riskIntervals(blocks);
  return {
    points: n,
    covered: c.riskCovered,
    coverage: n > 0 ? round(c.riskCovered / n, 6) : null,
    nominalCoverage: n > 0 ? round(c.riskNominalMilli / n / 1000, 6) : null,
    sigmaRatio: c.realised2 > 0 ? round(Math.sqrt(c.sigma2 / c.realised2), 6) : null,
    blocks: blocks.length,
    sigmaRatioInterval: intervals.sigmaRatio,
    coverageInterval: intervals.coverage,
    unscored: c.riskUnscored,
  };
}

/**
 * Funding carry as shipped: the model's training fit. Nothing per opportunity is recorded, so
 * there is no live expected-vs-realised figure to compute; the note says so where it is shown.
 */
const CARRY: CarryRecord = {
  recorded: false,
  note:
    'The service keeps no record of the funding carries it showed, so expected vs realised carry is not tracked live. ' +
    "Shown: the carry model shipped with this build, fitted on the funding history's training months (per spread bucket " +
    "and horizon, the share of 'spread now × hours' collected and the share of opportunities that beat both legs' fees). " +
    'Its expected ÷ realised carry on later months is measured by npm run evaluate: docs/evaluation.md, "Funding carry".',
  trainFrom: new Date(defaultCarry.trainFrom).toISOString(),
  trainTo: new Date(defaultCarry.trainTo).toISOString(),
  buckets: defaultCarry.buckets.map((b) => ({
    fromBps: b.fromBps,
    horizons: b.horizons.map((h) => ({
      hours: h.hours,
      retention: round(h.retention, 4),
      shareNetPositive: round(h.shareNetPositive, 4),
      samples: h.samples,
    })),
  })),
};

function rate(hits: number, n: number, meanNetBps: number | null) {
  if (n === 0) return { hitRate: null, interval: null, meanNetBps: null };
  const ci = wilson(hits, n);
  return {
    hitRate: round(hits / n, 6),
    interval: { low: round(ci.low, 6), high: round(ci.high, 6) },
    meanNetBps: meanNetBps === null ? null : round(meanNetBps, 4),
  };
}

/** A line of `c`; `blocks`, its risk points per resampled block (none: no risk interval). */
function lineOf(
  exchange: Exchange | 'ALL',
  timeframe: Timeframe | 'ALL',
  c: Cell,
  blocks: readonly RiskBlock[] = [],
): TrackRecordLine {
  const n = c.calls;
  const meanRetBps = n > 0 ? c.retCentiBps / n / 100 : 0;
  const q = n > 0 ? c.buys / n : 0;
  const randomHits = n > 0 ? q * c.ups + (1 - q) * c.downs : 0;
  const base = n > 0 ? c.hits / n : 0;
  return {
    exchange,
    timeframe,
    calls: n,
    holds: c.holds,
    holdShare: n + c.holds > 0 ? round(c.holds / (n + c.holds), 6) : null,
    buys: c.buys,
    sells: c.sells,
    hits: c.hits,
    following: rate(c.hits, n, n > 0 ? c.netCentiBps / n / 100 : null),
    alwaysBuy: rate(c.ups, n, n > 0 ? meanRetBps - FEE_BPS : null),
    alwaysSell: rate(c.downs, n, n > 0 ? -meanRetBps - FEE_BPS : null),
    random: rate(randomHits, n, n > 0 ? (2 * q - 1) * meanRetBps - FEE_BPS : null),
    // Brier of p = confidence/100 against the hit, from integer sums: (Σp² − 2Σpy + Σy) / n.
    brier: n > 0 ? round((c.sumConf2 / 10_000 - (2 * c.sumConfHit) / 100 + c.hits) / n, 6) : null,
    baseRateBrier: n > 0 ? round(base * (1 - base), 6) : null,
    buckets: c.buckets.map((b, i) => ({
      bucket: bucketLabel(i),
      from: i * 10,
      to: i === BUCKETS - 1 ? 100 : i * 10 + 9,
      calls: b[0]!,
      hits: b[1]!,
      hitRate: b[0]! > 0 ? round(b[1]! / b[0]!, 6) : null,
      meanConfidence: b[0]! > 0 ? round(b[2]! / b[0]!, 4) : null,
    })),
    risk: riskOf(c, blocks),
    feeds: { live: c.live, replay: c.replay, replayLooped: c.looped },
  };
}

/**
 * Where the shipped models' training months end (the signal calibration's and the risk model's, the
 * later of the two): a replayed verdict whose candle closed before it is scored on data the model
 * was fitted on.
 */
const TRAINED_UNTIL = Math.max(defaultCalibration.trainTo, defaultVolatility.trainTo);

/** Replay verdicts counted in a cell of `day` whose candles closed before TRAINED_UNTIL. */
function replayedInTraining(ref: { day: number; cell: Cell }): number {
  return ref.day * DAY_MS < TRAINED_UNTIL ? ref.cell.replay : 0;
}

/**
 * What a record's counted verdicts came from, in a word and in a sentence; `inTraining` of its
 * replay verdicts closed inside the models' training months (replayedInTraining).
 */
function feedOf(c: Cell, inTraining = 0): { feed: TrackRecordFeed; feedNote: string } {
  const n = (k: number) => `${k} resolved verdict${k === 1 ? '' : 's'}`;
  const feed: TrackRecordFeed =
    c.live > 0 && c.replay > 0 ? 'mixed' : c.replay > 0 ? 'replay' : c.live > 0 ? 'live' : 'none';
  const until = new Date(TRAINED_UNTIL).toISOString().slice(0, 10);
  // Said with the count: a REPLAY_START inside the training months scores the model in sample.
  const training =
    inTraining > 0
      ? ` ${inTraining} of the ${c.replay} replayed closed before ${until}, inside the months the model was fitted on: ` +
        'those are in-sample figures, not a test of it.'
      : ` None of the ${c.replay} replayed closed inside the months the model was fitted on (before ${until}).`;
  const said = {
    live: `Built from live venue data: ${n(c.live)}.`,
    replay:
      `Built wholly from the replay feed, recorded market data served as if live, not from live venues: ${n(c.replay)}. ` +
      `This is not a live track record.${training}`,
    mixed:
      `Built partly from the replay feed (recorded market data served as if live): ${n(c.replay)} replayed ` +
      `and ${c.live} live; each line's feeds count them.${training}`,
    none: 'No resolved verdict is counted in this window.',
  }[feed];
  const looped =
    c.looped > 0
      ? ` ${n(c.looped)} of the replay's looped laps (its data served again after it ended, which can ` +
        'include the months the model was fitted on) are left out of every figure.'
      : '';
  return { feed, feedNote: said + looped };
}

/**
 * Why a line counts nothing: every verdict of it resolved came due in a looped lap. Over the whole
 * record (`state`), a line that counts none will count none later either on a looping replay (one
 * started less than OUTCOME_AFTER_CANDLES candles of the timeframe before its data's end: 24 days
 * on 1d), so the note says what gives it a record: an earlier replay start, which only a new event
 * log reads (a log keeps the replay clock it first recorded). A line that counts none in this
 * window alone has earlier verdicts counted over longer windows, and the note says that instead.
 */
function loopedOnly(lines: readonly TrackRecordLine[], state: TrackRecordState): string {
  const counted = new Map<string, number>();
  for (const { exchange, timeframe, cell } of cellsIn(state, 'all', 0)) {
    const market = `${exchange} ${timeframe}`;
    counted.set(market, (counted.get(market) ?? 0) + cell.live + cell.replay);
  }
  const never: string[] = [];
  const notHere: string[] = [];
  for (const l of lines) {
    if (l.feeds.replayLooped === 0 || l.feeds.live + l.feeds.replay > 0) continue;
    const name = `${l.exchange} ${l.timeframe}`;
    if ((counted.get(name) ?? 0) === 0) never.push(name);
    else notHere.push(name);
  }
  const cause =
    `each one resolved came due in a looped lap (its outcome, ${OUTCOME_AFTER_CANDLES} candles on, ` +
    "past the end of the replay's data)";
  return (
    (never.length > 0
      ? ` No verdict of ${never.join(', ')} is counted: ${cause}, and later ones will too; a replay ` +
        'started earlier gives them a record (REPLAY_START, read when the event log is new: a log keeps ' +
        'the replay clock it first recorded).'
      : '') +
    (notHere.length > 0
      ? ` No verdict of ${notHere.join(', ')} is counted in this window: ${cause}; a longer window counts ` +
        'their earlier ones.'
      : '')
  );
}

interface CellRef {
  exchange: Exchange;
  timeframe: Timeframe;
  day: number;
  cell: Cell;
}

function cellsIn(state: TrackRecordState, window: TrackRecordWindow, asOf: number): CellRef[] {
  const days = WINDOW_DAYS[window];
  const first = days === null ? Number.NEGATIVE_INFINITY : Math.floor(asOf / DAY_MS) - days + 1;
  const out: CellRef[] = [];
  for (const [key, cell] of Object.entries(state)) {
    const [exchange, timeframe, day] = key.split('|') as [Exchange, Timeframe, string];
    const d = Number(day);
    if (d >= first) out.push({ exchange, timeframe, day: d, cell });
  }
  return out;
}

/**
 * The time a record's figures are as of, which its window's UTC days end at: the latest time an
 * outcome it counts became due (a looped lap's, counted in no figure, never), capped by `now`
 * (`now` for a record that counts none), so the same log gives
 * the same asOf whenever it is asked. Which outcomes it counts is its log position (asOfPosition):
 * the resolver labels a close's outcomes stream by stream and backs off a venue that is down, so
 * some outcomes due by asOf may be labelled after the answer; a later export scored at both
 * (`history score --as-of --as-of-position`) counts exactly the outcomes at or before the position.
 */
export function recordAsOf(state: TrackRecordState, now: number): number {
  let latest = 0;
  for (const cell of Object.values(state)) latest = Math.max(latest, cell.lastDueAt);
  return latest === 0 ? now : Math.min(now, latest);
}

/** The record as it stands at `now`: as of its latest due outcome (recordAsOf). */
export function currentTrackRecord(
  state: TrackRecordState,
  window: TrackRecordWindow,
  now: number,
): TrackRecordResponse {
  return trackRecord(state, window, recordAsOf(state, now));
}

/**
 * The log position of the latest outcome a record counts (0 for an empty record): the outcomes are
 * folded in log order, so it counts every outcome at or before it and none after.
 */
export function recordPosition(state: TrackRecordState): number {
  let latest = 0;
  for (const cell of Object.values(state)) latest = Math.max(latest, cell.lastPosition);
  return latest;
}

/**
 * Whether an outcome fell due by `asOf`: what `history score --as-of` counts when it is given no
 * log position (outcomes due by then but labelled after an answer are counted, which the answer
 * did not).
 */
export function dueBy(point: Pick<ScoredPoint, 'candleCloseTime' | 'timeframe'>, asOf: number): boolean {
  return outcomeDueAt(point) <= asOf;
}

/** The public track record over a window ending at `asOf` (UTC days, the window's last day included). */
export function trackRecord(
  state: TrackRecordState,
  window: TrackRecordWindow,
  asOf: number,
): TrackRecordResponse {
  const cells = cellsIn(state, window, asOf);
  const overall = emptyCell();
  const byMarket = new Map<
    string,
    { exchange: Exchange; timeframe: Timeframe; cell: Cell; days: { day: number; cell: Cell }[] }
  >();
  const byDay = new Map<number, Cell>();
  let inTraining = 0;
  for (const ref of cells) {
    merge(overall, ref.cell);
    inTraining += replayedInTraining(ref);
    const k = `${ref.exchange}|${ref.timeframe}`;
    const m = byMarket.get(k) ?? {
      exchange: ref.exchange,
      timeframe: ref.timeframe,
      cell: emptyCell(),
      days: [],
    };
    merge(m.cell, ref.cell);
    m.days.push(ref);
    byMarket.set(k, m);
    byDay.set(ref.day, merge(byDay.get(ref.day) ?? emptyCell(), ref.cell));
  }
  const running = emptyCell();
  const series = [...byDay.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([day, cell]) => {
      merge(running, cell);
      const line = lineOf('ALL', 'ALL', running);
      return {
        day: new Date(day * DAY_MS).toISOString().slice(0, 10),
        calls: running.calls,
        hitRate: line.following.hitRate,
        alwaysBuy: line.alwaysBuy.hitRate,
        alwaysSell: line.alwaysSell.hitRate,
        random: line.random.hitRate,
        cumNetBps: round(running.netCentiBps / 100, 2),
        cumRandomNetBps: round((line.random.meanNetBps ?? 0) * running.calls, 2),
        riskPoints: line.risk.points,
        coverage: line.risk.coverage,
        sigmaRatio: line.risk.sigmaRatio,
      };
    });
  const markets = [...byMarket.values()].sort(
    (a, b) => a.exchange.localeCompare(b.exchange) || a.timeframe.localeCompare(b.timeframe),
  );
  const lines = markets.map((m) =>
    lineOf(m.exchange, m.timeframe, m.cell, riskBlocks(m.days, blockDaysOf(m.timeframe))),
  );
  // Every market's points resampled together, in blocks as long as its longest timeframe's.
  const overallBlockDays = Math.max(
    1,
    ...markets.filter((m) => m.cell.riskPoints > 0).map((m) => blockDaysOf(m.timeframe)),
  );
  const { feed, feedNote } = feedOf(overall, inTraining);
  return {
    asOf: new Date(asOf).toISOString(),
    asOfPosition: recordPosition(state),
    window,
    feed,
    feedNote: feedNote + loopedOnly(lines, state),
    feeBps: FEE_BPS,
    horizonCandles: HORIZON_CANDLES,
    overall: lineOf('ALL', 'ALL', overall, riskBlocks(cells, overallBlockDays)),
    lines,
    series,
    baselines: defaultBaselines,
    carry: CARRY,
  };
}

/** The line a trade call carries: calls of its exchange, timeframe and confidence bucket. */
export function trackRecordBrief(
  state: TrackRecordState,
  call: { exchange: Exchange; timeframe: Timeframe; confidence: number },
  asOf: number,
  window: TrackRecordWindow = TRADE_CALL_TRACK_RECORD_WINDOW,
): TrackRecordBrief {
  const market = emptyCell();
  for (const ref of cellsIn(state, window, asOf)) {
    if (ref.exchange === call.exchange && ref.timeframe === call.timeframe) merge(market, ref.cell);
  }
  const index = bucketOf(call.confidence);
  const [calls, hits] = market.buckets[index]!;
  const r = rate(hits!, calls!, null);
  return {
    window,
    exchange: call.exchange,
    timeframe: call.timeframe,
    confidenceBucket: bucketLabel(index),
    calls: calls!,
    hits: hits!,
    hitRate: r.hitRate,
    interval: r.interval,
    randomHitRate: lineOf(call.exchange, call.timeframe, market).random.hitRate,
    feed: feedOf(market).feed,
    holds: market.holds,
    ...(calls === 0 ? { note: noCallNote(market, `${call.exchange} ${call.timeframe}`, index, window) } : {}),
  };
}

/**
 * Why a brief counts no call, from its exchange and timeframe's cells in the window (`market`):
 * none resolved, each resolved one a HOLD (no call: no hit rate counts it), its calls in other
 * confidence buckets, or each one due in a looped replay lap. Verdicts of a looped lap beside
 * counted ones are named apart: their calls are not known, so they are not said to be HOLDs or
 * in other buckets.
 */
function noCallNote(market: Cell, name: string, bucket: number, window: TrackRecordWindow): string {
  const within = window === 'all' ? 'in the record' : `in the ${window} window`;
  const holds = `${market.holds} HOLD${market.holds === 1 ? '' : 's'} (no call, counted in no hit rate)`;
  const lapped = market.looped > 0;
  const verb = lapped ? 'is counted' : 'resolved';
  const outside = lapped ? ' outside looped replay laps' : '';
  const laps = lapped
    ? `, and ${market.looped} verdict${market.looped === 1 ? '' : 's'} came due in a looped replay lap, which no figure counts`
    : '';
  if (market.calls > 0) {
    return (
      `No call of ${name} at confidence ${bucketLabel(bucket)} ${verb} ${within}: its ` +
      `${market.calls} resolved call${market.calls === 1 ? '' : 's'}${outside} fell in other confidence buckets` +
      `${market.holds > 0 ? `, beside ${holds}` : ''}${laps}.`
    );
  }
  if (market.holds > 0) {
    const all =
      market.holds === 1
        ? `resolved verdict${outside} was a HOLD`
        : `resolved verdicts${outside} were all HOLDs`;
    return `No BUY or SELL call of ${name} ${verb} ${within}: its ${market.holds} ${all} (no call, counted in no hit rate)${laps}.`;
  }
  if (lapped) {
    const each =
      market.looped === 1 ? 'its one resolved verdict' : `each of its ${market.looped} resolved verdicts`;
    return `No verdict of ${name} is counted ${within}: ${each} came due in a looped replay lap, which no figure counts.`;
  }
  return `No verdict of ${name} resolved ${within}: a verdict resolves ${OUTCOME_AFTER_CANDLES} candles after its candle closes.`;
}
