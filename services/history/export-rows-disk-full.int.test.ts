import { join } from 'node:path';
import { open, type RootDatabase } from 'lmdb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { mountSmallDisk } from '../../test/disk-full.ts';
import { recordHistory } from '../../test/history-harness.ts';
import { HANG_MS } from '../../test/waits.ts';
import { ExportRowStore, openVerdictsDb } from './export-row-store.ts';

const disk = mountSmallDisk(4);
if (typeof disk === 'string' && process.env.CI !== 'true') {
  console.warn(`\n*** ${disk}: export rows disk-full suite NOT RUN ***\n`);
}

/**
 * The export-rows projection on a disk that fills up: its writes fail, and once there is space
 * again it folds what it missed by itself. It used to stop for good on the first failed write
 * (/readyz not ready until a rebuild, after a restart too). Its rows live on a small disk of
 * their own here, the log in memory, so that only the rows' writes meet the full disk.
 */
describe.runIf(typeof disk !== 'string' || process.env.CI === 'true')(
  'export rows on a disk that fills up',
  () => {
    const store = new MemoryEventStore();
    let root: RootDatabase;
    let rows: ExportRowStore;

    beforeAll(async () => {
      if (typeof disk === 'string') throw new Error(disk);
      root = open({ path: join(disk.dir, 'rows'), noSubdir: false, maxDbs: 16 });
      rows = new ExportRowStore(store, root);
      await rows.start();
    });
    afterAll(async () => {
      await rows?.stop();
      await root?.close();
      if (typeof disk !== 'string') disk.unmount();
    });

    it('a write on a full disk is retried, not the end of the projection: it catches up once space returns', async () => {
      if (typeof disk === 'string') return;
      disk.fill();
      const fx = await recordHistory({ steps: 20, store });
      await fx.engine.close();
      const head = await store.headPosition();
      // The fold of the verdicts failed for lack of space: nothing past the checkpoint is claimed.
      await expect.poll(() => rows.error?.message ?? '').toMatch(/No space left|output error/);
      expect(rows.checkpoint).toBeLessThan(head);
      expect(rows.running).toBe(true);

      disk.free();
      await rows.waitFor(head, HANG_MS);
      expect(rows.error).toBeNull();
      const verdicts = (await store.readAll()).filter((e) => e.type === 'VerdictRecorded').length;
      expect(verdicts).toBeGreaterThan(0);
      expect([...openVerdictsDb(root).getKeys({ start: 1 })]).toHaveLength(verdicts);
    });
  },
);
