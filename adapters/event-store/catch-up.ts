import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { Subscription } from './port.ts';

/** Wakes waiting subscribers when new events are committed in this process. */
export class AppendSignal {
  private waiters = new Set<() => void>();

  notify(): void {
    const waiters = this.waiters;
    this.waiters = new Set();
    for (const wake of waiters) wake();
  }

  /** Resolves on the next notify, or after `timeoutMs` (to see appends by other processes). */
  wait(timeoutMs: number): { promise: Promise<void>; cancel: () => void } {
    let resolve!: () => void;
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    // Woken by notify or by the poll tick, whichever comes first; either way the other is
    // cleared, so a process does not keep one pending timer per wake-up alive.
    const wake = () => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      this.waiters.delete(wake);
      resolve();
    }, timeoutMs);
    this.waiters.add(wake);
    return {
      promise,
      cancel: () => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        wake();
      },
    };
  }
}

/**
 * A catch-up subscription over any store that can read all from a position: reads pages until
 * it has caught up, then waits for an append signal (or a poll tick) and reads again. Because it
 * always reads "after the last position yielded", nothing is lost or doubled.
 */
export function catchUpSubscription(
  readAll: (after: number, maxCount: number) => Promise<RecordedEvent[]>,
  signal: AppendSignal,
  options: { after?: number; pageSize?: number; pollMs?: number } = {},
): Subscription {
  const pageSize = options.pageSize ?? 512;
  const pollMs = options.pollMs ?? 250;
  let closed = false;
  let pendingWait: { cancel: () => void } | null = null;

  async function* run(): AsyncGenerator<RecordedEvent> {
    let after = options.after ?? 0;
    try {
      while (!closed) {
        // Register before reading so an append between the read and the wait is not missed.
        const wait = signal.wait(pollMs);
        pendingWait = wait;
        const page = await readAll(after, pageSize);
        for (const event of page) {
          if (closed) break;
          after = event.position;
          yield event;
        }
        if (page.length < pageSize && !closed) await wait.promise;
        else wait.cancel();
      }
    } finally {
      // A failed read or an early return must not leave a poll timer holding the process open.
      pendingWait?.cancel();
    }
  }

  const iterator = run();
  return {
    [Symbol.asyncIterator]: () => iterator,
    async close() {
      closed = true;
      pendingWait?.cancel();
      await iterator.return(undefined);
    },
  };
}
