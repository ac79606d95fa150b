import { parseRecorded } from '../adapters/event-store/parsed.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import type { DomainEvent, EventType } from '../contracts/events.ts';

/**
 * A projection is a deterministic fold over the event log. `evolve` must depend on nothing but
 * its arguments (no clock, no I/O, no randomness), so that a rebuild from position 0 reaches
 * exactly the state of the live run. It may update `state` in place and return it: the runner
 * owns the state and snapshots it by value.
 */
export interface Projection<S> {
  readonly name: string;
  /** Bump when `evolve` changes meaning: a stored snapshot of another version is rebuilt. */
  readonly version: number;
  initial(): S;
  evolve(state: S, event: RecordedEvent): S;
  /** The event types `evolve` folds (set by `defineProjection`); it passes the others over. */
  readonly eventTypes?: readonly EventType[];
  /**
   * `evolve` for an event already validated, of one of `eventTypes` (set by `defineProjection`):
   * the runner validates each event of a page once for every projection (projections/log-feed.ts).
   */
  readonly evolveValid?: (state: S, event: DomainEvent) => S;
}

/** A recorded event of one of the given catalog types, its data validated. */
export type EventOf<T extends EventType> = Extract<DomainEvent, { type: T }>;

/**
 * The one way to write a projection over domain events: it declares the types it folds, and
 * `evolve` receives them typed and validated once; an event of another type is passed over
 * before anything is parsed (most projections see every event of the log).
 */
export function defineProjection<S, T extends EventType>(spec: {
  name: string;
  version: number;
  eventTypes: readonly T[];
  initial(): S;
  evolve(state: S, event: EventOf<T>): S;
}): Projection<S> {
  const types = new Set<string>(spec.eventTypes);
  return {
    name: spec.name,
    version: spec.version,
    eventTypes: spec.eventTypes,
    initial: spec.initial,
    evolve(state, recorded) {
      if (!types.has(recorded.type)) return state;
      const event = parseRecorded(recorded);
      return event ? spec.evolve(state, event as EventOf<T>) : state;
    },
    evolveValid: spec.evolve as (state: S, event: DomainEvent) => S,
  };
}

/** Folds a list of events from the initial state: the definition of a projection's state. */
export function foldEvents<S>(projection: Projection<S>, events: Iterable<RecordedEvent>): S {
  let state = projection.initial();
  for (const event of events) state = projection.evolve(state, event);
  return state;
}

/**
 * Folds the whole log page by page, for one-shot readers (a CLI, a cache rebuild) that need the
 * state now rather than a running projection. Returns the state and how many events it folded.
 */
export async function foldLog<S>(
  store: EventStore,
  projection: Projection<S>,
  pageSize = 1_000,
): Promise<{ state: S; events: number }> {
  let state = projection.initial();
  let after = 0;
  let events = 0;
  for (;;) {
    const page = await store.readAll({ after, maxCount: pageSize });
    for (const event of page) state = projection.evolve(state, event);
    events += page.length;
    if (page.length < pageSize) return { state, events };
    after = page[page.length - 1]!.position;
  }
}
