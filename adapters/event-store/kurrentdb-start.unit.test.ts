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

  it('a server out of reach as before; any other failure as it came', () => {
    expect(startRefusal(new UnavailableError(undefined, 'no connection'), URL)).toBeInstanceOf(
      DependencyRefusedError,
    );
    const other = new WrongExpectedVersionError(undefined, {
      streamName: 's',
      expected: 'no_stream',
      current: BigInt(1),
    } as never);
    expect(startRefusal(other, URL)).toBe(other);
  });
});
