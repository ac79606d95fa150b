import { closeSync, fsyncSync, openSync, renameSync, rmSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { open } from 'lmdb';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { makeDirectory } from '../make-directory.ts';
import { EVENT_ENCODING } from './lmdb.ts';
import { decodeStoredEvent } from './lmdb-codec.ts';
import { requireWritableEnvironment } from './lmdb-writable.ts';

/** The log a backup holds: its head (the backup point) and the event there. */
export interface BackupPoint {
  head: number;
  headEventId: string | null;
  headRecordedAt: string | null;
  /** Bytes of the copy's data.mdb (compacted: free pages left out). */
  bytes: number;
  /** Bytes of the source's data.mdb, which never shrinks. */
  sourceBytes: number;
}

/**
 * The environment opened as the event store opens it (lmdb.ts): LMDB's own copy tools cannot.
 * Debian's mdb_copy (LMDB 0.9.2x) refuses lmdb-js's 0.9.90 format (MDB_VERSION_MISMATCH); the
 * mdb_copy built from lmdb-js's own sources asks to map the whole address space of an environment
 * opened with remapChunks (ENOMEM); lmdb-js's plain copy (`backup(path, false)`) of such an
 * environment fails "Bad address". The compacting copy (`backup(path, true)`, mdb_env_copy2 with
 * MDB_CP_COMPACT) walks the trees page by page inside one read transaction: a consistent copy of
 * every database of the environment (events, streams, ids, snapshots, export rows) at one commit,
 * taken while the service writes, without its free pages.
 */
function openReadOnly(path: string) {
  requireWritableEnvironment(path, { readOnly: true });
  return open({
    path,
    noSubdir: false,
    maxDbs: 16,
    overlappingSync: false,
    remapChunks: true,
    readOnly: true,
  });
}

function fsyncPath(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Copies the LMDB environment at `source` (a directory) to `dest`, which must not exist yet: the
 * copy is written to `dest.partial` and renamed once complete and on disk, so `dest` is either a
 * whole copy or absent. Throws (leaving no `dest`) when the copy fails.
 */
export async function backupLmdbEnvironment(source: string, dest: string): Promise<BackupPoint> {
  const partial = `${dest}.partial`;
  rmSync(partial, { recursive: true, force: true });
  makeDirectory(partial);
  const env = openReadOnly(source);
  try {
    await env.backup(partial, true);
  } catch (err) {
    rmSync(partial, { recursive: true, force: true });
    throw err;
  } finally {
    await env.close();
  }
  fsyncPath(join(partial, 'data.mdb'));
  fsyncPath(partial);
  renameSync(partial, dest);
  fsyncPath(dirname(dest));
  const point = await readBackupPoint(dest);
  return { ...point, sourceBytes: statSync(join(source, 'data.mdb')).size };
}

/** The head of the log in the environment at `path` (a backup), read without writing to it. */
export async function readBackupPoint(path: string): Promise<Omit<BackupPoint, 'sourceBytes'>> {
  const env = openReadOnly(path);
  try {
    const events = env.openDB<RecordedEvent, number>({ name: 'events', ...EVENT_ENCODING });
    let head = 0;
    for (const key of events.getKeys({ reverse: true, limit: 1 })) head = key;
    const stored = head > 0 ? events.get(head) : undefined;
    const event = stored === undefined ? null : decodeStoredEvent(stored, head);
    return {
      head,
      headEventId: event?.id ?? null,
      headRecordedAt: event?.recordedAt ?? null,
      bytes: statSync(join(path, 'data.mdb')).size,
    };
  } finally {
    await env.close();
    // The copy is data.mdb alone: LMDB makes lock.mdb again where it is opened.
    rmSync(join(path, 'lock.mdb'), { force: true });
  }
}
