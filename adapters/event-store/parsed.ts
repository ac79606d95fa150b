import type { RecordedEvent } from '../../contracts/envelope.ts';
import { type DomainEvent, parseDomainEvent } from '../../contracts/events.ts';

/**
 * Where the validated form of a recorded event is kept, on the event object itself: a WeakMap
 * holding every event of a rebuild costs the garbage collector more than the validation saves.
 */
const PARSED = Symbol('parsed domain event');

type WithParsed = RecordedEvent & { [PARSED]?: DomainEvent | null };

/**
 * `parseDomainEvent` once per recorded event object: the projections fed the same page (see
 * projections/log-feed.ts) share one validation of each event instead of one each.
 */
export function parseRecorded(recorded: RecordedEvent): DomainEvent | null {
  const held = (recorded as WithParsed)[PARSED];
  if (held !== undefined) return held;
  const event = parseDomainEvent(recorded);
  if (Object.isExtensible(recorded)) (recorded as WithParsed)[PARSED] = event;
  return event;
}
