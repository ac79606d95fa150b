import { describe, expect, it } from 'vitest';
import { freePort } from '../../test/ports.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { connectKurrentEventStore } from './kurrentdb.ts';

/**
 * What an operator reads in the `failed to start` line when KurrentDB cannot be reached: the
 * server, its address (the password masked), what was tried and the setting to correct, not the
 * client's bare `UnavailableError` (its whole message on a closed port). Needs no KurrentDB server.
 */
describe('connecting the KurrentDB event store', () => {
  it('names KurrentDB, its address, the read tried and KURRENTDB_URL when nothing answers there', async () => {
    // A port the system handed out and took back: nothing listens there (a fixed block could be
    // another suite's server by the time the client connects).
    const port = await freePort();
    const url = `kurrentdb://admin:s3cret@127.0.0.1:${port}?tls=false`;
    const error = await connectKurrentEventStore({ connectionString: url }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(DependencyRefusedError);
    const { message } = error as Error;
    expect(message).toContain(
      `KurrentDB at kurrentdb://admin:***@127.0.0.1:${port}?tls=false (KURRENTDB_URL) is unreachable: the first read of its log ($all's last event) got no answer (`,
    );
    expect(message).toContain("Is KurrentDB running there, and KURRENTDB_URL's host and port right?");
    // The client's class name is said as such, never as the whole reason.
    expect(message).not.toMatch(/: UnavailableError\./);
    expect(message).not.toContain('s3cret');
  });
});
