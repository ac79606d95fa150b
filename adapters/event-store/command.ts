import type { ExpectedRevision, RecordedEvent } from '../../contracts/envelope.ts';
import { type EventData, type EventType, newEvent } from '../../contracts/events.ts';
import { KeyedLock } from '../keyed-lock.ts';
import { parseRecorded } from './parsed.ts';
import { type EventStore, WrongExpectedRevisionError } from './port.ts';

/**
 * The one way the service writes and reads a stream's state: a decider (pure `decide` and
 * `evolve`, no I/O, no clock) run by `handleCommand`, and `aggregateStream` to fold a stream.
 * Events reach `evolve` validated against the catalog once, here; a stream's events of other
 * types are passed over without being parsed.
 */

/** An event as a decider decides and folds it: a catalog type with its data. */
export type DecidedEvent<T extends EventType = EventType> = {
  [K in T]: {
    type: K;
    data: EventData<K>;
    /** Deterministic id, when a re-append must be idempotent. */
    id?: string;
    correlationId?: string;
    causationId?: string | null;
  };
}[T];

/** Where an event sits in its stream, for folds that remember it (revision, recorded time). */
export type EventMeta = Pick<RecordedEvent, 'id' | 'stream' | 'revision' | 'position' | 'recordedAt'>;

export interface Fold<State, Event extends DecidedEvent> {
  /** The event types `evolve` folds; others in the stream are passed over unread. */
  readonly eventTypes: readonly Event['type'][];
  initialState(): State;
  /** `meta` is absent for events decided but not yet recorded (a decider spec, say). */
  evolve(state: State, event: Event, meta?: EventMeta): State;
}

export interface Decider<State, Command, Event extends DecidedEvent> extends Fold<State, Event> {
  /** The events that carry the command out, or throws the rule it breaks. */
  decide(command: Command, state: State): Event[];
}

/** A stored event as the fold's own type, validated once; null when the fold does not take it. */
export function asFolded<Event extends DecidedEvent>(
  fold: Pick<Fold<unknown, Event>, 'eventTypes'>,
  recorded: RecordedEvent,
): Event | null {
  if (!(fold.eventTypes as readonly string[]).includes(recorded.type)) return null;
  const event = parseRecorded(recorded);
  return event ? (event as unknown as Event) : null;
}

export interface Aggregate<State> {
  state: State;
  /** Revision of the stream's last event (of any type), or null when the stream does not exist. */
  revision: number | null;
}

/** Folds one stream from its first event. */
export async function aggregateStream<State, Event extends DecidedEvent>(
  store: EventStore,
  stream: string,
  fold: Fold<State, Event>,
): Promise<Aggregate<State>> {
  let state = fold.initialState();
  let revision: number | null = null;
  for (const recorded of await store.readStream(stream)) {
    revision = recorded.revision;
    const event = asFolded(fold, recorded);
    if (event) state = fold.evolve(state, event, recorded);
  }
  return { state, revision };
}

export interface HandledCommand<State, Event extends DecidedEvent> {
  /** The events appended (empty when the decider decided nothing: nothing was written). */
  events: Event[];
  /** The state after them. */
  state: State;
  /** Global position of the last appended event; null when nothing was written. */
  position: number | null;
  /** Revision of the stream's last event after the command, or null when it still does not exist. */
  revision: number | null;
}

export interface HandleOptions<State> {
  /**
   * Times to read, decide and append again when another writer moved the stream in between
   * (default 0: the conflict is thrown). Safe because `decide` is pure. Such commands on one
   * stream of one store also queue behind each other in this process, so the retries are left
   * for writers in other processes: a hundred concurrent requests on one stream do not spend
   * them losing to each other.
   */
  retry?: number;
  /**
   * The state the caller already holds for this stream (read earlier in the same request):
   * decided against as is, appended at its revision, so a stream is not read twice. A retry
   * after a conflict reads the stream afresh.
   */
  known?: Aggregate<State>;
  /**
   * The decided events are built only from values the caller already holds typed (no outside
   * input), so their catalog check can only confirm what the types say: skip it. For hot paths
   * (a webhook delivery's claim and outcome); commands carrying outside input keep the check.
   */
  trusted?: boolean;
}

/**
 * Reads the stream, decides, and appends the decided events at the revision it read: a
 * concurrent writer makes the append fail (WrongExpectedRevisionError) rather than be
 * overwritten, and with `retry` the command is decided again on the newer state.
 */
export async function handleCommand<State, Command, Event extends DecidedEvent>(
  store: EventStore,
  stream: string,
  decider: Decider<State, Command, Event>,
  command: Command,
  options: HandleOptions<State> = {},
): Promise<HandledCommand<State, Event>> {
  if (!options.retry) return decideAndAppend(store, stream, decider, command, options);
  return queueOf(store).run(stream, () => decideAndAppend(store, stream, decider, command, options));
}

/** Keyed by store, not only by stream name: two stores (tests, a second replica's) never wait on each other. */
const queues = new WeakMap<EventStore, KeyedLock>();
function queueOf(store: EventStore): KeyedLock {
  let queue = queues.get(store);
  if (!queue) {
    queue = new KeyedLock();
    queues.set(store, queue);
  }
  return queue;
}

/** A pause before a retry, random so that writers in several processes stop colliding in step. */
export const backoff = (attempt: number) =>
  new Promise((resolve) => setTimeout(resolve, Math.random() * 5 * 2 ** attempt));

async function decideAndAppend<State, Command, Event extends DecidedEvent>(
  store: EventStore,
  stream: string,
  decider: Decider<State, Command, Event>,
  command: Command,
  options: HandleOptions<State>,
): Promise<HandledCommand<State, Event>> {
  const retries = options.retry ?? 0;
  let known = options.known;
  for (let attempt = 0; ; attempt++) {
    const { state, revision } = known ?? (await aggregateStream(store, stream, decider));
    known = undefined;
    const events = decider.decide(command, state);
    if (events.length === 0) return { events, state, position: null, revision };
    const expectedRevision: ExpectedRevision = revision === null ? 'no_stream' : revision;
    try {
      const result = await store.append(
        stream,
        events.map((e) => {
          const meta = {
            ...(e.id !== undefined ? { id: e.id } : {}),
            ...(e.correlationId !== undefined ? { correlationId: e.correlationId } : {}),
            ...(e.causationId !== undefined ? { causationId: e.causationId } : {}),
          };
          return options.trusted
            ? { type: e.type, data: e.data, ...meta }
            : newEvent(e.type, e.data as EventData<typeof e.type>, meta);
        }),
        { expectedRevision },
      );
      const after = events.reduce((s, e) => decider.evolve(s, e), state);
      return { events, state: after, position: result.position, revision: result.nextRevision };
    } catch (err) {
      if (!(err instanceof WrongExpectedRevisionError) || attempt >= retries) throw err;
      if (attempt > 0) await backoff(attempt);
    }
  }
}
