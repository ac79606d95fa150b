import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { mountSmallDisk } from '../../test/disk-full.ts';

const disk = mountSmallDisk(4);
if (typeof disk === 'string' && process.env.CI !== 'true') {
  console.warn(`\n*** ${disk}: LMDB projection store disk-full suite NOT RUN ***\n`);
}
const child = fileURLToPath(new URL('./lmdb-snapshots-disk-full-child.ts', import.meta.url));

describe.runIf(typeof disk !== 'string' || process.env.CI === 'true')(
  'LMDB projection store on a full disk',
  () => {
    afterAll(() => {
      if (typeof disk !== 'string') disk.unmount();
    });

    it('refuses the save as retryable StorageFullError and the process lives on, without an event store in it', () => {
      if (typeof disk === 'string') throw new Error(disk);
      const run = spawnSync(process.execPath, ['--import', 'tsx', child, disk.dir], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(run.stderr).not.toMatch(/Unhandled|Commit failed/);
      expect(run.status).toBe(0);
      const out = JSON.parse(run.stdout.trim().split('\n').at(-1)!);
      expect(out.refused).toEqual({ name: 'StorageFullError', code: 'storage_full', retryable: true });
      // The last snapshot saved whole is still there.
      expect(out.loaded).toBeGreaterThanOrEqual(1);
    });
  },
);
