import type { AppendResult, ExpectedRevision, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';

/**
 * The event store port. Every adapter (memory, LMDB, KurrentDB, PostgreSQL) passes the same contract suite
 * in `contract.ts`.
 */
export interface EventStore {
  readonly kind: 'memory' | 'lmdb' | 'kurrentdb' | 'postgres';
  /**
   * Positions are consecutive (1, 2, 3...): the difference of two is the number of events between
   * them. False where a position is a byte offset in the server's log (KurrentDB), so how far a
   * reader is behind must be counted in events (projections/lag.ts `eventsBehind`).
   */
  readonly densePositions: boolean;

  /**
   * Appends atomically: all events or none. Throws WrongExpectedRevisionError when the stream's
   * revision does not match. Re-appending events whose ids are already the stream's events is
   * idempotent: nothing is written and the original result is returned (`written: false` where
   * the store can tell; see AppendResult).
   */
  append(stream: string, events: NewEvent[], options?: AppendOptions): Promise<AppendResult>;

  /** Events of one stream in revision order; empty when the stream does not exist. */
  readStream(
    stream: string,
    options?: { fromRevision?: number; maxCount?: number },
  ): Promise<RecordedEvent[]>;

  /** Events of all streams with position > `after` (default 0), in position order. */
  readAll(options?: { after?: number; maxCount?: number }): Promise<RecordedEvent[]>;

  /**
   * Catch-up then live: yields every event with position > `after`, in order, with none lost
   * or doubled, until the subscription is closed.
   */
  subscribeToAll(options?: { after?: number }): Subscription;

  /**
   * Optional hint that another process appended (e.g. a bus message about an event this process
   * has not read yet): live subscriptions read again now instead of at their next poll. Stores
   * whose subscriptions are pushed need not implement it.
   */
  wake?(): void;

  /**
   * Optional doorbell that reads nothing: resolves at once when the log's head is already past
   * `after`, else on the next append in this process, `wake()`, or after `timeoutMs` (appends by
   * other processes), whichever comes first. A follower at the head waits on it instead of keeping
   * a live subscription open only to learn that something was appended (which reads and decodes
   * every event a second time). A store with `onAppended` may leave out of "already past" its
   * own commits not handed over yet: it rings when it hands them over. `cancel` resolves the
   * promise and drops the wait.
   */
  appended?(after: number, timeoutMs: number): { promise: Promise<void>; cancel: () => void };

  /**
   * Optional: hands `listener` the events of every commit this process makes, in position order,
   * once the commit is on disk (the store's acknowledgement), as they were appended: no read and
   * no decode. Each call is one commit's events; events other processes append are not handed
   * over, so a listener must check that a commit follows on from what it has seen (positions are
   * dense where this exists) and read the log otherwise. The events' data is the appender's own
   * object, shared: neither side may change it (appenders build it for the append). Returns the
   * function that stops the listening.
   */
  onAppended?(listener: (events: readonly RecordedEvent[]) => void): () => void;

  /**
   * Optional, where appends may be answered once committed (`durability: 'committed'`): how much
   * the engine has written and not yet flushed (PostgreSQL: the whole server's WAL, committed or
   * not, an upper bound on the log's commits at risk), and its bound on how long it may stay so.
   */
  flushLag?(): Promise<{ unflushedBytes: number; boundMs: number }>;

  /**
   * Optional, where readers may be held back from committed events (PostgreSQL: behind an older
   * open transaction): how many events are committed after `after` up to `head`, whether or not a
   * reader may take them yet, counted up to `cap` + 1. Lag is counted with it, so a held reader
   * shows as behind.
   */
  countCommitted?(after: number, head: number, cap: number): Promise<number>;

  /**
   * Optional, where processes on other hosts may share the log (PostgreSQL): a lease named `name`
   * that one process at a time holds, given back when it releases it, stops, or loses its
   * connection. The outcome resolver works only while it holds its lease (one chain writer).
   */
  lease?(name: string): Lease;

  /** Current revision of a stream, or null when it does not exist. */
  streamRevision(stream: string): Promise<number | null>;

  /** Position of the last event in the store (0 when empty). */
  headPosition(): Promise<number>;

  health(): Promise<HealthReport>;
  close(): Promise<void>;
}

export interface AppendOptions {
  expectedRevision?: ExpectedRevision;
  /**
   * 'flushed' (default): on disk before the promise resolves. 'committed': committed (visible to
   * every reader, and kept if this process dies) with the disk flush following within the engine's
   * bounded delay; for records whose loss in a crash of the database server itself is tolerable
   * (see deploy/README.md, durability by event class). Stores that always flush ignore it.
   */
  durability?: 'flushed' | 'committed';
}

export interface Lease {
  /** Whether this process holds the lease now, taking it when free; false when that cannot be told. */
  hold(): Promise<boolean>;
  /** Gives the lease back and asks for it no more. */
  release(): Promise<void>;
}

export interface Subscription extends AsyncIterable<RecordedEvent> {
  close(): Promise<void>;
}

export interface HealthReport {
  ok: boolean;
  detail?: string;
  /** The error behind a failure: /readyz shows the reason its code gives, the log its words. */
  cause?: unknown;
}

export class WrongExpectedRevisionError extends Error {
  override readonly name = 'WrongExpectedRevisionError';
  constructor(
    readonly stream: string,
    readonly expected: ExpectedRevision,
    readonly actual: number | null,
  ) {
    super(
      `stream ${stream}: expected revision ${String(expected)}, actual ${actual === null ? 'no stream' : actual}`,
    );
  }
}

/** A re-append that reuses some but not all event ids of an earlier append. */
export class IdempotencyConflictError extends Error {
  override readonly name = 'IdempotencyConflictError';
  constructor(
    readonly stream: string,
    readonly eventId: string,
  ) {
    super(`stream ${stream}: event ${eventId} was already appended in a different batch`);
  }
}

/**
 * The store's server cannot be reached right now; nothing was written (or a retry with the same
 * event ids is idempotent). HTTP answers it as a retryable 503.
 */
export class EventStoreUnavailableError extends Error {
  override readonly name: string = 'EventStoreUnavailableError';
  readonly statusCode = 503;
  readonly code: string = 'event_store_unavailable';
  readonly retryable = true;
  /**
   * What a caller is told. The message names the store's server and the driver's words
   * (`postgres unreachable: connect ECONNREFUSED 10.0.3.7:5432`, an LMDB path): for the log, not
   * for whoever holds a key (/readyz shows a generic reason too).
   */
  get publicMessage(): string {
    return 'the event log is unreachable right now; retry shortly';
  }
}

/**
 * A statement the server cancelled at its statement timeout (PostgreSQL's SQLSTATE 57014): rolled
 * back, nothing written, retryable as the outage is. Unlike the outage it points at one caller, so
 * its stack (which read or write was slow) is logged.
 */
export class StatementCancelledError extends EventStoreUnavailableError {
  override readonly name: string = 'StatementCancelledError';
}

/**
 * The store's disk (or LMDB's map) is full: nothing was written. Reads still work; writes are
 * refused as retryable until space returns, and the store's health says so meanwhile.
 */
export class StorageFullError extends EventStoreUnavailableError {
  override readonly name: string = 'StorageFullError';
  override readonly code: string = 'storage_full';
  override get publicMessage(): string {
    return 'the event log is out of space; nothing was written; retry later';
  }
}

/**
 * The configured log does not exist and the caller asked not to create it: a command that only
 * reads, on a mistyped DATA_DIR or POSTGRES_SCHEMA, would otherwise answer from a new, empty log
 * ("no keys") as if it were the service's. Thrown before anything is created.
 */
export class NoEventStoreError extends Error {
  override readonly name = 'NoEventStoreError';
}

/**
 * A log holding an event type this build does not know: a newer version wrote it (types are only
 * ever added). This version cannot read such events, so it refuses the log when it opens it, in
 * one line that says what to do, rather than skip them or fail in whatever reads one first.
 * `unknown` names the type as the store keeps it, `known` the range or count this build knows.
 */
export class NewerLogError extends Error {
  override readonly name = 'NewerLogError';
  constructor(unknown: string, known: string, where = 'the event log') {
    super(
      `${where} holds ${unknown}, which this build does not know (it knows ${known}): ` +
        'the log was written by a newer version of the service, and this version refuses it. ' +
        'Run that newer version, or roll back by restoring a backup taken before the upgrade (deploy/README.md, Upgrades)',
    );
  }
}

export function checkExpected(stream: string, expected: ExpectedRevision, actual: number | null): void {
  const ok =
    expected === 'any' ||
    (expected === 'no_stream' && actual === null) ||
    (expected === 'stream_exists' && actual !== null) ||
    (typeof expected === 'number' && actual === expected);
  if (!ok) throw new WrongExpectedRevisionError(stream, expected, actual);
}

/** The envelope an adapter stores for `event` at the place the append gave it. */
export function recordEvent(
  event: NewEvent,
  at: Pick<RecordedEvent, 'id' | 'stream' | 'revision' | 'position' | 'recordedAt'>,
): RecordedEvent {
  return {
    id: at.id,
    type: event.type,
    stream: at.stream,
    revision: at.revision,
    position: at.position,
    recordedAt: at.recordedAt,
    correlationId: event.correlationId ?? at.id,
    causationId: event.causationId ?? null,
    data: event.data,
  };
}
