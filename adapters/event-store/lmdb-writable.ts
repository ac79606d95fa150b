import { accessSync, constants, existsSync } from 'node:fs';
import { join } from 'node:path';

const READ = constants.R_OK;
const READ_WRITE = constants.R_OK | constants.W_OK;

/**
 * Refuses an LMDB environment this process may not use before lmdb-js opens it, with Node's own
 * error (EACCES or EROFS, naming the path), which the service and the command lines tell in one
 * line. lmdb-js reports a directory or data file it may not write as a bare `Permission denied:
 * Attempting to …` that names no path, and a lock file it may not write ends the process
 * (SIGSEGV, lmdb-js 3.5.6): a DATA_DIR restored or created by another user (root) under a service
 * that runs as its own. A read-only open (`readOnly`, the backup's) writes the lock file alone, so
 * it asks only to read the directory and data.mdb: a backup of a log it may read but not write is
 * taken, as lmdb-js takes it; the directory must be writable only while lock.mdb is still to make.
 */
export function requireWritableEnvironment(path: string, { readOnly = false } = {}): void {
  const lock = join(path, 'lock.mdb');
  const needs: [file: string, mode: number][] = readOnly
    ? [
        [path, existsSync(lock) ? READ : READ_WRITE],
        [join(path, 'data.mdb'), READ],
        [lock, READ_WRITE],
      ]
    : [
        [path, READ_WRITE],
        [join(path, 'data.mdb'), READ_WRITE],
        [lock, READ_WRITE],
      ];
  for (const [file, mode] of needs) {
    try {
      accessSync(file, mode);
    } catch (err) {
      // Not made yet: LMDB creates it in a directory that passed.
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
