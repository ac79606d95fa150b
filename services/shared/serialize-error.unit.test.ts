import { describe, expect, it } from 'vitest';
import { EventStoreUnavailableError } from '../../adapters/event-store/port.ts';
import { serializeError } from './logger.ts';

describe("the logger's error serializer", () => {
  it('states a cause once when the message already names it (postgres unreachable: X, not X: X)', () => {
    const cause = new Error('connect ECONNREFUSED 10.0.0.5:5432');
    const err = new EventStoreUnavailableError(`postgres unreachable: ${cause.message}`, { cause });
    const out = serializeError(err) as { message: string; type: string; stack: string };
    expect(out.message).toBe('postgres unreachable: connect ECONNREFUSED 10.0.0.5:5432');
    expect(out.type).toBe('EventStoreUnavailableError');
    expect(out.stack).toContain('caused by: Error: connect ECONNREFUSED');
  });

  it('still appends a cause the message does not name, each once, as pino does', () => {
    const root = new Error('socket hang up');
    const mid = new Error('relay failed', { cause: root });
    const err = new Error(`could not read the anchors: ${root.message}`, { cause: mid });
    expect((serializeError(err) as { message: string }).message).toBe(
      'could not read the anchors: socket hang up: relay failed',
    );
  });

  it('appends a cause whose words the message merely holds (request timeout, cause timeout)', () => {
    const err = new Error('request timeout after 5 s', { cause: new Error('timeout') });
    expect((serializeError(err) as { message: string }).message).toBe('request timeout after 5 s: timeout');
  });

  it('appends an error-like cause that is not an Error instance, as pino does', () => {
    const err = new Error('publish failed', { cause: { message: 'stream not found', code: 10059 } });
    expect((serializeError(err) as { message: string }).message).toBe('publish failed: stream not found');
  });

  it('leaves what is not an error as it is', () => {
    expect(serializeError('plain')).toBe('plain');
  });
});
