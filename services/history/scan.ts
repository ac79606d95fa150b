import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { type HistoryRow, outcomeStream, revealTime } from '../../contracts/history.ts';
import type { Call, Exchange, Timeframe } from '../../contracts/market.ts';
import { turnEnd } from '../shared/turn-end.ts';
import { encodeCursor } from './cursor.ts';
import {
  candleCloseTimeOf,
  dueAtOf,
  F_CALL,
  F_COIN,
  F_EXCHANGE,
  F_ID,
  F_STREAM,
  F_TIMEFRAME,
  fieldOf,
  revealAtOf,
  revisionOf,
  type StoredRows,
  type StoredVerdictEntry,
  shownStoredLabel,
} from './export-rows.ts';
import { outcomeDueAt } from './outcome.ts';
import { historyRow } from './rows.ts';

export type { StoredRows } from './export-rows.ts';

type Verdict = RecordedEvent<EventData<'VerdictRecorded'>, 'VerdictRecorded'>;
type Outcome = RecordedEvent<EventData<'VerdictOutcomeResolved'>, 'VerdictOutcomeResolved'>;

export interface HistoryFilter {
  exchange?: Exchange;
  coin?: string;
  timeframe?: Timeframe;
  call?: Call;
  /** Inclusive bounds on the verdict's candle close time (Unix ms). */
  from?: number;
  to?: number;
}

export interface ScanOptions {
  filter: HistoryFilter;
  /** Rows after this log position. */
  after: number;
  limit: number;
  /** With no row to give, keep looking for new ones until this time (long poll). */
  waitUntil?: number;
  /** Asked after each wait for new rows: false once the caller may no longer be served (its key revoked), which ends the wait with nothing more. */
  live?: () => boolean;
  now: () => number;
  pageSize?: number;
  signal?: AbortSignal;
  /** Which verdicts have an outcome; without it every revealed verdict's outcome stream is read. */
  outcomes?: OutcomeIndex;
  /** Revealed rows as stored bytes (the export-rows projection), for a maker that takes them. */
  stored?: StoredRows;
}

/**
 * What a scan waits for between two page reads: the end of the event loop's turn. Pages the client
 * takes as fast as they come (loopback, a fast reader, a store that answers at once) were otherwise
 * read in one unbroken chain of promise jobs, and the loop reached no other request's I/O until
 * the export ended or its socket filled: another key's p99 beside 4 NDJSON exports is measured
 * with and without it by bench/history.bench.ts (fairness; bench/README.md, history rows). A
 * client slower than the scan still holds the next page back: the scan reads only when pulled.
 * Replaced only by that bench, to measure the scan without it.
 */
export const pageTurn: { wait: () => Promise<void> } = { wait: turnEnd };

/**
 * How long a scan waits for the stored rows to fold what the log held when it began: on a busy
 * service the head moves with every call, a few milliseconds ahead of the projection.
 */
const STORED_CATCH_UP_MS = 500;

/**
 * The events a scan's first page reads, fewer than a full page so that the first row leaves at
 * once; pages grow to the full size once the stream is flowing. A long poll's look for new rows is
 * such a read (tests count the empty ones to know a poll waits: test/history-harness.ts).
 */
export const FIRST_PAGE = 32;

/** The verdicts an outcome has labelled, as far as the log up to `checkpoint` tells. */
export interface OutcomeIndex {
  readonly checkpoint: number;
  has(stream: string, revision: number): boolean;
}

/** Where a scan stands: the cursor to resume from and how many rows it gave. */
export class ScanProgress {
  position: number;
  eventId: string | null = null;
  rows = 0;
  constructor(after: number, afterId: string | null) {
    this.position = after;
    this.eventId = afterId;
  }
  get cursor(): string {
    return encodeCursor(this.position, this.eventId);
  }
}

/** Builds what the scan yields per verdict: a row object, or the events for a column writer (rows.ts). */
export type RowMaker<T> = (verdict: Verdict, outcome: Outcome | null, now: number) => T;
/**
 * What the scan yields for a row read from the export-rows projection: `make` gets its position,
 * its verdict record and the label the reveal rule gives it now (false: a commitment). A maker
 * without `commitments` has commitments made from their events by the RowMaker instead.
 */
export interface StoredMaker<T> {
  commitments: boolean;
  /**
   * What `make` gives is done with (written out, or copied) before the scan is asked for its next
   * batch: the scan then reads every page's records into the same memory.
   */
  spent?: boolean;
  make(position: number, verdict: Buffer, label: Buffer | null | false): T;
}

/** Does the verdict pass the filter? `call` is checked apart: it only ever applies to revealed rows. */
function matchesMarket(d: EventData<'VerdictRecorded'>, f: HistoryFilter): boolean {
  if (f.exchange && d.exchange !== f.exchange) return false;
  if (f.coin && d.coin !== f.coin) return false;
  if (f.timeframe && d.timeframe !== f.timeframe) return false;
  if (f.from !== undefined && d.candleCloseTime < f.from) return false;
  if (f.to !== undefined && d.candleCloseTime > f.to) return false;
  return true;
}

async function readOutcome(store: EventStore, verdictId: string): Promise<Outcome | null> {
  const [recorded] = await store.readStream(outcomeStream(verdictId), { maxCount: 1 });
  return recorded?.type === 'VerdictOutcomeResolved' ? (recorded as Outcome) : null;
}

/**
 * The part of a scan the export-rows projection covers: revealed rows are its stored bytes, the
 * filters and the reveal rule are applied to what it stored beside them. A verdict still younger
 * than its reveal time is read from the log and made as the log scan makes it (a commitment).
 */
async function* scanStored<T>(
  store: EventStore,
  options: ScanOptions,
  progress: ScanProgress,
  make: RowMaker<T>,
  fromStore: StoredMaker<T>,
  stored: StoredRows,
  head: number,
): AsyncGenerator<T[]> {
  const pageSize = options.pageSize ?? 128;
  const { filter } = options;
  let size = Math.min(pageSize, FIRST_PAGE);
  /**
   * The memory every page but the first is read into, when the maker is done with a batch before
   * the next (`spent`): room for a full page of records of about 1 KB (the inputs are most of
   * one), a longer page's rest read into memory of its own. Made for a second page only: a
   * request of a few rows (a poll, `limit=1`) reads one page into the shared slabs.
   */
  let into: Buffer | undefined;
  for (let pages = 0; ; pages++) {
    if (pages > 0) await pageTurn.wait();
    if (progress.rows >= options.limit || options.signal?.aborted || !stored.usable) return;
    if (pages === 1 && fromStore.spent) into = Buffer.allocUnsafe(Math.min(pageSize * 2048, 512 * 1024));
    // Read together: every verdict up to this checkpoint is there, with the outcomes the log held.
    const upTo = stored.checkpoint;
    const upToId = stored.checkpointId;
    if (upTo <= progress.position) return;
    const entries = stored.verdictsAfter(progress.position, upTo, size, into);
    const full = entries.length === size;
    size = Math.min(pageSize, size * 4);
    const now = options.now();
    // Which verdicts have an outcome, as for the log scan: looked up only for those it names.
    const index = options.outcomes && options.outcomes.checkpoint >= head ? options.outcomes : null;
    const rows: T[] = [];
    let lastRow: StoredVerdictEntry | null = null;
    for (const entry of entries) {
      const v = entry.value;
      if (filter.exchange && fieldOf(v, F_EXCHANGE) !== filter.exchange) continue;
      if (filter.coin && fieldOf(v, F_COIN) !== filter.coin) continue;
      if (filter.timeframe && fieldOf(v, F_TIMEFRAME) !== filter.timeframe) continue;
      if (filter.from !== undefined && candleCloseTimeOf(v) < filter.from) continue;
      if (filter.to !== undefined && candleCloseTimeOf(v) > filter.to) continue;
      const revealed = now >= revealAtOf(v);
      // The call of a commitment is not shown, so it is not filtered on either.
      if (filter.call && revealed && fieldOf(v, F_CALL) !== filter.call) continue;
      if (!revealed && !fromStore.commitments) {
        const id = fieldOf(v, F_ID);
        const [event] = await store.readAll({ after: entry.key - 1, maxCount: 1 });
        if (event?.type !== 'VerdictRecorded' || event.id !== id) {
          throw new Error(`export rows: verdict ${id} is not at position ${entry.key}`);
        }
        rows.push(make(event as Verdict, null, now));
      } else {
        const due =
          revealed && now >= dueAtOf(v) && (!index || index.has(fieldOf(v, F_STREAM), revisionOf(v)));
        const outcome = due ? stored.outcome(fieldOf(v, F_ID)) : undefined;
        rows.push(fromStore.make(entry.key, v, shownStoredLabel(v, outcome, now)));
      }
      lastRow = entry;
      if (progress.rows + rows.length >= options.limit) break;
    }
    if (progress.rows + rows.length >= options.limit && lastRow) {
      // The limit falls inside the page: resume right after the last row given.
      progress.position = lastRow.key;
      progress.eventId = fieldOf(lastRow.value, F_ID);
    } else if (full) {
      const end = entries[entries.length - 1]!;
      progress.position = end.key;
      progress.eventId = fieldOf(end.value, F_ID);
    } else {
      // Nothing more up to the checkpoint: the next read starts past it.
      progress.position = upTo;
      progress.eventId = upToId;
    }
    progress.rows += rows.length;
    if (rows.length > 0) yield rows;
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * History rows in log order, one batch per page read, so memory stays flat whatever the range:
 * the consumer pulls, and nothing is read ahead of it beyond one page. Batches, not single rows:
 * a promise hop per row costs as much as serialising it. When a batch is handed over, `progress`
 * names the last event it covers, so a consumer that stops after any batch resumes exactly after it.
 */
export function scanHistory(
  store: EventStore,
  options: ScanOptions,
  progress: ScanProgress,
): AsyncGenerator<HistoryRow[]>;
export function scanHistory<T>(
  store: EventStore,
  options: ScanOptions,
  progress: ScanProgress,
  make: RowMaker<T>,
  fromStore?: StoredMaker<T>,
): AsyncGenerator<T[]>;
export async function* scanHistory<T>(
  store: EventStore,
  options: ScanOptions,
  progress: ScanProgress,
  make: RowMaker<T> = historyRow as RowMaker<T>,
  fromStore?: StoredMaker<T>,
): AsyncGenerator<T[]> {
  // Small pages: a page's decoded events and rows stay reachable until the writer has sent them,
  // across the socket's backpressure, so 1,000-event pages outlived young-generation collections
  // and were promoted, to be swept by full ones. With 128 an NDJSON export took about a sixth
  // less CPU per row (same process, alternating: 0.31 -> 0.37 of a raw readAll's CPU per row).
  const pageSize = options.pageSize ?? 128;
  const { filter } = options;
  // The index may say "no outcome" only once it has folded every outcome the log held when the
  // scan began; until then (a projection still catching up) every candidate is looked up, as
  // without an index. Outcomes appended during the scan may or may not be attached either way.
  const head = options.outcomes || options.stored ? await store.headPosition() : 0;
  // The stored rows serve what they cover only if they have folded every outcome the log held
  // when the scan began, as for the index above; the log scan below takes over where they end.
  const stored = options.stored;
  if (fromStore && stored?.usable) {
    const caughtUp =
      stored.checkpoint >= head ||
      (await stored.waitFor(head, STORED_CATCH_UP_MS).then(
        () => true,
        () => false,
      ));
    if (caughtUp) yield* scanStored(store, options, progress, make, fromStore, stored, head);
  }
  // Small first pages, so the first row leaves at once; full pages once the stream is flowing.
  let size = Math.min(pageSize, FIRST_PAGE);
  for (let pages = 0; ; pages++) {
    if (pages > 0) await pageTurn.wait();
    if (progress.rows >= options.limit || options.signal?.aborted) return;
    const page = await store.readAll({ after: progress.position, maxCount: size });
    size = Math.min(pageSize, size * 4);
    if (page.length === 0) {
      const waitUntil = options.waitUntil ?? 0;
      if (progress.rows > 0 || Date.now() >= waitUntil) return;
      await sleep(Math.min(250, waitUntil - Date.now()), options.signal);
      // A key revoked while its long poll waited gets no row appended after: its next call is refused.
      if (options.live?.() === false) return;
      continue;
    }
    const now = options.now();
    const index = options.outcomes && options.outcomes.checkpoint >= head ? options.outcomes : null;
    // Validated once, when appended (newEvent): the export reads the stored shape as is.
    const picked: Verdict[] = [];
    const lookups: (Promise<Outcome | null> | null)[] = [];
    let lookedUp = false;
    for (const event of page) {
      if (event.type !== 'VerdictRecorded') continue;
      const verdict = event as Verdict;
      if (!matchesMarket(verdict.data, filter)) continue;
      const revealed = now >= revealTime(verdict.data);
      // The call of a commitment is not shown, so it is not filtered on either.
      if (filter.call && revealed && verdict.data.call !== filter.call) continue;
      picked.push(verdict);
      // Outcomes of the page's revealed verdicts that have one, read together.
      const due =
        revealed &&
        now >= outcomeDueAt(verdict.data) &&
        (!index || index.has(verdict.stream, verdict.revision));
      lookups.push(due ? readOutcome(store, verdict.id) : null);
      lookedUp ||= due;
    }
    const outcomes = lookedUp ? await Promise.all(lookups) : null;
    const rows: T[] = [];
    let last = page[page.length - 1]!;
    for (let i = 0; i < picked.length; i++) {
      const verdict = picked[i]!;
      rows.push(make(verdict, outcomes?.[i] ?? null, now));
      if (progress.rows + rows.length >= options.limit) {
        // The limit falls inside the page: resume right after the last row given.
        last = verdict;
        break;
      }
    }
    progress.position = last.position;
    progress.eventId = last.id;
    progress.rows += rows.length;
    if (rows.length > 0) yield rows;
  }
}
