import { afterAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Slices stop in the reverse of their start. The verdict scheduler (slice `engine`) writes to the
 * log; the readers (history, webhooks, projections) drain to the log's head at their stop. Stopped
 * after them, a scheduler busy with its start-up backfill went on appending while history chased
 * the head: an operator's SIGTERM took 14.6 s on `npm start`, 0.4 s short of SHUTDOWN_TIMEOUT_MS's
 * SIGKILL (1.6 s with the scheduler stopped first).
 */
describe('shutdown order', () => {
  let svc: TestService | undefined;
  afterAll(async () => {
    await svc?.stop();
  });

  it('starts the verdict scheduler last, so it is the first slice stopped', async () => {
    svc = await startTestService(['api', 'engine', 'projections', 'dispatcher']);
    const names = svc.service.components.map((c) => c.name);
    expect(names).toContain('history');
    expect(names.at(-1)).toBe('engine');
  });
});
