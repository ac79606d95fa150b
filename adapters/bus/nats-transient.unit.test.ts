import { JetStreamApiError } from '@nats-io/jetstream';
import { describe, expect, it } from 'vitest';
import { isTransient } from './nats.ts';

// What the bus start waits out (a server or its storage coming back) and what fails at once.
const apiError = (code: number, err_code: number, description: string) =>
  new JetStreamApiError({ code, err_code, description });

describe('isTransient', () => {
  it('waits out a stream store the server could not create (its account directory removed under it)', () => {
    expect(isTransient(apiError(500, 10077, 'error creating store for stream'))).toBe(true);
  });

  it('waits out JetStream 503s and a refused connection, also as a cause', () => {
    expect(isTransient(apiError(503, 10008, 'JetStream system temporarily unavailable'))).toBe(true);
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:4222'), { code: 'ECONNREFUSED' });
    expect(isTransient(new Error('connect failed', { cause: refused }))).toBe(true);
  });

  it('fails at once on a stream the server refuses for its settings', () => {
    expect(
      isTransient(apiError(400, 10058, 'stream name already in use with a different configuration')),
    ).toBe(false);
    expect(isTransient(apiError(400, 10065, 'subjects overlap with an existing stream'))).toBe(false);
    expect(isTransient(new Error('Authorization Violation'))).toBe(false);
  });
});
