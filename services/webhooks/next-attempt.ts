import { deliveryStateOf, seriesLength, type Trigger } from './delivery-decider.ts';
import type { DeliveryRecord } from './delivery-log-fold.ts';
import type { DeliveryJob, DeliveryWorker } from './delivery-worker.ts';
import { withSeq } from './payloads.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

/**
 * Claims the next attempt of a known delivery (a retry, a recovery or a resend), re-sending the
 * first attempt's bytes. An attempt queued by a dispatcher that let it wait past the stuck time is
 * that attempt taken over (claimed at its turn here), not a new one; a resend leaves it alone.
 * Null when another worker got there first or the body is gone.
 */
export async function claimNextAttempt(
  worker: DeliveryWorker,
  record: DeliveryRecord,
  sub: SubscriptionRecord,
  trigger: Trigger,
): Promise<DeliveryJob | null> {
  const stored = await worker.bodyOf({
    deliveryId: record.id,
    subscriptionId: record.subscriptionId,
    seq: record.seq,
  });
  const last = record.attempts.at(-1);
  if (stored === null || !last) return null;
  if (last.queued && trigger === 'resend') return null;
  // Known from the projection, else asked again (an idempotent append returns the same number).
  const seq = record.seq ?? (await worker.sequence(record.subscriptionId, record.id));
  const body = withSeq(stored, record.id, seq);
  if (last.queued) {
    const before = record.attempts.at(-2);
    return worker.claim({
      deliveryId: record.id,
      subscription: sub,
      eventId: record.eventId,
      event: record.event,
      attempt: last.attempt,
      seq,
      seriesAttempt: seriesLength(record),
      trigger: last.trigger as Trigger,
      body,
      expected: record.revision,
      queuedAttempt: true,
      ...(last.trigger === 'retry' && before?.nextAttemptAt
        ? { dueAt: Date.parse(before.nextAttemptAt) }
        : {}),
    });
  }
  return worker.claim({
    deliveryId: record.id,
    subscription: sub,
    eventId: record.eventId,
    event: record.event,
    attempt: last.attempt + 1,
    seq,
    seriesAttempt: seriesLength(record) + 1,
    trigger,
    body,
    expected: record.revision,
    state: deliveryStateOf(record),
    // A retry keeps the schedule's time it was due at; a recovery or resend starts afresh.
    ...(trigger === 'retry' && last.nextAttemptAt !== null ? { dueAt: Date.parse(last.nextAttemptAt) } : {}),
  });
}
