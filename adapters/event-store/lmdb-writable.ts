import { accessSync, constants } from 'node:fs';
import { join } from 'node:path';

/**
 * Refuses an LMDB environment this process may not read and write before lmdb-js opens it, with
 * Node's own error (EACCES or EROFS, naming the path), which the service and the command lines
 * tell in one line. lmdb-js reports a directory or data file it may not write as a bare
 * `Permission denied: Attempting to …` that names no path, and a lock file it may not write ends
 * the process (SIGSEGV, lmdb-js 3.5.6): a DATA_DIR restored or created by another user (root)
 * under a service that runs as its own. Readers write the lock file too, so a read-only open is
 * checked alike.
 */
export function requireWritableEnvironment(path: string): void {
  for (const file of [path, join(path, 'data.mdb'), join(path, 'lock.mdb')]) {
    try {
      accessSync(file, constants.R_OK | constants.W_OK);
    } catch (err) {
      // Not made yet: LMDB creates it in a directory that passed.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
