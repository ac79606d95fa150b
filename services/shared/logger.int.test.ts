import { execFileSync, spawn } from 'node:child_process';
import { closeSync, constants, mkdtempSync, openSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

/** Runs logger-child.ts; resolves with its stdout lines once it exits, or once `until` holds. */
function run(args: string[], until?: (lines: string[]) => boolean, env: Record<string, string> = {}) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/shared/logger-child.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...env },
  });
  // Decoded as a stream: a multi-byte character may straddle two reads of the pipe.
  child.stdout.setEncoding('utf8');
  let out = '';
  let err = '';
  const lines = () => out.split('\n').filter((l) => l !== '');
  return new Promise<{ lines: string[]; ms: number; stderr: string }>((resolve, reject) => {
    const started = Date.now();
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
      if (until?.(lines())) {
        child.kill('SIGKILL');
        resolve({ lines: lines(), ms: Date.now() - started, stderr: err });
      }
    });
    child.stderr.on('data', (chunk: Buffer) => {
      err += chunk.toString();
    });
    child.once('exit', (code, signal) => {
      if (until) reject(new Error(`exited (${code ?? signal}) before its line: ${err}`));
      else resolve({ lines: lines(), ms: Date.now() - started, stderr: err });
    });
  });
}

function numbered(lines: string[]) {
  return lines.map((l) => JSON.parse(l) as { n: number; text: string; msg: string; service: string });
}

describe('the service logger (buffered stdout)', () => {
  it('writes every line whole, in order, multi-byte characters intact, well past one buffer', async () => {
    const { lines } = await run(['many', '3000']);
    const parsed = numbered(lines);
    expect(parsed.map((l) => l.n)).toEqual(Array.from({ length: 3000 }, (_, n) => n));
    for (const line of parsed) expect(line.text).toBe(line.n % 7 === 0 ? 'prix: 5 € – ünïcödé ✓' : 'x');
    expect(parsed[0]).toMatchObject({ msg: 'line', service: 'signal-service' });
  });

  it('writes what it holds before a SIGKILL when flushBeforeKill ran first (main’s way to SIGKILL)', async () => {
    // 3,000 lines of ~90 B: several chunks, the last still held when the kill comes.
    const { lines } = await run(['killed', '3000']);
    expect(numbered(lines).map((l) => l.n)).toEqual(Array.from({ length: 3000 }, (_, n) => n));
  });

  it('writes every line whole before a SIGKILL when the stdout pipe was full and took part of a chunk', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'logger-full-'));
    try {
      // A FIFO as stdout: a pipe of 64 KB that nobody reads until the child is on its way to the kill.
      const fifo = join(dir, 'stdout');
      execFileSync('mkfifo', [fifo]);
      const readEnd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      const writeEnd = openSync(fifo, constants.O_WRONLY);
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'services/shared/logger-child.ts', 'full', '2000', join(dir, 'written')],
        { stdio: ['pipe', writeEnd, 'pipe'], env: { ...process.env, UV_THREADPOOL_SIZE: '1' } },
      );
      closeSync(writeEnd);
      let err = '';
      const full = new Promise<void>((resolve, reject) => {
        child.stderr?.on('data', (chunk: Buffer) => {
          err += chunk.toString();
          if (err.includes('full\n')) resolve();
        });
        child.once('exit', (code, signal) => reject(new Error(`exited (${code ?? signal}): ${err}`)));
      });
      await full;
      // Only now is the pipe read: the kill path finds it full, with part of a chunk in it.
      const reader = new Socket({ fd: readEnd, readable: true, writable: false });
      reader.setEncoding('utf8');
      let out = '';
      reader.on('data', (chunk: string) => {
        out += chunk;
      });
      const ended = new Promise((resolve) => reader.once('end', resolve));
      child.stdin?.write('\n');
      await ended;
      const lines = out.split('\n').filter((l) => l !== '');
      // Every line parses (none cut, none spliced into another), each once, in order.
      expect(numbered(lines).map((l) => l.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('writes out every line before a SIGKILL with the thread pool stuck', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'logger-fifo-'));
    try {
      const fifo = join(dir, 'never-written');
      execFileSync('mkfifo', [fifo]);
      // 2,000 lines of ~200 B: past the 64 KB that starts an asynchronous write.
      const { lines } = await run(['stuck', '2000', fifo], undefined, { UV_THREADPOOL_SIZE: '1' });
      expect(numbered(lines).map((l) => l.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('lets the line of a quiet process out by the flush interval, far below its buffer size', async () => {
    const { lines } = await run(['quiet'], (ls) => ls.length > 0);
    expect(numbered(lines)).toMatchObject([{ n: 0, msg: 'quiet line' }]);
  });

  it('calls back a flush once what it holds is written', async () => {
    const { lines, stderr } = await run(['flushed']);
    expect(numbered(lines)).toMatchObject([{ n: 0, msg: 'line' }]);
    // sonic-boom ends a flush with fsync, which a pipe refuses (EINVAL): called back all the same.
    expect(stderr).toMatch(/^flushed (ok|Error: EINVAL)/m);
  });
});
