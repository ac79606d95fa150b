import type { FoldProgress } from '../../projections/position-waiters.ts';
import type { Check, CheckResult } from './readiness.ts';

/**
 * A projection runner's /readyz check: not ready once its fold failed, else ready while it runs,
 * with the checkpoint it folded up to either way. The failure is carried as `cause`: /readyz shows
 * only the reason its code gives, and its words (a TLS altname naming a bare host, a path) go to
 * the log with the check's full result.
 *
 * `fields` adds what a caller shows with either answer (the key registry's log identity). `head`
 * reads the log's head first, whatever the runner's state: a store that cannot answer fails the
 * check (the fault table of deploy/README counts on it), and the runner's state read after it
 * gives a checkpoint and a lag that add up to that head. `lag` shows that lag while the runner has
 * not failed, only where positions count events.
 */
export function projectionCheck(
  runner: Pick<FoldProgress, 'error' | 'running' | 'checkpoint'>,
  more: {
    fields?: () => Promise<Record<string, unknown>>;
    head?: () => Promise<number>;
    lag?: boolean;
  } = {},
): Check {
  return async (): Promise<CheckResult> => {
    const fields = (await more.fields?.()) ?? {};
    const head = await more.head?.();
    const failure = runner.error;
    if (failure)
      return { ok: false, detail: failure.message, cause: failure, checkpoint: runner.checkpoint, ...fields };
    const lag = more.lag && head !== undefined ? { lag: head - runner.checkpoint } : {};
    return { ok: runner.running, checkpoint: runner.checkpoint, ...lag, ...fields };
  };
}
