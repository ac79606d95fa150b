import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

/**
 * The operator command lines write their usage when it is asked for: with no argument, exit 2 (a
 * command was expected); with `--help` or `help` first, exit 0. Before any setting is read: a
 * refused one (PORT) does not hide it.
 */
const ROOT = new URL('../../', import.meta.url);

function run(entry: string, ...args: string[]) {
  return spawnSync(process.execPath, ['--import', 'tsx', entry, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, PORT: 'not-a-port', LOG_LEVEL: 'silent' },
    timeout: 60_000,
  });
}

describe('the usage of an operator command line', () => {
  it.each(['services/history/cli.ts', 'services/operator/cli.ts', 'services/operator/backup.ts'])(
    '%s: none exits 2, --help and help exit 0, each with the usage on stdout',
    (entry) => {
      const none = run(entry);
      expect(none.stderr).toBe('');
      expect(none.status).toBe(2);
      expect(none.stdout).toContain(entry);
      expect(none.stdout.endsWith('\n')).toBe(true);
      for (const help of ['--help', 'help']) {
        expect(run(entry, help), help).toMatchObject({ status: 0, stdout: none.stdout, stderr: '' });
      }
    },
  );
});
