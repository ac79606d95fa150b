import type { RecordedEvent } from '../../contracts/envelope.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { counterExpiry, dayKey, monthKey, resetsAtOf } from './windows.ts';

/** Counter per quota window, as the cache should hold it, folded from the debit events. */
export type QuotaBalances = Record<string, { count: number; expiresAt: number }>;

/**
 * Debit events: QuotaDebitsRecorded (calls, or a lease's units), QuotaDebited (one call, older
 * logs) and QuotaDebitsReturned (a lease's unused units, folded as taken back).
 */
export const DEBIT_EVENT_TYPES = ['QuotaDebited', 'QuotaDebitsRecorded', 'QuotaDebitsReturned'] as const;

/** Units a debit event charges (negative for a return; 0 for other events, or another `subject`'s). */
export function debitedUnits(event: RecordedEvent, subject?: string): number {
  const type = event.type;
  if (type !== 'QuotaDebited' && type !== 'QuotaDebitsRecorded' && type !== 'QuotaDebitsReturned') return 0;
  const data = event.data as { subject?: unknown; units?: unknown };
  if (subject !== undefined && data.subject !== subject) return 0;
  if (typeof data.units !== 'number') return 0;
  return type === 'QuotaDebitsReturned' ? -data.units : data.units;
}

/** Adds `units` to a window's counter, making it with `expiresAt` when new. */
export function addUnits(state: QuotaBalances, key: string, units: number, expiresAt: number): void {
  const current = state[key];
  if (current) current.count += units;
  else state[key] = { count: units, expiresAt };
}

export const quotaBalancesProjection: Projection<QuotaBalances> = defineProjection({
  name: 'quota-balances',
  // 2: QuotaDebitsReturned folded (a snapshot of version 1 may have passed returns over).
  version: 2,
  eventTypes: DEBIT_EVENT_TYPES,
  initial: (): QuotaBalances => ({}),
  evolve(state, event) {
    const { subject, day, month } = event.data;
    const units = debitedUnits(event);
    addUnits(state, monthKey(subject, month), units, counterExpiry(resetsAtOf(month)));
    addUnits(state, dayKey(subject, day), units, counterExpiry(resetsAtOf(day)));
    return state;
  },
});
