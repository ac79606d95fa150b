import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const script = fileURLToPath(new URL('../adapters/event-store/lmdb-crash-writer.ts', import.meta.url));

export interface LockHolder {
  child: ChildProcess;
  /** Kills the holder (if it still runs) and waits for its exit: the lock is free after it. */
  release(): Promise<void>;
}

/**
 * Another process on the same LMDB directory takes the log's write lock and keeps it (what a
 * writer stalled mid-write does to every append of the service). Resolves once it holds the lock;
 * rejects if it exits before.
 */
export async function holdWriteLock(eventsDir: string): Promise<LockHolder> {
  const child = spawn(process.execPath, ['--import', 'tsx', script, 'hold', eventsDir], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('"holding":true')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`lock holder exited (${code}) before taking the lock`)));
  });
  return {
    child,
    release: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}
