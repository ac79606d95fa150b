import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { newEvent } from '../contracts/events.ts';

const ROOT = new URL('..', import.meta.url).pathname;

interface Run {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  stderr: string;
  exit: Promise<number | null>;
}

function run(env: Record<string, string>, args: string[] = []): Run {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', FEED: 'replay', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const result: Run = {
    child,
    lines: [],
    stderr: '',
    exit: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
  };
  let buffer = '';
  child.stdout!.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    let nl = buffer.indexOf('\n');
    while (nl >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      try {
        result.lines.push(JSON.parse(line));
      } catch {
        result.lines.push({ raw: line });
      }
      nl = buffer.indexOf('\n');
    }
  });
  child.stderr!.on('data', (chunk: Buffer) => {
    result.stderr += chunk.toString();
  });
  return result;
}

const running: Run[] = [];
const dirs: string[] = [];
afterEach(async () => {
  for (const r of running.splice(0)) r.child.kill('SIGKILL');
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function tempDir() {
  const dir = await mkdtemp(join(tmpdir(), 'proc-'));
  dirs.push(dir);
  return dir;
}

describe('the service process', () => {
  it('refuses a bad configuration, naming the variable', async () => {
    const r = run({ PORT: 'eighty', EVENT_STORE: 'cassandra' });
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('PORT');
    expect(r.stderr).toContain('"eighty"');
    expect(r.stderr).toContain('EVENT_STORE');
  });

  it('refuses an unknown role', async () => {
    const r = run({ DATA_DIR: await tempDir() }, ['--role', 'janitor']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('unknown role "janitor"');
  });

  it('refuses production without a webhook master key in one line, no stack trace', async () => {
    const r = run({ NODE_ENV: 'production', DATA_DIR: await tempDir() }, ['--role', 'dispatcher']);
    running.push(r);
    expect(await r.exit).toBe(1);
    expect(r.stderr).toContain('WEBHOOK_MASTER_KEY');
    expect(r.stderr).not.toMatch(/^\s+at /m);
  });

  it('starts on embedded defaults, folds the log, and on SIGTERM checkpoints and exits 0', async () => {
    const dataDir = await tempDir();
    const seed = await openLmdbEventStore({ path: join(dataDir, 'events') });
    for (let i = 0; i < 25; i++) {
      await seed.append(`quota-${i % 3}`, [
        newEvent('ApiKeyRevoked', { keyId: `k${i}`, reason: 'test' }),
        newEvent('ApiKeyRevoked', { keyId: `k${i}b`, reason: 'test' }),
      ]);
    }
    await seed.close();

    const r = run({ DATA_DIR: dataDir, REPLAY_SPEED: '0' });
    running.push(r);
    await expect.poll(() => r.lines.find((l) => l.msg === 'service started'), { interval: 100 }).toBeTruthy();
    const url = r.lines.find((l) => l.msg === 'service started')!.url as string;
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    await expect
      .poll(async () => {
        const body = (await (await fetch(`${url}/readyz`)).json()) as {
          checks: Record<string, { checkpoint?: number }>;
        };
        return body.checks['projection:event-stats']?.checkpoint ?? 0;
      })
      .toBeGreaterThanOrEqual(50);

    r.child.kill('SIGTERM');
    expect(await r.exit).toBe(0);
    expect(r.lines.some((l) => l.msg === 'service stopped')).toBe(true);

    // Whatever the scheduler added at start, every projection drained to the head and saved it.
    const reopened = await openLmdbEventStore({ path: join(dataDir, 'events') });
    const head = await reopened.headPosition();
    const snapshot = await reopened
      .projectionStore()
      .load<{ total: number; byType: Record<string, number> }>('event-stats');
    expect(snapshot).toMatchObject({
      checkpoint: head,
      state: { total: head, byType: { ApiKeyRevoked: 50 } },
    });
    expect((await reopened.projectionStore().load('latest-verdicts'))?.checkpoint ?? head).toBe(head);
    const relay = await reopened.projectionStore().load('relay');
    expect(relay?.checkpoint).toBeGreaterThanOrEqual(50);
    await reopened.close();
  });
});
