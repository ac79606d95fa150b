import type { Logger } from 'pino';
import {
  type Cache,
  CounterStateLostError,
  type QuotaWindow,
  REFUND_ID_TTL_MS,
} from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData, Plan } from '../../contracts/events.ts';
import { setBounded } from '../shared/bounded-map.ts';
import { turnEnd } from '../shared/turn-end.ts';
import { Budget, type BudgetOptions, type Lease } from './budget.ts';
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
  refusedBy: 'monthly' | 'daily' | null;
  /** Log position of the event that records the debit, when debited. */
  position: number | null;
}

export type LeaseOptions = Pick<BudgetOptions, 'ms'> & Partial<BudgetOptions>;

/**
 * Runs `op` on the live counters; when they are gone, waits up to `waitMs` for `ensure` to rebuild
 * them and tries once more, else the loss is thrown (retryable). Every quota (calls, chats) runs so.
 */
export async function onLiveCounters<T>(
  op: () => Promise<T>,
  ensure: (() => Promise<void>) | undefined,
  waitMs = 2_000,
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

/** A quota lease: prepaid units of one subject's calls of one tool, on the counters and the log. */
interface QuotaLease extends Lease {
  /** The subject's windows it was granted on (a new day or plan ends it). */
  at: SubjectWindows;
  /** Log position of the last grant: the position its calls answer with. */
  position: number;
  /** A give-back sent to the counters (retries send the same id and units: never given twice). */
  refunding: { units: number; id: string; since: number } | null;
  /** Given back on the counters, its record still to be appended. */
  unrecorded: { units: number; generation: string | null; id: string } | null;
}

interface Batch {
  subject: QuotaSubject;
  period: QuotaPeriod;
  generation: string;
  keys: string[];
  tool: string;
  units: number;
  calls: { resolve: (position: number) => void; reject: (err: unknown) => void }[];
}

interface SubjectWindows {
  subject: QuotaSubject;
  period: QuotaPeriod;
  limits: PlanLimits;
  windows: QuotaWindow[];
  keys: string[];
}

/** One subject's debits on their way to the log. */
interface Lane {
  inFlight: number;
  scheduled: boolean;
  waiting: Map<string, Batch>;
}

/**
 * Two appends of a subject's debits in flight at most: with one, a call counted just after an
 * append left waited for that append and then its own (6,640-6,830 against 7,570-8,120 req/s).
 */
const MAX_ROUNDS_IN_FLIGHT = 2;

/**
 * Counts served calls. The check-and-debit of the day and month windows is one atomic cache
 * operation, so replicas cannot overspend; each debit is then recorded on the log (batched per
 * subject), which the counters are rebuilt from. Busy subjects are served from a Budget lease.
 * Nothing is served from counters whose generation is gone: empty counters would give calls away.
 */
export class QuotaMeter {
  readonly counters: QuotaCounters;
  private readonly lanes = new Map<string, Lane>();
  private due: [string, Lane][] = [];
  private readonly budget: Budget<QuotaLease, SubjectWindows>;
  /** The counters' figures at a subject's last debit, grant or give-back here, by window key. */
  private readonly counts = new Map<string, { keys: readonly string[]; counts: readonly number[] }>();
  private readonly windowsBySubject = new Map<string, SubjectWindows>();

  constructor(
    private readonly deps: {
      cache: Cache;
      store: EventStore;
      plans: PlanTable;
      now?: () => number;
      counters?: QuotaCounters;
      /** Prepaid debits for busy subjects; absent or `ms: 0`, every call is debited on its own. */
      lease?: LeaseOptions;
      logger?: Logger;
    },
  ) {
    this.counters = deps.counters ?? new QuotaCounters({ store: deps.store, cache: deps.cache });
    const lease = deps.lease ?? { ms: 0 };
    this.budget = new Budget<QuotaLease, SubjectWindows>(
      { maxUnits: 256, ...lease },
      {
        grant: (l, units) => this.grant(l, units),
        giveBack: (l) => this.giveBack(l),
        // The same day and plan (windows made again once the memo was cleared): the same lease.
        fits: (l, at) =>
          l.at === at || (l.at.period.day === at.period.day && l.at.subject.plan === at.subject.plan),
        make: (base, at) => ({ ...base, at, position: 0, refunding: null, unrecorded: null }),
        holds: (l, at) => sameKeys(l.at.keys, at.keys),
      },
      () => this.now(),
      deps.logger,
    );
  }

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  private live<T>(op: () => Promise<T>): Promise<T> {
    return onLiveCounters(op, () => this.counters.ensure());
  }

  /**
   * A subject's windows and their keys, made once per day and plan and shared (frozen) by its
   * calls: spelling and hashing fresh keys on every call showed in the keyed profiles.
   */
  private windowsOf(subject: QuotaSubject, period: QuotaPeriod): SubjectWindows {
    const limits = this.deps.plans[subject.plan];
    const known = this.windowsBySubject.get(subject.id);
    if (
      known !== undefined &&
      known.period === period &&
      known.limits === limits &&
      known.subject.plan === subject.plan
    )
      return known;
    // Frozen, so no call changes what the next reads; typed mutable for the cache port.
    const windows = Object.freeze(quotaWindows(subject.id, limits, period).map((w) => Object.freeze(w)));
    const keys = Object.freeze(windows.map((w) => w.key)) as string[];
    const made = { subject, period, limits, windows: windows as QuotaWindow[], keys };
    // A memo: past 10,000 subjects it starts afresh.
    if (this.windowsBySubject.size >= 10_000) this.windowsBySubject.clear();
    this.windowsBySubject.set(subject.id, made);
    return made;
  }

  /** Live figures without debiting. Throws CacheUnavailableError when the counters are out of reach. */
  async peek(subject: QuotaSubject): Promise<QuotaSnapshot> {
    const at = this.windowsOf(subject, quotaPeriod(this.now()));
    const counts = await this.live(() => this.deps.cache.readLive(QUOTA_FAMILY, at.keys));
    return this.figures(at, counts);
  }

  /** Whether the subject's next call of `tool` is prepaid: a lease of this day and plan holds a unit for it. */
  prepaid(subject: QuotaSubject, tool: string): boolean {
    const lease = this.budget.get(subject.id, tool);
    return (
      lease !== undefined &&
      lease.free > 0 &&
      lease.at.subject.plan === subject.plan &&
      lease.at.period.day === quotaPeriod(this.now()).day
    );
  }

  /** The counters' `counts`, less what this process's leases of the subject hold in these windows. */
  private figures(at: SubjectWindows, counts: readonly number[]): QuotaSnapshot {
    const held = this.budget.held(at.subject.id, at);
    return quotaSnapshot(
      at.limits,
      at.period,
      held === 0 ? counts : counts.map((count) => (count > held ? count - held : 0)),
    );
  }

  /**
   * Debits one call, or refuses when a window is full. Resolves only once the debit is on the log:
   * a call is never served before. Throws CacheUnavailableError or a store error when the debit or
   * its record cannot be made; the caller must not serve then.
   */
  async debit(subject: QuotaSubject, tool: string, _requestId: string): Promise<DebitOutcome> {
    const at = this.windowsOf(subject, quotaPeriod(this.now()));
    const { windows, keys } = at;
    // The counts of these windows at the subject's last debit, grant or give-back here.
    const last = this.counts.get(subject.id);
    const known = last !== undefined && sameKeys(last.keys, keys) ? last.counts : [];
    const lane = this.lanes.get(subject.id);
    // A new day or plan ends the lease (fits): its units go back to the windows they were counted in.
    const lease = this.budget.lease(subject.id, tool, lane !== undefined && lane.inFlight > 0, at);
    if (lease !== undefined && this.budget.take(lease, left(windows, known))) {
      const outcome = {
        ok: true,
        snapshot: this.figures(at, known),
        refusedBy: null,
        position: lease.position,
      };
      // Answered with the rest of the turn's calls, as a group commit's are (turn-end.ts).
      await turnEnd();
      return outcome;
    }
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, windows, 1));
    const snapshot = this.figures(at, result.counts);
    const recorded = result.ok ? this.record(subject, tool, at.period, keys, result.generation) : null;
    if (lease !== undefined && !lease.ended) {
      setBounded(this.counts, subject.id, { keys, counts: result.counts }, 10_000);
      if (result.ok) this.budget.refill(lease, left(windows, result.counts));
    }
    if (recorded === null)
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily', position: null };
    return { ok: true, snapshot, refusedBy: null, position: await recorded };
  }

  /** Counts `units` ahead on the counters, then appends them (flushed: a lost grant is calls served free). */
  private async grant(lease: QuotaLease, units: number): Promise<number> {
    const { subject, period, windows, keys } = lease.at;
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, windows, units));
    if (!lease.ended) setBounded(this.counts, subject.id, { keys, counts: result.counts }, 10_000);
    if (!result.ok) return 0;
    lease.pending += units;
    const id = newEventId();
    const data = debitData(subject, lease.part, units, period, result.generation);
    try {
      const appended = await this.deps.store.append(
        quotaStream(subject.id),
        [{ type: 'QuotaDebitsRecorded', data, id }],
        { durability: 'flushed' },
      );
      lease.position = appended.position;
      return units;
    } catch (err) {
      if (await this.recordLanded(quotaStream(subject.id), id)) return units;
      await this.release(subject.id, result.generation, keys, units);
      lease.pending -= units;
      this.deps.logger?.warn({ err }, 'quota lease not recorded: its units given back');
      return 0;
    }
  }

  /**
   * Gives an ended lease's unused units back: on the live counters (under one id for every try, so
   * a try whose answer was lost is not given back twice), then on the log as QuotaDebitsReturned.
   * Out of reach for half the id's life, the units stay charged, the safe side.
   */
  private async giveBack(lease: QuotaLease): Promise<boolean> {
    if (lease.unrecorded === null) {
      if (lease.free === 0) return true;
      lease.refunding ??= { units: lease.free, id: newEventId(), since: Date.now() };
      const { units, id, since } = lease.refunding;
      if (Date.now() - since > REFUND_ID_TTL_MS / 2) {
        this.deps.logger?.error(
          { subject: lease.owner, tool: lease.part, units, refundId: id },
          'quota lease not given back: the counters were out of reach too long; its units stay charged',
        );
        lease.free -= units;
        lease.refunding = null;
        return true;
      }
      const generation = await this.deps.cache.refundLive(QUOTA_FAMILY, lease.at.keys, units, id);
      lease.free -= units;
      lease.refunding = null;
      lease.unrecorded = { units, generation, id };
      this.uncount(lease.owner, units, lease.at.keys);
    }
    const { units, generation, id } = lease.unrecorded;
    const stream = quotaStream(lease.owner);
    const data = debitData(lease.at.subject, lease.part, units, lease.at.period, generation);
    try {
      await this.deps.store.append(stream, [{ type: 'QuotaDebitsReturned', data, id }], {
        durability: 'flushed',
      });
    } catch (err) {
      if (!(await this.recordLanded(stream, id))) throw err;
    }
    lease.unrecorded = null;
    return lease.free === 0;
  }

  /** Takes units given back on the windows `keys` out of the counts a subject's leased calls answer with. */
  private uncount(subjectId: string, units: number, keys: readonly string[]): void {
    const known = this.counts.get(subjectId);
    if (known === undefined) return;
    this.counts.set(subjectId, {
      keys: known.keys,
      counts: known.counts.map((count, i) =>
        keys.includes(known.keys[i]!) ? (count > units ? count - units : 0) : count,
      ),
    });
  }

  private async release(subjectId: string, generation: string, keys: string[], units: number) {
    const released = await this.deps.cache
      .releaseLive(QUOTA_FAMILY, generation, keys, units)
      .catch(() => false);
    if (released) this.uncount(subjectId, units, keys);
  }

  /** Ends every lease and gives its units back (the api's shutdown): a clean stop charges only what was served. */
  stop(): Promise<void> {
    return this.budget.stop();
  }

  /**
   * Records a counted call with the others of its subject counted meanwhile as one
   * QuotaDebitsRecorded: at most MAX_ROUNDS_IN_FLIGHT appends per subject in flight, never more
   * events than calls. Calls differing in generation, day, plan, kind or tool go in events of
   * their own (a rebuild counts each by the first three).
   */
  private record(
    subject: QuotaSubject,
    tool: string,
    period: QuotaPeriod,
    keys: string[],
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
      batch = { subject, period, generation, keys, tool, units: 0, calls: [] };
      lane.waiting.set(group, batch);
    }
    batch.units++;
    const appended = new Promise<number>((resolve, reject) => batch.calls.push({ resolve, reject }));
    if (!lane.scheduled && lane.inFlight < MAX_ROUNDS_IN_FLIGHT) {
      lane.scheduled = true;
      // One immediate for every lane due: their appends reach the store together (GroupWriter).
      this.due.push([subject.id, lane]);
      if (this.due.length === 1) setImmediate(this.flushDue);
    }
    return appended;
  }

  private readonly flushDue = () => {
    const due = this.due;
    this.due = [];
    for (const [subjectId, lane] of due) this.flush(subjectId, lane, true);
  };

  /** Starts a round with every waiting batch (a scheduled one takes the whole turn's calls). */
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
    const { subject } = batch;
    const id = newEventId();
    const data = debitData(subject, batch.tool, batch.units, batch.period, batch.generation);
    try {
      // Committed: it survives this process; the flush follows within the store's bound.
      const appended = await this.deps.store.append(
        quotaStream(subject.id),
        [{ type: 'QuotaDebitsRecorded', data, id }],
        { durability: 'committed' },
      );
      for (const call of batch.calls) call.resolve(appended.position);
    } catch (err) {
      // None of these calls is served, so none may use up quota: given back unless the record
      // landed after all (a commit whose answer was lost).
      if (!(await this.recordLanded(quotaStream(subject.id), id)))
        await this.release(subject.id, batch.generation, batch.keys, batch.units);
      for (const call of batch.calls) call.reject(err);
    }
  }

  /** Whether a record whose append failed is on the log anyway; unreadable: false (no charge on a guess). */
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

function quotaStream(subjectId: string): string {
  return `quota-${subjectId}`;
}

function sameKeys(a: readonly string[], b: readonly string[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/** What is left in the tighter of `windows` at `counts` (none known: nothing, so no grant). */
function left(windows: QuotaWindow[], counts: readonly number[]): number {
  if (counts.length === 0) return 0;
  let least = Number.POSITIVE_INFINITY;
  for (let i = 0; i < windows.length; i++) least = Math.min(least, windows[i]!.limit - (counts[i] ?? 0));
  return least;
}

/** A debit event's data, from values checked already, in the schema's field order. */
function debitData(
  subject: QuotaSubject,
  tool: string,
  units: number,
  period: QuotaPeriod,
  generation: string | null,
): EventData<'QuotaDebitsRecorded'> {
  const data: EventData<'QuotaDebitsRecorded'> = {
    subject: subject.id,
    subjectKind: subject.kind,
    plan: subject.plan,
    tool,
    units,
    day: period.day,
    month: period.month,
  };
  if (generation !== null) data.generation = generation;
  return data;
}
