import { linkSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { makeDirectory } from '../../adapters/make-directory.ts';

/** Another live service process holds the data directory. */
export class DataDirInUse extends Error {
  constructor(
    readonly dataDir: string,
    readonly holderPid: number,
    readonly lockFile: string,
  ) {
    super(
      `DATA_DIR ${dataDir} is in use by another service process (pid ${holderPid}, recorded in ${lockFile}). ` +
        'One service process per LMDB data directory: a second keeps quota counters and projections of its own ' +
        'beside the first. Stop that process, or give this one a DATA_DIR of its own.',
    );
    this.name = 'DataDirInUse';
  }
}

export interface DataDirLock {
  readonly file: string;
  /** Removes the lock file if it is still this process's (synchronous: it runs in an exit handler). */
  release(): void;
}

interface Holder {
  pid: number;
  /** The holder's start time (clock ticks since boot, /proc/<pid>/stat), where the system tells it. */
  started: string | null;
}

/** The file the lock is: `service.pid` in DATA_DIR. */
export const LOCK_FILE = 'service.pid';

/**
 * Takes the data directory for this service process, or throws DataDirInUse naming the live process
 * that has it. The lock is a pid file created whole and at once (written beside, then hard-linked
 * into place, which fails if it exists). A file whose process is gone (a kill -9, a crash, a
 * reboot) is stale and taken over: the pid is checked with kill(pid, 0), and where /proc tells a
 * process's start time, a pid since reused by another process does not count either. (An OS lock
 * such as flock would need a native addon; proper-lockfile's mtime locks need a timer that a
 * process stopped longer than its stale time loses, and do not name the holder.)
 * The operator CLIs do not take it: LMDB is safe across processes, and they only append or read.
 */
export function lockDataDir(
  dataDir: string,
  /** Runs between finding a lock file stale and taking it away: a test's stand-in for a rival. */
  beforeTakeover: () => void = () => undefined,
): DataDirLock {
  makeDirectory(dataDir);
  const file = join(dataDir, LOCK_FILE);
  const mine: Holder = { pid: process.pid, started: startTime(process.pid) };
  const draft = `${file}.${process.pid}.tmp`;
  writeFileSync(draft, `${JSON.stringify(mine)}\n`);
  try {
    // Three tries: a stale file is taken away and the link tried again; another process starting
    // at the same moment may win that race, and is then the live holder.
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        linkSync(draft, file);
        return {
          file,
          release() {
            if (readHolder(file)?.pid === process.pid) rmSync(file, { force: true });
          },
        };
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = readHolder(file);
      if (holder && isLive(holder)) throw new DataDirInUse(dataDir, holder.pid, file);
      // Moved aside under a name of this process's, not removed: of two processes that both found
      // it stale, the second would otherwise remove the lock the first has just linked. A rename is
      // atomic, so what is moved is whatever stands there now; a live lock moved by mistake is put
      // back and refuses this process.
      beforeTakeover();
      const aside = `${file}.${process.pid}.stale`;
      try {
        renameSync(file, aside);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // another took it away first
        throw err;
      }
      const moved = readHolder(aside);
      if (moved && isLive(moved)) {
        try {
          linkSync(aside, file);
        } finally {
          rmSync(aside, { force: true });
        }
        throw new DataDirInUse(dataDir, moved.pid, file);
      }
      rmSync(aside, { force: true });
    }
    throw new Error(`could not take ${file}: it was replaced three times while being taken`);
  } finally {
    rmSync(draft, { force: true });
  }
}

function readHolder(file: string): Holder | null {
  try {
    const parsed = JSON.parse(readFileSync(file, 'utf8')) as Partial<Holder>;
    return Number.isInteger(parsed.pid) && (parsed.pid as number) > 0
      ? { pid: parsed.pid as number, started: parsed.started ?? null }
      : null;
  } catch {
    return null; // gone meanwhile, or not ours: stale
  }
}

function isLive(holder: Holder): boolean {
  // A restarted container's process often gets the pid its predecessor had.
  if (holder.pid === process.pid) return false;
  try {
    process.kill(holder.pid, 0);
  } catch (err) {
    // EPERM: a process of another user has the pid; it is alive.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const now = startTime(holder.pid);
  return holder.started === null || now === null || now === holder.started;
}

/** A process's start time from /proc (field 22 of its stat line), or null where there is none. */
function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}
