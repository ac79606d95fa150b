import type { EventStore } from './port.ts';

/** What a watched store tells about the appends it has started and not yet finished. */
export interface AppendWatch {
  /** Appends started and not yet resolved or rejected. */
  readonly pending: number;
  /** How long the oldest of them has been waiting, in ms (0 when none is). */
  oldestPendingMs(now?: number): number;
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
  let next = 0;
  const append: EventStore['append'] = (stream, events, options) => {
    const id = next++;
    started.set(id, Date.now());
    let result: ReturnType<EventStore['append']>;
    try {
      result = store.append(stream, events, options);
    } catch (err) {
      started.delete(id);
      throw err;
    }
    return result.finally(() => started.delete(id));
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
  };
  return { store: proxy, watch };
}
