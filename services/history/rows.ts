import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { type HistoryRow, revealTime } from '../../contracts/history.ts';
import { encodeCursor } from './cursor.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

const DAY_MS = 86_400_000;
/** 'YYYY-MM-DDT' per day number; a history spans a few thousand days, bounded all the same. */
const dayPrefixes = new Map<number, string>();
/** '00'..'99' and '000'..'999': a table lookup per field instead of a String and a padStart. */
const TWO = Array.from({ length: 100 }, (_v, n) => String(n).padStart(2, '0'));
const THREE = Array.from({ length: 1000 }, (_v, n) => String(n).padStart(3, '0'));

/**
 * `new Date(ms).toISOString()`, for the reveal time of every exported row: the date part is
 * formatted once per day and the time of day by arithmetic, a third of the cost per row.
 */
export function isoTime(ms: number): string {
  const day = Math.floor(ms / DAY_MS);
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    if (dayPrefixes.size >= 16_384) dayPrefixes.clear();
    prefix = new Date(day * DAY_MS).toISOString().slice(0, -13);
    dayPrefixes.set(day, prefix);
  }
  const t = ms - day * DAY_MS;
  const h = Math.floor(t / 3_600_000);
  const m = Math.floor(t / 60_000) % 60;
  const s = Math.floor(t / 1_000) % 60;
  return `${prefix}${TWO[h]}:${TWO[m]}:${TWO[s]}.${THREE[t % 1_000]}Z`;
}

/**
 * The reveal rule, for every format: false while the verdict is younger than its reveal time
 * (only its commitment shows); once revealed, the outcome to attach, or null. An outcome labels
 * exactly the content it names; one for other content is not attached.
 */
function shownLabel(verdict: Verdict, outcome: Outcome | null, now: number): Outcome | null | false {
  if (now < revealTime(verdict.data)) return false;
  return outcome && outcome.data.verdictHash === verdict.data.hash ? outcome : null;
}

/**
 * A verdict as history shows it at `now`. Before its reveal time only the commitment leaves:
 * the chain fields and the market the stream name already states; content and outcome stay
 * null whatever the caller asked for. This is the one place a row is built, for every format.
 */
export function historyRow(verdict: Verdict, outcome: Outcome | null, now: number): HistoryRow {
  const d = verdict.data;
  const label = shownLabel(verdict, outcome, now);
  const revealed = label !== false;
  const o = label || null;
  return {
    position: verdict.position,
    verdict_id: verdict.id,
    stream: verdict.stream,
    revision: verdict.revision,
    recorded_at: verdict.recordedAt,
    exchange: d.exchange,
    coin: d.coin,
    timeframe: d.timeframe,
    hash: d.hash,
    prev_hash: d.prevHash,
    reveal_at: isoTime(revealTime(d)),
    revealed,
    call: revealed ? d.call : null,
    confidence: revealed ? d.confidence : null,
    score: revealed ? d.score : null,
    regime: revealed ? d.regime : null,
    price: revealed ? d.price : null,
    candle_close_time: revealed ? d.candleCloseTime : null,
    feed: revealed ? d.feed : null,
    engine_version: revealed ? d.engineVersion : null,
    trigger: revealed ? d.trigger : null,
    inputs_json: revealed ? JSON.stringify(d.inputs) : null,
    outcome_id: o ? o.id : null,
    return_1: o ? o.data.return1 : null,
    return_6: o ? o.data.return6 : null,
    return_24: o ? o.data.return24 : null,
    result: o ? o.data.result : null,
    net_centi_bps: o ? o.data.netCentiBps : null,
    mae_bps: o ? o.data.maeBps : null,
    mfe_bps: o ? o.data.mfeBps : null,
    realised_vol: o ? o.data.realisedVol : null,
    lean: o ? (o.data.lean ?? null) : null,
    lean_net_centi_bps: o ? (o.data.leanNetCentiBps ?? null) : null,
    outcome_hash: o ? (o.data.hash ?? null) : null,
    outcome_prev_hash: o?.data.hash ? (o.data.prevHash ?? null) : null,
    outcome_position: o?.data.hash ? o.position : null,
    cursor: encodeCursor(verdict.position, verdict.id),
  };
}

/** The verdict content of a revealed row, as hashed into the chain; null for a commitment. */
export function rowContent(row: HistoryRow): Omit<EventData<'VerdictRecorded'>, 'hash'> | null {
  if (!row.revealed || row.call === null) return null;
  return {
    exchange: row.exchange,
    coin: row.coin,
    timeframe: row.timeframe,
    call: row.call,
    confidence: row.confidence!,
    score: row.score!,
    regime: row.regime!,
    price: row.price!,
    candleCloseTime: row.candle_close_time!,
    feed: row.feed!,
    engineVersion: row.engine_version!,
    inputs: JSON.parse(row.inputs_json ?? '{}') as EventData<'VerdictRecorded'>['inputs'],
    prevHash: row.prev_hash,
    trigger: row.trigger!,
  };
}

// ---- columns, written straight from the stored events (Parquet) --------------------------------

/** A verdict as the scan hands it to a column writer: the events and the clock of its page. */
export interface RowRef {
  verdict: Verdict;
  outcome: Outcome | null;
  now: number;
}
export const rowRef = (verdict: Verdict, outcome: Outcome | null, now: number): RowRef => ({
  verdict,
  outcome,
  now,
});

/**
 * Fills one array per column (HISTORY_COLUMNS order), from index `at`, with what `historyRow`
 * would hold, without building the row objects: for Parquet, whose writer wants columns, the rows
 * were built only to be taken apart again. The reveal rule is `shownLabel`, as for the others.
 */
export function fillColumns(refs: readonly RowRef[], c: unknown[][], at = 0): void {
  const [position, verdictId, stream, revision, recordedAt, exchange, coin, timeframe, hash, prevHash] = c;
  const [revealAtCol, revealedCol, call, confidence, score, regime, price, candleCloseTime, feed] =
    c.slice(10);
  const [engineVersion, trigger, inputsJson, outcomeId, return1, return6, return24, result] = c.slice(19);
  const [netCentiBps, maeBps, mfeBps, realisedVol, lean, leanNetCentiBps] = c.slice(27);
  const [outcomeHash, outcomePrevHash, outcomePosition, cursor] = c.slice(33);
  for (let j = 0; j < refs.length; j++) {
    const { verdict: v, outcome, now } = refs[j]!;
    const i = at + j;
    const d = v.data;
    const label = shownLabel(v, outcome, now);
    position![i] = v.position;
    verdictId![i] = v.id;
    stream![i] = v.stream;
    revision![i] = v.revision;
    recordedAt![i] = v.recordedAt;
    exchange![i] = d.exchange;
    coin![i] = d.coin;
    timeframe![i] = d.timeframe;
    hash![i] = d.hash;
    prevHash![i] = d.prevHash;
    revealAtCol![i] = isoTime(revealTime(d));
    const shown = label !== false;
    revealedCol![i] = shown;
    call![i] = shown ? d.call : null;
    confidence![i] = shown ? d.confidence : null;
    score![i] = shown ? d.score : null;
    regime![i] = shown ? d.regime : null;
    price![i] = shown ? d.price : null;
    candleCloseTime![i] = shown ? d.candleCloseTime : null;
    feed![i] = shown ? d.feed : null;
    engineVersion![i] = shown ? d.engineVersion : null;
    trigger![i] = shown ? d.trigger : null;
    inputsJson![i] = shown ? JSON.stringify(d.inputs) : null;
    const o = label ? label.data : null;
    outcomeId![i] = label ? label.id : null;
    return1![i] = o ? o.return1 : null;
    return6![i] = o ? o.return6 : null;
    return24![i] = o ? o.return24 : null;
    result![i] = o ? o.result : null;
    netCentiBps![i] = o ? o.netCentiBps : null;
    maeBps![i] = o ? o.maeBps : null;
    mfeBps![i] = o ? o.mfeBps : null;
    realisedVol![i] = o ? o.realisedVol : null;
    lean![i] = o ? (o.lean ?? null) : null;
    leanNetCentiBps![i] = o ? (o.leanNetCentiBps ?? null) : null;
    outcomeHash![i] = o ? (o.hash ?? null) : null;
    outcomePrevHash![i] = o?.hash ? (o.prevHash ?? null) : null;
    outcomePosition![i] = label && o?.hash ? label.position : null;
    cursor![i] = encodeCursor(v.position, v.id);
  }
}
