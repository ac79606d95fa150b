/** Origins of subscription URLs already parsed. */
const origins = new Map<string, string>();

/**
 * One queue per endpoint with its own concurrency limit, so a slow or dead endpoint only ever
 * holds its own slots: every other endpoint's deliveries start at once.
 */
export class EndpointQueues {
  private readonly queues = new Map<string, { running: number; waiting: (() => Promise<void>)[] }>();
  private readonly idle = new Set<() => void>();

  constructor(private readonly concurrency: number) {}

  /** The endpoint an URL belongs to: its origin (scheme, host, port). */
  static keyOf(url: string): string {
    // Asked twice per delivery, of the few URLs subscriptions have: parsing each time showed up in
    // the dispatcher's profile.
    let origin = origins.get(url);
    if (origin === undefined) {
      origin = new URL(url).origin;
      if (origins.size >= 10_000) origins.clear();
      origins.set(url, origin);
    }
    return origin;
  }

  /**
   * Runs the task, or queues it behind the endpoint's others: every task is taken, in order. How
   * much of a waiting task stays in memory is the caller's to decide (see `waiting`).
   */
  push(key: string, task: () => Promise<void>): void {
    let queue = this.queues.get(key);
    if (!queue) {
      queue = { running: 0, waiting: [] };
      this.queues.set(key, queue);
    }
    if (queue.running < this.concurrency) this.run(key, queue, task);
    else queue.waiting.push(task);
  }

  /** Tasks waiting for a slot of this endpoint (not those running). */
  waiting(key: string): number {
    return this.queues.get(key)?.waiting.length ?? 0;
  }

  /** Tasks running or waiting, over every endpoint. */
  get size(): number {
    let n = 0;
    for (const q of this.queues.values()) n += q.running + q.waiting.length;
    return n;
  }

  /** Tasks running or waiting per endpoint (endpoints with none are absent). */
  depths(): Map<string, number> {
    const depths = new Map<string, number>();
    for (const [key, q] of this.queues) depths.set(key, q.running + q.waiting.length);
    return depths;
  }

  /** Resolves when nothing is running or waiting. */
  async drained(): Promise<void> {
    if (this.size === 0) return;
    await new Promise<void>((resolve) => this.idle.add(resolve));
  }

  private run(
    key: string,
    queue: { running: number; waiting: (() => Promise<void>)[] },
    task: () => Promise<void>,
  ): void {
    queue.running++;
    void task()
      .catch(() => undefined)
      .finally(() => {
        queue.running--;
        const next = queue.waiting.shift();
        if (next) this.run(key, queue, next);
        else if (queue.running === 0) this.queues.delete(key);
        if (this.size === 0) {
          for (const resolve of this.idle) resolve();
          this.idle.clear();
        }
      });
  }
}
