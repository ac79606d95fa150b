import { mkdirSync, statSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * `mkdir -p`: `path` and the directories above it that are missing. Not `mkdirSync(path,
 * { recursive: true })`, which never returns under a directory that takes no new entries (Node 20
 * and 24 loop on `/proc/foo`, whose parent exists but answers every mkdir ENOENT), so a service
 * or command given such a DATA_DIR or DEST hung in silence. Here that mkdir's ENOENT is thrown, as
 * every other refusal is (EACCES, EROFS, EEXIST for a file in the way).
 */
export function makeDirectory(path: string): void {
  try {
    mkdirSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' && isDirectory(path)) return;
    // ENOENT under a parent that exists: the directory takes no new entries (/proc, /sys).
    const parent = dirname(path);
    if (code !== 'ENOENT' || parent === path || isDirectory(parent)) throw err;
    makeDirectory(parent);
    // Once more, now that the parent is there (another process may have made `path` meanwhile).
    makeDirectory(path);
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}
