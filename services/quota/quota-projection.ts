import { defineProjection, type Projection } from '../../projections/projection.ts';
import { counterExpiry, dayKey, monthKey, resetsAtOf } from './windows.ts';

/** Counter per quota window, as the cache should hold it, folded from QuotaDebited (see quota-rebuild.ts). */
export type QuotaBalances = Record<string, { count: number; expiresAt: number }>;

function add(state: QuotaBalances, key: string, units: number, expiresAt: number): void {
  const current = state[key];
  if (current) current.count += units;
  else state[key] = { count: units, expiresAt };
}

export const quotaBalancesProjection: Projection<QuotaBalances> = defineProjection({
  name: 'quota-balances',
  version: 1,
  eventTypes: ['QuotaDebited'],
  initial: (): QuotaBalances => ({}),
  evolve(state, event) {
    const { subject, units, day, month } = event.data;
    add(state, monthKey(subject, month), units, counterExpiry(resetsAtOf(month)));
    add(state, dayKey(subject, day), units, counterExpiry(resetsAtOf(day)));
    return state;
  },
});
