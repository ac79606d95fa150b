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

/**
 * What a member of a log feed keeps of its progress, whatever it folds into (a projection's state,
 * the export rows on disk): the position folded up to, whether it is running, the failure that
 * stopped it, and the callers waiting for a position.
 */
export abstract class FoldProgress {
  protected position = 0;
  protected joined = false;
  protected failure: Error | null = null;
  protected readonly waiters: PositionWaiters;

  constructor(name: string) {
    this.waiters = new PositionWaiters(name);
  }

  /** Global position of the last event folded in: everything up to it is readable here. */
  get checkpoint(): number {
    return this.position;
  }

  get running(): boolean {
    return this.joined;
  }

  get error(): Error | null {
    return this.failure;
  }

  /** Resolves once every event up to `position` is folded in (read-your-writes for callers). */
  waitFor(position: number, timeoutMs = 5_000): Promise<void> {
    return this.waiters.wait(this.position, position, timeoutMs);
  }

  protected releaseWaiters(): void {
    this.waiters.reached(this.position);
  }
}
