import { deterministicId } from '../../contracts/deterministic-id.ts';
import {
  HISTORY_CONTENT_COLUMNS,
  type HistoryRow,
  replayLapOf,
  revealTime,
  type TrackRecordResponse,
  type TrackRecordWindow,
} from '../../contracts/history.ts';
import type { Call } from '../../contracts/market.ts';
import { type OutcomeContent, outcomeHash, verdictHash } from '../../contracts/verdict-hash.ts';
import { verdictStream } from '../engine/verdict-recorder.ts';
import { MalformedRowError } from './files.ts';
import { servedForecast } from './outcome.ts';
import { rowContent } from './rows.ts';
import { addPoint, currentTrackRecord, dueBy, type TrackRecordState, trackRecord } from './track-record.ts';

export interface BrokenLink {
  stream: string;
  revision: number;
  verdictId: string;
  position: number;
  reason: string;
  /** A malformed row: where it is in the file (`line 12`); its stream … position are as read. */
  at?: string;
}

/**
 * What `verify` found. `rows` is every row the export holds, read to its end; `rowsWalked` and the
 * figures after it are of the rows the chain walk checked, which stops at the first broken link it
 * meets.
 */
export interface ChainReport {
  ok: boolean;
  /** The rows read from the export, to its end: those after a broken link or a malformed row too. */
  rows: number;
  /**
   * The rows the chain walk checked, in file order. Every row when it met no broken link: the chains
   * hold, or a link is found open only once the file has been read (an outcome the file lacks, a
   * split outcome chain). Else the rows up to the one it stopped at: the broken link's own row (not
   * a malformed one's), or for a recorded_at out of order the row whose stamp fell behind, which is
   * the moved row or the one after it. The rows after it are checked only by what `verify --anchors`
   * and `--data` check, which read every row.
   */
  rowsWalked: number;
  streams: number;
  /** Revealed rows whose hash was recomputed from their content. */
  rehashed: number;
  /**
   * Streams whose first row in the file is not the chain's first verdict (the file starts
   * mid-chain there, as an `after` or `from` export does): their chain is checked from that row
   * on. Not the on-chain anchors, which `verify --anchors` reports under `anchors`.
   */
  streamsStartingMidChain: number;
  /** Outcomes whose chain hash was recomputed from the row's outcome columns and verdict hash. */
  outcomes: number;
  /** Outcomes recorded before outcomes were chained (no outcome_hash): not covered by any chain. */
  unchainedOutcomes: number;
  /**
   * Only when the file is verified as an export made with `call=` (verify --call): the links that
   * skip verdicts the file does not hold (the other calls' revealed rows, which that filter leaves
   * out), not checked, nor the outcome links of their streams. Null otherwise, and when none skips.
   */
  skippedLinks: SkippedLinks | null;
  firstBroken: BrokenLink | null;
}

export interface SkippedLinks {
  /** The call= filter the file was exported with. */
  call: Call;
  /** Links from a row to its stream's previous verdict that the file does not hold. */
  links: number;
  /** The first such link's row. */
  first: RowRef;
}

const ref = (row: HistoryRow) => ({
  stream: row.stream,
  revision: row.revision,
  verdictId: row.verdict_id,
  position: row.position,
});
type RowRef = ReturnType<typeof ref>;

/** The outcome chain of one verdict stream, as far as the file has shown it. */
interface OutcomeChain {
  /** Outcomes no later outcome has linked to yet (one, the head, once the file is read), with their log positions. */
  heads: Map<string, RowRef & { outcomePosition: number }>;
  /** The last CONSUMED_KEPT outcomes some later outcome linked to: a second link to one is a fork. */
  consumed: Set<string>;
  /** Links to outcomes not seen yet, with the rows that lost their outcome since the last link. */
  waiting: Map<string, { row: RowRef; missing: RowRef[]; outcomePosition: number }>;
  /** Revealed rows without a chained outcome since the last chained one (the first two: one is named). */
  unlabelled: RowRef[];
  started: boolean;
  /** The link of the file's first chained outcome of the stream: to before the file, when it starts mid-chain. */
  entry: string | null;
  /** The file holds the stream from its first verdict, so every link must be found in it. */
  whole: boolean;
  /** A link of the stream skips verdicts the file does not hold: its open outcome links are not checked. */
  gapped: boolean;
}

/**
 * Walks every market's chain in file order: each row must link to the previous row of its
 * stream, and a revealed row's hash must match its content. Memory: per stream, one verdict
 * hash, the outcome chain's open ends and its last CONSUMED_KEPT links. A file that starts mid-chain (an `after` or `from` export) is checked from its first row of each stream on.
 * The walk stops at the first broken link; the file is read to its end all the same, to count its
 * rows (`rows`, against `rowsWalked`) and hand each to onRow.
 *
 * Outcomes form a chain per stream of their own, in the order they were resolved (about the
 * verdicts' order): each outcome's hash is recomputed from the row's outcome columns and its
 * verdict's hash, and every link must find the outcome it names. A link whose outcome is not in
 * the file names the row that lost it when one row of the stream is labelless between the two
 * chained outcomes, else the row that links. The stream's last outcome has no later link: an
 * anchor covers it (`verify --anchors`).
 */
export async function verifyRows(
  rows: AsyncIterable<HistoryRow | MalformedRowError>,
  options: {
    onRow?: (row: HistoryRow) => Promise<void>;
    /**
     * The call= filter the file was exported with: every revealed row must be of it, and a link
     * after a revealed row may skip verdicts the file does not hold (the other calls' revealed
     * rows), counted in skippedLinks rather than broken.
     */
    call?: Call;
  } = {},
): Promise<ChainReport> {
  // Per stream, its last row, with the stamps of the row before it (see `blame`).
  const last = new Map<string, LastRow>();
  const chains = new Map<string, OutcomeChain>();
  const report: ChainReport = {
    ok: true,
    rows: 0,
    rowsWalked: 0,
    streams: 0,
    rehashed: 0,
    streamsStartingMidChain: 0,
    outcomes: 0,
    unchainedOutcomes: 0,
    skippedLinks: null,
    firstBroken: null,
  };
  // The calls of the revealed rows walked, to name a one-call file's likely filter.
  const calls = new Set<string>();
  const broken = (at: RowRef, reason: string) => {
    report.ok = false;
    report.firstBroken = { ...at, reason };
  };
  // A row whose fields are no history row's ends the walk where it stands, like a broken link: thrown
  // by a reader that stops there, or yielded in its place by one that reads on (readExportPastMalformed).
  let malformed: MalformedRowError | null = null;
  async function* wellFormed(): AsyncGenerator<HistoryRow | MalformedRowError> {
    try {
      yield* rows;
    } catch (err) {
      if (!(err instanceof MalformedRowError)) throw err;
      malformed = err;
    }
  }
  // A recorded_at out of order that its stream's next row is to tell apart (see `blame`). The walk
  // is past the break then (at that row or the one before it): it only looks for that next row,
  // counting no other.
  let undecided: (OutOfOrder & { stream: string }) | null = null;
  // The walk stops at the first broken link; what onRow checks (the anchors' roots, the outcomes
  // recomputed from candles) is about the whole file, so it is handed every row, those after the
  // break too: one changed row would otherwise fail every anchor after it and leave its column
  // unnamed. A loop's break must not close the file then, so the walk reads through a view of the
  // iterator without return().
  const source = wellFormed();
  const walk: AsyncIterable<HistoryRow | MalformedRowError> = {
    [Symbol.asyncIterator]: () => ({ next: () => source.next() }),
  };
  for await (const row of walk) {
    report.rows++;
    if (row instanceof MalformedRowError) {
      malformed = row;
      break;
    }
    await options.onRow?.(row);
    if (undecided !== null) {
      if (row.stream !== undecided.stream) continue;
      const moved = blame(undecided, Date.parse(row.recorded_at));
      undecided = null;
      broken(moved.at, moved.reason);
      break;
    }
    report.rowsWalked++;
    if (row.revealed && row.call !== null) {
      calls.add(row.call);
      if (options.call !== undefined && row.call !== options.call) {
        broken(ref(row), `call is ${row.call}: not a row of an export made with call=${options.call}`);
        break;
      }
    }
    const prev = last.get(row.stream);
    if (prev) {
      if (row.revision <= prev.revision) {
        broken(ref(row), `revision ${row.revision} does not follow ${prev.revision}`);
        break;
      }
      if (row.prev_hash !== prev.hash) {
        // Verdicts left out after a revealed row of an export made with call=: that filter leaves
        // out the other calls' revealed rows (commitments always pass it, and a stream's revealed
        // rows come before its commitments). Else a broken link.
        if (options.call === undefined || !prev.revealed) {
          const only = calls.size === 1 && prev.revealed ? [...calls][0] : undefined;
          broken(
            ref(row),
            only === undefined
              ? 'prev_hash does not link to the previous verdict of this stream'
              : `prev_hash does not link to the previous verdict of this stream: verdicts between them are not in the file (dropped, or left out by an export made with call=${only}, as every revealed row so far is ${only}: verify --call ${only} checks such an export as far as it holds)`,
          );
          break;
        }
        report.skippedLinks ??= { call: options.call, links: 0, first: ref(row) };
        report.skippedLinks.links++;
        chains.get(row.stream)!.gapped = true;
      }
      if (row.position <= prev.position) {
        broken(
          ref(row),
          `position ${row.position} does not follow ${prev.position}, the previous verdict's of this stream`,
        );
        break;
      }
      const recordedAt = Date.parse(row.recorded_at);
      if (recordedAt < prev.recordedAt - RECORDED_SKEW_MS) {
        // Before the row before the previous one too: this row's stamp moved back.
        if (prev.before === null || recordedAt < prev.before.recordedAt - RECORDED_SKEW_MS) {
          broken(ref(row), RECORDED_EARLIER);
          break;
        }
        undecided = { stream: row.stream, prev, row: ref(row), stamps: { recordedAt, lag: lagOf(row) } };
        continue;
      }
    } else {
      report.streams++;
      if (row.prev_hash !== null) report.streamsStartingMidChain++;
      chains.set(row.stream, {
        heads: new Map(),
        consumed: new Set(),
        waiting: new Map(),
        unlabelled: [],
        started: false,
        entry: null,
        whole: row.prev_hash === null,
        gapped: false,
      });
    }
    const stamped = recordTimes(row);
    if (stamped) {
      broken(ref(row), stamped);
      break;
    }
    const content = rowContent(row);
    if (content) {
      if (verdictHash(content) !== row.hash) {
        broken(ref(row), 'hash does not match the revealed content');
        break;
      }
      report.rehashed++;
    }
    last.set(row.stream, {
      at: ref(row),
      revealed: row.revealed,
      hash: row.hash,
      revision: row.revision,
      position: row.position,
      recordedAt: Date.parse(row.recorded_at),
      lag: lagOf(row),
      before: prev ? { recordedAt: prev.recordedAt, lag: prev.lag } : null,
    });
    const reason = checkOutcome(row, chains.get(row.stream)!, report);
    if (reason) {
      broken(ref(row), reason);
      break;
    }
  }
  // The rest of the file, counted, and for onRow (nothing left when the walk read to the end).
  for await (const row of source) {
    report.rows++;
    if (options.onRow && !(row instanceof MalformedRowError)) await options.onRow(row);
  }
  // The stream ended (or a malformed row ended the file) before the row that would tell.
  if (undecided !== null) {
    const moved = blame(undecided, null);
    broken(moved.at, moved.reason);
  }
  if (malformed !== null && report.ok) {
    const { row, where, message } = malformed as MalformedRowError;
    broken(row as RowRef, message);
    report.firstBroken = { ...report.firstBroken!, at: where };
    return report;
  }
  if (report.ok) {
    for (const chain of chains.values()) {
      // Its outcomes link to outcomes of verdicts the file does not hold: not checked.
      if (chain.gapped) continue;
      const reason = openLinks(chain);
      if (reason) {
        broken(reason.at, reason.reason);
        break;
      }
    }
  }
  return report;
}

/**
 * How far a verdict's recorded_at may fall behind the previous one of its stream: each is the
 * clock of the process that appended it, and a stream's writer may move to another host.
 */
const RECORDED_SKEW_MS = 60_000;
const RECORDED_EARLIER = "recorded_at is earlier than the previous verdict's of this stream";
const RECORDED_LATER = "recorded_at is later than the next verdict's of this stream";

/** A row's recorded_at and how long after its candle's close that was (null without a close). */
interface Stamps {
  recordedAt: number;
  lag: number | null;
}

interface LastRow extends Stamps {
  at: RowRef;
  revealed: boolean;
  hash: string;
  revision: number;
  position: number;
  /** The stamps of the stream's row before this one; null for the stream's first row. */
  before: Stamps | null;
}

function lagOf(row: HistoryRow): number | null {
  return row.candle_close_time === null ? null : Date.parse(row.recorded_at) - row.candle_close_time;
}

/**
 * A row (R) recorded more than the skew before its stream's previous one (P), but not before the
 * one before that (A): either P's stamp moved later or R's moved back.
 */
interface OutOfOrder {
  prev: LastRow;
  row: RowRef;
  stamps: Stamps;
}

/**
 * Which of P and R moved: the one whose removal leaves A, the other and the stream's next row (S,
 * its recorded_at; null at the stream's end) in order. When both do, the one whose delay after its
 * candle's close differs more from A's (a verdict is recorded a steady while after its close, or
 * all at once by a backfill, where the next row tells); R when neither, or without the closes.
 */
function blame(open: OutOfOrder, next: number | null): { at: RowRef; reason: string } {
  const { prev, stamps } = open;
  const withoutP = next === null || next >= stamps.recordedAt - RECORDED_SKEW_MS;
  const withoutR = next === null || next >= prev.recordedAt - RECORDED_SKEW_MS;
  const before = prev.before!;
  const laterByLag =
    before.lag !== null &&
    prev.lag !== null &&
    stamps.lag !== null &&
    Math.abs(prev.lag - before.lag) > Math.abs(stamps.lag - before.lag);
  const later = withoutP && (!withoutR || laterByLag);
  return later ? { at: prev.at, reason: RECORDED_LATER } : { at: open.row, reason: RECORDED_EARLIER };
}

/**
 * The row's stamps outside the hash, against what determines them: the stream is the one its
 * market names (a whole stream renamed breaks no link, and its /verify link would name another
 * stream), revealed agrees with the content shown, reveal_at is the candle close plus the reveal
 * delay, outcome_id derives from the verdict id, and an outcome is recorded after its verdict. The
 * reason one is wrong, or null.
 */
function recordTimes(row: HistoryRow): string | null {
  if (row.stream !== verdictStream(row)) return 'stream is not the one its exchange, coin and timeframe name';
  // revealed decides whether the hash is checked against the content: it must be what the row shows.
  if (row.revealed && row.call === null)
    return 'revealed without its call: a revealed row shows its content, which its hash covers';
  if (!row.revealed) {
    const shown = HISTORY_CONTENT_COLUMNS.filter((k) => row[k] !== null);
    if (shown.length > 0)
      return `a commitment (revealed false) showing ${shown.join(', ')}: before its reveal a row shows none of its content, and no hash is checked against what it shows`;
  }
  if (!Number.isFinite(Date.parse(row.recorded_at))) return 'recorded_at is not a time';
  if (
    row.candle_close_time !== null &&
    Date.parse(row.reveal_at) !==
      revealTime({ candleCloseTime: row.candle_close_time, timeframe: row.timeframe })
  )
    return 'reveal_at is not the candle close plus the reveal delay';
  if (row.outcome_id !== null && row.outcome_id !== deterministicId('verdict-outcome', row.verdict_id))
    return 'outcome_id is not the one its verdict id gives';
  if (row.outcome_position !== null && row.outcome_position <= row.position)
    return 'outcome_position is not after the verdict';
  return null;
}

/**
 * Links remembered per stream to tell a fork from a dropped outcome: a fork further back than this
 * is still reported, as a link to an outcome not in the file.
 */
const CONSUMED_KEPT = 256;

const OUTCOME_VALUES = [
  'return_1',
  'return_6',
  'return_24',
  'result',
  'net_centi_bps',
  'mae_bps',
  'mfe_bps',
  'realised_vol',
  'lean',
  'lean_net_centi_bps',
] as const;

/** The outcome of a row as its chain hash covers it; null when the row carries none. */
export function rowOutcome(row: HistoryRow): OutcomeContent | null {
  if (row.result === null || row.return_1 === null || row.return_6 === null || row.return_24 === null)
    return null;
  return {
    verdictHash: row.hash,
    prevHash: row.outcome_prev_hash,
    return1: row.return_1,
    return6: row.return_6,
    return24: row.return_24,
    result: row.result,
    netCentiBps: row.net_centi_bps,
    maeBps: row.mae_bps,
    mfeBps: row.mfe_bps,
    realisedVol: row.realised_vol!,
    lean: row.lean,
    leanNetCentiBps: row.lean_net_centi_bps,
  };
}

/** One row's outcome against its stream's outcome chain; the reason it breaks, or null. */
function checkOutcome(row: HistoryRow, chain: OutcomeChain, report: ChainReport): string | null {
  const at = ref(row);
  const hasValues = OUTCOME_VALUES.some((c) => row[c] !== null);
  if (row.outcome_hash === null) {
    if (row.outcome_prev_hash !== null || row.outcome_position !== null)
      return 'outcome_prev_hash or outcome_position is set without an outcome_hash';
    if (!hasValues) {
      if (row.revealed && chain.unlabelled.length < 2) chain.unlabelled.push(at);
      return null;
    }
    // Recorded before outcomes were chained: only before the stream's chain began.
    if (chain.started) return 'outcome without outcome_hash after the outcome chain of this stream began';
    report.unchainedOutcomes++;
    return null;
  }
  if (!row.revealed) return 'outcome on a verdict not yet revealed';
  const content = rowOutcome(row);
  if (content === null) return 'outcome_hash without the outcome columns it covers';
  if (outcomeHash(content) !== row.outcome_hash) return 'outcome_hash does not match the outcome columns';
  report.outcomes++;
  const hash = row.outcome_hash;
  const link = row.outcome_prev_hash;
  // A chained outcome carries its log position (the row sets it whenever it sets the hash).
  if (row.outcome_position === null) return 'outcome_hash without the outcome_position it was recorded at';
  const outcomePosition = row.outcome_position;
  const previous = link === null ? undefined : chain.heads.get(link);
  if (link === null) {
    if (chain.started) return 'a second outcome chain start (outcome_prev_hash null) in this stream';
  } else if (previous !== undefined) {
    if (previous.outcomePosition >= outcomePosition)
      return 'outcome_position is not after the previous outcome of this stream';
    chain.heads.delete(link);
    chain.consumed.add(link);
    if (chain.consumed.size > CONSUMED_KEPT) chain.consumed.delete(chain.consumed.values().next().value!);
  } else if (chain.waiting.has(link) || chain.consumed.has(link)) {
    return 'two outcomes link to the same previous outcome (a forked outcome chain)';
  } else {
    if (!chain.started) chain.entry = link;
    chain.waiting.set(link, { row: at, missing: chain.unlabelled, outcomePosition });
  }
  chain.started = true;
  chain.unlabelled = [];
  const next = chain.waiting.get(hash);
  if (next !== undefined) {
    if (outcomePosition >= next.outcomePosition)
      return 'outcome_position is not before the next outcome of this stream';
    chain.waiting.delete(hash);
  } else chain.heads.set(hash, { ...at, outcomePosition });
  return null;
}

/** What is still open once the file is read: links to outcomes it does not hold, or a split chain. */
function openLinks(chain: OutcomeChain): { at: RowRef; reason: string } | null {
  // A file that starts mid-chain links once to an outcome before it.
  const open = [...chain.waiting.entries()]
    .filter(([link]) => chain.whole || link !== chain.entry)
    .map(([, v]) => v)
    .sort((a, b) => a.row.position - b.row.position);
  const first = open[0];
  if (first) {
    if (first.missing.length === 1)
      return {
        at: first.missing[0]!,
        reason: `outcome missing: the stream's next outcome (position ${first.row.position}) links to an outcome not in the file (dropped, or recorded after this row was served: export the range again)`,
      };
    return {
      at: first.row,
      reason:
        'outcome_prev_hash links to an outcome not in the file (dropped, or recorded after its row was served: export the range again)',
    };
  }
  if (chain.heads.size <= 1) return null;
  const heads = [...chain.heads.values()].sort((a, b) => a.position - b.position);
  return { at: heads[0]!, reason: 'no later outcome links to this outcome (the outcome chain is split)' };
}

/**
 * The track record from labelled rows alone: the service's own fold over the same labels. The
 * risk forecast scored is the one in the row's inputs, which the outcome copied when it resolved
 * (outcomes resolved before outcomes carried it were scored without it by the service).
 */
export async function scoreRows(
  rows: AsyncIterable<HistoryRow>,
  window: TrackRecordWindow,
  /**
   * The time the window ends at (the answer's asOf). None given: as the service answers, as of the
   * latest due outcome the file counts (capped by `now`), not the wall clock, so a replay's export,
   * whose feed time is not today, scores its 7d/30d/90d windows as the service does.
   */
  asOf: number | undefined,
  /** The answer's asOfPosition: only outcomes at or before it count; none given, those due by asOf. */
  asOfPosition?: number,
  now: number = Date.now(),
): Promise<TrackRecordResponse> {
  const state: TrackRecordState = {};
  for await (const row of rows) {
    if (row.result === null || row.call === null || row.return_6 === null) continue;
    if (asOfPosition !== undefined) {
      if (row.outcome_position === null || row.outcome_position > asOfPosition) continue;
    } else if (!dueBy({ candleCloseTime: row.candle_close_time!, timeframe: row.timeframe }, asOf ?? now))
      continue;
    const inputs = JSON.parse(row.inputs_json ?? '{}');
    addPoint(
      state,
      {
        exchange: row.exchange,
        timeframe: row.timeframe,
        call: row.call,
        confidence: row.confidence!,
        candleCloseTime: row.candle_close_time!,
        return6: row.return_6,
        result: row.result,
        netCentiBps: row.net_centi_bps,
        price: row.price!,
        return1: row.return_1!,
        return24: row.return_24!,
        volatility: servedForecast(inputs, row.timeframe),
        feed: row.feed ?? 'replay',
        replayLap: replayLapOf(inputs),
      },
      row.outcome_position ?? 0,
    );
  }
  return asOf === undefined ? currentTrackRecord(state, window, now) : trackRecord(state, window, asOf);
}
