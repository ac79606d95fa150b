import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/** `npm run build` (the image's build stage) into a folder of its own, and what it emits. */

const ROOT = fileURLToPath(new URL('..', import.meta.url));

describe('npm run build', () => {
  // A folder of its own (under the ignored .scratch/): another test run building at the same time
  // must not empty the output under this one, as a shared dist/ would.
  const out = join(ROOT, '.scratch', `build-test-${process.pid}-${Date.now()}`);
  const entry = join(out, 'services/main.js');

  // Emitted without the type check (--emit-only, tsc --noCheck): npm test runs `tsc --noEmit` over
  // these sources beside the suite, and the build's own check would repeat it (this suite took
  // 22-26 CPU s with it, 7-8 without). Under load 10-30 tsc can still take minutes (a fixed 300 s
  // once overran a checking build): the build is awaited as it runs. The hook's limit only ends a
  // build that hangs, so it is an hour.
  beforeAll(async () => {
    const build = spawn('npm', ['run', 'build', '--', `--out-dir=${out}`, '--emit-only'], { cwd: ROOT });
    let output = '';
    build.stdout.on('data', (chunk) => {
      output += String(chunk);
    });
    build.stderr.on('data', (chunk) => {
      output += String(chunk);
    });
    const code = await new Promise<number | null>((resolve) => build.on('close', resolve));
    if (code !== 0) throw new Error(`npm run build failed (${code}):\n${output}`);
  }, 3_600_000);
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it('emits the compiled entry point services/main.js', () => {
    expect(existsSync(entry)).toBe(true);
    // Relative imports were rewritten to the emitted .js files, static and dynamic (main loads
    // the service once its configuration holds).
    expect(readFileSync(entry, 'utf8')).toMatch(/from "\.\/component\.js"/);
    expect(readFileSync(entry, 'utf8')).toMatch(/import\("\.\/service\.js"\)/);
    expect(readFileSync(entry, 'utf8')).not.toMatch(/(from |import\()["'][^"']*\.ts["']/);
  });

  it('puts beside it what the service reads from disk at run time', () => {
    for (const asset of [
      'package.json',
      'adapters/cache/debit-windows.lua',
      'services/engine/signals/calibration/table.json',
      'services/webhooks/README.md',
      'README.md',
      'docs/methodology.md',
      'sample-data/market',
    ]) {
      expect(existsSync(join(out, asset)), `${asset} is missing from the build`).toBe(true);
    }
    expect(JSON.parse(readFileSync(join(out, 'package.json'), 'utf8'))).toEqual({ type: 'module' });
  });

  it('has operator command lines that name themselves as run, node and the compiled file: the image has no npm scripts', async () => {
    const env = { ...process.env };
    delete env.npm_lifecycle_event;
    for (const cli of [
      'services/operator/cli.js',
      'services/history/cli.js',
      'services/operator/backup.js',
    ]) {
      const file = relative(ROOT, join(out, cli));
      // No arguments: the usage on stdout, exit 2.
      const told = await promisify(execFile)(process.execPath, [file], { cwd: ROOT, env }).catch(
        (err: { code: number; stdout: string }) => err,
      );
      expect(told).toMatchObject({ code: 2 });
      expect((told as { stdout: string }).stdout).toMatch(new RegExp(`^(usage: )?node ${file} `));
    }
  });

  it('leaves tests out of the build', () => {
    expect(existsSync(join(out, 'projections/runner.test.js'))).toBe(false);
    expect(existsSync(join(out, 'test'))).toBe(false);
  });
});
