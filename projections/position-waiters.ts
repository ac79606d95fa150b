/**
 * Callers waiting for a projection to reach a log position (read-your-writes): the projection
 * runner and the history slice's export-rows store both fold the log and answer `waitFor`.
 */
export class PositionWaiters {
  private waiters: { position: number; resolve: () => void }[] = [];

  constructor(private readonly name: string) {}

  /** Resolves once `reached(p)` is called with p >= position; rejects after `timeoutMs`. */
  wait(current: number, position: number, timeoutMs: number): Promise<void> {
    if (current >= position) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w.resolve !== done);
        reject(
          new Error(`projection ${this.name} did not reach position ${position} within ${timeoutMs} ms`),
        );
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      this.waiters.push({ position, resolve: done });
    });
  }

  /** The projection now holds every event up to `position`. */
  reached(position: number): void {
    if (this.waiters.length === 0) return;
    const ready = this.waiters.filter((w) => w.position <= position);
    if (ready.length === 0) return;
    this.waiters = this.waiters.filter((w) => w.position > position);
    for (const w of ready) w.resolve();
  }
}
