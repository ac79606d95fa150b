import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { parseDomainEvent } from '../../contracts/events.ts';
import {
  applyDeliveryEvent,
  type DeliveryRecord,
  deliveryStream,
  findDelivery,
  initialDeliveryLog,
  sequenceStream,
} from './delivery-log-fold.ts';

/**
 * The delivery log as the event log holds it, beyond what the projection keeps in memory: a
 * delivery's whole record from its own stream, and where in the global log a time begins.
 */

/** Clock skew between writers that position order may show against recordedAt order. */
export const RECORDED_AT_SKEW_MS = 60_000;

/**
 * A global position at or before the first event recorded at `timeMs` (minus the skew allowance):
 * a binary search over the log, one single-event read per step, so finding T in a long log costs
 * about log2(head) reads instead of a scan from the start.
 */
export async function positionBefore(store: EventStore, timeMs: number): Promise<number> {
  const target = timeMs - RECORDED_AT_SKEW_MS;
  let lo = 0;
  let hi = await store.headPosition();
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    const [next] = await store.readAll({ after: mid, maxCount: 1 });
    if (!next || Date.parse(next.recordedAt) >= target) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** The `DeliverySequenced` that gave a subscription's delivery its number `seq`, if it exists. */
export async function readSequenced(
  store: EventStore,
  subscriptionId: string,
  seq: number,
): Promise<RecordedEvent | undefined> {
  const [sequenced] = await store.readStream(sequenceStream(subscriptionId), {
    fromRevision: seq - 1,
    maxCount: 1,
  });
  return sequenced;
}

/**
 * A delivery's record folded from the event log (whatever the projection still holds), or null.
 * Its first attempt is in its `DeliverySequenced` (`first`), whose number the events of its own
 * stream carry (`seq`), or, in logs written before, that stream's first event. `sequenced` is that
 * event when the caller read it already. A delivery whose own stream is still empty (its first
 * attempt recorded, no outcome) is found only with `sequenced`, or in the projection, which keeps
 * such records (see the delivery log's trim).
 */
export async function readDeliveryRecord(
  store: EventStore,
  deliveryId: string,
  sequenced?: RecordedEvent,
): Promise<DeliveryRecord | null> {
  return (await readDeliveryRecordAt(store, deliveryId, sequenced))?.record ?? null;
}

/**
 * readDeliveryRecord with the log position of the latest event folded into the record: a
 * projection whose checkpoint has passed it has folded every event of that delivery.
 */
export async function readDeliveryRecordAt(
  store: EventStore,
  deliveryId: string,
  sequenced?: RecordedEvent,
): Promise<{ record: DeliveryRecord; position: number } | null> {
  const events = await store.readStream(deliveryStream(deliveryId));
  let head = sequenced ?? null;
  // A stream written before its first attempt moved into the sequence event opens with that
  // attempt, which carries no `seq`; every event of one written since carries it.
  const opening = events[0]?.data as { seq?: number; subscriptionId: string } | undefined;
  if (head === null && opening?.seq !== undefined) {
    head = (await readSequenced(store, opening.subscriptionId, opening.seq)) ?? null;
  }
  if (head === null && events.length === 0) return null;
  const log = initialDeliveryLog();
  let position = 0;
  for (const recorded of head ? [head, ...events] : events) {
    const event = parseDomainEvent(recorded);
    if (event) applyDeliveryEvent(log, event);
    position = Math.max(position, recorded.position);
  }
  const record = findDelivery(log, deliveryId);
  return record ? { record, position } : null;
}

/**
 * Whether a delivery read from its stream should be sent again by a recovery: it failed every
 * attempt, or its retries were suspended while the subscription was disabled, or its attempt was
 * claimed by a dispatcher that died (no outcome after `stuckAfterMs`).
 */
export function needsRecovery(record: DeliveryRecord, now: number, stuckAfterMs: number): boolean {
  if (record.status === 'succeeded') return false;
  if (record.status === 'failed') return true;
  const last = record.attempts.at(-1);
  if (!last) return false;
  if (last.outcome === 'failed') return true;
  return last.outcome === 'pending' && Date.parse(last.claimedAt ?? last.attemptedAt) + stuckAfterMs <= now;
}

/** Event types a recovery reads from the log; everything else is skipped unparsed. */
export const RECOVERY_TYPES: ReadonlySet<string> = new Set([
  'VerdictRecorded',
  'RegimeShifted',
  'RiskShifted',
  'DeliveryAttempted',
  'DeliveryQueued',
  'DeliverySequenced',
]);

/** Pages of the global log from `after` to `until` (inclusive), only the types a recovery reads. */
export async function* logPages(
  store: EventStore,
  after: number,
  until: number,
  pageSize = 512,
): AsyncGenerator<RecordedEvent[]> {
  let from = after;
  while (from < until) {
    const page = await store.readAll({ after: from, maxCount: pageSize });
    if (page.length === 0) return;
    const within = page.filter((e) => e.position <= until);
    yield within.filter((e) => RECOVERY_TYPES.has(e.type));
    if (within.length < page.length) return;
    from = page.at(-1)!.position;
  }
}

/** At most `perSecond` calls of `take` resolve in any one-second window. */
export class Pacer {
  private windowStart = 0;
  private taken = 0;

  constructor(private readonly perSecond: number) {}

  async take(): Promise<void> {
    const now = Date.now();
    if (now - this.windowStart >= 1_000) {
      this.windowStart = now;
      this.taken = 0;
    }
    if (this.taken >= this.perSecond) {
      await new Promise((resolve) => setTimeout(resolve, this.windowStart + 1_000 - now));
      this.windowStart = Date.now();
      this.taken = 0;
    }
    this.taken++;
  }
}
