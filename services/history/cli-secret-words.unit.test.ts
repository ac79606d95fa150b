import { describe, expect, it } from 'vitest';
import { runHistoryCommand, UsageError } from './cli-commands.ts';

describe('npm run history: a refused command line does not print the API key', () => {
  it('names --key given twice without its values (a bearer secret), and other options with theirs', async () => {
    const deps = {
      progress: null,
      openStore: () => Promise.reject(new Error('no store is opened for a refused command line')),
    };
    const first = 'sk_live_first_0123456789abcdef';
    const second = 'sk_live_second_0123456789abcdef';
    const refused = await runHistoryCommand(
      ['export', '--url', 'http://127.0.0.1:9', '--key', first, '--key', second, '--out', 'never.ndjson'],
      deps,
    ).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(UsageError);
    expect((refused as Error).message).toBe('--key given 2 times: it takes one value');
    expect((refused as Error).message).not.toContain('sk_live');
    // What is no secret is still named with its values.
    await expect(
      runHistoryCommand(['verify', 'x.ndjson', '--format', 'csv', '--format', 'ndjson'], deps),
    ).rejects.toThrow(new UsageError('--format given 2 times ("csv", "ndjson"): it takes one value'));
  });
});
