import type { DeliveryRecord } from './delivery-log-fold.ts';
import { type DeliveryJob, type DeliveryWorker, SERIES_START, type Trigger } from './delivery-worker.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

/** Attempts since the current run through the retry schedule began, the latest included. */
export function seriesLength(record: DeliveryRecord): number {
  let n = 0;
  for (let i = record.attempts.length - 1; i >= 0; i--) {
    n++;
    if (SERIES_START.has(record.attempts[i]!.trigger)) break;
  }
  return n;
}

/**
 * Claims the next attempt of a known delivery (a retry, a recovery or a resend), re-sending the
 * first attempt's bytes. Null when another worker got there first or the body is gone.
 */
export async function claimNextAttempt(
  worker: DeliveryWorker,
  record: DeliveryRecord,
  sub: SubscriptionRecord,
  trigger: Trigger,
): Promise<DeliveryJob | null> {
  const body = await worker.bodyOf(record.id);
  const last = record.attempts.at(-1);
  if (body === null || !last) return null;
  return worker.claim({
    deliveryId: record.id,
    subscription: sub,
    eventId: record.eventId,
    event: record.event,
    attempt: last.attempt + 1,
    seriesAttempt: seriesLength(record) + 1,
    trigger,
    body,
    expected: record.revision,
  });
}
