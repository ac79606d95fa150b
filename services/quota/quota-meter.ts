import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { newEvent, type Plan } from '../../contracts/events.ts';
import type { PlanTable } from './plans.ts';
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
 * Counts served calls. The check-and-debit of the day and month windows is one atomic cache
 * operation, so concurrent calls and replicas cannot overspend; each debit is then recorded as
 * QuotaDebited, the fact the cache counters are rebuilt from.
 */
export class QuotaMeter {
  constructor(
    private readonly deps: { cache: Cache; store: EventStore; plans: PlanTable; now?: () => number },
  ) {}

  private now(): number {
    return (this.deps.now ?? Date.now)();
  }

  /** Live figures without debiting. Throws CacheUnavailableError when the counters are out of reach. */
  async peek(subject: QuotaSubject): Promise<QuotaSnapshot> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const counts = await this.deps.cache.readWindows(
      quotaWindows(subject.id, limits, period).map((w) => w.key),
    );
    return quotaSnapshot(limits, period, counts);
  }

  /**
   * Debits one call, or refuses when a window is full. Throws CacheUnavailableError or a store
   * error when the debit or its record cannot be made; the caller must not serve then.
   */
  async debit(subject: QuotaSubject, tool: string, requestId: string): Promise<DebitOutcome> {
    const limits = this.deps.plans[subject.plan];
    const period = quotaPeriod(this.now());
    const result = await this.deps.cache.debitWindows(quotaWindows(subject.id, limits, period), 1);
    const snapshot = quotaSnapshot(limits, period, result.counts);
    if (!result.ok) {
      return { ok: false, snapshot, refusedBy: result.refusedBy === 0 ? 'monthly' : 'daily', position: null };
    }
    const appended = await this.deps.store.append(quotaStream(subject.id), [
      newEvent('QuotaDebited', {
        subject: subject.id,
        subjectKind: subject.kind,
        plan: subject.plan,
        tool,
        units: 1,
        day: period.day,
        month: period.month,
        requestId,
      }),
    ]);
    return { ok: true, snapshot, refusedBy: null, position: appended.position };
  }
}
