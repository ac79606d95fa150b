import {
  AccessDeniedError,
  type AllStreamResolvedEvent,
  ANY,
  type AppendStreamState,
  BACKWARDS,
  type CurrentStreamState,
  END,
  excludeSystemEvents,
  FORWARDS,
  type JSONType,
  jsonEvent,
  KurrentDBClient,
  NO_STREAM,
  type Position,
  type ResolvedEvent,
  START,
  STREAM_EXISTS,
  StreamNotFoundError,
  UnavailableError,
  WrongExpectedVersionError,
} from '@kurrent/kurrentdb-client';
import type { AppendResult, ExpectedRevision, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { maskUrlCredentials } from '../../contracts/mask-url.ts';
import { DependencyRefusedError } from '../dependency-refused.ts';
import { findIdempotentAppend, freshEventIds } from './idempotency.ts';
import {
  checkExpected,
  type EventStore,
  type HealthReport,
  IdempotencyConflictError,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';

export interface KurrentDbEventStoreOptions {
  /** e.g. `kurrentdb://localhost:2113?tls=false` */
  connectionString: string;
  /**
   * How many of a stream's latest events are searched for the ids of a re-append. A retry older
   * than this is still refused by an exact or no_stream expected revision, and KurrentDB's own
   * event-id check catches most of the rest.
   */
  idempotencyWindow?: number;
}

/** What the envelope keeps in KurrentDB's event metadata (`$`-names are KurrentDB's convention). */
interface EnvelopeMetadata {
  $correlationId?: string;
  $causationId?: string;
  recordedAt?: string;
}

/**
 * Reads the log's head once before anything else, so that a server out of reach stops the start
 * (and an operator command) with a line naming KurrentDB, its address and KURRENTDB_URL, as
 * PostgreSQL's does, rather than the client's bare `UnavailableError` at some later first read.
 */
export async function connectKurrentEventStore(
  options: KurrentDbEventStoreOptions,
): Promise<KurrentDbEventStore> {
  const store = new KurrentDbEventStore(options);
  try {
    await store.headPosition();
  } catch (err) {
    await store.close().catch(() => undefined);
    throw startRefusal(err, options.connectionString);
  }
  return store;
}

/**
 * What the first read's failure stops the start with: a server out of reach or a login it refuses
 * is a DependencyRefusedError naming KurrentDB, its address (credentials masked), what was tried
 * and what to correct, as PostgreSQL's are; anything else as it came.
 */
export function startRefusal(err: unknown, connectionString: string): unknown {
  const where = `KurrentDB at ${maskUrlCredentials(connectionString)} (KURRENTDB_URL)`;
  if (err instanceof UnavailableError)
    return new DependencyRefusedError(
      `${where} is unreachable: the first read of its log ($all's last event) got no answer (${clientReason(err)}). ` +
        "Is KurrentDB running there, and KURRENTDB_URL's host and port right? Start the server, or correct them; " +
        'start this process again once it answers, or let its supervisor restart it',
      { cause: err },
    );
  // A wrong user or password (the server's UNAUTHENTICATED), or a user without the right to read $all.
  if (err instanceof AccessDeniedError)
    return new DependencyRefusedError(
      `${where} refused the login: ${err.message || 'access denied'}. To fix it, correct KURRENTDB_URL's username and password, or give that user the right to read and write every stream ($all)`,
      { cause: err },
    );
  return err;
}

/**
 * What the client says of a failure: its class, and the gRPC code, details and causes where it
 * gives them. Its message is often only its class's name (a server out of reach: `UnavailableError`,
 * with no code and no details), which is then said as such rather than repeated.
 */
function clientReason(err: Error): string {
  const name = err.constructor.name;
  type Given = { code?: unknown; details?: unknown; cause?: unknown };
  const raw = (err as { _raw?: Given })._raw;
  const parts: string[] = [];
  const add = (text: unknown) => {
    const said = typeof text === 'string' ? text.trim() : '';
    if (said && said !== name && !parts.some((p) => p.includes(said))) parts.push(said);
  };
  add(err.message);
  for (const given of [err as Given, raw]) {
    if (given?.code !== undefined) add(`code ${String(given.code)}`);
    add(given?.details);
    if (given?.cause instanceof Error) add(`${given.cause.name}: ${given.cause.message}`);
  }
  return parts.length === 0 ? `the client's ${name}, with no reason given` : `${name}: ${parts.join('; ')}`;
}

/**
 * The distributed event store on KurrentDB (EventStoreDB's successor).
 *
 * Positions: the port's position of an event is its KurrentDB *prepare* position, the byte offset
 * of its record in the transaction log. Every event has its own (a commit position can be shared
 * by the events of one append), appends are written contiguously by the server's single writer
 * so log order is $all order, and offsets are far below 2^53, so the numbers are exact, > 0 and
 * strictly increasing. Reading "after n" starts $all at {commit: n, prepare: n}, a record
 * boundary because n is a position this adapter handed out, and drops anything at or before n,
 * which makes `after` exclusive whatever the server's own convention is.
 *
 * System events (`$`-types, `$`-streams, links) are not part of the port's log and are filtered out.
 */
export class KurrentDbEventStore implements EventStore {
  readonly kind = 'kurrentdb' as const;
  /** Positions are prepare positions: byte offsets in the server's transaction log. */
  readonly densePositions = false;
  private readonly client: KurrentDBClient;
  private readonly idempotencyWindow: number;

  constructor(options: KurrentDbEventStoreOptions) {
    this.client = KurrentDBClient.connectionString(options.connectionString);
    this.idempotencyWindow = options.idempotencyWindow ?? 128;
  }

  async append(
    stream: string,
    events: NewEvent[],
    options: { expectedRevision?: ExpectedRevision } = {},
  ): Promise<AppendResult> {
    const expected = options.expectedRevision ?? 'any';
    // Repeats within the batch only: ids already in the stream are findRetry's to judge.
    const ids = freshEventIds(stream, events);
    const callerIds = events.some((e) => e.id !== undefined);
    if (callerIds) {
      const prior = await this.findRetry(stream, events);
      if (prior) return prior;
    }
    if (events.length === 0) {
      const current = await this.streamRevision(stream);
      checkExpected(stream, expected, current);
      return { nextRevision: current ?? -1, position: await this.headPosition(), written: false };
    }
    const recordedAt = new Date().toISOString();
    const data = events.map((e, i) => {
      const metadata: EnvelopeMetadata = { $correlationId: e.correlationId ?? ids[i]!, recordedAt };
      if (e.causationId) metadata.$causationId = e.causationId;
      return jsonEvent({ id: ids[i]!, type: e.type, data: e.data as JSONType, metadata: { ...metadata } });
    });
    try {
      const result = await this.client.appendToStream(stream, data, { streamState: toStreamState(expected) });
      // No `written`: the server answers a repeat of ids it holds (a concurrent retry that passed
      // findRetry beside this one) as a success without writing it, the same answer as a write.
      return {
        nextRevision: Number(result.nextExpectedRevision),
        position: await this.positionOfRevision(stream, result.nextExpectedRevision),
      };
    } catch (error) {
      if (!(error instanceof WrongExpectedVersionError)) throw error;
      // A concurrent retry of the same batch may have won the race: that is still a success.
      if (callerIds) {
        const prior = await this.findRetry(stream, events);
        if (prior) return prior;
      }
      throw new WrongExpectedRevisionError(stream, expected, fromCurrentState(error.actualState));
    }
  }

  async readStream(stream: string, options: { fromRevision?: number; maxCount?: number } = {}) {
    const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;
    if (maxCount <= 0) return [];
    const out: RecordedEvent[] = [];
    try {
      const reading = this.client.readStream(stream, {
        direction: FORWARDS,
        fromRevision: BigInt(options.fromRevision ?? 0),
        ...(Number.isFinite(maxCount) ? { maxCount } : {}),
      });
      for await (const resolved of reading) {
        const recorded = toRecorded(resolved);
        if (recorded) out.push(recorded);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return [];
      throw error;
    }
    return out;
  }

  async readAll(options: { after?: number; maxCount?: number } = {}) {
    const after = options.after ?? 0;
    const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;
    const out: RecordedEvent[] = [];
    let from: Position | typeof START = after > 0 ? toPosition(after) : START;
    let last = after;
    // Events at or before `after` that the server returns are dropped, so keep reading until
    // the page is full or the server has nothing more.
    while (out.length < maxCount) {
      const want = Math.min(maxCount - out.length, 4096) + 1;
      let returned = 0;
      let lastRaw: Position | undefined;
      for await (const resolved of this.client.readAll({
        direction: FORWARDS,
        fromPosition: from,
        maxCount: want,
        filter: excludeSystemEvents(),
      })) {
        returned++;
        lastRaw = resolved.event?.position ?? lastRaw;
        const recorded = toRecorded(resolved);
        if (!recorded || recorded.position <= last) continue;
        last = recorded.position;
        out.push(recorded);
        if (out.length >= maxCount) break;
      }
      if (returned < want || !lastRaw) break;
      from = lastRaw;
    }
    return out;
  }

  subscribeToAll(options: { after?: number } = {}): Subscription {
    const after = options.after ?? 0;
    const source = this.client.subscribeToAll({
      fromPosition: after > 0 ? toPosition(after) : START,
      filter: excludeSystemEvents(),
    });
    let closed = false;
    async function* run(): AsyncGenerator<RecordedEvent> {
      let last = after;
      for await (const resolved of source) {
        if (closed) break;
        const recorded = toRecorded(resolved);
        if (!recorded || recorded.position <= last) continue;
        last = recorded.position;
        yield recorded;
      }
    }
    const iterator = run();
    return {
      [Symbol.asyncIterator]: () => iterator,
      async close() {
        closed = true;
        await source.unsubscribe();
        await iterator.return(undefined);
      },
    };
  }

  async streamRevision(stream: string) {
    try {
      for await (const resolved of this.client.readStream(stream, {
        direction: BACKWARDS,
        fromRevision: END,
        maxCount: 1,
      })) {
        if (resolved.event) return Number(resolved.event.revision);
      }
      return null;
    } catch (error) {
      if (error instanceof StreamNotFoundError) return null;
      throw error;
    }
  }

  async headPosition() {
    for await (const resolved of this.client.readAll({
      direction: BACKWARDS,
      fromPosition: END,
      maxCount: 1,
      filter: excludeSystemEvents(),
    })) {
      const recorded = toRecorded(resolved);
      if (recorded) return recorded.position;
    }
    return 0;
  }

  async health(): Promise<HealthReport> {
    try {
      for await (const _ of this.client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: 1 }))
        break;
      return { ok: true };
    } catch (error) {
      const { name, message } = error as Error;
      return { ok: false, detail: message ? `${name}: ${message}` : name, cause: error };
    }
  }

  async close() {
    await this.client.dispose();
  }

  /**
   * Looks for the batch's ids among the stream's latest events: the original result when this is
   * a retry of one earlier append, IdempotencyConflictError when it only partly overlaps one.
   */
  private async findRetry(stream: string, events: NewEvent[]): Promise<AppendResult | null> {
    const recent = new Map<string, RecordedEvent>();
    try {
      for await (const resolved of this.client.readStream(stream, {
        direction: BACKWARDS,
        fromRevision: END,
        maxCount: Math.max(this.idempotencyWindow, events.length * 2),
      })) {
        const recorded = toRecorded(resolved);
        if (recorded) recent.set(recorded.id, recorded);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return null;
      throw error;
    }
    const prior = findIdempotentAppend(stream, events, (id) => recent.get(id));
    if (prior) return prior;
    for (const e of events) {
      if (e.id && recent.has(e.id)) throw new IdempotencyConflictError(stream, e.id);
    }
    return null;
  }

  /** The append result carries the write's position, not the last event's: read that event back. */
  private async positionOfRevision(stream: string, revision: bigint): Promise<number> {
    for await (const resolved of this.client.readStream(stream, { fromRevision: revision, maxCount: 1 })) {
      const recorded = toRecorded(resolved);
      if (recorded) return recorded.position;
    }
    throw new Error(`kurrentdb: event ${stream}@${revision} vanished right after it was appended`);
  }
}

export function toStreamState(expected: ExpectedRevision): AppendStreamState {
  if (expected === 'any') return ANY;
  if (expected === 'no_stream') return NO_STREAM;
  if (expected === 'stream_exists') return STREAM_EXISTS;
  return BigInt(expected);
}

/** Deleted and tombstoned streams report negative revisions; to the port they do not exist. */
export function fromCurrentState(actual: CurrentStreamState): number | null {
  return typeof actual === 'bigint' && actual >= 0n ? Number(actual) : null;
}

export function toPosition(position: number): Position {
  return { commit: BigInt(position), prepare: BigInt(position) };
}

export function toRecorded(resolved: ResolvedEvent | AllStreamResolvedEvent): RecordedEvent | null {
  const e = resolved.event;
  if (!e || e.type.startsWith('$') || e.streamId.startsWith('$')) return null;
  if (!e.position) {
    throw new Error(
      'kurrentdb: the server does not report $all positions on stream reads (needs KurrentDB/ESDB >= 22.6)',
    );
  }
  const position = Number(e.position.prepare);
  if (!Number.isSafeInteger(position) || position <= 0) {
    throw new Error(`kurrentdb: prepare position ${e.position.prepare} cannot be a port position`);
  }
  const metadata = (isRecord(e.metadata) ? e.metadata : {}) as EnvelopeMetadata;
  return {
    id: e.id,
    type: e.type,
    stream: e.streamId,
    revision: Number(e.revision),
    position,
    recordedAt: metadata.recordedAt ?? e.created.toISOString(),
    correlationId: metadata.$correlationId ?? e.id,
    causationId: metadata.$causationId ?? null,
    data: e.data,
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !(value instanceof Uint8Array);
}
