import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = new URL('..', import.meta.url).pathname;

/**
 * A security review's walk: a server URL mistyped before its user (`postgres//user:pw@host`, the
 * colon after the scheme left out) is not a URL, and the start's refusal echoed it whole, password
 * included, to the console and whatever collects it. Every other shape was masked already.
 */
describe('a start refused for a mistyped server URL', () => {
  const dirs: string[] = [];
  afterAll(async () => {
    for (const dir of dirs) await rm(dir, { recursive: true, force: true });
  });

  it('names each setting and never prints its password', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'config-refusal-'));
    dirs.push(dataDir);
    const child = spawn(process.execPath, ['--import', 'tsx', 'services/main.ts'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        HOST: '127.0.0.1',
        PORT: '0',
        DATA_DIR: dataDir,
        EVENT_STORE: 'postgres',
        POSTGRES_URL: 'postgres//signal:PGSECRET7@127.0.0.1:5432/signals',
        CACHE: 'redis',
        REDIS_URL: 'redis:/default:REDISSECRET7@127.0.0.1:6379',
        BUS: 'nats',
        NATS_URL: 'nats//svc:NATSSECRET7@127.0.0.1:4222',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect(code, output).not.toBe(0);
    expect(output).toContain('POSTGRES_URL');
    expect(output).toContain('postgres//signal:***@127.0.0.1');
    expect(output).toContain('REDIS_URL');
    expect(output).toContain('redis:/default:***@127.0.0.1');
    expect(output).toContain('NATS_URL');
    expect(output).toContain('nats//svc:***@127.0.0.1');
    for (const secret of ['PGSECRET7', 'REDISSECRET7', 'NATSSECRET7']) expect(output).not.toContain(secret);
  }, 60_000);
});
