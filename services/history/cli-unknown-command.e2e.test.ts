import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { runHistoryCommand, USAGE, UsageError } from './cli-commands.ts';

/**
 * `npm run history -- <command>` with a command it does not have: a usage error (exit 2, as USAGE
 * says) whose first line names the commands it has, before any setting is read or store opened.
 */
const ROOT = new URL('../../', import.meta.url);
const deps = {
  progress: null,
  openStore: () => Promise.reject(new Error('no store is opened for an unknown command')),
};

describe('npm run history: an unknown command', () => {
  it('is refused naming the commands there are, whatever options follow it', async () => {
    for (const argv of [['frobnicate'], ['frobnicate', '--bogus'], ['frobnicate', '--store'], ['toString']]) {
      await expect(runHistoryCommand(argv, deps), argv.join(' ')).rejects.toThrow(
        new UsageError(`unknown command ${argv[0]}: the commands are export, verify, score`),
      );
    }
    // Each of them is a command USAGE lists.
    for (const command of ['export', 'verify', 'score']) expect(USAGE).toContain(`\n  ${command} `);
  });

  it('exits 2 from the real command line with that line and a one-line hint, not the usage, before any setting is read', () => {
    for (const argv of [['frobnicate'], ['score']]) {
      const cli = spawnSync(process.execPath, ['--import', 'tsx', 'services/history/cli.ts', ...argv], {
        cwd: ROOT,
        encoding: 'utf8',
        // A setting the service would refuse: read, it would be told instead.
        env: { ...process.env, PORT: 'not-a-port', LOG_LEVEL: 'silent' },
        timeout: 60_000,
      });
      expect(cli.status, argv.join(' ')).toBe(2);
      expect(cli.stdout).toBe('');
      // The refusal, then where the usage is: two lines, the usage itself left to --help.
      expect(cli.stderr.split('\n')).toEqual([
        argv[0] === 'score'
          ? 'score needs the export file'
          : 'unknown command frobnicate: the commands are export, verify, score',
        'for the usage: node --import tsx services/history/cli.ts --help',
        '',
      ]);
      expect(cli.stderr).not.toContain('<command> [options]');
    }
  });
});
