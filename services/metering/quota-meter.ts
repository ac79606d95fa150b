import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { DebitResult } from '../../adapters/cache/port.ts';
import { type Cache, CounterStateLostError, type QuotaWindow } from '../../adapters/cache/port.ts';
import { type EventStore, EventStoreUnavailableError } from '../../adapters/event-store/port.ts';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData, Plan } from '../../contracts/events.ts';
import { turnEnd } from '../shared/turn-end.ts';
import type { PlanLimits, PlanTable } from './plans.ts';
import { QUOTA_FAMILY, QuotaCounters } from './quota-rebuild.ts';
import type { QuotaSnapshot } from './snapshot.ts';
import { type QuotaPeriod, type QuotaSubject, type SubjectWindows, subjectWindows } from './windows.ts';

/** A debit made, or refused by the window named (the first full one, the month before the day). */
export type DebitOutcome =
  | { ok: true; snapshot: QuotaSnapshot; refusedBy: null }
  | { ok: false; snapshot: QuotaSnapshot; refusedBy: 'monthly' | 'daily' };

/** Told how every metered call ended (the quota metrics). */
export interface QuotaObserver {
  debited(plan: Plan): void;
  refused(plan: Plan, reason: 'daily' | 'monthly' | 'unavailable'): void;
}

/** The rate limits a lease prepays requests in beside its quota units (the rate limiter): the windows a
 *  subject's requests of `tool` are counted in at `now` (ending together), and the tier it is limited as. */
export interface RateWindows {
  windowsOf(subject: QuotaSubject, tool: string, now: number): QuotaWindow[];
  tierOf(subject: QuotaSubject): string;
}

/** A lease tool's requests prepaid in rate windows; `granted`: their debit, its counts with all prepaid. */
interface RateUnits {
  windows: QuotaWindow[];
  free: number;
  granted: DebitResult;
}

export interface LeaseOptions {
  /** How many ms of a busy subject's calls one grant covers; 0 (or no lease): each call debited alone. */
  ms: number;
  /** Units of one grant at most (256). */
  maxUnits?: number;
  /** A lease no call took from for one to two of these is given back (default: ms, within 20-250 ms). */
  idleMs?: number;
}

/** Runs `op`; when the counters are gone, again after `ensure` rebuilt them (2 s at most), else throws. */
export async function onLiveCounters<T>(op: () => Promise<T>, ensure?: () => Promise<void>): Promise<T> {
  try {
    return await op();
  } catch (err) {
    if (!(err instanceof CounterStateLostError) || ensure === undefined) throw err;
    // A rebuild that fails leaves the loss to be thrown; its wait's timer holds no process open.
    await Promise.race([ensure(), delay(2_000, undefined, { ref: false })]).catch(() => {
      throw err;
    });
    return op();
  }
}

/**
 * A lease: prepaid units of one subject's calls, whatever their tool, debited on the counters and
 * recorded on the log ahead of the calls, so a busy caller's call is decided without a round trip.
 * One per subject, so a crash or a failed give-back leaves at most one lease charged per subject.
 * - granted once MIN_UNITS calls were seen, sized to `ms` of calls at their recent rate, at most
 *   `maxUnits` and 1/LEASE_SHARE of what is left: near a limit every call goes to the counters, and
 *   no replica holds units another one needs; the next grant is asked for once half the last is left;
 * - given back after one to two idle periods without a call, when the day or plan changes, and at a
 *   clean stop; lost on a crash, or when its give-back cannot be recorded (GIVE_BACK_TRIES failed tries,
 *   or half an hour while the event store is unavailable: recordReturn): its unused units stay charged.
 * Measured against a debit per call: `npm run bench -- budget`.
 */
class QuotaLease {
  /** Units on the counters that no call took yet. */
  free = 0;
  /** Units of the grant in flight: counted, not yet usable. */
  pending = 0;
  /** Units of the last grant. */
  size = 0;
  /** Calls since `since`: the rate the next grant is sized by. */
  calls = 0;
  /** No call since the last sweep: the next sweep ends it. */
  idle = false;
  granting: Promise<void> | null = null;
  /** Its give-back, once ended: no call takes from it again. */
  ending: Promise<void> | null = null;
  /** The counters' figures of its windows at its subject's last debit, grant or give-back here. */
  counts: readonly number[] = [];
  /** Its tool's requests prepaid in the rate limit's window of its last grant. */
  rate: RateUnits | null = null;
  /** A request of its tool asked for its rate units since its last grant: prepaying them may serve one. */
  rateAsked = false;

  constructor(
    /** The tool of the call that opened it: its grants and give-back are recorded under it. */
    readonly tool: string,
    readonly at: SubjectWindows,
    public since: number,
  ) {}
}

const LEASE_IDLE_MS = 250;
const LEASE_SHARE = 16;
/** How far the clocks of the api replicas, the cache and the store may disagree. */
const CLOCK_SKEW_MS = 5_000;
/** A grant smaller than this is not worth its round trips and its two events. */
const MIN_UNITS = 8;
/** Tries of each step of a give-back, an idle period apart, before its units are left charged. */
const GIVE_BACK_TRIES = 3;
/**
 * How long a give-back already made on the live counters keeps trying to record it on the log while
 * the event store is unavailable (a PostgreSQL restart or failover), pauses doubling to 5 s: given up
 * sooner, the log would charge the key units the counters gave back, which every rebuild of the
 * counters from the log (a Redis loss, a restore, rebuild-quota) would then charge it for. Half an
 * hour, as the live counters' own give-back. A stopping meter tries GIVE_BACK_TRIES times only.
 */
const RETURN_RECORD_WITHIN_MS = 30 * 60_000;
const RETURN_RECORD_MAX_PAUSE_MS = 5_000;

/**
 * Counts served calls: the day and month windows are checked and debited in one atomic cache operation
 * (replicas cannot overspend), then recorded on the log the counters are rebuilt from; busy subjects are
 * served from a lease. Nothing is served from counters whose generation is gone: empty, they give calls away.
 */
export class QuotaMeter {
  readonly counters: QuotaCounters;
  readonly plans: PlanTable;
  readonly now: () => number;
  /** Every channel that meters calls shares the api's one meter, so one observer sees them all. */
  observer: QuotaObserver | null = null;
  /** Rate limits whose requests each grant prepays beside its quota units; null: quota alone. */
  rates: RateWindows | null = null;
  /** Aborted by stop(): ends the pauses of give-backs still waiting for the event store. */
  private readonly stopping = new AbortController();
  private readonly leaseMs: number;
  private readonly maxUnits: number;
  private readonly idleMs: number;
  /** Each subject's leases: one live at most, and the ended ones still giving units back. */
  private readonly leases = new Map<string, QuotaLease[]>();
  private sweeper: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly deps: {
      cache: Cache;
      store: EventStore;
      plans: PlanTable;
      now?: () => number;
      counters?: QuotaCounters;
      lease?: LeaseOptions;
      logger?: Logger;
    },
  ) {
    this.counters = deps.counters ?? new QuotaCounters({ store: deps.store, cache: deps.cache });
    this.plans = deps.plans;
    this.now = deps.now ?? Date.now;
    this.leaseMs = deps.lease?.ms ?? 0;
    this.maxUnits = deps.lease?.maxUnits ?? 256;
    this.idleMs = deps.lease?.idleMs ?? Math.max(20, Math.min(LEASE_IDLE_MS, this.leaseMs));
  }

  private live<T>(op: () => Promise<T>): Promise<T> {
    return onLiveCounters(op, () => this.counters.ensure());
  }

  /**
   * Figures without debiting, in the subject's windows now or `at`: from the counts last read here while
   * a lease of their day and plan holds a unit, else read live (CacheUnavailableError when out of reach).
   */
  async peek(
    subject: QuotaSubject,
    at = subjectWindows(subject, this.plans, this.now()),
  ): Promise<QuotaSnapshot> {
    const lease = this.liveLease(at.subject.id);
    if (lease !== undefined && lease.free > 0 && sameDayAndPlan(lease.at, at))
      return this.figures(at, lease.counts);
    const counts = await this.live(() => this.deps.cache.readLive(QUOTA_FAMILY, at.keys));
    return this.figures(at, counts);
  }

  /** `counts`, less what the subject's leases here hold (one of the day before holds on the month's too). */
  private figures(at: SubjectWindows, counts: readonly number[]): QuotaSnapshot {
    let shown = counts;
    for (const { free, pending, at: leased } of this.leases.get(at.subject.id) ?? [])
      if (free + pending > 0) shown = less(shown, at.keys, leased.keys, free + pending);
    return quotaSnapshot(at.limits, at.period, shown);
  }

  /**
   * Debits one call in the subject's windows now or `at` (made when the call was asked), or refuses when
   * one is full. Resolves only once the debit is on the log; throws (cache, store) when it cannot be made.
   */
  async debit(
    subject: QuotaSubject,
    tool: string,
    at = subjectWindows(subject, this.plans, this.now()),
  ): Promise<DebitOutcome> {
    const lease = this.leaseOf(at, tool);
    if (lease !== undefined && this.take(lease, left(at.windows, lease.counts))) {
      const outcome: DebitOutcome = { ok: true, snapshot: this.figures(at, lease.counts), refusedBy: null };
      // Answered with the rest of the turn's calls, as a group commit's are (turn-end.ts).
      await turnEnd();
      return outcome;
    }
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, at.windows, 1));
    const snapshot = this.figures(at, result.counts);
    const recorded = result.ok
      ? this.record(at, debitData(at, tool, 1, result.generation), 'committed')
      : null;
    if (lease !== undefined && lease.ending === null) {
      if (result.ok) this.refill(lease, left(at.windows, result.counts));
      lease.counts = result.counts;
    }
    if (recorded === null)
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily' };
    await recorded;
    return { ok: true, snapshot, refusedBy: null };
  }

  /** The live lease while it holds the call's day and plan, else a new one, empty until a grant (refill). */
  private leaseOf(at: SubjectWindows, tool: string): QuotaLease | undefined {
    const subjectId = at.subject.id;
    const live = this.liveLease(subjectId);
    // The same day and plan (windows made again once the memo was cleared): the same lease.
    if (live !== undefined && sameDayAndPlan(live.at, at)) return live;
    // A call asked before midnight and debited after it debits directly: ending the new day's lease would
    // flip-flop give-backs and fresh leases between the two days while such calls are in flight.
    if (live !== undefined && at.period.dayResetsAt < live.at.period.dayResetsAt) return undefined;
    // A new day or plan ends the lease: its units go back to the windows they were counted in.
    if (live !== undefined) this.end(live);
    if (!this.leasing) return undefined;
    const lease = new QuotaLease(tool, at, this.now());
    this.leases.set(subjectId, [...(this.leases.get(subjectId) ?? []), lease]);
    if (this.sweeper === null) {
      this.sweeper = setInterval(this.sweep, this.idleMs);
      this.sweeper.unref();
    }
    return lease;
  }

  private liveLease(subjectId: string): QuotaLease | undefined {
    return this.leases.get(subjectId)?.find((lease) => lease.ending === null);
  }

  private get leasing(): boolean {
    return this.leaseMs > 0 && this.maxUnits >= MIN_UNITS && !this.stopped;
  }

  /** A call of the lease: takes one of its units when it has one. */
  private take(lease: QuotaLease, left: number): boolean {
    lease.calls++;
    lease.idle = false;
    if (lease.free === 0) return false;
    lease.free--;
    this.refill(lease, left);
    return true;
  }

  /** Asks for the next grant when due: none in flight and at most half the last one left. */
  private refill(lease: QuotaLease, left: number): void {
    if (lease.granting !== null || lease.ending !== null || !this.leasing || lease.calls < MIN_UNITS) return;
    if (lease.free + lease.pending > lease.size >> 1) return;
    const now = this.now();
    const elapsed = Math.max(1, now - lease.since);
    // What the subject's leases hold here, this one and the ended ones still giving units back; none
    // while another's grant is being counted (its units are not in `pending` until the counters
    // answer), so that a kill -9 leaves at most one lease's units charged and unanswered.
    let held = 0;
    for (const other of this.leases.get(lease.at.subject.id) ?? []) {
      if (other.granting !== null) return;
      held += other.free + other.pending;
    }
    // Four times the calls seen at most: a burst's first calls do not buy a full lease.
    const units = Math.min(
      this.maxUnits - held,
      Math.floor((lease.calls * this.leaseMs) / elapsed),
      4 * lease.calls,
      Math.floor(left / LEASE_SHARE),
    );
    if (units >= MIN_UNITS || elapsed > this.leaseMs) {
      lease.calls = 0;
      lease.since = now;
    }
    if (units < MIN_UNITS) return;
    lease.granting = this.grant(lease, units)
      .catch((err: unknown) => this.deps.logger?.warn({ err }, 'quota lease not granted'))
      .finally(() => {
        lease.granting = null;
      });
  }

  /** Counts `units` ahead on the counters, then appends them (flushed: a lost grant is calls served free). */
  private async grant(lease: QuotaLease, units: number): Promise<void> {
    const { at } = lease;
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, at.windows, units));
    lease.counts = result.counts;
    if (!result.ok) return;
    lease.pending = units;
    try {
      await this.record(at, debitData(at, lease.tool, units, result.generation), 'flushed');
      lease.free += units;
      lease.size = units;
    } catch (err) {
      this.deps.logger?.warn({ err }, 'quota lease not recorded: its units given back');
      return;
    } finally {
      lease.pending = 0;
    }
    await this.grantRate(lease, units);
  }

  /**
   * Counts up to `units` of the lease tool's requests ahead in the rate windows now, at most 1/LEASE_SHARE
   * of what its last grant left there (of a window's limit before any). Best effort: else each request is debited.
   */
  private async grantRate(lease: QuotaLease, units: number): Promise<void> {
    if (this.rates === null || lease.ending !== null || !lease.rateAsked) return;
    lease.rateAsked = false;
    const windows = this.rates.windowsOf(lease.at.subject, lease.tool, this.now());
    const kept = lease.rate !== null && sameWindows(lease.rate.windows, windows) ? lease.rate : null;
    const share = Math.floor(left(windows, kept?.granted.counts ?? windows.map(() => 0)) / LEASE_SHARE);
    const n = Math.min(units, share - (kept?.free ?? 0));
    if (n < MIN_UNITS) return;
    const result = await this.deps.cache.debitWindows(windows, n).catch(() => null);
    // An ended lease's give-back waits for this grant, and gives these back too.
    if (result?.ok) lease.rate = { windows, free: n + (kept?.free ?? 0), granted: result };
  }

  /** One of the subject's requests of `tool` prepaid in the window ending at `end` under its plan `tier`: its
   *  windows and counts at the grant (prepaid ones count as spent), or null when its live lease holds none. */
  takeRate(subjectId: string, tier: string, tool: string, end: number): Readonly<RateUnits> | null {
    const lease = this.liveLease(subjectId);
    if (lease?.tool !== tool || this.rates!.tierOf(lease.at.subject) !== tier) return null;
    lease.rateAsked = true;
    const { rate } = lease;
    if (rate === null || rate.free === 0 || rate.windows[0]!.expiresAt !== end) return null;
    rate.free--;
    return rate;
  }

  /** Ends `lease` once, however many ask: its unused units go back (giveBack). */
  private end(lease: QuotaLease): void {
    lease.ending ??= this.giveBack(lease);
  }

  /**
   * Gives an ended lease's unused units back once its grant in flight is in: on the live counters (one
   * id for every try: a try whose answer was lost is not given back twice), then on the log. Never rejects.
   */
  private async giveBack(lease: QuotaLease): Promise<void> {
    await lease.granting;
    const { at, tool, rate } = lease;
    lease.rate = null;
    // Unused requests go back unless their window ends within the clocks' allowed skew: one that
    // reached the next window's counter would give its budget away. Else they lapse with it.
    if (rate !== null && rate.free > 0 && rate.windows[0]!.expiresAt - this.now() > CLOCK_SKEW_MS) {
      const keys = rate.windows.map((w) => w.key);
      await this.deps.cache.releaseWindows(keys, rate.free).catch(() => {});
    }
    const units = lease.free;
    try {
      if (units === 0) return;
      const id = newEventId();
      const generation = await this.tried(() => this.deps.cache.refundLive(QUOTA_FAMILY, at.keys, units, id));
      lease.free = 0;
      this.uncount(at, units);
      const data = debitData(at, tool, units, generation);
      await this.recordReturn(data, id);
    } catch (err) {
      this.deps.logger?.error(
        { err, subject: at.subject.id, tool, units },
        'quota lease not given back: its units stay charged on the log',
      );
    } finally {
      lease.free = 0;
      const rest = this.leases.get(at.subject.id)?.filter((other) => other !== lease) ?? [];
      if (rest.length > 0) this.leases.set(at.subject.id, rest);
      else this.leases.delete(at.subject.id);
    }
  }

  /**
   * Records a give-back the live counters already took: tried GIVE_BACK_TRIES times an idle period
   * apart, and while the event store is unavailable (and the meter is not stopping) on, pauses
   * doubling to RETURN_RECORD_MAX_PAUSE_MS, for RETURN_RECORD_WITHIN_MS. Every try carries the same id.
   */
  private async recordReturn(data: EventData<'QuotaDebitsReturned'>, id: string): Promise<void> {
    const deadline = Date.now() + RETURN_RECORD_WITHIN_MS;
    let pauseMs = this.idleMs;
    for (let tries = 1; ; tries++) {
      try {
        return await this.append('QuotaDebitsReturned', data, id, 'flushed');
      } catch (err) {
        const waitOut = err instanceof EventStoreUnavailableError && !this.stopped && Date.now() < deadline;
        if (tries >= GIVE_BACK_TRIES && !waitOut) throw err;
        if (tries === GIVE_BACK_TRIES)
          this.deps.logger?.warn(
            { err, subject: data.subject, units: data.units },
            'quota lease give-back not on the log yet: tried again until the event store answers',
          );
        // A stop ends the pause: one last try, then the units are left charged, as before.
        await delay(pauseMs, undefined, { ref: false, signal: this.stopping.signal }).catch(() => {});
        if (tries >= GIVE_BACK_TRIES) pauseMs = Math.min(pauseMs * 2, RETURN_RECORD_MAX_PAUSE_MS);
      }
    }
  }

  /** `op`, tried up to GIVE_BACK_TRIES times an idle period apart. */
  private async tried<T>(op: () => Promise<T>): Promise<T> {
    for (let tries = 1; ; tries++) {
      try {
        return await op();
      } catch (err) {
        if (tries >= GIVE_BACK_TRIES) throw err;
        await delay(this.idleMs);
      }
    }
  }

  private readonly sweep = (): void => {
    for (const leases of this.leases.values())
      for (const lease of leases) {
        if (lease.idle) this.end(lease);
        lease.idle = true;
      }
    if (this.leases.size === 0 && this.sweeper !== null) {
      clearInterval(this.sweeper);
      this.sweeper = null;
    }
  };

  /** Ends every lease and gives its units back (the api's shutdown): a clean stop charges only what was served. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopping.abort();
    if (this.sweeper !== null) clearInterval(this.sweeper);
    this.sweeper = null;
    const leases = [...this.leases.values()].flat();
    for (const lease of leases) this.end(lease);
    await Promise.all(leases.map((lease) => lease.ending));
  }

  /** Takes units given back on the windows `at` out of the counts its subject's live lease answers with. */
  private uncount(at: SubjectWindows, units: number): void {
    const live = this.liveLease(at.subject.id);
    if (live === undefined) return;
    live.counts = less(live.counts, live.at.keys, at.keys, units);
  }

  /**
   * Records counted units on the log, or gives them back: a call's record committed (it survives this
   * process), a grant's flushed (a lost grant is calls served free). Calls appended together land together.
   */
  private async record(at: SubjectWindows, data: EventData<DebitRecord>, durability: Durability) {
    try {
      await this.append('QuotaDebitsRecorded', data, newEventId(), durability);
    } catch (err) {
      // Units not recorded are not served: given back (out of reach, they stay charged).
      const { generation, units } = data;
      if (await this.deps.cache.releaseLive(QUOTA_FAMILY, generation!, at.keys, units).catch(() => false))
        this.uncount(at, units);
      throw err;
    }
  }

  /** Appends a record; a failed append that landed anyway (its answer lost) succeeds; unreadable: failed. */
  private async append(type: DebitRecord, data: EventData<DebitRecord>, id: string, durability: Durability) {
    const stream = `quota-${data.subject}`;
    const since = Date.now();
    try {
      await this.deps.store.append(stream, [{ type, data, id }], { durability });
    } catch (err) {
      if (!(await this.landed(stream, id, since))) throw err;
    }
  }

  /** Whether `id` is on `stream`, read back a page at a time from its end to before its append began. */
  private async landed(stream: string, id: string, since: number): Promise<boolean> {
    const { store } = this.deps;
    let end = await store.streamRevision(stream).catch(() => null);
    while (end !== null && end >= 0) {
      const from = Math.max(0, end - 63);
      const page = await store
        .readStream(stream, { fromRevision: from, maxCount: end - from + 1 })
        .catch(() => []);
      if (page.some((event) => event.id === id)) return true;
      // The store's clock may trail this process's: a page wholly older than that is past it.
      const last = page.at(-1);
      if (last === undefined || Date.parse(last.recordedAt) < since - CLOCK_SKEW_MS) return false;
      end = from - 1;
    }
    return false;
  }
}

type DebitRecord = 'QuotaDebitsRecorded' | 'QuotaDebitsReturned';
type Durability = 'committed' | 'flushed';

function sameWindows(a: QuotaWindow[], b: QuotaWindow[]): boolean {
  return a.length === b.length && a.every((w, i) => w.key === b[i]!.key && w.expiresAt === b[i]!.expiresAt);
}

function sameDayAndPlan(a: SubjectWindows, b: SubjectWindows): boolean {
  return a === b || (a.period.day === b.period.day && a.subject.plan === b.subject.plan);
}

/** `counts` of the windows `keys`, less `units` on those among `from` (never below 0). */
function less(counts: readonly number[], keys: string[], from: string[], units: number): readonly number[] {
  return counts.map((count, i) => (from.includes(keys[i]!) ? (count > units ? count - units : 0) : count));
}

/** What is left in the tighter of `windows` at `counts` (none known: nothing, so no grant). */
function left(windows: QuotaWindow[], counts: readonly number[]): number {
  if (counts.length === 0) return 0;
  let least = Number.POSITIVE_INFINITY;
  for (let i = 0; i < windows.length; i++) least = Math.min(least, windows[i]!.limit - (counts[i] ?? 0));
  return least;
}

/**
 * Figures from the counters `[month, day]`. The block's own four are those of the window that binds,
 * the one with less left (the month on a tie: a call then waits for it), so `resets_at` is when an
 * exhausted caller may call again; `monthly` and `daily` give each whole. `used` is the calls counted,
 * above `total` once a key moved to a smaller plan (`remaining` 0 then: the debit refuses at the limit).
 */
export function quotaSnapshot(
  limits: PlanLimits,
  period: QuotaPeriod,
  counts: readonly number[],
): QuotaSnapshot {
  const monthly = windowFigures(counts[0] ?? 0, limits.monthly, period.monthResetsAtIso);
  if (limits.daily === null) return { ...monthly, monthly };
  const daily = windowFigures(counts[1] ?? 0, limits.daily, period.dayResetsAtIso);
  return { ...(daily.remaining < monthly.remaining ? daily : monthly), monthly, daily };
}

function windowFigures(used: number, total: number, resets_at: string) {
  return { used, total, remaining: Math.max(0, total - used), resets_at };
}

/** A debit event's data, from values checked already, in the schema's field order. */
function debitData(
  { subject, period }: SubjectWindows,
  tool: string,
  units: number,
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
