import type { ProjectionStore } from '../projection-store/port.ts';
import type { EventStore } from './port.ts';

/**
 * What a watched store tells about the writes it has started and not yet finished: appends, and
 * the snapshot saves and deletes of a projection store watched beside it (watchSnapshots).
 */
export interface AppendWatch {
  /** Writes started and not yet resolved or rejected. */
  readonly pending: number;
  /** How long the oldest of them has been waiting, in ms (0 when none is). */
  oldestPendingMs(now?: number): number;
  /** How long since a write last finished (resolved or failed), or since the watch began, in ms. */
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
export function watchAppends<S extends EventStore>(
  store: S,
): { store: S; watch: AppendWatch; watchSnapshots<P extends ProjectionStore>(snapshots: P): P } {
  // Insertion order is start order, so the first entry is always the oldest still pending.
  const started = new Map<number, number>();
  let lastFinishedAt = Date.now();
  let next = 0;
  const finished = (id: number) => {
    started.delete(id);
    lastFinishedAt = Date.now();
  };
  const tracked = <T>(write: () => Promise<T>): Promise<T> => {
    const id = next++;
    started.set(id, Date.now());
    let result: Promise<T>;
    try {
      result = write();
    } catch (err) {
      finished(id);
      throw err;
    }
    return result.finally(() => finished(id));
  };
  const append: EventStore['append'] = (stream, events, options) =>
    tracked(() => store.append(stream, events, options));
  const proxy = passThrough(store, { append });
  // A snapshot save waits on the same LMDB write lock as an append: a process stuck in one (the
  // engine saving band scales when a stopped process took the lock) stops appending too, so
  // watching appends alone left it ready for good while nothing was written.
  const watchSnapshots = <P extends ProjectionStore>(snapshots: P): P => {
    const save: ProjectionStore['save'] = (name, snapshot) => tracked(() => snapshots.save(name, snapshot));
    const remove: ProjectionStore['delete'] = (name) => tracked(() => snapshots.delete(name));
    return passThrough(snapshots, { save, delete: remove });
  };
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
  return { store: proxy, watch, watchSnapshots };
}

/** `target` with the methods in `own` replaced; the rest run on the target itself (bound once). */
function passThrough<T extends object>(target: T, own: Record<PropertyKey, unknown>): T {
  const bound = new Map<PropertyKey, unknown>();
  return new Proxy(target, {
    get(object, property) {
      if (Object.hasOwn(own, property)) return own[property];
      const value: unknown = Reflect.get(object, property, object);
      if (typeof value !== 'function') return value;
      // Bound once: methods run with the store itself as `this`, not the proxy.
      let fn = bound.get(property);
      if (!fn) {
        fn = (value as (...args: unknown[]) => unknown).bind(object);
        bound.set(property, fn);
      }
      return fn;
    },
  });
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
