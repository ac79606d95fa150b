import type { AppendResult, NewEvent, RecordedEvent } from '../../contracts/envelope.ts';
import { newEventId } from '../../contracts/event-id.ts';
import { IdempotencyConflictError } from './port.ts';

/**
 * The ids a fresh append writes: the caller's, or fresh time-ordered ones (newEventId).
 * IdempotencyConflictError when an id repeats within the batch or `stored` says the store already
 * holds a caller's id. An id made here is not looked up: a time-ordered id is new by construction
 * (its millisecond and 74 random bits), and the look-up was one index read per event for nothing.
 */
export function freshEventIds(
  stream: string,
  events: NewEvent[],
  stored: (id: string) => boolean = () => false,
): string[] {
  // One event, the common append: no set of the batch's ids to build.
  if (events.length === 1) {
    const given = events[0]!.id;
    if (given === undefined) return [newEventId()];
    if (stored(given)) throw new IdempotencyConflictError(stream, given);
    return [given];
  }
  const ids: string[] = [];
  const seen = new Set<string>();
  for (const event of events) {
    const id = event.id ?? newEventId();
    if (seen.has(id) || (event.id !== undefined && stored(id)))
      throw new IdempotencyConflictError(stream, id);
    seen.add(id);
    ids.push(id);
  }
  return ids;
}

/**
 * When the first event's id is already stored in this stream, the append is a retry: it is
 * idempotent only if every event id matches the same consecutive run that was written before.
 * Returns the original result then (`written: false`), null when this is a fresh append.
 */
export function findIdempotentAppend(
  stream: string,
  events: NewEvent[],
  lookup: (id: string) => RecordedEvent | undefined,
): AppendResult | null {
  const firstId = events[0]?.id;
  if (!firstId) return null;
  const first = lookup(firstId);
  if (!first) return null;
  if (first.stream !== stream) throw new IdempotencyConflictError(stream, firstId);
  let last = first;
  for (let i = 1; i < events.length; i++) {
    const id = events[i]!.id;
    const found = id ? lookup(id) : undefined;
    if (!found || found.stream !== stream || found.revision !== first.revision + i) {
      throw new IdempotencyConflictError(stream, id ?? '(no id)');
    }
    last = found;
  }
  return { nextRevision: last.revision, position: last.position, written: false };
}
