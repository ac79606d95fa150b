import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DataDirInUse, LOCK_FILE, lockDataDir } from './data-dir-lock.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});
async function tempDir() {
  const dir = await mkdtemp(join(tmpdir(), 'data-dir-lock-'));
  dirs.push(dir);
  return dir;
}

/** Another live process, and its lock file's line as lockDataDir would write it. */
async function otherProcess() {
  const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)'], { stdio: 'ignore' });
  const stat = await readFile(`/proc/${child.pid}/stat`, 'utf8');
  const started = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
  return { child, pid: child.pid!, started };
}

describe('the data directory lock', () => {
  it('is refused while a live process holds it, and taken over from one whose pid now names another process', async () => {
    const dir = await tempDir();
    const other = await otherProcess();
    try {
      await writeFile(join(dir, LOCK_FILE), JSON.stringify({ pid: other.pid, started: other.started }));
      expect(() => lockDataDir(dir)).toThrow(DataDirInUse);
      expect(() => lockDataDir(dir)).toThrow(`(pid ${other.pid}, recorded in ${join(dir, LOCK_FILE)})`);
      // The same pid, started at another time: the holder is gone and its pid was reused.
      await writeFile(join(dir, LOCK_FILE), JSON.stringify({ pid: other.pid, started: '1' }));
      const lock = lockDataDir(dir);
      expect(JSON.parse(await readFile(join(dir, LOCK_FILE), 'utf8'))).toMatchObject({ pid: process.pid });
      lock.release();
    } finally {
      other.child.kill('SIGKILL');
    }
  });

  it('is taken over from a dead pid, this process’s own pid and an unreadable file, and released', async () => {
    const dir = await tempDir();
    for (const content of [
      JSON.stringify({ pid: 2 ** 22 + 1, started: null }),
      JSON.stringify({ pid: process.pid }),
      'half',
    ]) {
      await writeFile(join(dir, LOCK_FILE), content);
      const lock = lockDataDir(dir);
      lock.release();
      await expect(readFile(join(dir, LOCK_FILE))).rejects.toThrow(/ENOENT/);
    }
  });

  it('is not taken from a rival that took the same stale file a moment before', async () => {
    const dir = await tempDir();
    const rival = await otherProcess();
    try {
      await writeFile(join(dir, LOCK_FILE), JSON.stringify({ pid: 2 ** 22 + 1, started: null }));
      // Between this process finding the file stale and taking it away, a rival (a live process)
      // takes it over and links its own lock: this process must leave the rival's lock in place.
      const rivalLock = JSON.stringify({ pid: rival.pid, started: rival.started });
      expect(() => lockDataDir(dir, () => writeFileSync(join(dir, LOCK_FILE), rivalLock))).toThrow(
        `(pid ${rival.pid}, recorded in ${join(dir, LOCK_FILE)})`,
      );
      expect(await readFile(join(dir, LOCK_FILE), 'utf8')).toBe(rivalLock);
      expect((await readdir(dir)).sort()).toEqual([LOCK_FILE]);
    } finally {
      rival.child.kill('SIGKILL');
    }
  });
});
