/**
 * Test sends (POST /api/webhooks/:id/test) one key may make per window, per api process: each
 * makes the service send a signed POST to a host of the caller's choosing, so they get a budget
 * of their own, well under the plan's request rate.
 */
export const TEST_SENDS_PER_WINDOW = 10;
export const TEST_SEND_WINDOW_MS = 60_000;

/** Keys remembered before the expired windows are dropped. */
const SWEEP_AT = 10_000;

/** A fixed window per key: `limit` takes, then refusals until the window ends. */
export class TestSendBudget {
  private readonly windows = new Map<string, { start: number; used: number }>();

  constructor(
    readonly limit = TEST_SENDS_PER_WINDOW,
    readonly windowMs = TEST_SEND_WINDOW_MS,
  ) {}

  /** Takes one send of `key`'s budget: null when taken, else the milliseconds until the window ends. */
  take(key: string, now: number): number | null {
    let window = this.windows.get(key);
    if (window === undefined || now - window.start >= this.windowMs) {
      if (window === undefined && this.windows.size >= SWEEP_AT) this.sweep(now);
      window = { start: now, used: 0 };
      this.windows.set(key, window);
    }
    if (window.used >= this.limit) return Math.max(1, window.start + this.windowMs - now);
    window.used++;
    return null;
  }

  private sweep(now: number): void {
    for (const [key, window] of this.windows) {
      if (now - window.start >= this.windowMs) this.windows.delete(key);
    }
  }
}
