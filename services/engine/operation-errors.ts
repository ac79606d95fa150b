import { ZodError, type ZodType } from 'zod';
import { EventStoreUnavailableError, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { MarketDataError } from '../../adapters/market/errors.ts';
import { ERRORS, type ErrorCode, isErrorCode } from '../../contracts/errors.ts';
import { issueText } from '../../contracts/issue-text.ts';

/**
 * How an operation failure leaves any channel: an HTTP status, a stable code and a message the
 * caller can act on. `retryable` marks failures that may pass on a later try (a venue outage): it
 * is always the catalog's word for the code (retryableCode), so HTTP and MCP say the same of it.
 */
export interface OperationFailure {
  status: number;
  code: string;
  message: string;
  retryable: boolean;
  /** Field-level detail for invalid input. */
  issues?: { path: string; message: string }[];
  /**
   * Figures the refusal's `_service` block carries besides the caller and quota (the chat quota),
   * on every channel: HTTP's body and MCP's structuredContent alike.
   */
  service?: Record<string, unknown>;
  /**
   * When a refusal for a window (the chat quota's month) serves again, ISO 8601: MCP's tool error
   * says it as quota_exhausted does, `resets_at` and `retry_after_ms`; HTTP's 429 in Retry-After.
   */
  resetsAt?: string;
}

/** Whether the same request may pass later, refused with `code`: the catalog's word for it. */
export function retryableCode(code: string): boolean {
  return isErrorCode(code) && ERRORS[code].retryable;
}

/**
 * A failure a feature describes itself (the knowledge tools' SCREAMING_CASE codes), in its own
 * words: its status and retryable are the catalog's for its code.
 */
export class OperationError extends Error {
  override readonly name = 'OperationError';
  readonly failure: OperationFailure;
  constructor(failure: Omit<OperationFailure, 'status' | 'retryable' | 'code'> & { code: ErrorCode }) {
    super(failure.message);
    const { status, retryable } = ERRORS[failure.code];
    this.failure = { ...failure, status, retryable };
  }
}

/**
 * A refused input as its failure, every issue worded by issueText (what the field must be, what
 * was sent): `schema` and `input` are the input's schema and the input as sent, when known.
 */
export function invalidInput(
  err: ZodError,
  schema?: ZodType,
  input?: unknown,
  whole = '(body)',
): OperationFailure {
  const issues = err.issues.map((i) => {
    const path = i.path.map(String).join('.') || whole;
    return { path, message: issueText(i, path, schema, input) };
  });
  return {
    status: ERRORS.invalid_input.status,
    code: 'invalid_input' satisfies ErrorCode,
    message: issues.map((i) => i.message).join('; '),
    retryable: retryableCode('invalid_input'),
    issues,
  };
}

/** Maps a thrown error to its failure, or null when it is a bug (the channel answers 500). */
export function describeFailure(err: unknown): OperationFailure | null {
  if (err instanceof OperationError) return err.failure;
  if (err instanceof ZodError) return invalidInput(err);
  if (err instanceof MarketDataError) {
    // The catalog's status and retryable for the market's codes (unknown_coin 404, venue_unavailable 503...).
    const status = isErrorCode(err.code) ? ERRORS[err.code].status : 422;
    return { status, code: err.code, message: err.message, retryable: retryableCode(err.code) };
  }
  // An operation that records what it answers (a verdict) while the event store is out of reach
  // (a PostgreSQL restart or failover, a host cut off) or full: nothing was written, try again.
  if (err instanceof EventStoreUnavailableError) {
    return { status: 503, code: err.code, message: err.publicMessage, retryable: retryableCode(err.code) };
  }
  // Recording lost its stream's race to other writers on every try (seen once in the fault
  // drill, PostgreSQL restarting under load): nothing of this call was written, and a retry
  // finds the verdict that won.
  if (err instanceof WrongExpectedRevisionError) {
    return {
      status: ERRORS.event_store_unavailable.status,
      code: 'event_store_unavailable' satisfies ErrorCode,
      message: `the market's verdict stream is busy with concurrent writers (${err.message}); retry`,
      retryable: retryableCode('event_store_unavailable'),
    };
  }
  return null;
}
