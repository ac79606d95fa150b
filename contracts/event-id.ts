import { v7 } from 'uuid';

/**
 * A fresh event id: a version-7 UUID, whose leading bits are the time in milliseconds (then a
 * counter within the millisecond), so ids made one after another sort in the order they were
 * made. Every store keeps an index from event id to position (LMDB's `ids` database, PostgreSQL's
 * unique index on `id`), and both are B-trees: random (version-4) ids land on a random leaf each,
 * so every commit copies and writes pages all over the index, while ordered ids fill its right
 * edge. Into an LMDB store holding 1M random ids, commits of 30 appends ran 1.47× as many events a
 * second with ids chosen here as with random ones, at 0.86 of the CPU per event (event-store bench
 * (e), bench/README.md). An id says when it was made, to the millisecond, and keeps 74 random bits;
 * an event's envelope says when already (`recordedAt`).
 *
 * For events whose id must come out the same whenever it is derived (a retry finds its first
 * write), see deterministicId instead.
 */
export function newEventId(): string {
  return v7();
}
