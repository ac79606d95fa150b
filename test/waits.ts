/**
 * How long a test waits for a fold to reach a position (a projection's `waitFor`) before it calls
 * the fold hung: a bound against a hang, not a figure of speed, so a passing test never waits it
 * out. Long, because the suite runs on a shared two-core machine under load: waitFor's default of
 * 5 s ran out for a fold of 50,000 verdicts in a CI run at load 11. Half the test timeout (120 s,
 * vitest.config.ts), as expect.poll's is, so a hung fold fails with waitFor's own words (the
 * projection and the position it did not reach) rather than as a test that timed out.
 */
export const HANG_MS = 60_000;
