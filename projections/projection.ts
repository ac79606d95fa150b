import type { RecordedEvent } from '../contracts/envelope.ts';

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
}

/** Folds a list of events from the initial state: the definition of a projection's state. */
export function foldEvents<S>(projection: Projection<S>, events: Iterable<RecordedEvent>): S {
  let state = projection.initial();
  for (const event of events) state = projection.evolve(state, event);
  return state;
}
