import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { type HistoryRow, revealTime } from '../../contracts/history.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

const DAY_MS = 86_400_000;
/** 'YYYY-MM-DDT' per day number; a history spans a few thousand days, bounded all the same. */
const dayPrefixes = new Map<number, string>();
const pad = (n: number, width: number) => String(n).padStart(width, '0');

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
  return `${prefix}${pad(h, 2)}:${pad(m, 2)}:${pad(s, 2)}.${pad(t % 1_000, 3)}Z`;
}

/**
 * A verdict as history shows it at `now`. Before its reveal time only the commitment leaves:
 * the chain fields and the market the stream name already states; content and outcome stay
 * null whatever the caller asked for. This is the one place a row is built, for every format.
 */
export function historyRow(verdict: Verdict, outcome: Outcome | null, now: number): HistoryRow {
  const d = verdict.data;
  const revealAt = revealTime(d);
  const revealed = now >= revealAt;
  // An outcome labels exactly the content it names; one for other content is not attached.
  const o = revealed && outcome && outcome.data.verdictHash === d.hash ? outcome : null;
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
    reveal_at: isoTime(revealAt),
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
