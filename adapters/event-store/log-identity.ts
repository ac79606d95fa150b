import type { EventStore } from './port.ts';

/**
 * What tells one event log from another: the id of its first event (a fresh UUID per log), or null
 * while the log is empty. Positions do not: two logs both have a position 12. A process that
 * writes to the log and a service it asks to have read it (`npm run keys -- create`, /readyz)
 * compare this to know they share one log before they compare positions.
 */
export function logIdentity(store: EventStore): () => Promise<string | null> {
  let known: string | null = null;
  return async () => {
    // The first event never changes once written: one read, then remembered.
    if (known === null) known = (await store.readAll({ maxCount: 1 }))[0]?.id ?? null;
    return known;
  };
}
