/** One dependency's state as /readyz reports it. */
export interface CheckResult {
  ok: boolean;
  detail?: string;
  /**
   * Reported, not failing: the dependency is impaired but the process still serves (ok stays
   * true, so /readyz stays 200), e.g. `chain` while a settling rail's chain is stale.
   */
  degraded?: boolean;
  /**
   * The error behind a failure, for the log only: /readyz shows the reason its code gives
   * (failureReason) in place of `detail`, whose words (a host, an address, a URL) are logged. On a
   * check that passes (the last failed try of work it retries) it is logged and gives no `detail`:
   * such a check shows the reason in a field of its own (`lastError`).
   */
  cause?: unknown;
  /** Words for the log only (what a degraded check's dependency answered), never shown. */
  logged?: unknown;
  [extra: string]: unknown;
}

export type Check = () => Promise<CheckResult>;

/**
 * The named checks behind /readyz. Each check is bounded by a timeout so a hung dependency
 * reports "not ok" instead of hanging the probe.
 */
export class Readiness {
  private readonly checks = new Map<string, Check>();

  add(name: string, check: Check): void {
    this.checks.set(name, check);
  }

  async run(timeoutMs = 2_000): Promise<{ ready: boolean; checks: Record<string, CheckResult> }> {
    const entries = await Promise.all(
      [...this.checks].map(async ([name, check]) => [name, await bounded(check, timeoutMs)] as const),
    );
    return { ready: entries.every(([, r]) => r.ok), checks: Object.fromEntries(entries) };
  }
}

async function bounded(check: Check, timeoutMs: number): Promise<CheckResult> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<CheckResult>((resolve) => {
    timer = setTimeout(() => resolve({ ok: false, detail: `no answer within ${timeoutMs} ms` }), timeoutMs);
  });
  try {
    return await Promise.race([
      check().catch((err: unknown) => ({
        ok: false,
        detail: err instanceof Error ? err.message : String(err),
        cause: err,
      })),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
