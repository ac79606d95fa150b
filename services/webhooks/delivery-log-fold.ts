import type { DomainEvent, EventData, WebhookEventType } from '../../contracts/events.ts';
import type { DeliveryView } from '../../contracts/webhooks.ts';
import { SUBSCRIPTION_DISABLED } from './subscription-fold.ts';

export interface AttemptRecord {
  attempt: number;
  attemptedAt: string;
  sentAt: string | null;
  queuedMs: number | null;
  /** Not sent because the endpoint's circuit breaker was open. */
  held?: boolean;
  /**
   * Waiting in its endpoint's queue, neither claimed nor recorded yet (`attemptedAt` is when it was
   * queued). The dispatcher that queued it may send it at its turn without a claim while its
   * queue lease holds; its outcome then follows the queue event directly.
   */
  queued?: boolean;
  /** When it was claimed, when that came after it was queued: an attempt is stuck from here. */
  claimedAt?: string;
  trigger: string;
  outcome: 'pending' | 'succeeded' | 'failed';
  status: number | null;
  latencyMs: number | null;
  error: string | null;
  response: string | null;
  nextAttemptAt: string | null;
}

export interface DeliveryRecord {
  id: string;
  seq: number | null;
  subscriptionId: string;
  eventId: string;
  event: WebhookEventType;
  url: string;
  createdAt: string;
  /**
   * Revision of the delivery stream's last event: the expected revision of the next claim;
   * `NO_STREAM` while its only record is its `DeliverySequenced` (the stream does not exist yet).
   */
  revision: number;
  /** pending: an attempt is running or a retry is scheduled; failed: no attempt follows. */
  status: 'pending' | 'succeeded' | 'failed';
  attempts: AttemptRecord[];
}

export interface DeliveryLogState {
  deliveries: Record<string, DeliveryRecord>;
  /**
   * Sequence numbers folded before their delivery's claim (the two are appended together, in
   * either order); taken when the claim arrives.
   */
  seqWaiting?: Record<string, number>;
  /** Delivery ids per subscription, oldest first, the newest `DELIVERY_LOG_LIMIT` kept. */
  bySub: Record<string, string[]>;
}

/**
 * Deliveries remembered per subscription by default (WEBHOOK_DELIVERY_LOG_RETENTION); older
 * finished ones leave this in-memory log (never pending ones), not the event log: recovery and
 * resend read a delivery's own stream. The oldest finished one leaves when a delivery is added
 * past the limit, or when one finishes past it.
 */
export const DELIVERY_LOG_LIMIT = 200;

export function deliveryStream(deliveryId: string): string {
  return `delivery-${deliveryId}`;
}

/** A subscription's delivery sequence: revision r holds the delivery with seq r + 1. */
export function sequenceStream(subscriptionId: string): string {
  return `webhook-seq-${subscriptionId}`;
}

export const initialDeliveryLog = (): DeliveryLogState => ({ deliveries: {}, bySub: {}, seqWaiting: {} });

export function findDelivery(state: DeliveryLogState, id: string): DeliveryRecord | undefined {
  return Object.hasOwn(state.deliveries, id) ? state.deliveries[id] : undefined;
}

function takeSeq(state: DeliveryLogState, deliveryId: string): number | null {
  const waiting = state.seqWaiting;
  if (!waiting || !Object.hasOwn(waiting, deliveryId)) return null;
  const seq = waiting[deliveryId]!;
  delete waiting[deliveryId];
  return seq;
}

function attemptOf(record: DeliveryRecord, attempt: number): AttemptRecord | undefined {
  return record.attempts.find((a) => a.attempt === attempt);
}

/**
 * What the last trim of a subscription's list knows of it: its first `scan` ids are kept (pending,
 * see `kept`); those up to `from` are too, but for at most `holes` that finished since. Without it
 * a burst of pending deliveries makes every new one rescan the whole list (quadratic in the
 * backlog), as it did when any outcome dropped what was known (a flood finishes one delivery for
 * each it adds). It only skips work: a list without an entry (e.g. one loaded from a snapshot) is
 * scanned from the start, with the same result.
 */
const pendingPrefix = new WeakMap<string[], { scan: number; from: number; holes: number }>();
/**
 * The order deliveries were added to this log in (their lists keep it): where an outcome's delivery
 * sits. A symbol's property: snapshots (JSON, structured clones) leave it out.
 */
const ADDED = Symbol('added');
let added = 0;
function addedAt(record: DeliveryRecord | undefined): number | undefined {
  return (record as { [ADDED]?: number } | undefined)?.[ADDED];
}

/**
 * A delivery of this subscription stopped being pending (`record`; none: any of them, and what
 * was known of the list is dropped). Before `scan` it makes the scan start over; before `from`, a
 * hole; past `from` it changes nothing known.
 */
function finished(state: DeliveryLogState, subscriptionId: string, record?: DeliveryRecord): void {
  const ids = state.bySub[subscriptionId];
  if (!ids) return;
  const prefix = pendingPrefix.get(ids);
  if (prefix === undefined) return;
  const order = addedAt(record);
  const { scan, from } = prefix;
  const fromOrder = from < ids.length ? addedAt(state.deliveries[ids[from]!]) : Number.POSITIVE_INFINITY;
  const scanOrder = scan < ids.length ? addedAt(state.deliveries[ids[scan]!]) : Number.POSITIVE_INFINITY;
  if (order === undefined || fromOrder === undefined || scanOrder === undefined) {
    pendingPrefix.delete(ids);
    return;
  }
  if (order >= fromOrder) return;
  if (order < scanOrder) prefix.scan = 0;
  prefix.holes++;
}

/**
 * Whether the delivery's latest attempt was held because its subscription was disabled before its
 * turn: nothing was sent, and a re-enable sends it (the dispatcher's retry scan, once the
 * subscription is active again).
 */
export function heldForDisable(record: DeliveryRecord): boolean {
  const last = record.attempts.at(-1);
  return last?.held === true && last.outcome === 'failed' && last.error === SUBSCRIPTION_DISABLED;
}

/**
 * Never evicted: a pending delivery; one whose only record is its `DeliverySequenced` (no
 * outcome was ever recorded, e.g. its dispatcher died): its own stream is empty, so the event log
 * cannot answer for it by its id, only this log can; and one held for its subscription's disable,
 * which a re-enable finds here (as many as were in flight at the disable, no more).
 */
function kept(record: DeliveryRecord | undefined): boolean {
  return (
    record?.status === 'pending' ||
    record?.revision === NO_STREAM ||
    (record !== undefined && heldForDisable(record))
  );
}

function trim(state: DeliveryLogState, subscriptionId: string, limit: number): void {
  const ids = state.bySub[subscriptionId]!;
  let prefix = pendingPrefix.get(ids);
  if (prefix === undefined) {
    prefix = { scan: 0, from: 0, holes: 0 };
    pendingPrefix.set(ids, prefix);
  }
  let { scan, from, holes } = prefix;
  while (ids.length > limit) {
    // The oldest delivery no longer pending: a hole before `from`, or else the first past it. A
    // hole pending again (a resend, a recovery) is passed over like any kept one.
    let at = -1;
    if (holes > 0) {
      while (scan < from && kept(state.deliveries[ids[scan]!])) scan++;
      if (scan < from) {
        at = scan;
        holes--;
        from--;
      } else holes = 0;
    }
    if (at < 0) {
      while (from < ids.length && kept(state.deliveries[ids[from]!])) from++;
      if (from >= ids.length) {
        scan = from;
        break;
      }
      at = from;
      scan = from;
    }
    // The front, as in a flood the oldest finishes first: shift() moves no ids, splice(0, 1) all.
    const evicted = at === 0 ? ids.shift() : ids.splice(at, 1)[0];
    delete state.deliveries[evicted!];
  }
  if (holes === 0) scan = from;
  prefix.scan = scan;
  prefix.from = from;
  prefix.holes = holes;
}

/** `DeliveryRecord.revision` of a delivery whose own stream does not exist yet (see `DeliverySequenced.first`). */
export const NO_STREAM = -1;

type AttemptData = EventData<'DeliveryAttempted'>;

function addRecord(
  state: DeliveryLogState,
  d: AttemptData,
  recordedAt: string,
  limit: number,
): DeliveryRecord {
  const record: DeliveryRecord = {
    id: d.deliveryId,
    seq: null,
    subscriptionId: d.subscriptionId,
    eventId: d.eventId,
    event: d.webhookEvent,
    url: d.url,
    createdAt: recordedAt,
    revision: NO_STREAM,
    status: 'pending',
    attempts: [],
  };
  state.deliveries[d.deliveryId] = record;
  (record as { [ADDED]?: number })[ADDED] = added++;
  const ids = state.bySub[d.subscriptionId] ?? [];
  ids.push(d.deliveryId);
  state.bySub[d.subscriptionId] = ids;
  trim(state, d.subscriptionId, limit);
  return record;
}

function pushAttempt(
  record: DeliveryRecord,
  d: AttemptData,
  recordedAt: string,
  queued: boolean,
  revision: number,
): void {
  record.revision = revision;
  record.status = 'pending';
  record.url = d.url;
  record.attempts.push({
    attempt: d.attempt,
    attemptedAt: recordedAt,
    sentAt: null,
    queuedMs: null,
    ...(queued ? { queued: true } : {}),
    trigger: d.trigger ?? 'event',
    outcome: 'pending',
    status: null,
    latencyMs: null,
    error: null,
    response: null,
    nextAttemptAt: null,
  });
}

export function applyDeliveryEvent(
  state: DeliveryLogState,
  event: DomainEvent,
  limit: number = DELIVERY_LOG_LIMIT,
): DeliveryLogState {
  switch (event.type) {
    case 'DeliveryQueued':
    case 'DeliveryAttempted': {
      const d = event.data;
      let record = findDelivery(state, d.deliveryId);
      const last = record?.attempts.at(-1);
      if (event.type === 'DeliveryAttempted' && last?.queued && last.attempt === d.attempt) {
        // The queued attempt's turn: the same attempt, claimed now (its queue time stays).
        record!.revision = event.revision;
        delete last.queued;
        last.claimedAt = event.recordedAt;
        break;
      }
      if (!record) {
        // A later attempt of a delivery this log no longer held carries its number (since the
        // first attempt moved into the sequence event): where its body is found.
        record = addRecord(state, d, event.recordedAt, limit);
        record.seq = takeSeq(state, d.deliveryId) ?? d.seq ?? null;
      }
      pushAttempt(record, d, event.recordedAt, event.type === 'DeliveryQueued', event.revision);
      break;
    }
    case 'DeliverySequenced': {
      const seq = event.revision + 1;
      const first = event.data.first;
      if (first) {
        // The first attempt recorded with its number: the delivery's own stream does not exist yet.
        const known = findDelivery(state, first.deliveryId);
        if (known) {
          // Claimed in its own stream by older code and never numbered: this is its number.
          known.seq = seq;
          break;
        }
        const record = addRecord(state, first, event.recordedAt, limit);
        record.seq = seq;
        pushAttempt(record, first, event.recordedAt, first.queued === true, NO_STREAM);
        break;
      }
      const record = findDelivery(state, event.data.deliveryId);
      if (record) record.seq = seq;
      else {
        state.seqWaiting ??= {};
        state.seqWaiting[event.data.deliveryId] = seq;
      }
      break;
    }
    case 'DeliverySucceeded':
    case 'DeliveryFailed': {
      const d = event.data;
      const record = findDelivery(state, d.deliveryId);
      if (!record) break;
      record.revision = event.revision;
      const attempt = attemptOf(record, d.attempt);
      const failed = event.type === 'DeliveryFailed';
      const next = failed ? event.data.nextAttemptAt : null;
      if (attempt) {
        // A queued attempt sent under its queue lease has its outcome without a claim before it.
        delete attempt.queued;
        attempt.outcome = failed ? 'failed' : 'succeeded';
        attempt.status = d.status;
        attempt.latencyMs = d.latencyMs;
        attempt.sentAt = d.sentAt ?? null;
        attempt.queuedMs = d.queuedMs ?? null;
        if (failed && event.data.held) attempt.held = true;
        attempt.response = d.response;
        attempt.error = failed ? event.data.error : null;
        attempt.nextAttemptAt = next;
      }
      // Only the latest attempt decides the delivery's status (an old attempt may report late).
      const latest = record.attempts.at(-1);
      if (latest?.attempt === d.attempt) record.status = failed ? (next ? 'pending' : 'failed') : 'succeeded';
      if (record.status !== 'pending') {
        finished(state, record.subscriptionId, record);
        // Dropped as it finishes past the limit, not at the next delivery added: a flood's backlog
        // finishing with none after it otherwise stays whole in memory and in every snapshot
        // (2,744-3,186 deliveries, 1.7-2.0 MB of JSON, in the webhooks bench's single layout, where
        // 200 are kept: bench/README, "The backlog and the collector").
        if (state.bySub[record.subscriptionId]!.length > limit) trim(state, record.subscriptionId, limit);
      }
      break;
    }
    case 'SubscriptionDisabled': {
      // Nothing more is attempted for a disabled subscription; what was pending counts as failed
      // (and is what "recover since" re-sends after a re-enable).
      for (const id of state.bySub[event.data.subscriptionId] ?? []) {
        const record = state.deliveries[id];
        if (record?.status === 'pending') record.status = 'failed';
      }
      finished(state, event.data.subscriptionId);
      break;
    }
    case 'SubscriptionDeleted': {
      for (const id of state.bySub[event.data.subscriptionId] ?? []) delete state.deliveries[id];
      delete state.bySub[event.data.subscriptionId];
      break;
    }
  }
  return state;
}

/**
 * A delivery as the API shows it. Attempts held back (by an open breaker, or let go unsent by a
 * stopping dispatcher) are `held` and carry no number: the others are numbered by the requests
 * actually sent (or in flight), 1, 2, 3…
 */
export function deliveryView(record: DeliveryRecord): DeliveryView {
  let sent = 0;
  // A failed delivery has no attempt to come: the retry its last attempt scheduled was called off
  // when its subscription was disabled, so the view names none (the fold keeps it).
  const last = record.status === 'failed' ? record.attempts.at(-1) : undefined;
  return {
    delivery_id: record.id,
    seq: record.seq ?? null,
    event: record.event,
    event_id: record.eventId,
    status: record.status,
    created_at: record.createdAt,
    attempts: record.attempts.map((a) => ({
      attempt: a.held ? null : ++sent,
      attempted_at: a.attemptedAt,
      sent_at: a.sentAt ?? null,
      queued_ms: typeof a.queuedMs === 'number' ? Math.round(a.queuedMs) : null,
      trigger: a.trigger,
      outcome: a.held ? 'held' : a.outcome,
      status: a.status,
      // Whole milliseconds, as the test send's answer: the timer's float carries no finer truth.
      latency_ms: a.latencyMs === null ? null : Math.round(a.latencyMs),
      error: a.error,
      response: a.response,
      next_attempt_at: a === last ? null : a.nextAttemptAt,
    })),
  };
}
