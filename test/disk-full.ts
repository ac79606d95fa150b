import { execFileSync } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmdirSync, rmSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A small tmpfs of its own, to run a store out of space for real; or why this machine does not
 * let the tests mount one (not root, no tmpfs).
 */
export function mountSmallDisk(
  sizeMb: number,
): { dir: string; fill(): void; free(): void; unmount(): void } | string {
  const dir = mkdtempSync(join(tmpdir(), 'disk-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    rmdirSync(dir);
    return `cannot mount a tmpfs here: ${(err as Error).message.split('\n')[0]}`;
  }
  const filler = join(dir, 'filler');
  return {
    dir,
    /** Writes a file until the disk has not a byte left. */
    fill() {
      const fd = openSync(filler, 'a');
      const chunk = Buffer.alloc(64 * 1024, 1);
      try {
        for (let size = chunk.length; size >= 1; ) {
          try {
            writeSync(fd, chunk, 0, size);
          } catch (err) {
            if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
            size = Math.floor(size / 2);
          }
        }
      } finally {
        closeSync(fd);
      }
    },
    free() {
      rmSync(filler, { force: true });
    },
    unmount() {
      try {
        execFileSync('umount', ['-l', dir], { stdio: 'pipe' });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
