import { describe, expect, it } from 'vitest';
import {
  EventStoreUnavailableError,
  StatementCancelledError,
  StorageFullError,
} from '../../adapters/event-store/port.ts';
import { serializeError } from './logger.ts';

describe("the logger's error serializer", () => {
  it('states a cause once when the message already names it (postgres unreachable: X, not X: X)', () => {
    const cause = new Error('connect ECONNREFUSED 10.0.0.5:5432');
    const err = new EventStoreUnavailableError(`postgres unreachable: ${cause.message}`, { cause });
    const out = serializeError(err) as { message: string; type: string; stack: string };
    expect(out.message).toBe('postgres unreachable: connect ECONNREFUSED 10.0.0.5:5432');
    expect(out.type).toBe('EventStoreUnavailableError');
  });

  it("logs the event store's outage without a stack, other errors with theirs and their causes'", () => {
    // Every reader, saver and ticker of a process logs the outage while it lasts.
    const cause = new Error('connect ECONNREFUSED 10.0.0.5:5432');
    const outage = serializeError(new EventStoreUnavailableError('postgres unreachable', { cause }));
    expect(outage).toMatchObject({
      type: 'EventStoreUnavailableError',
      message: 'postgres unreachable: connect ECONNREFUSED 10.0.0.5:5432',
    });
    expect(outage).not.toHaveProperty('stack');
    const full = serializeError(new StorageFullError('LMDB at /data is out of space'));
    expect(full).not.toHaveProperty('stack');
    const bug = serializeError(new Error('store read failed', { cause })) as { stack: string };
    expect(bug.stack).toContain('caused by: Error: connect ECONNREFUSED');
  });

  it('keeps the stack of a statement cancelled at its timeout: it names the caller that was slow', () => {
    async function readTheSlowProjection(): Promise<never> {
      const cause = Object.assign(new Error('canceling statement due to statement timeout'), {
        code: '57014',
      });
      throw new StatementCancelledError(`postgres statement cancelled: ${cause.message}`, { cause });
    }
    return readTheSlowProjection().catch((err: unknown) => {
      const out = serializeError(err) as { type: string; message: string; stack?: string };
      expect(out.type).toBe('StatementCancelledError');
      expect(out.message).toBe('postgres statement cancelled: canceling statement due to statement timeout');
      expect(out.stack).toContain('readTheSlowProjection');
      // Still the event store's retryable 503 to whoever called.
      expect(err).toBeInstanceOf(EventStoreUnavailableError);
    });
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
