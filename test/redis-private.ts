import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort } from './ports.ts';

/**
 * A Redis server of its own on a free loopback port (no persistence), for tests that change what
 * the whole server does (make it a replica, cap its memory), which the shared one must not.
 */
export async function startPrivateRedis(
  options: {
    port?: number;
    /** More redis-server arguments (`--databases 2`). */
    args?: string[];
  } = {},
): Promise<{
  url: string;
  /** A connection for the test's own commands (REPLICAOF, CONFIG SET). */
  admin: Redis;
  /** Makes it a replica of a primary that is not there: it answers reads and refuses writes. */
  readOnly(): Promise<void>;
  stop(): Promise<void>;
}> {
  const port = options.port ?? (await freePort());
  const dir = mkdtempSync(join(tmpdir(), 'redis-private-'));
  const server = spawn(
    'redis-server',
    [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--dir',
      dir,
      '--save',
      '',
      '--appendonly',
      'no',
      ...(options.args ?? []),
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
  let output = '';
  server.stdout.on('data', (chunk: Buffer) => {
    output += chunk.toString();
  });
  // A missing binary is an 'error' and no 'exit': both end the wait, with the cause.
  let failed: Error | null = null;
  const exited = new Promise<void>((resolve) => {
    server.once('exit', () => resolve());
    server.once('error', (err) => {
      failed = err;
      resolve();
    });
  });
  const stop = async () => {
    admin.disconnect();
    server.kill('SIGKILL');
    await exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const admin = new Redis({ port, host: '127.0.0.1', lazyConnect: true });
  try {
    const deadline = Date.now() + 10_000;
    while (!output.includes('Ready to accept connections')) {
      if (failed !== null || server.exitCode !== null || Date.now() > deadline)
        throw new Error(
          `redis-server on port ${port} did not start: ${failed === null ? output.slice(-500) : String(failed)}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await admin.connect();
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    admin,
    async readOnly() {
      await admin.replicaof('127.0.0.1', String(await freePort()));
    },
    stop,
  };
}
