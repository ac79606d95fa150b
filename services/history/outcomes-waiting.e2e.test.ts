import { pino } from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { recordHistory } from '../../test/history-harness.ts';
import { serviceProcesses } from '../../test/service-process.ts';
import { pendingOutcomesProjection } from './projections.ts';
import { OutcomeResolver, outcomesCheck } from './resolver.ts';

/**
 * processor:history-outcomes on /readyz of a real process says `waitingForView` only when verdicts
 * are due and the pending-outcomes view holds them back: a resolver with nothing due waits for
 * nothing, and an operator reading `waitingForView: true` would look for a lagging view that is not.
 */
const processes = serviceProcesses('outcomes-waiting-');
afterAll(() => processes.stopAll());

describe('processor:history-outcomes with nothing due', () => {
  it('does not say waitingForView on the /readyz of a real process', async () => {
    // The roles that resolve outcomes, with no engine: the log holds no verdict, so none is due.
    const r = await processes.start({}, ['--role', 'projections,dispatcher']);
    await expect
      .poll(() => r.lines.find((l) => l.msg === 'service started'), { timeout: 90_000, interval: 100 })
      .toBeTruthy();
    const url = r.lines.find((l) => l.msg === 'service started')!.url as string;
    const check = async () =>
      ((await (await fetch(`${url}/readyz`)).json()) as { checks: Record<string, Record<string, unknown>> })
        .checks['processor:history-outcomes'];
    await expect.poll(async () => (await check())?.ok, { timeout: 60_000, interval: 200 }).toBe(true);
    expect(await check()).toMatchObject({ ok: true, pending: 0, resolved: 0, waitingForView: false });
    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
  }, 180_000);
});

describe('processor:history-outcomes with verdicts due', () => {
  it('says waitingForView while the pending view lags the head, and not once it resolves them', async () => {
    const { store, feed } = await recordHistory({ steps: 2, settleHours: 30 });
    const quiet = pino({ level: 'silent' });
    const pending = new ProjectionRunner(store, new MemoryProjectionStore(), pendingOutcomesProjection, {
      logger: quiet,
    });
    await pending.start();
    await pending.waitFor(await store.headPosition());
    // The view stopped while the log goes on: three events it has not folded, over a lag of one.
    await pending.stop();
    await store.append('outcomes-waiting-filler', [
      newEvent('ApiKeyRevoked', { keyId: 'a', reason: 'test' }),
      newEvent('ApiKeyRevoked', { keyId: 'b', reason: 'test' }),
      newEvent('ApiKeyRevoked', { keyId: 'c', reason: 'test' }),
    ]);
    const resolver = new OutcomeResolver({ store, feed, pending, logger: quiet, maxLag: 1, concurrency: 1 });
    const check = outcomesCheck(() => resolver, pending);
    expect(await resolver.resolveDue()).toBe(0);
    expect(await check()).toMatchObject({ ok: true, waitingForView: true });
    expect((await check()).pending).toBeGreaterThan(0);
    // The view folds the rest: the due verdicts are resolved, and nothing waits for the view.
    await pending.start();
    expect(await resolver.resolveDue()).toBeGreaterThan(0);
    expect(await check()).toMatchObject({ ok: true, waitingForView: false });
    await pending.stop();
  });
});
