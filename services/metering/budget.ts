import type { Logger } from 'pino';

/**
 * One prepaid budget, the only way this folder decides a busy caller's call without a round trip:
 * the quota meter's leases (units debited on the counters and the log). The kind says how units
 * are granted and given back on its shared state (BudgetKind). The rules:
 *
 * - granted to a busy owner only (a call within ms/MIN_UNITS of its last one, and within idleMs, or
 *   one while its last is in flight where the kind says so), once MIN_UNITS of its calls were seen,
 *   sized to `ms` of its calls at their recent rate, at most `maxUnits`, and only while it is at
 *   most 1/BUDGET_SHARE of what is left: near a limit every call goes to the shared counters, and
 *   no replica holds units another one needs;
 * - used without a round trip: a unit is counted on the shared state before any call takes it;
 *   the next grant is asked for once half the last one is left;
 * - given back once no call took from it for one to two idle periods, and at a clean stop;
 * - lost on a crash: a killed process leaves its leases' unused units counted, at most
 *   `maxUnits` per busy owner and part, charged.
 *
 * Measured against a round trip per call: `npm run bench -- budget`.
 */
const BUDGET_IDLE_MS = 250;
export const BUDGET_SHARE = 16;
/** A grant smaller than this is not worth its round trips (and, for quota, its two events). */
export const MIN_UNITS = 8;

export interface Lease {
  readonly owner: string;
  readonly part: string;
  /** Units counted on the shared state that no call took yet. */
  free: number;
  /** Units being granted: counted, not yet usable. */
  pending: number;
  /** Units of the last grant. */
  size: number;
  /** Calls since `since`: the rate the next grant is sized by. */
  calls: number;
  since: number;
  /** The sweep count at the last call: two sweeps without one end the lease. */
  lastTaken: number;
  granting: Promise<void> | null;
  giving: Promise<void> | null;
  ended: boolean;
}

/**
 * What a kind of lease adds to the budget: how units are granted and given back on its shared
 * state, and which calls a lease serves. `C` is what a call brings (the quota's subject windows,
 * the rate limiter's request shape): the budget hands it on, so no call makes a closure.
 */
export interface BudgetKind<L extends Lease, C> {
  /** Counts up to `units` ahead on the shared state, adding them to `pending`; resolves the units granted. */
  grant(lease: L, units: number): Promise<number>;
  /** Gives back the lease's free units; resolves whether nothing is left to give back. */
  giveBack(lease: L): Promise<boolean>;
  /** Whether the owner's live lease still serves `call`; one that does not is ended. */
  fits(lease: L, call: C): boolean;
  /** A new lease for `call`: `base` with the kind's fields. */
  make(base: Lease, call: C): L;
  /** Whether the lease's units are counted where `call`'s are (`held`). */
  holds(lease: L, call: C): boolean;
}

export interface BudgetOptions {
  /** How much of a busy owner's traffic one grant covers, in ms of its calls; 0: no leases. */
  ms: number;
  maxUnits: number;
  idleMs?: number;
}

const REMEMBERED_OWNERS = 10_000;

export class Budget<L extends Lease, C> {
  readonly idleMs: number;
  private readonly leases = new Map<string, Map<string, L>>();
  /** Ended leases whose units are not all given back yet. */
  private readonly ending = new Set<L>();
  private readonly lastCall = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private sweeps = 0;
  private stopped = false;

  constructor(
    readonly options: BudgetOptions,
    private readonly kind: BudgetKind<L, C>,
    private readonly now: () => number,
    private readonly logger?: Logger,
  ) {
    this.idleMs = options.idleMs ?? Math.max(20, Math.min(BUDGET_IDLE_MS, options.ms));
  }

  get on(): boolean {
    return this.options.ms > 0 && this.options.maxUnits >= MIN_UNITS && !this.stopped;
  }

  get(owner: string, part: string): L | undefined {
    return this.leases.get(owner)?.get(part);
  }

  /** Units the owner's leases, live and ending, hold where `call` is counted: counted, not used. */
  held(owner: string, call: C): number {
    let units = 0;
    const live = this.leases.get(owner);
    if (live !== undefined)
      for (const lease of live.values())
        if (this.kind.holds(lease, call)) units += lease.free + lease.pending;
    if (this.ending.size > 0)
      for (const lease of this.ending)
        if (lease.owner === owner && this.kind.holds(lease, call)) units += lease.free + lease.pending;
    return units;
  }

  /**
   * The lease of a call of `owner`'s `part`, noting the call: the live one while it fits `call`,
   * else a new one when the owner is busy: a call in flight (`overlapping`), or its last within
   * ms/MIN_UNITS and idleMs.
   */
  lease(owner: string, part: string, overlapping: boolean, call: C): L | undefined {
    const now = this.now();
    const last = this.lastCall.get(owner) ?? Number.NEGATIVE_INFINITY;
    // Past REMEMBERED_OWNERS it starts afresh: a flood of callers costs them a lease's delay, not memory.
    if (this.lastCall.size >= REMEMBERED_OWNERS) this.lastCall.clear();
    this.lastCall.set(owner, now);
    let parts = this.leases.get(owner);
    const live = parts?.get(part);
    if (live !== undefined && this.kind.fits(live, call)) return live;
    if (live !== undefined) this.end(live);
    if (!this.on || (!overlapping && now - last > Math.min(this.options.ms / MIN_UNITS, this.idleMs)))
      return undefined;
    const lease = this.kind.make(
      {
        owner,
        part,
        free: 0,
        pending: 0,
        size: 0,
        calls: 0,
        since: now,
        lastTaken: this.sweeps,
        granting: null,
        giving: null,
        ended: false,
      },
      call,
    );
    parts = this.leases.get(owner);
    if (parts === undefined) {
      parts = new Map();
      this.leases.set(owner, parts);
    }
    parts.set(part, lease);
    if (this.timer === null) {
      this.timer = setInterval(this.sweep, this.idleMs);
      this.timer.unref();
    }
    return lease;
  }

  /** A call of the lease: takes one of its units when it has one (and asks for the next grant when due). */
  take(lease: L, left: number): boolean {
    lease.calls++;
    lease.lastTaken = this.sweeps;
    if (lease.free === 0) return false;
    lease.free--;
    this.refill(lease, left);
    return true;
  }

  /** Asks for the next grant when due: none in flight and at most half the last one left. */
  refill(lease: L, left: number): void {
    if (lease.granting !== null || lease.ended || !this.on || lease.calls < MIN_UNITS) return;
    if (lease.free + lease.pending > lease.size >> 1) return;
    const now = this.now();
    const elapsed = Math.max(1, now - lease.since);
    let ending = 0;
    for (const other of this.ending)
      if (other.owner === lease.owner && other.part === lease.part) ending += other.free + other.pending;
    // Four times the calls seen at most: a burst's first calls do not buy a full lease.
    const units = Math.min(
      this.options.maxUnits - lease.free - lease.pending - ending,
      Math.ceil((lease.calls * this.options.ms) / elapsed),
      4 * lease.calls,
      Math.floor(left / BUDGET_SHARE),
    );
    if (units < MIN_UNITS) {
      if (elapsed > this.options.ms) {
        lease.calls = 0;
        lease.since = now;
      }
      return;
    }
    lease.calls = 0;
    lease.since = now;
    lease.granting = this.kind
      .grant(lease, units)
      .then(
        (granted) => {
          if (granted <= 0) return;
          lease.pending -= granted;
          lease.free += granted;
          lease.size = granted;
        },
        (err: unknown) => this.logger?.warn({ err }, 'budget lease not granted'),
      )
      .finally(() => {
        lease.granting = null;
        if (lease.ended) this.giveBack(lease);
      });
  }

  /** No call takes from the lease again; its unused units are given back. */
  end(lease: L): void {
    if (lease.ended) return;
    lease.ended = true;
    const parts = this.leases.get(lease.owner);
    if (parts?.get(lease.part) === lease) {
      parts.delete(lease.part);
      if (parts.size === 0) this.leases.delete(lease.owner);
    }
    this.ending.add(lease);
    this.giveBack(lease);
  }

  /** Forgets every lease without giving anything back (the shared state lost them). */
  forget(): void {
    this.leases.clear();
    this.ending.clear();
  }

  private giveBack(lease: L): void {
    if (lease.giving !== null || lease.granting !== null) return;
    lease.giving = this.kind
      .giveBack(lease)
      .then(
        (settled) => {
          if (settled) this.ending.delete(lease);
        },
        (err: unknown) => this.logger?.warn({ err }, 'budget lease not given back yet'),
      )
      .finally(() => {
        lease.giving = null;
      });
  }

  private readonly sweep = (): void => {
    this.sweeps++;
    for (const parts of [...this.leases.values()])
      for (const lease of [...parts.values()]) if (this.sweeps - lease.lastTaken > 1) this.end(lease);
    for (const lease of this.ending) this.giveBack(lease);
    if (this.leases.size === 0 && this.ending.size === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  };

  /** Ends every lease and waits for its units to be given back (a clean stop charges only what was served). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    for (const parts of [...this.leases.values()]) for (const lease of [...parts.values()]) this.end(lease);
    for (let round = 0; round < 3 && this.ending.size > 0; round++) {
      if (round > 0) await new Promise((resolve) => setTimeout(resolve, this.idleMs));
      const ending = [...this.ending];
      await Promise.all(ending.map((lease) => lease.granting));
      for (const lease of ending) this.giveBack(lease);
      await Promise.all(ending.map((lease) => lease.giving));
    }
    if (this.ending.size > 0)
      this.logger?.warn({ leases: this.ending.size }, 'budget leases not given back at stop');
  }
}
