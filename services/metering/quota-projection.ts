import type { RecordedEvent } from '../../contracts/envelope.ts';
import { defineProjection, type Projection } from '../../projections/projection.ts';
import { chatKey, counterExpiry, dayKey, monthKey, resetsAtOf } from './windows.ts';

/** Counter per quota window, as the cache should hold it, folded from the counted events. */
export type QuotaBalances = Record<string, { count: number; expiresAt: number }>;

/** Debit events: QuotaDebitsRecorded, QuotaDebited (older logs), QuotaDebitsReturned (taken back). */
const DEBIT_EVENT_TYPES = ['QuotaDebited', 'QuotaDebitsRecorded', 'QuotaDebitsReturned'] as const;
export const DEBITS: ReadonlySet<string> = new Set(DEBIT_EVENT_TYPES);

/** Units a debit event charges (negative for a return; 0 for other events, or another `subject`'s). */
export function debitedUnits(event: RecordedEvent, subject?: string): number {
  if (!DEBITS.has(event.type)) return 0;
  const data = event.data as { subject?: unknown; units?: unknown };
  if (subject !== undefined && data.subject !== subject) return 0;
  if (typeof data.units !== 'number') return 0;
  return event.type === 'QuotaDebitsReturned' ? -data.units : data.units;
}

function addUnits(state: QuotaBalances, key: string, units: number, expiresAt: number): void {
  const current = state[key];
  if (current) current.count += units;
  else state[key] = { count: units, expiresAt };
}

/** Not a window: the start of the latest day folded (its `expiresAt`): past, so no rebuild writes it. */
const LATEST_DAY = '@latest-day';

/**
 * The counters of every quota window, calls and monthly chats (a chat delta may go below 0: the cache
 * clamps), that a rebuild writes. Windows expired before the latest day folded are dropped when a new day
 * begins, so the state holds about a month of windows, however long the log.
 */
export const quotaBalancesProjection: Projection<QuotaBalances> = defineProjection({
  name: 'quota-balances',
  // 3: chats folded, expired windows dropped.
  version: 3,
  eventTypes: [...DEBIT_EVENT_TYPES, 'ChatQuotaConsumed', 'ChatQuotaRefunded'],
  initial: (): QuotaBalances => ({}),
  evolve(state, event) {
    const { subject, month } = event.data;
    const monthEnds = counterExpiry(resetsAtOf(month));
    if (event.type === 'ChatQuotaConsumed' || event.type === 'ChatQuotaRefunded') {
      addUnits(state, chatKey(subject, month), event.type === 'ChatQuotaConsumed' ? 1 : -1, monthEnds);
      return state;
    }
    const { day } = event.data;
    const units = debitedUnits(event);
    addUnits(state, monthKey(subject, month), units, monthEnds);
    const dayEnds = resetsAtOf(day);
    addUnits(state, dayKey(subject, day), units, counterExpiry(dayEnds));
    const dayStarts = dayEnds - 86_400_000;
    const latest = state[LATEST_DAY];
    if (latest === undefined || dayStarts > latest.expiresAt) {
      for (const [key, window] of Object.entries(state)) if (window.expiresAt <= dayStarts) delete state[key];
      state[LATEST_DAY] = { count: 0, expiresAt: dayStarts };
    }
    return state;
  },
});
