import type { Logger } from 'pino';
import type { Bus, BusMessage, Consumer } from '../../adapters/bus/port.ts';
import { DEFAULT_SUBJECT_PREFIX, eventSubject } from '../../adapters/bus/subjects.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { type DomainEvent, parseDomainEvent } from '../../contracts/events.ts';
import type { ScanTradeCallsInput, ScanTradeCallsOutput } from '../../contracts/tools.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { verdictVerifyUrl } from '../api/verify/url.ts';
import { type DeliveryRecord, findDelivery } from './delivery-log-fold.ts';
import type { DeliveryJob, DeliveryWorker, Trigger } from './delivery-worker.ts';
import { dueDigests } from './digest-schedule.ts';
import { type Candidate, largestTopN, matches } from './matching.ts';
import { claimNextAttempt } from './next-attempt.ts';
import {
  deliveryIdFor,
  digestEventId,
  regimeShiftEnvelope,
  scanDigestEnvelope,
  tradeCallEnvelope,
} from './payloads.ts';
import type { MarketRanking } from './ranking.ts';
import { findSubscription, type SubscriptionRecord } from './subscription-fold.ts';
import type { WebhookState } from './webhook-projection.ts';

export interface DispatcherOptions {
  store: EventStore;
  bus: Bus;
  runner: ProjectionRunner<WebhookState>;
  worker: DeliveryWorker;
  ranking: MarketRanking;
  logger: Logger;
  verifyBaseUrl: string;
  stuckAfterMs: number;
  tickMs: number;
  subjectPrefix?: string;
  /** Durable consumer names start with this; two dispatchers sharing it share the work. */
  durablePrefix?: string;
  /** Runs the ranked scan of a digest; without it scan_digest subscriptions get nothing. */
  scan?: (input: ScanTradeCallsInput) => Promise<ScanTradeCallsOutput>;
  /** Clock for digest periods (tests compress it). */
  now?: () => number;
  /** How long a bus message waits for the webhook projection to reach its position. */
  catchUpTimeoutMs?: number;
}

const decoder = new TextDecoder();

/**
 * The webhook dispatcher: turns trade calls and regime shifts from the bus into claimed
 * deliveries, runs digests on their cadence, and retries what is due. The bus message is acked
 * only after every matching delivery's first attempt is recorded, and everything after that is
 * driven by the log, so a crash at any point loses nothing: the next dispatcher finds the
 * unfinished attempts in the delivery log and sends them again with the same delivery_id.
 */
export class WebhookDispatcher {
  private readonly consumers: Consumer[] = [];
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private readonly claiming = new Set<string>();
  private readonly digestsFired = new Set<string>();
  private readonly digestScans = new Map<string, Promise<ScanTradeCallsOutput>>();
  private readonly submissions = new Set<Promise<unknown>>();
  private readonly logger: Logger;
  private running = false;

  constructor(private readonly options: DispatcherOptions) {
    this.logger = options.logger.child({ component: 'dispatcher' });
  }

  async start(): Promise<void> {
    const { bus } = this.options;
    const prefix = this.options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    const durable = this.options.durablePrefix ?? 'dispatcher';
    this.running = true;
    const handle = (m: BusMessage) => this.onMessage(m);
    this.consumers.push(
      await bus.consume(
        {
          durable: `${durable}-calls`,
          filterSubject: eventSubject('VerdictRecorded', prefix),
          maxInFlight: 64,
        },
        handle,
      ),
      await bus.consume(
        {
          durable: `${durable}-shifts`,
          filterSubject: eventSubject('RegimeShifted', prefix),
          maxInFlight: 4,
        },
        handle,
      ),
      await bus.consume(
        { durable: `${durable}-reenable`, filterSubject: eventSubject('SubscriptionReEnabled', prefix) },
        handle,
      ),
    );
    this.timer = setInterval(() => {
      this.ticking ??= this.tick()
        .catch((err: unknown) => this.logger.warn({ err }, 'dispatcher tick failed'))
        .finally(() => {
          this.ticking = null;
        });
    }, this.options.tickMs);
    this.logger.info('webhook dispatcher started');
  }

  /** Stops taking work, then waits (up to `drainMs`) for attempts in flight to be recorded. */
  async stop(drainMs = 20_000): Promise<void> {
    this.running = false;
    if (this.timer) clearInterval(this.timer);
    await Promise.all(this.consumers.splice(0).map((c) => c.stop()));
    await this.ticking;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.submissions]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, drainMs);
      }),
    ]);
    clearTimeout(timer);
  }

  private submit(job: DeliveryJob): void {
    const task = this.options.worker
      .submit(job)
      .catch((err: unknown) =>
        this.logger.error({ err, deliveryId: job.deliveryId }, 'recording a delivery failed'),
      )
      .finally(() => this.submissions.delete(task));
    this.submissions.add(task);
  }

  private async onMessage(message: BusMessage): Promise<void> {
    let recorded: RecordedEvent;
    try {
      recorded = JSON.parse(decoder.decode(message.data)) as RecordedEvent;
    } catch {
      this.logger.error({ subject: message.subject }, 'unreadable bus message; dropped');
      message.term();
      return;
    }
    const event = parseDomainEvent(recorded);
    if (event === null) {
      await message.ack();
      return;
    }
    // Match against the subscriptions as of this event, never an older view.
    await this.options.runner.waitFor(recorded.position, this.options.catchUpTimeoutMs ?? 10_000);
    if (event.type === 'SubscriptionReEnabled') await this.recover(event);
    else await this.fanOut(event);
    await message.ack();
  }

  private async fanOut(event: DomainEvent): Promise<void> {
    let candidate: Candidate;
    if (event.type === 'VerdictRecorded') {
      if (event.data.call === 'HOLD') return;
      candidate = { event: 'trade_call', ...event.data };
    } else if (event.type === 'RegimeShifted') {
      candidate = { event: 'regime_shift', ...event.data };
    } else return;
    const subs = Object.values(this.options.runner.state.subscriptions.subs);
    if (subs.some((s) => s.status === 'active' && largestTopN(s.assets) !== null)) {
      await this.options.ranking.prepare(candidate.exchange);
    }
    const matched = subs.filter((s) =>
      matches(s, candidate, (exchange, coin) => this.options.ranking.rankOf(exchange, coin)),
    );
    if (matched.length === 0) return;
    const verdict = event.type === 'RegimeShifted' ? await this.verdictOf(event) : null;
    const verifyUrl = verdictVerifyUrl(this.options.verifyBaseUrl, verdict ?? event);
    for (const sub of matched) {
      const deliveryId = deliveryIdFor(event.id, sub.id);
      const envelope =
        event.type === 'VerdictRecorded'
          ? tradeCallEnvelope({
              deliveryId,
              createdAt: event.recordedAt,
              verdict: event.data,
              verifyUrl,
            })
          : regimeShiftEnvelope({
              deliveryId,
              createdAt: event.recordedAt,
              shift: (event as Extract<DomainEvent, { type: 'RegimeShifted' }>).data,
              signalHash: verdict?.hash ?? null,
              verifyUrl,
            });
      const job = await this.options.worker.claim({
        deliveryId,
        subscription: sub,
        eventId: event.id,
        event: envelope.event,
        attempt: 1,
        trigger: 'event',
        body: JSON.stringify(envelope),
        expected: 'no_stream',
      });
      // null: a redelivered bus message whose deliveries were already recorded.
      if (job) this.submit(job);
    }
  }

  /** The verdict that carried a regime shift (written in the same append, just before it). */
  private async verdictOf(
    event: Extract<DomainEvent, { type: 'RegimeShifted' }>,
  ): Promise<{ stream: string; revision: number; hash: string } | null> {
    const events = await this.options.store.readStream(event.stream, {
      fromRevision: Math.max(0, event.revision - 1),
      maxCount: 1,
    });
    const verdict = events.map(parseDomainEvent).find((e) => e?.id === event.data.verdictEventId);
    return verdict?.type === 'VerdictRecorded'
      ? { stream: verdict.stream, revision: verdict.revision, hash: verdict.data.hash }
      : null;
  }

  /** "Recover everything failed since T": a new attempt for each delivery whose last attempt failed since T. */
  private async recover(event: Extract<DomainEvent, { type: 'SubscriptionReEnabled' }>): Promise<void> {
    const since = event.data.recoverSince;
    if (!since) return;
    const { log, subscriptions } = this.options.runner.state;
    const sub = findSubscription(subscriptions, event.data.subscriptionId);
    if (sub?.status !== 'active') return;
    const sinceMs = Date.parse(since);
    for (const id of [...(log.bySub[sub.id] ?? [])]) {
      const record = findDelivery(log, id);
      const last = record?.attempts.at(-1);
      if (!record || !last || record.status !== 'failed' || Date.parse(last.attemptedAt) < sinceMs) continue;
      await this.retry(record, sub, 'recover');
    }
  }

  /** Claims the next attempt of a known delivery and hands it to the worker. */
  private async retry(
    record: DeliveryRecord,
    sub: SubscriptionRecord,
    trigger: Trigger,
  ): Promise<DeliveryJob | null> {
    if (this.claiming.has(record.id) || this.options.worker.owned.has(record.id)) return null;
    this.claiming.add(record.id);
    try {
      const job = await claimNextAttempt(this.options.worker, record, sub, trigger);
      if (job) this.submit(job);
      return job;
    } finally {
      this.claiming.delete(record.id);
    }
  }

  /** Due retries, attempts whose dispatcher died, and digests whose period began. */
  async tick(): Promise<void> {
    if (!this.running) return;
    const now = Date.now();
    const { log, subscriptions } = this.options.runner.state;
    for (const record of Object.values(log.deliveries)) {
      if (record.status !== 'pending' || this.options.worker.owned.has(record.id)) continue;
      const last = record.attempts.at(-1);
      if (!last) continue;
      let trigger: Trigger | null = null;
      if (last.outcome === 'failed' && last.nextAttemptAt !== null && Date.parse(last.nextAttemptAt) <= now) {
        trigger = 'retry';
      } else if (
        last.outcome === 'pending' &&
        Date.parse(last.attemptedAt) + this.options.stuckAfterMs <= now
      ) {
        trigger = 'stale';
      }
      if (trigger === null) continue;
      const sub = findSubscription(subscriptions, record.subscriptionId);
      if (sub?.status !== 'active') continue;
      await this.retry(record, sub, trigger);
    }
    if (this.options.scan) await this.digests();
  }

  private async digests(): Promise<void> {
    const { log, subscriptions } = this.options.runner.state;
    const now = (this.options.now ?? Date.now)();
    this.digestScans.clear();
    for (const { sub, periodStart } of dueDigests(Object.values(subscriptions.subs), now)) {
      const eventId = digestEventId(sub.id, periodStart);
      const deliveryId = deliveryIdFor(eventId, sub.id);
      if (this.digestsFired.has(deliveryId) || findDelivery(log, deliveryId)) continue;
      const input: ScanTradeCallsInput = {
        timeframe: sub.timeframe!,
        exchange: sub.exchange!,
        topN: sub.topN!,
        limit: sub.topN!,
        minConfidence: sub.minConfidence ?? 0,
      };
      const key = JSON.stringify(input);
      let scan = this.digestScans.get(key);
      if (!scan) {
        scan = this.options.scan!(input);
        this.digestScans.set(key, scan);
      }
      let result: ScanTradeCallsOutput;
      try {
        result = await scan;
      } catch (err) {
        this.logger.warn({ err, subscriptionId: sub.id }, 'digest scan failed; retried on the next tick');
        continue;
      }
      const envelope = scanDigestEnvelope({
        deliveryId,
        createdAt: new Date(now).toISOString(),
        cadence: sub.cadence!,
        periodStart,
        scan: result,
      });
      const job = await this.options.worker.claim({
        deliveryId,
        subscription: sub,
        eventId,
        event: 'scan_digest',
        attempt: 1,
        trigger: 'digest',
        body: JSON.stringify(envelope),
        expected: 'no_stream',
      });
      this.digestsFired.add(deliveryId);
      if (job) this.submit(job);
    }
  }
}
