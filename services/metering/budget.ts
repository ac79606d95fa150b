/**
 * The rules of a prepaid budget, one set for both kinds this folder keeps: the quota meter's
 * leases (units debited on the counters and the log ahead of a busy subject's calls) and the rate
 * limiter's (units counted in Redis ahead of a busy credential's requests). What each kind
 * counts differs; how a budget is granted, used, given back and lost is the same:
 *
 * - granted only to a busy caller (its calls overlap, or come within the idle time of each
 *   other), and only while what it has left is at least 1/BUDGET_SHARE of it: near a limit every
 *   call is decided by the shared counters, and no replica holds units another one's calls need;
 * - used without a round trip: a unit is counted on the shared state before any call takes it, so
 *   no call is answered on a unit that is not counted;
 * - given back once no call took from it for one to two idle periods, and at a clean stop;
 * - lost on a crash: a killed process leaves its budgets' unused units counted (charged quota, or
 *   requests refused early until the window ends), at most one budget per busy caller and tool.
 *
 * Measured against a round trip per call (bench/budget.bench.ts): git log of that file.
 */

/** A budget no call took from for one to two of these is ended and its units given back. */
export const BUDGET_IDLE_MS = 250;
/** The sweep's interval at least, however short a test or a setting makes the idle time. */
export const MIN_BUDGET_IDLE_MS = 20;
/** A budget holds at most this share of what is left (quota) or of the limit (rate). */
export const BUDGET_SHARE = 16;

/**
 * The timer that ends idle budgets: runs `sweep` every `everyMs` while it says budgets are left,
 * and never keeps the process alive.
 */
export class IdleSweeper {
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly everyMs: number,
    /** Ends what is idle; returns whether any budget is left to watch. */
    private readonly sweep: () => boolean,
  ) {}

  /** Starts the timer unless it runs. */
  watch(): void {
    if (this.timer !== null) return;
    this.timer = setInterval(() => {
      if (!this.sweep()) this.stop();
    }, this.everyMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }
}
