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

/**
 * A key's test send outstanding in this api process to one endpoint (`key` names the API key and
 * the receiver's origin; waiting for a slot of the endpoint or sending): one at a time. Each holds
 * its request and its sample until the receiver answers, and waits behind the key's own slots
 * there (held by a hung receiver for WEBHOOK_TIMEOUT_MS each), so the budget alone (10 a minute)
 * would let a key pile up waiting sends faster than a slow receiver lets them go. A second one to
 * the same endpoint is refused at once, before it takes the budget.
 */
export class TestSendsInFlight {
  private readonly started = new Map<string, number>();

  /**
   * Marks `key`'s test send started: null when it may go (call the returned release once it is
   * answered), else the milliseconds until the one outstanding is over at the latest (its start
   * plus `boundMs`, at least a second; a send still waiting behind the key's other sends takes
   * longer, and a retry then hears a new figure).
   */
  begin(key: string, now: number, boundMs: number): { release: () => void } | { waitMs: number } {
    const since = this.started.get(key);
    if (since !== undefined) return { waitMs: Math.max(1_000, since + boundMs - now) };
    this.started.set(key, now);
    return { release: () => this.started.delete(key) };
  }
}
