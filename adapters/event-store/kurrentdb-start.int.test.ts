import { describe, expect, it } from 'vitest';
import { freePort } from '../../test/ports.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { connectKurrentEventStore } from './kurrentdb.ts';

/**
 * What an operator reads in the `failed to start` line when KurrentDB cannot be reached: the
 * server, its address (the password masked) and the setting to correct; before, the client's bare
 * `UnavailableError`, thrown by whichever read came first. Needs no KurrentDB server.
 */
describe('connecting the KurrentDB event store', () => {
  it('names KurrentDB, its address and KURRENTDB_URL when nothing answers there', async () => {
    const port = await freePort();
    const url = `kurrentdb://admin:s3cret@127.0.0.1:${port}?tls=false`;
    const error = await connectKurrentEventStore({ connectionString: url }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DependencyRefusedError);
    const { message } = error as Error;
    expect(message).toContain(
      `KurrentDB at kurrentdb://admin:***@127.0.0.1:${port}?tls=false (KURRENTDB_URL) is unreachable`,
    );
    expect(message).toContain("Start the server, or correct KURRENTDB_URL's host and port");
    expect(message).not.toContain('s3cret');
  });
});
