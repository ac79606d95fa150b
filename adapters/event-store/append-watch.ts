import type { EventStore } from './port.ts';

/** What a watched store tells about the appends it has started and not yet finished. */
export interface AppendWatch {
  /** Appends started and not yet resolved or rejected. */
  readonly pending: number;
  /** How long the oldest of them has been waiting, in ms (0 when none is). */
  oldestPendingMs(now?: number): number;
  /** How long since an append last finished (resolved or failed), or since the watch began, in ms. */
  sinceLastFinishedMs(now?: number): number;
}

/**
 * Wraps any store so the process can tell when its appends stop completing: an LMDB write lock
 * held by a stopped process, a PostgreSQL lock or a server that no longer answers all look the
 * same from here, an append that neither resolves nor fails. Reads and health checks can keep
 * answering meanwhile, so the store's own health does not see it.
 *
 * A Proxy rather than a class implementing the port: everything but `append` reaches the store
 * itself, including what a slice reads off the concrete adapter (LMDB's `root`).
 */
export function watchAppends<S extends EventStore>(store: S): { store: S; watch: AppendWatch } {
  // Insertion order is start order, so the first entry is always the oldest still pending.
  const started = new Map<number, number>();
  let lastFinishedAt = Date.now();
  let next = 0;
  const finished = (id: number) => {
    started.delete(id);
    lastFinishedAt = Date.now();
  };
  const append: EventStore['append'] = (stream, events, options) => {
    const id = next++;
    started.set(id, Date.now());
    let result: ReturnType<EventStore['append']>;
    try {
      result = store.append(stream, events, options);
    } catch (err) {
      finished(id);
      throw err;
    }
    return result.finally(() => finished(id));
  };
  const bound = new Map<PropertyKey, unknown>();
  const proxy = new Proxy(store, {
    get(target, property) {
      if (property === 'append') return append;
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== 'function') return value;
      // Bound once: methods run with the store itself as `this`, not the proxy.
      let fn = bound.get(property);
      if (!fn) {
        fn = (value as (...args: unknown[]) => unknown).bind(target);
        bound.set(property, fn);
      }
      return fn;
    },
  });
  const watch: AppendWatch = {
    get pending() {
      return started.size;
    },
    oldestPendingMs(now = Date.now()) {
      for (const at of started.values()) return Math.max(0, now - at);
      return 0;
    },
    sinceLastFinishedMs(now = Date.now()) {
      return Math.max(0, now - lastFinishedAt);
    },
  };
  return { store: proxy, watch };
}

/**
 * Whether the process's appends are stalled, as /readyz reports it, with hysteresis. It turns not
 * ready when its oldest pending append has waited longer than `stallMs` and no append has finished
 * for as long: writes have stopped (a lock held by a stopped process, a server that no longer
 * answers), where under load they are slow but still finishing. It turns ready again once appends
 * finish and the oldest still pending is younger than half of `stallMs`, so a store limping at the
 * threshold does not flap.
 */
export function appendReadiness(watch: AppendWatch, stallMs: number) {
  let stalled = false;
  return (now = Date.now()) => {
    const oldestMs = watch.oldestPendingMs(now);
    const pending = watch.pending;
    stalled = stalledAfter(stalled, oldestMs, watch.sinceLastFinishedMs(now), stallMs);
    return stalled
      ? {
          ok: false,
          detail: `an append has waited ${oldestMs} ms for the event store and none finished for ${stallMs} ms`,
          pending,
          oldestMs,
        }
      : { ok: true, pending, oldestMs };
  };
}

/** The next stalled state (see appendReadiness) from the oldest pending append's wait and the time since one finished. */
export function stalledAfter(stalled: boolean, oldestMs: number, idleMs: number, stallMs: number): boolean {
  if (!stalled) return oldestMs > stallMs && idleMs > stallMs;
  return !(oldestMs < stallMs / 2 && idleMs < stallMs);
}
