import { type Cache, CounterStateLostError, type QuotaWindow } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData, NewDomainEvent, Plan } from '../../contracts/events.ts';
import { setBounded } from '../shared/bounded-map.ts';
import type { PlanLimits, PlanTable } from './plans.ts';
import { QUOTA_FAMILY, QuotaCounters } from './quota-rebuild.ts';
import { type QuotaSnapshot, quotaSnapshot } from './snapshot.ts';
import { type QuotaPeriod, quotaPeriod, quotaWindows } from './windows.ts';

/** Whose calls are counted: a key (by hash) or an anonymous client (by hashed address). */
export interface QuotaSubject {
  id: string;
  kind: 'key' | 'anonymous';
  plan: Plan;
}

export interface DebitOutcome {
  ok: boolean;
  snapshot: QuotaSnapshot;
  /** Which window refused, when one did. */
  refusedBy: 'monthly' | 'daily' | null;
  /** Log position of the event that records the debit (with its batch), when debited. */
  position: number | null;
}

function quotaStream(subjectId: string): string {
  return `quota-${subjectId}`;
}

/**
 * How long a call that finds the counters gone waits for their rebuild before it is refused as
 * retryable (503): long enough for a small log, short enough not to hold requests on a big one.
 */
const LOST_COUNTERS_WAIT_MS = 2_000;

/**
 * Runs `op` on the live counters. When they are gone it waits up to `waitMs` for `ensure` to
 * rebuild them and tries once more; still gone, the rebuild failing, or no `ensure`, the loss is
 * thrown (CacheUnavailableError: retryable). Every quota on the counters (calls, chats) runs so.
 */
export async function onLiveCounters<T>(
  op: () => Promise<T>,
  ensure: (() => Promise<void>) | undefined,
  waitMs = LOST_COUNTERS_WAIT_MS,
): Promise<T> {
  try {
    return await op();
  } catch (err) {
    if (!(err instanceof CounterStateLostError) || ensure === undefined) throw err;
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, waitMs);
    });
    try {
      await Promise.race([ensure(), waited]);
    } catch {
      throw err;
    } finally {
      clearTimeout(timer);
    }
    return op();
  }
}

/**
 * Counts served calls. The check-and-debit of the day and month windows is one atomic cache
 * operation, so concurrent calls and replicas cannot overspend; each debit is then recorded on
 * the log, batched per subject (QuotaDebitsRecorded), the fact the cache counters are rebuilt from. The counters live in the cache's
 * live generation: when there is none (the cache lost its data) nothing is served from them
 * until they are rebuilt, since empty counters would give calls away.
 */
export class QuotaMeter {
  /** Rebuilds the counters when their generation is gone; the api runs it at start and on reconnect. */
  readonly counters: QuotaCounters;
  /** Debits counted but not yet on the log, by subject. */
  private readonly lanes = new Map<string, Lane>();
  /** The windows last used by each recent subject (see windowsOf). */
  private readonly windowsBySubject = new Map<string, SubjectWindows>();

  constructor(
    private readonly deps: {
      cache: Cache;
      store: EventStore;
      plans: PlanTable;
      now?: () => number;
      counters?: QuotaCounters;
      lostWaitMs?: number;
    },
  ) {
    this.counters = deps.counters ?? new QuotaCounters({ store: deps.store, cache: deps.cache });
  }

  /**
   * A subject's windows for a plan and period, made once and shared by its calls until either
   * changes: every keyed call names the same two counters, and spelling their keys (the subject's
   * 64-character hash in each) and hashing the fresh strings in every lookup showed in the keyed
   * profiles. The same string objects each time also keep V8's hash of each key, so the cache's
   * lookups of them do not hash them again. Frozen: shared by concurrent calls.
   */
  private windowsOf(subject: QuotaSubject, limits: PlanLimits, period: QuotaPeriod): SubjectWindows {
    const known = this.windowsBySubject.get(subject.id);
    if (known !== undefined && known.period === period && known.limits === limits) return known;
    const windows = quotaWindows(subject.id, limits, period).map((w) => Object.freeze(w));
    const made: SubjectWindows = {
      period,
      limits,
      windows: Object.freeze(windows) as QuotaWindow[],
      keys: Object.freeze(windows.map((w) => w.key)) as string[],
    };
    setBounded(this.windowsBySubject, subject.id, made, REMEMBERED_SUBJECTS);
    return made;
  }

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  private live<T>(op: () => Promise<T>): Promise<T> {
    return onLiveCounters(op, () => this.counters.ensure(), this.deps.lostWaitMs);
  }

  /** Live figures without debiting. Throws CacheUnavailableError when the counters are out of reach. */
  async peek(subject: QuotaSubject): Promise<QuotaSnapshot> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const keys = this.windowsOf(subject, limits, period).keys;
    const counts = await this.live(() => this.deps.cache.readLive(QUOTA_FAMILY, keys));
    return quotaSnapshot(limits, period, counts);
  }

  /**
   * Debits one call, or refuses when a window is full. Throws CacheUnavailableError or a store
   * error when the debit or its record cannot be made; the caller must not serve then. Resolves
   * only once the debit is on the log, durably: a call is never served before. The request id is
   * not recorded: a batch's event holds units, not calls (see QuotaDebitsRecorded).
   */
  async debit(subject: QuotaSubject, tool: string, _requestId: string): Promise<DebitOutcome> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const windows = this.windowsOf(subject, limits, period).windows;
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, windows, 1));
    const snapshot = quotaSnapshot(limits, period, result.counts);
    if (!result.ok) {
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily', position: null };
    }
    const position = await this.record(subject, tool, period, windows, result.generation);
    return { ok: true, snapshot, refusedBy: null, position };
  }

  /**
   * Records one counted call, with the other calls of the same subject counted meanwhile, as one
   * QuotaDebitsRecorded. Each subject has at most two debit appends in flight: the calls counted
   * while both are on their way wait for one of them and go out together in the next. So a
   * subject's traffic adds at most two events per append round trip of the store (about one
   * group commit and its flush), however many calls it makes at once, and never more events than
   * calls; a lone call waits only for the end of the current turn, as before. With one in flight,
   * a call counted just after an append left waited for that append's flush and then its own:
   * the keyed MCP bench's main thread sat idle a quarter of the time (6,640-6,830 req/s; with two,
   * 7,570-8,120 in the same alternating runs; four were no better). Calls that share the batch but
   * not its generation, day, plan or tool go in events of their own: a rebuild counts each by the
   * first three, and one tool per event keeps the event flat.
   */
  private record(
    subject: QuotaSubject,
    tool: string,
    period: QuotaPeriod,
    windows: QuotaWindow[],
    generation: string,
  ): Promise<number> {
    let lane = this.lanes.get(subject.id);
    if (!lane) {
      lane = { inFlight: 0, scheduled: false, waiting: new Map() };
      this.lanes.set(subject.id, lane);
    }
    const group = `${generation}\u0000${period.day}\u0000${subject.plan}\u0000${subject.kind}\u0000${tool}`;
    let batch = lane.waiting.get(group);
    if (!batch) {
      batch = {
        subject,
        period,
        generation,
        keys: windows.map((w) => w.key),
        tool,
        units: 0,
        calls: [],
      };
      lane.waiting.set(group, batch);
    }
    batch.units++;
    const appended = new Promise<number>((resolve, reject) => batch.calls.push({ resolve, reject }));
    if (!lane.scheduled && lane.inFlight < MAX_ROUNDS_IN_FLIGHT) {
      lane.scheduled = true;
      // The rest of this turn's calls of the subject (a burst, or the replies of one pipelined
      // cache round trip) join the batch before it is appended.
      this.due.push([subject.id, lane]);
      if (this.due.length === 1) setImmediate(this.flushDue);
    }
    return appended;
  }

  /**
   * Lanes whose round starts at the end of this turn: one immediate starts them all, so their
   * appends reach the store together and share its round trips (see GroupWriter), where an
   * immediate per subject sent each alone.
   */
  private due: [string, Lane][] = [];
  private readonly flushDue = () => {
    const due = this.due;
    this.due = [];
    for (const [subjectId, lane] of due) this.flush(subjectId, lane, true);
  };

  /**
   * Starts a round with every waiting batch of a subject: at the end of the turn that scheduled
   * it, or when a round ends (unless a scheduled one is still to run: it takes the whole turn's
   * calls, where starting now would split them into two events).
   */
  private flush(subjectId: string, lane: Lane, scheduled = false): void {
    if (scheduled) lane.scheduled = false;
    else if (lane.scheduled) return;
    if (lane.waiting.size === 0 || lane.inFlight >= MAX_ROUNDS_IN_FLIGHT) {
      if (lane.inFlight === 0 && lane.waiting.size === 0 && this.lanes.get(subjectId) === lane)
        this.lanes.delete(subjectId);
      return;
    }
    const batches = [...lane.waiting.values()];
    lane.waiting.clear();
    lane.inFlight++;
    void Promise.all(batches.map((batch) => this.append(batch))).then(() => {
      lane.inFlight--;
      this.flush(subjectId, lane);
    });
  }

  private async append(batch: Batch): Promise<void> {
    const { subject, period } = batch;
    // Its id chosen here, so a failed append can be looked for on the log.
    const id = newEventId();
    // Built from values checked already (the plan and subject resolved, the tool parsed, the
    // period made here), in the schema's field order, typed by it: not run through zod again.
    const data: EventData<'QuotaDebitsRecorded'> = {
      subject: subject.id,
      subjectKind: subject.kind,
      plan: subject.plan,
      tool: batch.tool,
      units: batch.units,
      day: period.day,
      month: period.month,
      generation: batch.generation,
    };
    const record: NewDomainEvent<'QuotaDebitsRecorded'> = { type: 'QuotaDebitsRecorded', data, id };
    try {
      // Answered once committed: it survives this process's death, and the flush follows within
      // the store's bound (deploy/README.md, durability by event class).
      const appended = await this.deps.store.append(quotaStream(subject.id), [record], {
        durability: 'committed',
      });
      for (const call of batch.calls) call.resolve(appended.position);
    } catch (err) {
      // None of these calls is served, so none may use up quota: counted before its record was
      // written, a debit whose record is not on the log would stay counted for good (a closed or
      // failing store left counters 3 above the log, 3 calls the customer paid for and never got).
      // Given back unless the log shows the record landed after all (a commit whose answer was
      // lost): then the counter already matches the log a rebuild would fold.
      // Whatever the release does, every call of the batch is answered and the lane goes on.
      if (!(await this.recordLanded(quotaStream(subject.id), id))) {
        await Promise.resolve()
          .then(() => this.deps.cache.releaseLive(QUOTA_FAMILY, batch.generation, batch.keys, batch.units))
          .catch(() => false);
      }
      for (const call of batch.calls) call.reject(err);
    }
  }

  /**
   * Whether a record whose append failed is on the log anyway. Its stream's last events are enough:
   * a subject has at most MAX_ROUNDS_IN_FLIGHT rounds of a few events each in flight. A store that
   * cannot be read either answers false: an unserved call is not charged on a guess.
   */
  private async recordLanded(stream: string, id: string): Promise<boolean> {
    try {
      const revision = await this.deps.store.streamRevision(stream);
      if (revision === null) return false;
      const tail = await this.deps.store.readStream(stream, { fromRevision: Math.max(0, revision - 31) });
      return tail.some((event) => event.id === id);
    } catch {
      return false;
    }
  }
}

interface Batch {
  subject: QuotaSubject;
  period: QuotaPeriod;
  generation: string;
  /** The counters its calls were debited on (the same for every call of the group). */
  keys: string[];
  tool: string;
  units: number;
  calls: { resolve: (position: number) => void; reject: (err: unknown) => void }[];
}

/** Append rounds of one subject's debits on their way to the log at once. */
const MAX_ROUNDS_IN_FLIGHT = 2;

/** Subjects whose windows are remembered (see windowsOf); past this, the oldest goes. */
const REMEMBERED_SUBJECTS = 10_000;

interface SubjectWindows {
  period: QuotaPeriod;
  limits: PlanLimits;
  windows: QuotaWindow[];
  keys: string[];
}

/** One subject's debits on their way to the log: at most MAX_ROUNDS_IN_FLIGHT append rounds in flight. */
interface Lane {
  /** Append rounds started and not yet on disk. */
  inFlight: number;
  /** A round is due at the end of this turn. */
  scheduled: boolean;
  /** Batches gathering for the next round, by generation, day, plan and kind. */
  waiting: Map<string, Batch>;
}
