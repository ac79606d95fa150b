import { describe, expect, it } from 'vitest';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
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

  it("history's usage text names its exit codes", () => {
    expect(USAGE).toContain(
      'Exit 2: a usage error, a DATA_DIR that holds no event log, or a setting the service would refuse',
    );
  });
});
