import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MIN_NODE_MAJOR, nodeRefusal } from './node-version.ts';

/**
 * Every entry point refuses an older Node in one line, exit 1, before any other module runs: run
 * here under the machines' system Node (/usr/bin/node, 20 on these hosts; OLD_NODE names another).
 */
const ROOT = new URL('../../', import.meta.url);
/** A DATA_DIR holding no log: every command refuses it without writing (were the check missing). */
const EMPTY = mkdtempSync(join(tmpdir(), 'node-version-'));
afterAll(() => rmSync(EMPTY, { recursive: true, force: true }));
const ENTRIES: [string, ...string[]][] = [
  // An unknown role: were the check missing, the service would refuse it and stop, not start.
  ['service', 'services/main.ts', '--role', 'node-version-test'],
  ['keys', 'services/operator/cli.ts', 'list'],
  ['history', 'services/history/cli.ts', 'verify'],
  ['backup', 'services/operator/backup.ts', join(EMPTY, 'backup')],
];

function run(node: string, args: readonly string[]) {
  return spawnSync(node, ['--import', 'tsx', ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, DATA_DIR: EMPTY, PORT: '0', LOG_LEVEL: 'silent' },
    timeout: 60_000,
  });
}

describe('the Node the entry points run on', () => {
  it("names the major of package.json's engines", () => {
    const pkg = JSON.parse(readFileSync(new URL('package.json', ROOT), 'utf8')) as {
      engines: { node: string };
    };
    expect(pkg.engines.node).toBe(`>=${MIN_NODE_MAJOR}`);
    expect(nodeRefusal(`${MIN_NODE_MAJOR}.0.0`, '/x/node')).toBeNull();
  });

  const old = process.env.OLD_NODE ?? '/usr/bin/node';
  const version = spawnSync(old, ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout.trim();
  const refused = Number(version.split('.')[0]) < MIN_NODE_MAJOR;

  it.each(ENTRIES)(
    `%s under ${old} (Node ${version}): one line naming Node ${MIN_NODE_MAJOR}, exit 1, when that Node is older`,
    (_name, ...args) => {
      const result = run(old, args);
      if (refused) {
        expect(result.status).toBe(1);
        expect(result.stdout).toBe('');
        expect(result.stderr).toBe(`${nodeRefusal(version, old)}\n`);
        expect(result.stderr).toContain(`needs Node.js ${MIN_NODE_MAJOR} or later; this is Node ${version}`);
      } else expect(result.stderr).not.toContain('needs Node.js');
    },
    60_000,
  );

  it('the Node the suite runs on is let through: keys without a command prints its usage, exit 2', () => {
    const result = run(process.execPath, ['services/operator/cli.ts']);
    expect(result.stderr).not.toContain('needs Node.js');
    expect(result.status).toBe(2);
    expect(result.stdout).toMatch(/^usage: /);
  }, 60_000);
});
