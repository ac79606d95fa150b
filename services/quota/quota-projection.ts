import type { Cache } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { defineProjection, foldLog, type Projection } from '../../projections/projection.ts';
import { counterExpiry, dayKey, monthKey, resetsAtOf } from './windows.ts';

/** Counter per quota window, as the cache should hold it, folded from QuotaDebited. */
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

/**
 * Rebuilds the cache's quota counters from the log: folds every QuotaDebited and sets the
 * counters of windows still open at `now`. Run it on an emptied quota prefix (or on the
 * in-process cache at start); counters the log does not know are not touched.
 */
export async function rebuildQuotaCache(deps: {
  store: EventStore;
  cache: Cache;
  now?: number;
  pageSize?: number;
}): Promise<{ windows: number; events: number }> {
  const now = deps.now ?? Date.now();
  const pageSize = deps.pageSize ?? 1_000;
  const { state, events } = await foldLog(deps.store, quotaBalancesProjection, pageSize);
  const windows = Object.entries(state)
    .filter(([, w]) => w.expiresAt > now)
    .map(([key, w]) => ({ key, count: w.count, expiresAt: w.expiresAt }));
  for (let i = 0; i < windows.length; i += 500) await deps.cache.setWindows(windows.slice(i, i + 500));
  return { windows: windows.length, events };
}
