import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { EventData } from '../../contracts/events.ts';
import { type HistoryRow, outcomeStream, revealTime } from '../../contracts/history.ts';
import type { Call, Exchange, Timeframe } from '../../contracts/market.ts';
import { encodeCursor } from './cursor.ts';
import { outcomeDueAt } from './outcome.ts';
import { historyRow } from './rows.ts';

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
  now: () => number;
  pageSize?: number;
  signal?: AbortSignal;
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

/** Does the verdict pass the filter? `call` only ever applies to revealed rows. */
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

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * History rows in log order, read page by page so memory stays flat whatever the range: the
 * consumer pulls, and nothing is read ahead of it beyond one page. `progress` always names the
 * last event fully handled, so a consumer that stops at any row resumes exactly after it.
 */
export async function* scanHistory(
  store: EventStore,
  options: ScanOptions,
  progress: ScanProgress,
): AsyncGenerator<HistoryRow> {
  const pageSize = options.pageSize ?? 1_000;
  const { filter } = options;
  // Small first pages, so the first row leaves at once; full pages once the stream is flowing.
  let size = Math.min(pageSize, 32);
  for (;;) {
    if (progress.rows >= options.limit || options.signal?.aborted) return;
    const page = await store.readAll({ after: progress.position, maxCount: size });
    size = Math.min(pageSize, size * 4);
    if (page.length === 0) {
      const waitUntil = options.waitUntil ?? 0;
      if (progress.rows > 0 || Date.now() >= waitUntil) return;
      await sleep(Math.min(250, waitUntil - Date.now()), options.signal);
      continue;
    }
    const now = options.now();
    const picked: { event: RecordedEvent; verdict: Verdict | null }[] = [];
    for (const event of page) {
      let verdict: Verdict | null = null;
      // Validated once, when appended (newEvent): the export reads the stored shape as is.
      if (event.type === 'VerdictRecorded' && matchesMarket((event as Verdict).data, filter)) {
        verdict = event as Verdict;
      }
      picked.push({ event, verdict });
    }
    // Outcomes of the page's revealed verdicts, read together.
    const outcomes = await Promise.all(
      picked.map(({ verdict }) =>
        verdict && now >= revealTime(verdict.data) && now >= outcomeDueAt(verdict.data)
          ? readOutcome(store, verdict.id)
          : null,
      ),
    );
    for (const [i, { event, verdict }] of picked.entries()) {
      if (verdict) {
        const row = historyRow(verdict, outcomes[i] ?? null, now);
        if (!filter.call || !row.revealed || row.call === filter.call) {
          progress.position = event.position;
          progress.eventId = event.id;
          progress.rows++;
          yield row;
          if (progress.rows >= options.limit) return;
          continue;
        }
      }
      progress.position = event.position;
      progress.eventId = event.id;
    }
  }
}
