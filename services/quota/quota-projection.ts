import type { RecordedEvent } from '../../contracts/envelope.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { counterExpiry, dayKey, monthKey, resetsAtOf } from './windows.ts';

/**
 * Counter per quota window, as the cache should hold it, folded from the debit events (see
 * quota-rebuild.ts).
 */
export type QuotaBalances = Record<string, { count: number; expiresAt: number }>;

/**
 * The events that record debits: QuotaDebitsRecorded (a batch of one subject's calls, written
 * now) and QuotaDebited (one call, in logs written before). Both carry subject, units, day, month
 * and generation, and fold the same way.
 */
export const DEBIT_EVENT_TYPES = ['QuotaDebited', 'QuotaDebitsRecorded'] as const;

/** Units of calls a debit event records, 0 for any other event (or another subject's, when given). */
export function debitedUnits(event: RecordedEvent, subject?: string): number {
  if (event.type !== 'QuotaDebited' && event.type !== 'QuotaDebitsRecorded') return 0;
  const data = event.data as { subject?: unknown; units?: unknown };
  if (subject !== undefined && data.subject !== subject) return 0;
  return typeof data.units === 'number' ? data.units : 0;
}

function add(state: QuotaBalances, key: string, units: number, expiresAt: number): void {
  const current = state[key];
  if (current) current.count += units;
  else state[key] = { count: units, expiresAt };
}

export const quotaBalancesProjection: Projection<QuotaBalances> = defineProjection({
  name: 'quota-balances',
  version: 1,
  eventTypes: DEBIT_EVENT_TYPES,
  initial: (): QuotaBalances => ({}),
  evolve(state, event) {
    const { subject, units, day, month } = event.data;
    add(state, monthKey(subject, month), units, counterExpiry(resetsAtOf(month)));
    add(state, dayKey(subject, day), units, counterExpiry(resetsAtOf(day)));
    return state;
  },
});
