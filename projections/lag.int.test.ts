import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { eventStatsProjection } from './event-stats.ts';
import { projectionLag, runnerLags } from './lag.ts';
import { ProjectionRunner } from './runner.ts';

const root = mkdtempSync(join(tmpdir(), 'projection-lag-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('projectionLag (the /readyz check)', () => {
  it('is not ok while a running projection is further behind the head than the bound, ok once caught up', async () => {
    const store = await openLmdbEventStore({ path: join(root, 'a') });
    const runner = new ProjectionRunner(store, store.projectionStore(), eventStatsProjection);
    try {
      for (let i = 0; i < 10; i++)
        await store.append(
          `s-${i}`,
          Array.from({ length: 1_000 }, () => ({ type: 'Noted', data: { i } })),
        );
      const head = await store.headPosition();
      expect(await projectionLag(store, 1_000)).toMatchObject({ ok: true, behind: {} });

      await runner.start();
      // The catch-up folds a page and then yields to the event loop; this check runs in between.
      const during = await projectionLag(store, 5_000);
      expect(during.ok).toBe(false);
      expect(during.behind['event-stats']).toBeGreaterThan(5_000);
      expect(during.detail).toMatch(/event-stats/);

      await runner.waitFor(head);
      expect(await projectionLag(store, 5_000)).toMatchObject({ ok: true, head, behind: {} });
    } finally {
      await runner.stop();
      await store.close();
    }
  });

  it('leaves out a fold that gates no readiness (the quota seed), while one beside it that does still counts', async () => {
    const store = await openLmdbEventStore({ path: join(root, 'b') });
    const seed = new ProjectionRunner(store, store.projectionStore(), eventStatsProjection, {
      gatesReadiness: false,
    });
    try {
      await store.append(
        's',
        Array.from({ length: 10_000 }, () => ({ type: 'Noted', data: {} })),
      );
      await seed.start();
      // Same check point as above: the catch-up yields after its first page. Still behind after
      // the check, so behind during it.
      expect(await projectionLag(store, 5_000)).toMatchObject({ ok: true, behind: {} });
      expect((await runnerLags(store, 5_000)).lags.get('event-stats')).toBeGreaterThan(5_000);
      const gated = new ProjectionRunner(store, store.projectionStore(), {
        ...eventStatsProjection,
        name: 'event-stats-gated',
      });
      await gated.start();
      try {
        const during = await projectionLag(store, 5_000);
        expect(during.ok).toBe(false);
        expect(Object.keys(during.behind)).toEqual(['event-stats-gated']);
      } finally {
        await gated.stop();
      }
    } finally {
      await seed.stop();
      await store.close();
    }
  });
});
