import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

/**
 * Install scripts run only for the packages that need them, and every package that has one is
 * reviewed in package.json's `allowScripts` (npm 11.16's field; npm 12 skips the scripts of
 * packages it does not allow, and npm 11 warns about them).
 */
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  allowScripts?: Record<string, boolean>;
};
const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { hasInstallScript?: boolean }>;
};

/**
 * Allowed: the packages whose script puts their own binary in place when no prebuilt one fits
 * (lmdb has no JavaScript fallback; esbuild and anvil fetch their platform's binary). Denied: a
 * banner (ccxt), a version-scheme warning (protobufjs), and native speed-ups that fall back to
 * JavaScript (bufferutil for ws, msgpackr-extract for msgpackr, ssh2 and cpu-features for the
 * container tests' SSH).
 */
const NEEDED = ['@foundry-rs/anvil', 'esbuild', 'lmdb'];

describe('install scripts', () => {
  it('allowScripts reviews every locked package with an install script, and allows exactly the ones needed', () => {
    const withScripts = new Set(
      Object.entries(lock.packages)
        .filter(([path, entry]) => path !== '' && entry.hasInstallScript)
        .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length)),
    );
    const reviewed = pkg.allowScripts ?? {};
    expect(Object.keys(reviewed).sort()).toEqual([...withScripts].sort());
    expect(
      Object.entries(reviewed)
        .filter(([, allowed]) => allowed)
        .map(([name]) => name)
        .sort(),
    ).toEqual(NEEDED);
  });

  it('npm install on the pinned Node prints no install-scripts warning', async () => {
    // The npm that runs the suite (npm test, npx), started on the Node that runs it: the pinned one.
    const npm = process.env.npm_execpath;
    const [command, args] = npm ? [process.execPath, [npm]] : ['npm', []];
    const { stdout, stderr } = await promisify(execFile)(
      command,
      [...args, 'install', '--dry-run', '--no-audit', '--no-fund'],
      { cwd: ROOT, maxBuffer: 16 * 1024 * 1024 },
    );
    expect(`${stdout}\n${stderr}`).not.toMatch(/install-scripts|not yet covered by allowScripts/);
  }, 120_000);
});
