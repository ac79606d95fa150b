import { AccessDeniedError, UnavailableError, WrongExpectedVersionError } from '@kurrent/kurrentdb-client';
import { describe, expect, it } from 'vitest';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { startRefusal } from './kurrentdb.ts';

const URL = 'kurrentdb://admin:s3cret@esdb.internal:2113?tls=false';

describe("what KurrentDB's first read failing stops the start with", () => {
  it('a refused login: DependencyRefusedError naming KurrentDB, its address and what to correct', () => {
    const denied = new AccessDeniedError(undefined, 'Access denied');
    const error = startRefusal(denied, URL);
    expect(error).toBeInstanceOf(DependencyRefusedError);
    const { message, cause } = error as Error;
    expect(message).toBe(
      "KurrentDB at kurrentdb://admin:***@esdb.internal:2113?tls=false (KURRENTDB_URL) refused the login: Access denied. To fix it, correct KURRENTDB_URL's username and password, or give that user the right to read and write every stream ($all)",
    );
    expect(cause).toBe(denied);
  });

  it('a server out of reach: what was tried, the gRPC code and details where the client gives them; any other failure as it came', () => {
    const given = new UnavailableError({
      code: 14,
      details: 'No connection established',
      message: '14 UNAVAILABLE: No connection established',
    } as never);
    const error = startRefusal(given, URL);
    expect(error).toBeInstanceOf(DependencyRefusedError);
    expect((error as Error).message).toBe(
      "KurrentDB at kurrentdb://admin:***@esdb.internal:2113?tls=false (KURRENTDB_URL) is unreachable: the first read of its log ($all's last event) got no answer (UnavailableError: 14 UNAVAILABLE: No connection established; code 14). " +
        "Is KurrentDB running there, and KURRENTDB_URL's host and port right? Start the server, or correct them; start this process again once it answers, or let its supervisor restart it",
    );
    expect((error as Error).cause).toBe(given);
    const other = new WrongExpectedVersionError(undefined, {
      streamName: 's',
      expected: 'no_stream',
      current: BigInt(1),
    } as never);
    expect(startRefusal(other, URL)).toBe(other);
  });
});
