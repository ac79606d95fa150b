import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import type { DeliveryView } from '../../contracts/webhooks.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { type DeliveryRecord, deliveryView, findDelivery, sequenceStream } from './delivery-log-fold.ts';
import { readDeliveryRecord, readDeliveryRecordAt } from './recovery.ts';
import type { WebhookState } from './webhook-projection.ts';

/**
 * The delivery log as GET /api/webhooks/:id/deliveries lists it and a resend finds it: the webhook
 * projection's in-memory records (the newest WEBHOOK_DELIVERY_LOG_RETENTION per subscription, see
 * the fold's trim), completed from the event log where the projection holds a delivery in part or
 * not at all. The fold cannot complete them itself: what it let go is in the event log alone.
 */
export interface DeliveryLogSource {
  store: EventStore;
  /** The webhook projection, started; its checkpoint says what it has folded. */
  runner: Pick<ProjectionRunner<WebhookState>, 'state' | 'checkpoint'>;
}

/** A page of the deliveries after a seq, as the `after_seq` listing answers it (the subscription aside). */
export interface DeliveriesAfterPage {
  deliveries: DeliveryView[];
  next_after_seq: number;
  has_more: boolean;
  last_seq: number;
}

/**
 * A delivery the projection's in-memory log does not hold, read from the event log. Once the
 * projection has folded every event of it (and, checked in the same tick, holds it still not), it
 * left that log finished, which a pending delivery never does: one its own stream leaves pending
 * was finished by its subscription's disable, which that stream does not hold. It failed, as the
 * projection said before it let it go.
 */
async function deliveryOutOfLog(
  source: DeliveryLogSource,
  id: string,
  sequenced: RecordedEvent,
): Promise<DeliveryRecord | null> {
  const read = await readDeliveryRecordAt(source.store, id, sequenced);
  if (!read) return null;
  const folded = findDelivery(source.runner.state.log, id);
  if (folded) return folded;
  const { record, position } = read;
  return record.status === 'pending' && position <= source.runner.checkpoint
    ? { ...record, status: 'failed' }
    : record;
}

/** Whether the projection holds every attempt of the delivery, its first included. */
const isWhole = (record: DeliveryRecord) => (record.attempts[0]?.attempt ?? 1) === 1;

/**
 * A delivery as the projection holds it, completed from the event log when it holds only the
 * attempts from a resend or a recovery on: it had let the delivery go, and that attempt brought it
 * back without the ones before it (and with the attempt's time as its creation). Read from the
 * event log alone when the projection holds none of it (deliveryOutOfLog).
 */
async function deliveryRecordOf(
  source: DeliveryLogSource,
  id: string,
  sequenced?: RecordedEvent,
): Promise<DeliveryRecord | null> {
  const held = findDelivery(source.runner.state.log, id);
  if (held && isWhole(held)) return held;
  if (!held) return sequenced ? deliveryOutOfLog(source, id, sequenced) : null;
  const read = await readDeliveryRecordAt(source.store, id, sequenced);
  const now = findDelivery(source.runner.state.log, id) ?? held;
  if (!read) return now;
  // The projection's attempts (and status) as they are, after the log's attempts before them.
  const from = now.attempts[0]?.attempt ?? Number.POSITIVE_INFINITY;
  return {
    ...now,
    createdAt: read.record.createdAt,
    attempts: [...read.record.attempts.filter((a) => a.attempt < from), ...now.attempts],
  };
}

/** Every delivery after `afterSeq`, however old: the sequence stream holds them all, in seq order. */
export async function deliveriesAfter(
  source: DeliveryLogSource,
  subscriptionId: string,
  afterSeq: number,
  limit: number,
): Promise<DeliveriesAfterPage> {
  const sequenced = await source.store.readStream(sequenceStream(subscriptionId), {
    fromRevision: afterSeq,
    maxCount: limit,
  });
  const deliveries: DeliveryView[] = [];
  for (const event of sequenced) {
    const id = (event.data as { deliveryId: string }).deliveryId;
    const record = await deliveryRecordOf(source, id, event);
    if (record) deliveries.push(deliveryView({ ...record, seq: event.revision + 1 }));
  }
  // Read after the page, so the page never runs past it.
  const revision = await source.store.streamRevision(sequenceStream(subscriptionId));
  const lastSeq = revision === null ? 0 : revision + 1;
  const last = sequenced.at(-1);
  // A cursor past the end (saved before the operator restored an older backup) reads on from the
  // end: given back as it was, it would list nothing until the numbering passed it again.
  const next = last ? last.revision + 1 : Math.min(afterSeq, lastSeq);
  return { deliveries, next_after_seq: next, has_more: lastSeq > next, last_seq: lastSeq };
}

/** The subscription's newest `limit` deliveries the projection holds, newest first. */
export async function latestDeliveries(
  source: DeliveryLogSource,
  subscriptionId: string,
  limit: number,
): Promise<DeliveryView[]> {
  const { log } = source.runner.state;
  const ids = (log.bySub[subscriptionId] ?? []).slice(-limit).reverse();
  const deliveries: DeliveryView[] = [];
  for (const id of ids) {
    const held = findDelivery(log, id);
    // Read from the event log only for what the projection holds a part of.
    const record = held && !isWhole(held) ? await deliveryRecordOf(source, id) : held;
    if (record) deliveries.push(deliveryView(record));
  }
  return deliveries;
}

/** A delivery to resend: as the projection holds it, else from the event log (older ones left that log, never the event log). */
export async function deliveryToResend(
  source: DeliveryLogSource,
  id: string,
): Promise<DeliveryRecord | null> {
  return findDelivery(source.runner.state.log, id) ?? (await readDeliveryRecord(source.store, id));
}
