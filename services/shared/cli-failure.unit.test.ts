import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { NewerLogError } from '../../adapters/event-store/port.ts';
import { USAGE } from '../history/cli-commands.ts';
import { CommandFailedError, expectedFailure, failureText } from './cli-failure.ts';

describe('what an operator command line prints for a failure', () => {
  it('an expected failure as its one line, a bug with its stack', () => {
    expect(failureText(new CommandFailedError('quota: another rebuild came first; run it again'))).toBe(
      'quota: another rebuild came first; run it again',
    );
    expect(failureText(new CacheUnavailableError('redis cache get failed'))).toBe(
      'redis cache get failed: start Redis or correct REDIS_URL, then run the command again',
    );
    const denied = Object.assign(new Error("EACCES: permission denied, mkdir '/srv/data/events'"), {
      code: 'EACCES',
      path: '/srv/data/events',
    });
    expect(expectedFailure(denied)).toMatch(
      /^cannot use \/srv\/data\/events: permission denied \(EACCES\); use a path/,
    );
    // A full disk or a read-only one is not a permission to fix: each says what would help.
    const full = Object.assign(new Error('ENOSPC: no space left on device, write'), {
      code: 'ENOSPC',
      path: '/srv/data/events/data.mdb',
    });
    expect(expectedFailure(full)).toBe(
      'cannot use /srv/data/events/data.mdb: no space left on the device (ENOSPC); free space on that disk or use a path on another',
    );
    const readOnly = Object.assign(new Error('EROFS: read-only file system'), {
      code: 'EROFS',
      path: '/mnt/ro',
    });
    expect(expectedFailure(readOnly)).toBe(
      'cannot use /mnt/ro: read-only file system (EROFS); use a path on a writable file system',
    );
    const bug = new TypeError("Cannot read properties of undefined (reading 'plan')");
    expect(expectedFailure(bug)).toBeNull();
    expect(failureText(bug)).toBe(bug.stack);
    expect(failureText(bug)).toContain('\n    at ');
  });

  it('a log written by a newer version is its one line', () => {
    const newer = new NewerLogError('type code 99', 'codes 1–60');
    expect(expectedFailure(newer)).toBe(newer.message);
    expect(failureText(newer)).not.toContain('\n    at ');
  });

  it('a store that fails to open: a bug is printed with its stack, exit 1', async () => {
    // A command line's process: openedOrExit ends it, so it runs as a child of its own.
    const script = `import { openedOrExit } from ${JSON.stringify(fileURLToPath(new URL('./cli-failure.ts', import.meta.url)))};
await openedOrExit(async () => { throw new TypeError("Cannot read properties of undefined (reading 'plan')"); });`;
    const run = promisify(execFile)(process.execPath, [
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      script,
    ]);
    const failed = await run.then(
      () => null,
      (err: { code: number; stderr: string }) => err,
    );
    expect(failed?.code).toBe(1);
    expect(failed?.stderr).toMatch(
      /^TypeError: Cannot read properties of undefined \(reading 'plan'\)\n {4}at /,
    );
  }, 60_000);

  it("history's usage text names its exit codes", () => {
    // A POSTGRES_SCHEMA without a log is refused as a DATA_DIR is (openAdapters' existingLog), exit 2.
    expect(USAGE).toContain('a DATA_DIR or POSTGRES_SCHEMA that holds no event log');
    expect(USAGE).toContain(
      'Exit 2: a usage error (a filter refused here or by the service; from --store, a --coin the log\nholds no verdict of, or an --exchange or --timeframe it holds none of and the feed does not serve)',
    );
  });
});
