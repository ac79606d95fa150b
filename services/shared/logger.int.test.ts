import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/** Runs logger-child.ts; resolves with its stdout lines once it exits, or once `until` holds. */
function run(args: string[], until?: (lines: string[]) => boolean) {
  const child = spawn(process.execPath, ['--import', 'tsx', 'services/shared/logger-child.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const lines = () => out.split('\n').filter((l) => l !== '');
  return new Promise<{ lines: string[]; ms: number; stderr: string }>((resolve, reject) => {
    const started = Date.now();
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
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
    expect(parsed[7]!.text).toBe('prix: 5 € – ünïcödé ✓');
    expect(parsed[0]).toMatchObject({ msg: 'line', service: 'signal-service' });
  });

  it('writes what it holds before a SIGKILL when flushSync ran first (main’s exit path)', async () => {
    const { lines } = await run(['killed', '500']);
    expect(numbered(lines).map((l) => l.n)).toEqual(Array.from({ length: 500 }, (_, n) => n));
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
