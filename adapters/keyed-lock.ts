/**
 * Runs tasks one at a time per key, in order, and concurrently across keys: a market's indicator
 * state sees its candles once each however many requests ask for it at once, and commands on one
 * stream from this process do not race each other for its revision.
 */
export class KeyedLock {
  private readonly tails = new Map<string, Promise<unknown>>();

  /** True when no task of `key` is queued or running. */
  idle(key: string): boolean {
    return !this.tails.has(key);
  }

  run<T>(key: string, task: () => Promise<T>): Promise<T> {
    const previous = this.tails.get(key) ?? Promise.resolve();
    const next = previous.then(task, task);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    void tail.then(() => {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    });
    return next;
  }
}
