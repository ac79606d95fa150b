import type { FoldProgress } from '../../projections/position-waiters.ts';
import type { Check, CheckResult } from './readiness.ts';

/**
 * A projection runner's /readyz check: not ready once its fold failed, else ready while it runs,
 * with the checkpoint it folded up to either way. The failure is carried as `cause`: /readyz shows
 * only the reason its code gives, and its words (a TLS altname naming a bare host, a path) go to
 * the log with the check's full result.
 *
 * `fields` adds what a caller shows with either answer (the key registry's log identity),
 * `progress` what only a runner that has not failed shows (its lag behind the head).
 */
export function projectionCheck(
  runner: Pick<FoldProgress, 'error' | 'running' | 'checkpoint'>,
  more: {
    fields?: () => Promise<Record<string, unknown>>;
    progress?: () => Promise<Record<string, unknown>> | Record<string, unknown>;
  } = {},
): Check {
  return async (): Promise<CheckResult> => {
    const fields = (await more.fields?.()) ?? {};
    const failure = runner.error;
    if (failure)
      return { ok: false, detail: failure.message, cause: failure, checkpoint: runner.checkpoint, ...fields };
    return { ok: runner.running, checkpoint: runner.checkpoint, ...(await more.progress?.()), ...fields };
  };
}
