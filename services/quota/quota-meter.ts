import { type Cache, CounterStateLostError } from '../../adapters/cache/port.ts';
import { type EventStore, StorageFullError } from '../../adapters/event-store/port.ts';
import { newEvent, type Plan } from '../../contracts/events.ts';
import type { PlanTable } from './plans.ts';
import { QUOTA_FAMILY, QuotaCounters } from './quota-rebuild.ts';
import { type QuotaSnapshot, quotaSnapshot } from './snapshot.ts';
import { quotaPeriod, quotaWindows } from './windows.ts';

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
  /** Log position of the QuotaDebited event, when debited. */
  position: number | null;
}

export function quotaStream(subjectId: string): string {
  return `quota-${subjectId}`;
}

/**
 * How long a call that finds the counters gone waits for their rebuild before it is refused as
 * retryable (503): long enough for a small log, short enough not to hold requests on a big one.
 */
const LOST_COUNTERS_WAIT_MS = 2_000;

/**
 * Counts served calls. The check-and-debit of the day and month windows is one atomic cache
 * operation, so concurrent calls and replicas cannot overspend; each debit is then recorded as
 * QuotaDebited, the fact the cache counters are rebuilt from. The counters live in the cache's
 * live generation: when there is none (the cache lost its data) nothing is served from them
 * until they are rebuilt, since empty counters would give calls away.
 */
export class QuotaMeter {
  /** Rebuilds the counters when their generation is gone; the api runs it at start and on reconnect. */
  readonly counters: QuotaCounters;

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

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /**
   * Runs `op` on the live counters. When they are gone it waits a little for the rebuild and
   * tries once more; still gone, or the rebuild failing, is CacheUnavailableError (retryable).
   */
  private async live<T>(op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      if (!(err instanceof CounterStateLostError)) throw err;
      let timer: NodeJS.Timeout | undefined;
      const waited = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, this.deps.lostWaitMs ?? LOST_COUNTERS_WAIT_MS);
      });
      try {
        await Promise.race([this.counters.ensure(), waited]);
      } catch {
        throw err;
      } finally {
        clearTimeout(timer);
      }
      return op();
    }
  }

  /** Live figures without debiting. Throws CacheUnavailableError when the counters are out of reach. */
  async peek(subject: QuotaSubject): Promise<QuotaSnapshot> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const keys = quotaWindows(subject.id, limits, period).map((w) => w.key);
    const counts = await this.live(() => this.deps.cache.readLive(QUOTA_FAMILY, keys));
    return quotaSnapshot(limits, period, counts);
  }

  /**
   * Debits one call, or refuses when a window is full. Throws CacheUnavailableError or a store
   * error when the debit or its record cannot be made; the caller must not serve then.
   */
  async debit(subject: QuotaSubject, tool: string, requestId: string): Promise<DebitOutcome> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const windows = quotaWindows(subject.id, limits, period);
    const result = await this.live(() => this.deps.cache.debitLive(QUOTA_FAMILY, windows, 1));
    const snapshot = quotaSnapshot(limits, period, result.counts);
    if (!result.ok) {
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily', position: null };
    }
    const append = this.deps.store.append(quotaStream(subject.id), [
      newEvent('QuotaDebited', {
        subject: subject.id,
        subjectKind: subject.kind,
        plan: subject.plan,
        tool,
        units: 1,
        day: period.day,
        month: period.month,
        requestId,
        generation: result.generation,
      }),
    ]);
    const appended = await append.catch(async (err: unknown) => {
      // Nothing was written (a full disk): the call is not served, so it must not use up quota,
      // or an outage would exhaust every caller. Other failures may have written it: keep the debit.
      if (err instanceof StorageFullError) {
        const keys = windows.map((w) => w.key);
        await this.deps.cache.releaseLive(QUOTA_FAMILY, result.generation, keys, 1).catch(() => false);
      }
      throw err;
    });
    return { ok: true, snapshot, refusedBy: null, position: appended.position };
  }
}
