import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { type EventData, newEvent } from '../../contracts/events.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { deterministicId } from '../engine/deterministic-id.ts';
import { deliveryStream } from './delivery-log-fold.ts';
import { EndpointQueues } from './endpoint-queues.ts';
import { classifyFailure, nextAttemptAt, type RetryPolicy } from './retry-policy.ts';
import type { SecretBox } from './secret-box.ts';
import { RESPONSE_LIMIT, type SendResult, sendSigned } from './sender.ts';
import { findSubscription, type SubscriptionRecord, subscriptionStream } from './subscription-fold.ts';
import type { WebhookState } from './webhook-projection.ts';

/** What started an attempt, as DeliveryAttempted records it. */
export type Trigger = NonNullable<EventData<'DeliveryAttempted'>['trigger']>;

/** Triggers that start a fresh run through the retry schedule. */
export const SERIES_START: ReadonlySet<string> = new Set<Trigger>(['event', 'digest', 'recover', 'resend']);

export interface DeliveryJob {
  deliveryId: string;
  subscription: SubscriptionRecord;
  eventId: string;
  event: 'trade_call' | 'regime_shift' | 'scan_digest';
  body: string;
  attempt: number;
  /** Position of this attempt in its run through the retry schedule (1 = first). */
  seriesAttempt: number;
  /** Revision of the delivery stream after the claim: outcomes append against it. */
  revision: number;
}

/** An attempt that ended before (or instead of) a request. */
function failure(error: string): SendResult {
  return { ok: false, status: null, latencyMs: 0, error, response: null, retryAfterMs: null };
}

export interface WorkerSettings {
  retry: RetryPolicy;
  timeoutMs: number;
  disableAfterFailedDeliveries: number;
  disableAfterMs: number;
  endpointConcurrency: number;
  endpointQueueLimit: number;
}

/**
 * Claims attempts, sends them and records the outcome. A claim is an append of
 * DeliveryAttempted against the delivery stream's expected revision, so two dispatchers never
 * run the same attempt; the outcome appends against the claim's revision, so a stale worker's
 * late outcome never overwrites a newer attempt.
 */
export class DeliveryWorker {
  private readonly queues: EndpointQueues;
  /** Deliveries this process has claimed and not finished. */
  readonly owned = new Set<string>();
  /** Opened secrets by subscription, with the sealed form they came from (a new one misses). */
  private readonly opened = new Map<string, { sealed: SubscriptionRecord['secret']; secret: string }>();
  /** Submitted jobs whose outcome is not recorded yet. */
  private readonly recording = new Set<Promise<SendResult>>();
  private readonly logger: Logger;

  constructor(
    private readonly deps: {
      store: EventStore;
      runner: ProjectionRunner<WebhookState>;
      secrets: SecretBox;
      agent: Dispatcher;
      settings: WorkerSettings;
      logger: Logger;
    },
  ) {
    this.queues = new EndpointQueues(deps.settings.endpointConcurrency, deps.settings.endpointQueueLimit);
    this.logger = deps.logger.child({ component: 'webhook-worker' });
  }

  /**
   * Appends the claim of an attempt. Returns null when the delivery stream moved on (someone
   * else claimed it, or it already exists when `expected` is 'no_stream').
   */
  async claim(input: {
    deliveryId: string;
    subscription: SubscriptionRecord;
    eventId: string;
    event: DeliveryJob['event'];
    attempt: number;
    seriesAttempt?: number;
    trigger: Trigger;
    body: string;
    expected: number | 'no_stream';
  }): Promise<DeliveryJob | null> {
    const event = newEvent(
      'DeliveryAttempted',
      {
        deliveryId: input.deliveryId,
        subscriptionId: input.subscription.id,
        attempt: input.attempt,
        eventId: input.eventId,
        webhookEvent: input.event,
        url: input.subscription.url,
        trigger: input.trigger,
        ...(input.attempt === 1 ? { body: input.body } : {}),
      },
      // A random id: a second claim of the same attempt must conflict, not be taken as a re-append.
      { id: randomUUID(), correlationId: input.deliveryId },
    );
    try {
      const result = await this.deps.store.append(deliveryStream(input.deliveryId), [event], {
        expectedRevision: input.expected,
      });
      this.owned.add(input.deliveryId);
      return {
        deliveryId: input.deliveryId,
        subscription: input.subscription,
        eventId: input.eventId,
        event: input.event,
        body: input.body,
        attempt: input.attempt,
        seriesAttempt: SERIES_START.has(input.trigger) ? 1 : (input.seriesAttempt ?? input.attempt),
        revision: result.nextRevision,
      };
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) return null;
      throw err;
    }
  }

  /** The first attempt's body, which every later attempt re-sends. */
  async bodyOf(deliveryId: string): Promise<string | null> {
    const [first] = await this.deps.store.readStream(deliveryStream(deliveryId), { maxCount: 1 });
    const body = (first?.data as { body?: unknown } | undefined)?.body;
    return typeof body === 'string' ? body : null;
  }

  /**
   * Queues the job on its endpoint and resolves once its outcome is recorded. The endpoint's
   * slot is held for the request only: recording the outcome waits on the store, not on the
   * endpoint, so the endpoint's next request starts meanwhile. When the endpoint's queue is full
   * the attempt is recorded as deferred to its next retry slot instead of waiting in memory.
   */
  submit(job: DeliveryJob): Promise<SendResult> {
    const task = new Promise<SendResult>((resolve, reject) => {
      const accepted =
        this.deps.settings.endpointQueueLimit > 0 &&
        this.queues.push(EndpointQueues.keyOf(job.subscription.url), async () => {
          let sent: { result: SendResult; record: boolean };
          try {
            sent = await this.send(job);
          } catch (err) {
            reject(err);
            return;
          }
          // Not awaited: the slot is released as soon as the response is in.
          (sent.record ? this.recordOutcome(job, sent.result) : Promise.resolve()).then(
            () => resolve(sent.result),
            reject,
          );
        });
      if (!accepted) {
        const deferred = failure('endpoint queue full: deferred to the next retry');
        this.recordOutcome(job, deferred).then(() => resolve(deferred), reject);
      }
    });
    this.recording.add(task);
    const forget = () => this.recording.delete(task);
    task.then(forget, forget);
    return task;
  }

  /** Resolves when no job is queued, sending, or waiting for its outcome to be recorded. */
  async drained(): Promise<void> {
    while (this.recording.size > 0) await Promise.allSettled([...this.recording]);
    await this.queues.drained();
  }

  /** The request of one attempt; `record` is false when there is nothing left to record. */
  private async send(job: DeliveryJob): Promise<{ result: SendResult; record: boolean }> {
    const current = findSubscription(this.deps.runner.state.subscriptions, job.subscription.id);
    if (!current) {
      this.owned.delete(job.deliveryId);
      return { result: failure('subscription deleted'), record: false };
    }
    let secret: string;
    try {
      secret = this.openSecret(current);
    } catch (err) {
      this.logger.error({ err, subscriptionId: current.id }, 'cannot open the subscription secret');
      return {
        result: failure('subscription secret unreadable with the configured master key'),
        record: true,
      };
    }
    if (current.status !== 'active') return { result: failure('subscription disabled'), record: true };
    const result = await sendSigned(this.deps.agent, {
      url: current.url,
      secret,
      event: job.event,
      deliveryId: job.deliveryId,
      body: job.body,
      timeoutMs: this.deps.settings.timeoutMs,
    });
    return { result, record: true };
  }

  /** Decrypting per delivery costs more than the signature; a subscription's secret rarely changes. */
  private openSecret(sub: SubscriptionRecord): string {
    const cached = this.opened.get(sub.id);
    if (cached?.sealed === sub.secret) return cached.secret;
    const secret = this.deps.secrets.open(sub.secret, sub.id);
    if (this.opened.size >= 10_000) this.opened.clear();
    this.opened.set(sub.id, { sealed: sub.secret, secret });
    return secret;
  }

  private async recordOutcome(job: DeliveryJob, result: SendResult): Promise<void> {
    const now = Date.now();
    const ref = { deliveryId: job.deliveryId, subscriptionId: job.subscription.id, attempt: job.attempt };
    const gone = classifyFailure(result.status) === 'gone';
    const next =
      result.ok || gone || result.error === 'subscription disabled'
        ? null
        : nextAttemptAt(this.deps.settings.retry, job.seriesAttempt, now, result.retryAfterMs);
    const event = result.ok
      ? newEvent('DeliverySucceeded', {
          ...ref,
          status: result.status!,
          latencyMs: result.latencyMs,
          response: (result.response ?? '').slice(0, RESPONSE_LIMIT),
        })
      : newEvent('DeliveryFailed', {
          ...ref,
          status: result.status,
          error: result.error,
          latencyMs: result.latencyMs,
          response: result.response === null ? null : result.response.slice(0, RESPONSE_LIMIT),
          nextAttemptAt: next === null ? null : new Date(next).toISOString(),
        });
    let position: number;
    try {
      ({ position } = await this.deps.store.append(deliveryStream(job.deliveryId), [event], {
        expectedRevision: job.revision,
      }));
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) {
        this.logger.info(
          { deliveryId: job.deliveryId, attempt: job.attempt },
          'outcome superseded by a newer attempt',
        );
        return;
      }
      throw err;
    } finally {
      this.owned.delete(job.deliveryId);
    }
    if (result.ok) return;
    if (gone) {
      await this.disable(job.subscription, 'the receiver answered 410 Gone');
      return;
    }
    await this.checkPersistentFailure(job.subscription.id, position, now);
  }

  private async checkPersistentFailure(subscriptionId: string, position: number, now: number): Promise<void> {
    await this.deps.runner.waitFor(position, 5_000).catch(() => undefined);
    const sub = findSubscription(this.deps.runner.state.subscriptions, subscriptionId);
    if (sub?.status !== 'active') return;
    const { disableAfterFailedDeliveries, disableAfterMs } = this.deps.settings;
    if (sub.failedDeliveries >= disableAfterFailedDeliveries) {
      await this.disable(sub, `${sub.failedDeliveries} consecutive deliveries failed every attempt`);
    } else if (sub.failingSince !== null && now - Date.parse(sub.failingSince) >= disableAfterMs) {
      await this.disable(sub, `no successful delivery since ${sub.failingSince}`);
    }
  }

  async disable(sub: SubscriptionRecord, reason: string): Promise<void> {
    const current = findSubscription(this.deps.runner.state.subscriptions, sub.id) ?? sub;
    const event = newEvent(
      'SubscriptionDisabled',
      { subscriptionId: sub.id, reason, consecutiveFailures: current.failedDeliveries },
      // One disable per enabled period, however many workers decide it at once.
      { id: deterministicId('webhook-disabled', sub.id, current.generation) },
    );
    await this.deps.store.append(subscriptionStream(sub.keyId), [event]);
    this.logger.warn({ subscriptionId: sub.id, reason }, 'webhook subscription disabled');
  }
}
