import type { Logger } from 'pino';
import {
  type Cache,
  CounterStateLostError,
  type QuotaWindow,
  REFUND_ID_TTL_MS,
} from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData, NewDomainEvent, Plan } from '../../contracts/events.ts';
import { setBounded } from '../shared/bounded-map.ts';
import { turnEnd } from '../shared/turn-end.ts';
import { BUDGET_IDLE_MS, BUDGET_SHARE, IdleSweeper, MIN_BUDGET_IDLE_MS } from './budget.ts';
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
  private readonly lease: Required<LeaseOptions> | null;
  /** Leases of busy subjects, by subject and tool. */
  private readonly leases = new Map<string, Map<string, Lease>>();
  /** Leases ended and not yet given back: their returns in flight, or to try again. */
  private readonly ending = new Set<Lease>();
  /**
   * The counters' figures at the last debit, reservation or return of a leased subject in this
   * process (any tool): what its prepaid calls are told, less what the leases hold, and what its
   * next reservation is checked against, with the window keys they are of.
   */
  private readonly countsBySubject = new Map<
    string,
    { keys: readonly string[]; counts: readonly number[] }
  >();
  private sweeper: IdleSweeper | null = null;
  /** Sweeps so far: a lease's last take, counted in sweeps, tells it idle without a clock read per call. */
  private sweeps = 0;
  private stopped = false;

  constructor(
    private readonly deps: {
      cache: Cache;
      store: EventStore;
      plans: PlanTable;
      now?: () => number;
      counters?: QuotaCounters;
      lostWaitMs?: number;
      /** Prepaid debits for busy subjects (see Lease); absent, every call is debited on its own. */
      lease?: LeaseOptions;
      logger?: Logger;
    },
  ) {
    this.counters = deps.counters ?? new QuotaCounters({ store: deps.store, cache: deps.cache });
    const lease = deps.lease;
    this.lease =
      lease === undefined || lease.ms <= 0
        ? null
        : {
            ms: lease.ms,
            maxUnits: lease.maxUnits ?? DEFAULT_LEASE_MAX_UNITS,
            idleMs: lease.idleMs ?? Math.max(MIN_BUDGET_IDLE_MS, Math.min(BUDGET_IDLE_MS, lease.ms)),
          };
  }

  /**
   * A subject's windows for a plan and period, made once and shared by its calls until either
   * changes: every keyed call names the same two counters, and spelling their keys (the subject's
   * 64-character hash in each) and hashing the fresh strings in every lookup showed in the keyed
   * profiles. The same string objects each time also keep V8's hash of each key, so the cache's
   * lookups of them do not hash them again. Its windows and keys are frozen: shared by concurrent
   * calls. The record also carries when the subject was last called (see debit).
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
      lastCallAt: known?.lastCallAt ?? Number.NEGATIVE_INFINITY,
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
    const { keys, windows } = this.windowsOf(subject, limits, period);
    const counts = await this.live(() => this.deps.cache.readLive(QUOTA_FAMILY, keys));
    return this.figures(subject, limits, period, windows, counts);
  }

  /**
   * Whether the subject's next call of `tool` is prepaid: a lease of this day and plan holds a
   * unit on the log and the counters for it. Such a call needs no read before its run (the read
   * only spares the work of a caller already out of calls, which one holding a unit is not).
   */
  prepaid(subject: QuotaSubject, tool: string): boolean {
    const lease = this.leases.get(subject.id)?.get(tool);
    return (
      lease !== undefined &&
      lease.free > 0 &&
      lease.subject.plan === subject.plan &&
      lease.period.day === quotaPeriod(this.now()).day
    );
  }

  /**
   * A subject's figures from the counters' `counts`, less the units this process's leases hold for
   * its next calls (of any tool, in these windows): counted, not used.
   */
  private figures(
    subject: QuotaSubject,
    limits: PlanLimits,
    period: QuotaPeriod,
    windows: QuotaWindow[],
    counts: readonly number[],
  ): QuotaSnapshot {
    const byTool = this.leases.get(subject.id);
    if (byTool === undefined && this.ending.size === 0) return quotaSnapshot(limits, period, counts);
    let held = 0;
    if (byTool !== undefined)
      for (const lease of byTool.values())
        if (sameWindows(lease.windows, windows)) held += lease.free + lease.pending;
    // Ended and not yet given back: still on the counters, no longer any call's.
    for (const lease of this.ending)
      if (lease.subject.id === subject.id && sameWindows(lease.windows, windows))
        held += lease.free + lease.pending;
    if (held === 0) return quotaSnapshot(limits, period, counts);
    // Not Math.max: its result may be a heap number, which JSON.stringify writes on a slow path.
    return quotaSnapshot(
      limits,
      period,
      counts.map((count) => (count > held ? count - held : 0)),
    );
  }

  /**
   * Debits one call, or refuses when a window is full. Throws CacheUnavailableError or a store
   * error when the debit or its record cannot be made; the caller must not serve then. Resolves
   * only once the debit is on the log, durably: a call is never served before. The request id is
   * not recorded: a batch's event holds units, not calls (see QuotaDebitsRecorded).
   */
  async debit(subject: QuotaSubject, tool: string, _requestId: string): Promise<DebitOutcome> {
    const limits = this.deps.plans[subject.plan];
    const now = this.now();
    const period = quotaPeriod(now);
    const known = this.windowsOf(subject, limits, period);
    const windows = known.windows;
    // Called again soon after its last call: fast enough for a lease to be worth its two events,
    // and before the sweep would end a lease no call took from.
    const recent =
      this.lease !== null &&
      now - known.lastCallAt <= Math.min(this.lease.ms / LEASE_MIN_UNITS, this.lease.idleMs);
    known.lastCallAt = now;
    const lease = this.lease === null ? undefined : this.leaseOf(subject, tool, period, windows, recent);
    if (lease !== undefined) {
      lease.calls++;
      lease.lastTaken = this.sweeps;
      if (lease.free > 0) {
        // Prepaid: the unit is on the log and on the counters already.
        lease.free--;
        if (lease.free + lease.pending <= lease.size >> 1) this.maybeReserve(lease);
        const outcome: DebitOutcome = {
          ok: true,
          snapshot: this.figures(
            subject,
            limits,
            period,
            windows,
            this.countsBySubject.get(subject.id)?.counts ?? [],
          ),
          refusedBy: null,
          position: lease.position,
        };
        // Answered with the rest of the turn's calls, as a group commit's calls were (turn-end.ts).
        // An HTTP reply then waits for the next turn's end as well (the edge's onSend hook): the
        // call's answer is built with the others of its turn, and that measured cheaper than one
        // wait (73 against 78 µs per one-shot MCP call), for one more loop iteration of latency.
        await turnEnd();
        return outcome;
      }
    }
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, windows, 1));
    // Only while this call's lease is the subject's (a new day's or plan's may have replaced it
    // meanwhile, and its calls must not answer with these windows' counts).
    if (lease === undefined ? this.leases.has(subject.id) : !lease.ended)
      this.countsBySubject.set(subject.id, { keys: known.keys, counts: result.counts });
    if (lease !== undefined && result.ok) this.maybeReserve(lease);
    const snapshot = this.figures(subject, limits, period, windows, result.counts);
    if (!result.ok) {
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily', position: null };
    }
    const position = await this.record(subject, tool, period, windows, result.generation);
    return { ok: true, snapshot, refusedBy: null, position };
  }

  /**
   * The lease of a subject's calls of one tool: made once a call of the subject comes while its
   * debits are being appended, or within `ms / LEASE_MIN_UNITS` (and `idleMs`) of its last call
   * (`recent`); the rate then decides whether it ever holds units (see maybeReserve). Ended and
   * replaced when the day or the plan changes under it. Overlap alone missed busy keys: a key at
   * 60 calls/s whose calls came one at a time, each after the last one's debit was on the log
   * (128 keys over 32 connections, bench/scale-out.bench.ts), never overlapped, and every call
   * waited for an append of its own.
   */
  private leaseOf(
    subject: QuotaSubject,
    tool: string,
    period: QuotaPeriod,
    windows: QuotaWindow[],
    recent: boolean,
  ): Lease | undefined {
    const byTool = this.leases.get(subject.id);
    let lease = byTool?.get(tool);
    if (lease !== undefined && lease.windows !== windows) {
      // The same day and plan in windows made again (the remembered ones were evicted): kept.
      const same =
        lease.period.day === period.day &&
        lease.subject.plan === subject.plan &&
        lease.subject.kind === subject.kind &&
        sameWindows(lease.windows, windows) &&
        lease.windows.every((w, i) => w.limit === windows[i]!.limit);
      if (same) lease.windows = windows;
      else {
        this.end(lease);
        lease = undefined;
      }
    }
    if (lease !== undefined || this.stopped) return lease;
    const lane = this.lanes.get(subject.id);
    if (!recent && (lane === undefined || lane.inFlight === 0)) return undefined;
    lease = {
      subject,
      tool,
      period,
      windows,
      keys: windows.map((w) => w.key),
      free: 0,
      pending: 0,
      size: 0,
      reserved: null,
      giving: null,
      refunding: null,
      unrecorded: null,
      ended: false,
      position: 0,
      calls: 0,
      since: this.now(),
      lastTaken: this.sweeps,
    };
    if (byTool === undefined) this.leases.set(subject.id, new Map([[tool, lease]]));
    else byTool.set(tool, lease);
    if (!this.stopped) {
      this.sweeper ??= new IdleSweeper(this.lease!.idleMs, this.sweep);
      this.sweeper.watch();
    }
    return lease;
  }

  /**
   * Debits the next units of a busy subject ahead, sized to cover its calls of the next
   * `lease.ms` at the rate they came since the last reservation: counted on the counters (atomic,
   * like a call's debit) and then appended as one QuotaDebitsRecorded. Calls take them once the
   * append is committed, so no call is answered before its unit is on the log. Left out while
   * the subject has less than BUDGET_SHARE leases' worth of calls left: near a limit every call
   * is decided by its own debit, and replicas cannot hold units another one's calls need.
   */
  private maybeReserve(lease: Lease): void {
    const options = this.lease;
    const counts = this.countsBySubject.get(lease.subject.id)?.counts;
    if (options === null || lease.reserved !== null || lease.ended || this.stopped || counts === undefined)
      return;
    if (lease.calls < LEASE_MIN_UNITS) return;
    const now = this.now();
    const elapsed = Math.max(1, now - lease.since);
    // Twice the calls seen per half lease at most: a burst's first calls do not buy a full lease.
    // A subject's leases of one tool hold maxUnits at most, with what is left of the last
    // reservation and of a lease ended and not yet given back (a new day's) counted in: the bound
    // on what a killed api leaves charged.
    let ended = 0;
    for (const other of this.ending)
      if (other.subject.id === lease.subject.id && other.tool === lease.tool)
        ended += other.free + other.pending;
    const units = Math.min(
      options.maxUnits - lease.free - lease.pending - ended,
      Math.ceil((lease.calls * options.ms) / elapsed),
      4 * lease.calls,
    );
    if (units < LEASE_MIN_UNITS) {
      // Too slow to be worth two events; measured afresh from here.
      if (elapsed > options.ms) {
        lease.calls = 0;
        lease.since = now;
      }
      return;
    }
    let left = Number.POSITIVE_INFINITY;
    for (let i = 0; i < lease.windows.length; i++)
      left = Math.min(left, lease.windows[i]!.limit - (counts[i] ?? 0));
    if (units * BUDGET_SHARE > left) return;
    lease.calls = 0;
    lease.since = now;
    lease.reserved = this.reserve(lease, units);
  }

  private async reserve(lease: Lease, units: number): Promise<void> {
    const { subject, period } = lease;
    try {
      const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, lease.windows, units));
      // Ended meanwhile (a new day, a plan change, a quiet key), its figures are no call's: kept,
      // they would answer the next lease's calls with the old windows' counts, or stay behind
      // for a subject with no lease at all.
      if (!lease.ended) this.countsBySubject.set(subject.id, { keys: lease.keys, counts: result.counts });
      if (!result.ok) return;
      lease.pending += units;
      const id = newEventId();
      const record: NewDomainEvent<'QuotaDebitsRecorded'> = {
        type: 'QuotaDebitsRecorded',
        data: debitData(subject, lease.tool, units, period, result.generation),
        id,
      };
      let landed: boolean;
      let position = 0;
      try {
        // Flushed, unlike a call's debit: the units of a reservation lost in the window of
        // asynchronous commits (a PostgreSQL crash) would be a lease's worth of calls served free.
        position = (
          await this.deps.store.append(quotaStream(subject.id), [record], { durability: 'flushed' })
        ).position;
        landed = true;
      } catch (err) {
        landed = await this.recordLanded(quotaStream(subject.id), id);
        if (!landed) {
          const released = await this.deps.cache
            .releaseLive(QUOTA_FAMILY, result.generation, lease.keys, units)
            .catch(() => false);
          // The counts this lease's calls answer with still held these units: without this, each
          // call served from the units left reported them used (a full disk: 11 above the log).
          if (released) this.uncount(subject.id, units, lease.keys);
          this.deps.logger?.warn({ err }, 'quota lease not recorded: its units given back');
        }
      }
      lease.pending -= units;
      if (landed) {
        lease.free += units;
        lease.size = units;
        if (position > 0) lease.position = position;
      }
    } catch (err) {
      // The counters out of reach: the calls go on one debit each, which answer for it.
      this.deps.logger?.warn({ err }, 'quota lease not taken');
    } finally {
      lease.reserved = null;
      if (lease.ended) {
        this.ending.add(lease);
        this.giveBack(lease);
      }
    }
  }

  /** Ends a lease: no call takes from it again; its unused units are given back. */
  private end(lease: Lease): void {
    if (lease.ended) return;
    lease.ended = true;
    const byTool = this.leases.get(lease.subject.id);
    if (byTool?.get(lease.tool) === lease) {
      byTool.delete(lease.tool);
      if (byTool.size === 0) {
        this.leases.delete(lease.subject.id);
        this.countsBySubject.delete(lease.subject.id);
      }
    }
    this.ending.add(lease);
    if (lease.reserved === null) this.giveBack(lease);
  }

  /**
   * Gives an ended lease's unused units back: on the live counters first (tagged with that
   * generation, as a chat's refund is: refunded before a rebuild's replay has counted the lease in,
   * the counters clamp at 0 and the key stays charged, the safe side), then on the log as
   * QuotaDebitsReturned. Held in `ending` until both are done, and tried again on each sweep until
   * then: the counters out of reach, still charged meanwhile; the log refusing after the counters
   * gave back, the return is appended again under the same id (a rebuild meanwhile would count
   * the units as used). A reservation that lands after the lease ended is given back the same way.
   */
  private giveBack(lease: Lease): void {
    if (lease.giving !== null || lease.reserved !== null) return;
    if (lease.free === 0 && lease.unrecorded === null) {
      this.ending.delete(lease);
      return;
    }
    lease.giving = (async () => {
      if (lease.unrecorded === null) {
        // The same id and units on every try: a try whose answer was lost after Redis ran it (a
        // timeout) would otherwise be given back twice, the counters below the log by a lease.
        lease.refunding ??= { units: lease.free, id: newEventId(), since: Date.now() };
        const { units, id, since } = lease.refunding;
        if (Date.now() - since > REFUND_ID_TTL_MS / 2) {
          // Out of reach for half the id's life: another try could be given back twice. The
          // units stay charged on the log, and on the counters unless a lost try took them.
          this.deps.logger?.error(
            { subject: lease.subject.id, tool: lease.tool, keys: lease.keys, units, refundId: id },
            'quota lease not given back: the counters were out of reach too long; its units stay charged',
          );
          lease.free -= units;
          lease.refunding = null;
          return;
        }
        let generation: string | null;
        try {
          generation = await this.deps.cache.refundLive(QUOTA_FAMILY, lease.keys, units, id);
        } catch (err) {
          this.deps.logger?.warn(
            { err, units },
            'quota lease not given back yet: the counters are out of reach',
          );
          return;
        }
        lease.free -= units;
        lease.refunding = null;
        lease.unrecorded = { units, generation, id };
        this.uncount(lease.subject.id, units, lease.keys);
      }
      const { units, generation, id } = lease.unrecorded;
      const stream = quotaStream(lease.subject.id);
      const data = debitData(lease.subject, lease.tool, units, lease.period, generation);
      try {
        // Flushed: a return lost with a PostgreSQL crash would charge units no call took.
        await this.deps.store.append(stream, [{ type: 'QuotaDebitsReturned', data, id }], {
          durability: 'flushed',
        });
        lease.unrecorded = null;
      } catch (err) {
        if (await this.recordLanded(stream, id)) lease.unrecorded = null;
        else
          this.deps.logger?.error(
            { err, units },
            'quota lease given back on the counters, not yet on the log',
          );
      }
    })().finally(() => {
      lease.giving = null;
      if (lease.free === 0 && lease.unrecorded === null) this.ending.delete(lease);
    });
  }

  /**
   * Units given back on the counters of the windows `keys`, taken out of the counts a subject's
   * leased calls answer with: only from the windows they were given back to (a lease of the day
   * before gives back to that day and to the month both days share, not to today).
   */
  private uncount(subjectId: string, units: number, keys: readonly string[]): void {
    const known = this.countsBySubject.get(subjectId);
    if (known === undefined) return;
    this.countsBySubject.set(subjectId, {
      keys: known.keys,
      counts: known.counts.map((count, i) =>
        keys.includes(known.keys[i]!) ? (count > units ? count - units : 0) : count,
      ),
    });
  }

  /** Ends the leases no call took from since the last sweep, and retries returns that failed. */
  private readonly sweep = () => {
    this.sweeps++;
    for (const byTool of [...this.leases.values()])
      for (const lease of [...byTool.values()]) if (this.sweeps - lease.lastTaken > 1) this.end(lease);
    for (const lease of this.ending) this.giveBack(lease);
    return this.leases.size > 0 || this.ending.size > 0;
  };

  /**
   * Ends every lease and waits for its unused units to be given back (the api's shutdown, after
   * its last call): a process stopped so charges only what it served. Killed instead, a lease's
   * unused units stay charged: at most `lease.maxUnits` per busy subject and tool, about
   * `lease.ms` of its calls.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    this.sweeper?.stop();
    for (const byTool of [...this.leases.values()]) for (const lease of [...byTool.values()]) this.end(lease);
    for (let round = 0; round < 3 && this.ending.size > 0; round++) {
      if (round > 0) await new Promise((resolve) => setTimeout(resolve, this.lease?.idleMs ?? 0));
      const ending = [...this.ending];
      await Promise.all(ending.map((lease) => lease.reserved));
      for (const lease of ending) this.giveBack(lease);
      await Promise.all(ending.map((lease) => lease.giving));
    }
    if (this.ending.size > 0)
      this.deps.logger?.warn(
        { leases: this.ending.size },
        'quota leases not given back at stop: the counters or the log are out of reach',
      );
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
    const data = debitData(subject, batch.tool, batch.units, period, batch.generation);
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
        const released = await Promise.resolve()
          .then(() => this.deps.cache.releaseLive(QUOTA_FAMILY, batch.generation, batch.keys, batch.units))
          .catch(() => false);
        // A lease's calls may have taken these counts up meanwhile (a reservation's answer).
        if (released) this.uncount(subject.id, batch.units, batch.keys);
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

/** The same windows (month, day) by their keys: windows made again for the same day compare equal. */
function sameWindows(a: QuotaWindow[], b: QuotaWindow[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.key !== b[i]!.key) return false;
  return true;
}

/**
 * A debit event's data. Built from values checked already (the plan and subject resolved, the tool
 * parsed, the period made here), in the schema's field order, typed by it: not run through zod
 * again.
 */
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

export interface LeaseOptions {
  /** How much of a busy subject's traffic one lease covers, in ms of its calls at their recent rate; 0: no leases. */
  ms: number;
  /** Units one lease holds at most. */
  maxUnits?: number;
  /** A lease no call took from for between one and two of these is ended (default BUDGET_IDLE_MS, at most `ms`). */
  idleMs?: number;
}

const DEFAULT_LEASE_MAX_UNITS = 256;
/** A lease smaller than this is not worth its two events: the calls are debited one by one. */
const LEASE_MIN_UNITS = 8;

/**
 * Prepaid debits of one busy subject's calls of one tool. Its units are counted on the counters
 * and appended to the log before any call takes one, so every answered call's debit is committed
 * before its answer, as without a lease; what a lease changes is that a crash may leave units
 * charged that no call took (at most one lease's worth: see QuotaMeter.stop).
 */
interface Lease {
  subject: QuotaSubject;
  tool: string;
  period: QuotaPeriod;
  /** The subject's windows when the lease began (the day and plan it is counted in). */
  windows: QuotaWindow[];
  keys: string[];
  /** Units on the log and the counters that no call took yet. */
  free: number;
  /** Units counted on the counters whose record is being appended. */
  pending: number;
  /** Units of the last reservation (the next is taken when half of it is left). */
  size: number;
  /** The reservation in flight, if any. */
  reserved: Promise<void> | null;
  giving: Promise<void> | null;
  /** A return being given back on the counters (its retries send the same id and units). */
  refunding: { units: number; id: string; since: number } | null;
  /** A return given back on the counters whose record is still to be appended (under `id`). */
  unrecorded: { units: number; generation: string | null; id: string } | null;
  ended: boolean;
  /** Log position of the last reservation. */
  position: number;
  /** Calls since `since` (ms): the rate the next reservation is sized by. */
  calls: number;
  since: number;
  /** The sweep count at the last call. */
  lastTaken: number;
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
  /** When the subject's last call (any tool, served or not) came to this meter (its clock). */
  lastCallAt: number;
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
