import pLimit from 'p-limit';
import type { Logger } from 'pino';
import type { Bus, BusMessage, Consumer } from '../../adapters/bus/port.ts';
import { DEFAULT_SUBJECT_PREFIX, eventSubject } from '../../adapters/bus/subjects.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { type DomainEvent, type EventData, parseDomainEvent } from '../../contracts/events.ts';
import type { TrackRecordBrief } from '../../contracts/history.ts';
import { timerDelay } from '../../contracts/setting-lists.ts';
import type { ScanTradeCallsInput, ScanTradeCallsOutput } from '../../contracts/tools.ts';
import { verdictVerifyUrl } from '../../contracts/verify-url.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import type { Trigger } from './delivery-decider.ts';
import {
  type AttemptRecord,
  type DeliveryLogState,
  type DeliveryRecord,
  findDelivery,
  heldForDisable,
} from './delivery-log-fold.ts';
import type { DeliveryJob, DeliveryWorker } from './delivery-worker.ts';
import { EngineStoppedError } from './digest-scan.ts';
import { dueDigests, passedWithLaterCloses, skippedPeriods } from './digest-schedule.ts';
import { type Candidate, largestTopN, matches, recordedAfter } from './matching.ts';
import { claimNextAttempt } from './next-attempt.ts';
import {
  deliveryIdFor,
  digestEventId,
  digestPeriodOf,
  pinnedEnvelope,
  regimeShiftEnvelope,
  riskShiftEnvelope,
  scanDigestEnvelope,
  subscriptionDisabledEnvelope,
  tradeCallEnvelope,
} from './payloads.ts';
import type { MarketRanking } from './ranking.ts';
import { logPages, needsRecovery, Pacer, positionBefore, readDeliveryRecord } from './recovery.ts';
import {
  filtersAt,
  findSubscription,
  type SubscriptionRecord,
  subscriptionsOfKey,
} from './subscription-fold.ts';
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
  scan?: (
    input: ScanTradeCallsInput,
    period: { start: number; signal?: AbortSignal },
  ) => Promise<ScanTradeCallsOutput>;
  /** Clock for digest periods: the feed's (tests compress it). */
  now?: () => number;
  /** `now` is a replay clock: subscriptions count from when they were first seen in feed time. */
  feedClock?: boolean;
  /** How long a bus message waits for the webhook projection to reach its position. */
  catchUpTimeoutMs?: number;
  /** Deliveries a recovery claims per second, at most. */
  recoverPerSecond?: number;
  /** The track-record line a trade_call carries (from the history slice). */
  trackRecord?: (call: EventData<'VerdictRecorded'>) => TrackRecordBrief | null;
}

const decoder = new TextDecoder();

/** Digest claims a pass runs at once. */
const DIGEST_CLAIMS_AT_ONCE = 16;

/** A digest's scan as it ended: its result, or what it threw. */
type DigestScan = Promise<{ ok: true; result: ScanTradeCallsOutput } | { ok: false; err: unknown }>;

/**
 * The webhook dispatcher: turns trade calls, regime shifts and risk shifts from the bus into claimed
 * deliveries, runs digests on their cadence, and retries what is due. The bus message is acked
 * only after every matching delivery's first attempt is recorded, and everything after that is
 * driven by the log, so a crash at any point loses nothing: the next dispatcher finds the
 * unfinished attempts in the delivery log and sends them again with the same delivery_id.
 */
export class WebhookDispatcher {
  private readonly consumers: Consumer[] = [];
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  /** A scan asked for while one ran: it runs once that one ends (it may miss what changed meanwhile). */
  private tickAgain = false;
  /** The wake-up armed for the earliest retry or stale attempt the last scan saw coming. */
  private wake: { at: number; timer: NodeJS.Timeout } | null = null;
  /** What the last retry scan saw: the log position it read and the earliest due time after it. */
  private scanned = { checkpoint: -1, nextDue: 0 };
  private digesting: Promise<void> | null = null;
  /**
   * The delivery id and period of the latest digest fired per subscription, until the projection
   * has it: only the current period's digest can be due, so an older one's need not be kept.
   */
  private readonly digestsFired = new Map<string, { deliveryId: string; periodStart: number }>();
  private digestPassCount = 0;
  /** Digest periods passed unsent (counted as skippedPeriods counts them) before the digests fired. */
  private digestPeriodsSkippedCount = 0;
  /**
   * Feed time at which each digest subscription was first seen taking digests on its cadence (its
   * `digestSincePosition`: created, or edited to add scan_digest or change the cadence), replay
   * clocks only.
   */
  private readonly firstSeen = new Map<string, { position: number; at: number }>();
  /**
   * Feed time at which each re-enabled digest subscription was first seen active again (its
   * `enabledSincePosition`), replay clocks only: null for a re-enable from before the start.
   */
  private readonly enabledSeen = new Map<string, { position: number; at: number | null }>();
  /** The log's head when this dispatcher started: a subscription at or below it predates the start. */
  private headAtStart = Number.POSITIVE_INFINITY;
  private readonly digestScans = new Map<string, DigestScan>();
  /** Subscriptions whose digest of a passed period was left unsent since the start (once each). */
  private readonly passedDropped = new Set<string>();
  /** Aborted by stop(): a digest scan waiting for the engine gives way. */
  private digestsStopping = new AbortController();
  private readonly submissions = new Set<Promise<unknown>>();
  private readonly recovering = new Map<string, Promise<void>>();
  private readonly recovered = new Set<string>();
  private readonly logger: Logger;
  private running = false;

  constructor(private readonly options: DispatcherOptions) {
    this.logger = options.logger.child({ component: 'dispatcher' });
  }

  async start(): Promise<void> {
    const { bus } = this.options;
    await this.options.worker.startedAt();
    this.headAtStart = await this.options.store.headPosition();
    const prefix = this.options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    const durable = this.options.durablePrefix ?? 'dispatcher';
    this.running = true;
    if (this.digestsStopping.signal.aborted) this.digestsStopping = new AbortController();
    const handle = (m: BusMessage) => this.onMessage(m);
    // Acks are not confirmed: a message is acked only once its deliveries are claimed in the
    // store, and handling it again is idempotent (the sequence event, which records the first
    // attempt, has an id derived from the delivery id, and only the handling whose append wrote it
    // sends: its append says so, or the claim read back names it), so a lost ack costs a redelivery
    // that claims nothing, never a lost or doubled delivery. A confirmed ack would only turn that
    // into a nak, with the same redelivery, at a round trip per message.
    // Trade calls in flight: each holds its slot for about two group commits (the store catching
    // up to it, then its claims), so on LMDB, whose commits take longer the more they carry, the
    // slots and not the CPU bounded a flood: 64 gave 1,450 deliveries/s against 2,240 with 256, at
    // 0.325 against 0.30 ms of CPU each (measured in 6caa61d). What waits past them waits in
    // the endpoint queues, which bound the bytes kept, as it did before.
    const consumed: ReadonlyArray<[suffix: string, type: string, maxInFlight?: number]> = [
      ['calls', 'VerdictRecorded', 256],
      ['shifts', 'RegimeShifted', 4],
      ['risks', 'RiskShifted', 4],
      ['reenable', 'SubscriptionReEnabled'],
      ['disabled', 'SubscriptionDisabled'],
    ];
    // Asked for together: the in-process bus registers each durable when asked, and drops what
    // every registered durable has settled, so one registered a turn later could find the
    // messages its filter wants dropped by the first's scan past them.
    const opened = await Promise.allSettled(
      consumed.map(([suffix, type, maxInFlight]) =>
        bus.consume(
          {
            durable: `${durable}-${suffix}`,
            filterSubject: eventSubject(type, prefix),
            ...(maxInFlight === undefined ? {} : { maxInFlight }),
            confirmAck: false,
          },
          handle,
        ),
      ),
    );
    for (const result of opened) if (result.status === 'fulfilled') this.consumers.push(result.value);
    const failed = opened.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
    // Retries and digests tick apart: a digest's scan can take seconds on a busy machine, and
    // due retries waiting behind it were sent that much past their schedule.
    this.options.worker.onRetryScheduled = (due) => this.wakeAt(due);
    this.timer = setInterval(() => {
      this.kick();
      if (this.options.scan)
        this.digesting ??= this.digests()
          .catch((err: unknown) => this.logger.warn({ err }, 'digest tick failed'))
          .finally(() => {
            this.digesting = null;
          });
    }, this.options.tickMs);
    this.logger.info('webhook dispatcher started');
  }

  /** Stops taking work, then waits (up to `drainMs`) for attempts in flight to be recorded. */
  async stop(drainMs = 20_000): Promise<void> {
    this.running = false;
    if (this.timer) clearInterval(this.timer);
    if (this.wake) clearTimeout(this.wake.timer);
    this.options.worker.onRetryScheduled = null;
    this.digestsStopping.abort();
    await Promise.all(this.consumers.splice(0).map((c) => c.stop()));
    await this.ticking;
    await this.digesting;
    await this.settled(drainMs);
    // What still waits for its turn is let go unsent (the worker records no failure for it), and
    // the few appends that takes are waited for, briefly.
    this.options.worker.abandon();
    await this.settled(2_000);
  }

  /** Waits for the submitted jobs' outcomes, up to `ms`. */
  private async settled(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.submissions]),
      new Promise((resolve) => {
        timer = setTimeout(resolve, ms);
      }),
    ]);
    clearTimeout(timer);
  }

  private submit(job: DeliveryJob): void {
    // Only the id in the handler: a job waiting in a full endpoint queue must not keep its body alive.
    const { deliveryId } = job;
    // One reaction for either end (a catch and a finally made three promises and four closures).
    const task: Promise<void> = this.options.worker.submit(job).then(
      () => {
        this.submissions.delete(task);
      },
      (err: unknown) => {
        this.submissions.delete(task);
        this.logger.error({ err, deliveryId }, 'recording a delivery failed');
      },
    );
    this.submissions.add(task);
  }

  private async onMessage(message: BusMessage): Promise<void> {
    // The relay's own event on the in-process bus (shared, read only here), else its JSON.
    let recorded = message.value as RecordedEvent | undefined;
    if (recorded === undefined) {
      try {
        recorded = JSON.parse(decoder.decode(message.data)) as RecordedEvent;
      } catch {
        this.logger.error({ subject: message.subject }, 'unreadable bus message; dropped');
        message.term();
        return;
      }
    }
    const event = parseDomainEvent(recorded);
    if (event === null) {
      await message.ack();
      return;
    }
    // Match against the subscriptions as of this event, never an older view (one newer is fine:
    // a subscription created after the event's position does not take it, see recordedAfter). The message says the
    // store has it: read now rather than at the store's next poll for other processes' appends
    // (250 ms on LMDB, which otherwise bounds throughput at maxInFlight per poll).
    if (this.options.runner.checkpoint < recorded.position) this.options.store.wake?.();
    await this.options.runner.waitFor(recorded.position, this.options.catchUpTimeoutMs ?? 10_000);
    if (event.type === 'SubscriptionReEnabled') {
      // What was held for the disable is sent by the retry scan (every dispatcher's): now, not at
      // the next tick.
      this.kick();
      // A redelivery of the same message (a long recovery outlives the ack wait) joins the run.
      // A redelivery after the run finished (it outlived the ack wait) has nothing left to do.
      let run = this.recovered.has(event.id) ? Promise.resolve() : this.recovering.get(event.id);
      if (!run) {
        run = this.recover(event).then(() => {
          if (this.recovered.size >= 1_000) this.recovered.clear();
          this.recovered.add(event.id);
        });
        const done = () => this.recovering.delete(event.id);
        run.then(done, done);
        this.recovering.set(event.id, run);
      }
      await run;
    } else if (event.type === 'SubscriptionDisabled') await this.noticeDisabled(event);
    else await this.fanOut(event);
    await message.ack();
  }

  /**
   * The webhook a trade call, regime shift or risk shift is a candidate for; null for anything else.
   * Only the fields matching reads: a spread of the event's data copied the whole verdict per event.
   */
  private candidateOf(event: DomainEvent): Candidate | null {
    if (event.type === 'VerdictRecorded')
      return event.data.call === 'HOLD'
        ? null
        : candidate('trade_call', event.data, event.data.confidence, event.position);
    if (event.type === 'RegimeShifted')
      return candidate('regime_shift', event.data, event.data.confidence, event.position);
    if (event.type === 'RiskShifted') return candidate('risk_shift', event.data, null, event.position);
    return null;
  }

  /** Subscriptions (active ones, or just `only`) that take this candidate. */
  private async matching(candidate: Candidate, only?: SubscriptionRecord): Promise<SubscriptionRecord[]> {
    const subs = only ? [only] : Object.values(this.options.runner.state.subscriptions.subs);
    if (subs.some((s) => ranksTopN(s, candidate.position)))
      await this.options.ranking.prepare(candidate.exchange, candidate.candleCloseTime);
    // An indexed loop: a filter's callback would be a closure over the candidate per event.
    const out: SubscriptionRecord[] = [];
    for (let i = 0; i < subs.length; i++) if (matches(subs[i]!, candidate, this.rankOf)) out.push(subs[i]!);
    return out;
  }

  private readonly rankOf = (exchange: string, coin: string) => this.options.ranking.rankOf(exchange, coin);

  /** Claims the first attempt of each subscription's delivery of this event. */
  private async deliver(event: DomainEvent, subs: SubscriptionRecord[], trigger: Trigger): Promise<void> {
    if (subs.length === 0) return;
    const verdict =
      event.type === 'RegimeShifted' || event.type === 'RiskShifted' ? await this.verdictOf(event) : null;
    const verifyUrl = verdictVerifyUrl(this.options.verifyBaseUrl, verdict ?? event);
    // The same for every subscription of this event: worked out once.
    const trackRecord =
      event.type === 'VerdictRecorded' ? (this.options.trackRecord?.(event.data) ?? null) : null;
    const signalHash = verdict?.hash ?? null;
    const createdAt = event.recordedAt;
    for (const sub of subs) {
      const deliveryId = deliveryIdFor(event.id, sub.id);
      const envelope =
        event.type === 'VerdictRecorded'
          ? tradeCallEnvelope({ deliveryId, createdAt, verdict: event.data, verifyUrl, trackRecord })
          : event.type === 'RiskShifted'
            ? riskShiftEnvelope({ deliveryId, createdAt, signalHash, verifyUrl, shift: event.data })
            : regimeShiftEnvelope({
                deliveryId,
                createdAt,
                signalHash,
                verifyUrl,
                shift: (event as Extract<DomainEvent, { type: 'RegimeShifted' }>).data,
              });
      const job = await this.options.worker.claimFirst({
        deliveryId,
        subscription: sub,
        eventId: event.id,
        event: envelope.event,
        trigger,
        body: JSON.stringify(pinnedEnvelope(envelope, sub.eventVersion)),
      });
      // null: a redelivered bus message whose deliveries were already recorded.
      if (job) this.submit(job);
    }
  }

  private async fanOut(event: DomainEvent): Promise<void> {
    const candidate = this.candidateOf(event);
    if (candidate === null) return;
    await this.deliver(event, await this.matching(candidate), 'event');
  }

  /**
   * Tells the owner a subscription was disabled: a `subscription_disabled` delivery to each other
   * active subscription of the same key that asks for it.
   */
  private async noticeDisabled(event: Extract<DomainEvent, { type: 'SubscriptionDisabled' }>): Promise<void> {
    const subs = this.options.runner.state.subscriptions;
    const disabled = findSubscription(subs, event.data.subscriptionId);
    if (!disabled) return;
    const targets = subscriptionsOfKey(subs, disabled.keyId).filter(
      (s) =>
        s.id !== disabled.id &&
        s.status === 'active' &&
        recordedAfter(s, event.position) &&
        // The events it took when the disable was recorded, as a trade call is matched (an edit
        // applies from its log position on, however late this dispatcher handles the disable).
        filtersAt(s, event.position).events.includes('subscription_disabled'),
    );
    for (const sub of targets) {
      const deliveryId = deliveryIdFor(event.id, sub.id);
      const envelope = subscriptionDisabledEnvelope({
        deliveryId,
        createdAt: event.recordedAt,
        disabled: { id: disabled.id, url: disabled.url },
        reason: event.data.reason,
        consecutiveFailures: event.data.consecutiveFailures,
      });
      const job = await this.options.worker.claimFirst({
        deliveryId,
        subscription: sub,
        eventId: event.id,
        event: 'subscription_disabled',
        trigger: 'event',
        body: JSON.stringify(pinnedEnvelope(envelope, sub.eventVersion)),
      });
      if (job) this.submit(job);
    }
  }

  /**
   * The verdict that carried a regime or risk shift (written in the same append, before it: just
   * before, or with the regime shift between them).
   */
  private async verdictOf(
    event: Extract<DomainEvent, { type: 'RegimeShifted' | 'RiskShifted' }>,
  ): Promise<{ stream: string; revision: number; hash: string } | null> {
    const events = await this.options.store.readStream(event.stream, {
      fromRevision: Math.max(0, event.revision - 2),
      maxCount: 2,
    });
    const verdict = events.map(parseDomainEvent).find((e) => e?.id === event.data.verdictEventId);
    return verdict?.type === 'VerdictRecorded'
      ? { stream: verdict.stream, revision: verdict.revision, hash: verdict.data.hash }
      : null;
  }

  /**
   * "Recover everything since T", derived from the event log rather than the in-memory delivery
   * log (which keeps only the newest deliveries per subscription): every trade call and regime
   * shift since T that the subscription matches is delivered, whether it was attempted and failed
   * or never attempted because the subscription was disabled; every other delivery of the
   * subscription attempted since T (digests) that did not succeed is sent again. The log is read
   * in pages from T to the re-enable, and claims are paced (`recoverPerSecond`). A delivery held for
   * the disable is the retry scan's to send, whatever T: this run meets it only by its queue
   * record, when that is since T, and then one of the two claims wins.
   */
  private async recover(event: Extract<DomainEvent, { type: 'SubscriptionReEnabled' }>): Promise<void> {
    const since = event.data.recoverSince;
    if (!since) return;
    const { store, worker } = this.options;
    const sub = findSubscription(this.options.runner.state.subscriptions, event.data.subscriptionId);
    if (sub?.status !== 'active') return;
    const sinceMs = Date.parse(since);
    // Nothing of the subscription's was recorded before its SubscriptionCreated (it matches only
    // events after it): a recovery from its creation or earlier reads the log from there, not
    // from the log's start (the api clamps recover_since to the creation; a re-enable recorded
    // before it did may carry any time), and keeps every event after it whatever its recording time.
    const fromCreation = sinceMs <= Date.parse(sub.createdAt);
    const from = fromCreation
      ? sub.createdPosition
      : Math.max(await positionBefore(store, sinceMs), sub.createdPosition);
    const pacer = new Pacer(this.options.recoverPerSecond ?? 50);
    const seen = new Set<string>();
    let sent = 0;
    for await (const page of logPages(store, from, event.position)) {
      for (const recorded of page) {
        // Stopped halfway: the re-enable's message must not be acked as if the run were done (the
        // rest would never be sent). Failing it hands it back to the bus, and the next dispatcher
        // runs the recovery again; what this one claimed is skipped there, found in the log.
        if (!this.running) throw new Error('dispatcher stopped during a recovery; left to the next one');
        if (!fromCreation && Date.parse(recorded.recordedAt) < sinceMs) continue;
        const parsed = parseDomainEvent(recorded);
        if (parsed === null) continue;
        let deliveryId: string;
        let source: DomainEvent | null = null;
        let sequenced: RecordedEvent | undefined;
        if (parsed.type === 'DeliverySequenced') {
          // The first attempts recorded with their numbers (older logs: the attempts' own events).
          if (parsed.data.first?.subscriptionId !== sub.id) continue;
          deliveryId = parsed.data.deliveryId;
          sequenced = recorded;
        } else if (parsed.type === 'DeliveryAttempted' || parsed.type === 'DeliveryQueued') {
          if (parsed.data.subscriptionId !== sub.id) continue;
          deliveryId = parsed.data.deliveryId;
        } else {
          const candidate = this.candidateOf(parsed);
          if (candidate === null || (await this.matching(candidate, sub)).length === 0) continue;
          deliveryId = deliveryIdFor(parsed.id, sub.id);
          source = parsed;
        }
        if (seen.has(deliveryId) || worker.owned.has(deliveryId)) continue;
        seen.add(deliveryId);
        // A delivery whose own stream is still empty is found by its sequence event, or else in
        // the projection, which keeps it (the delivery log's trim).
        const record =
          (await readDeliveryRecord(store, deliveryId, sequenced)) ??
          findDelivery(this.options.runner.state.log, deliveryId) ??
          null;
        if (record === null && source === null) continue;
        if (record !== null && !needsRecovery(record, Date.now(), this.options.stuckAfterMs)) continue;
        await pacer.take();
        if (record === null) await this.deliver(source!, [sub], 'recover');
        else await this.retry(record, sub, 'recover');
        sent++;
      }
    }
    this.logger.info({ subscriptionId: sub.id, since, sent }, 'recovery finished');
  }

  /** Claims the next attempt of a known delivery and hands it to the worker. */
  private async retry(
    record: DeliveryRecord,
    sub: SubscriptionRecord,
    trigger: Trigger,
  ): Promise<DeliveryJob | null> {
    const job = await this.options.worker.claimingAlone(record.id, () =>
      claimNextAttempt(this.options.worker, record, sub, trigger),
    );
    if (job) this.submit(job);
    return job;
  }

  /** Runs a retry scan now, or right after the one running. */
  private kick(): void {
    if (this.ticking) {
      this.tickAgain = true;
      return;
    }
    this.ticking = this.tick()
      .catch((err: unknown) => this.logger.warn({ err }, 'dispatcher tick failed'))
      .finally(() => {
        this.ticking = null;
        if (this.tickAgain && this.running) {
          this.tickAgain = false;
          this.kick();
        }
      });
  }

  /**
   * Scans for retries at `due` (the periodic tick stays the backstop for other processes' failures).
   * A due time past a timer's range (a schedule's longest delay with its jitter, up to twice
   * MAX_TIMER_MS) wakes at the range's end, whose scan sets the next wake: a longer wait would
   * fire at once.
   */
  private wakeAt(due: number): void {
    if (!this.running || (this.wake && this.wake.at <= due)) return;
    if (this.wake) clearTimeout(this.wake.timer);
    const timer = setTimeout(
      () => {
        this.wake = null;
        this.kick();
      },
      timerDelay(due - Date.now()),
    );
    timer.unref();
    this.wake = { at: due, timer };
  }

  /**
   * Due retries, and attempts whose dispatcher died. The scan reads every pending delivery, so it
   * is skipped while nothing was folded since the last one and nothing it saw coming is due yet;
   * it wakes for the earliest due time it saw, so a retry goes out on its schedule rather than up
   * to a tick late.
   */
  async tick(): Promise<void> {
    if (!this.running) return;
    this.options.worker.followMoves();
    const now = Date.now();
    const checkpoint = this.options.runner.checkpoint;
    if (checkpoint === this.scanned.checkpoint && now < this.scanned.nextDue) return;
    const { log, subscriptions } = this.options.runner.state;
    let nextDue = Number.POSITIVE_INFINITY;
    for (const record of Object.values(log.deliveries)) {
      if (record.status !== 'pending') {
        // Held because its subscription was disabled before its turn: nothing was sent, and the
        // re-enable (with or without recover_since) sends it, as a fresh run of the schedule. Every
        // dispatcher may try; one claim wins. This is its only path: the delivery log never evicts
        // such a record (a restarted dispatcher has it again, from its snapshot or the log), and
        // the scan also reaches a hold recorded after the re-enable (by a dispatcher that had not
        // folded it yet), which a recovery, reading the log up to the re-enable, would not.
        if (record.status !== 'failed' || !heldForDisable(record) || this.options.worker.owned.has(record.id))
          continue;
        const sub = findSubscription(subscriptions, record.subscriptionId);
        if (sub?.status === 'active' && this.options.worker.canOpen(sub, now))
          await this.retry(record, sub, 'recover');
        continue;
      }
      const last = record.attempts.at(-1);
      if (!last) continue;
      const due = dueTime(last, this.options.stuckAfterMs);
      if (due === null) continue;
      const sub = findSubscription(subscriptions, record.subscriptionId);
      // An inactive subscription's deliveries wait for an event (re-enabled, deleted) to matter.
      if (sub?.status !== 'active') continue;
      // Its secret does not open with this process's master key: left as it is (no claim, no
      // attempt used) for a dispatcher that can sign it, this one once restarted with the right key.
      if (!this.options.worker.canOpen(sub, now)) continue;
      // One in flight here records its outcome soon; look again then rather than lose sight of it.
      if (this.options.worker.owned.has(record.id)) {
        nextDue = Math.min(nextDue, Math.max(due, now + this.options.tickMs));
        continue;
      }
      if (due > now) {
        nextDue = Math.min(nextDue, due);
        continue;
      }
      await this.retry(record, sub, last.outcome === 'failed' ? 'retry' : 'stale');
    }
    this.scanned = { checkpoint, nextDue };
    if (Number.isFinite(nextDue)) this.wakeAt(nextDue);
  }

  /** Digests whose period began. */
  private async digests(): Promise<void> {
    if (!this.running) return;
    const { log, subscriptions } = this.options.runner.state;
    const now = (this.options.now ?? Date.now)();
    this.digestScans.clear();
    // On a replay clock a subscription's wall-clock creation (or edit) time says nothing about feed
    // time: one created, or edited into a new digest series, while this dispatcher runs counts from
    // the feed time it first saw that. One recorded before this dispatcher started existed before it: a restart (the replay
    // clock runs on meanwhile, anchored in the log) must not skip the period it comes back in.
    const seen = this.options.feedClock
      ? (sub: { id: string; digestSincePosition: number }) =>
          this.feedTimeSeen(this.firstSeen, sub.id, sub.digestSincePosition, now, Number.NEGATIVE_INFINITY)
      : undefined;
    // Every due digest's scan starts at once, and they are claimed in turn as they end: a scan can
    // wait for the engine to evaluate its close (seconds on a restart's catch-up), and scans waiting
    // one after another could run the pass past the next boundary, whose period would go unsent.
    // Scans of one venue share its ranking, which each reads as of its own period's start or later
    // (MarketRanking.prepare), as one after another would.
    const due: {
      sub: SubscriptionRecord;
      periodStart: number;
      since: number;
      eventId: string;
      deliveryId: string;
      fired: { deliveryId: string; periodStart: number } | undefined;
      enabledSince: number | null;
      scan: DigestScan;
    }[] = [];
    for (const { sub, periodStart, since } of dueDigests(Object.values(subscriptions.subs), now, seen)) {
      const eventId = digestEventId(sub.id, periodStart);
      const deliveryId = deliveryIdFor(eventId, sub.id);
      const fired = this.digestsFired.get(sub.id);
      const enabledSince = this.enabledSince(sub, now);
      if (fired?.deliveryId === deliveryId || findDelivery(log, deliveryId)) continue;
      const input: ScanTradeCallsInput = {
        timeframe: sub.timeframe!,
        exchange: sub.exchange!,
        topN: sub.topN!,
        // Every top-N market, HOLD included: what is not listed is named in `skipped`.
        limit: sub.topN!,
        includeHolds: true,
        minConfidence: sub.minConfidence ?? 0,
      };
      const key = JSON.stringify([input, periodStart]);
      let scan = this.digestScans.get(key);
      if (!scan) {
        scan = this.options.scan!(input, { start: periodStart, signal: this.digestsStopping.signal }).then(
          (result) => ({ ok: true as const, result }),
          (err: unknown) => ({ ok: false as const, err }),
        );
        this.digestScans.set(key, scan);
      }
      due.push({ sub, periodStart, since, eventId, deliveryId, fired, enabledSince, scan });
    }
    // Each claimed as soon as its own scan ends: one digest's wait holds back no other's. The claims
    // (an append each) run a few at once: a pass can find thousands of subscriptions due.
    const claiming = pLimit(DIGEST_CLAIMS_AT_ONCE);
    const claims = await Promise.allSettled(
      due.map(async ({ sub, periodStart, since, eventId, deliveryId, fired, enabledSince, scan }) => {
        const outcome = await scan;
        if (!outcome.ok) {
          // A stop let the scan go (it was waiting for the engine): nothing failed.
          if (this.digestsStopping.signal.aborted || outcome.err instanceof EngineStoppedError) return;
          this.logger.warn(
            { err: outcome.err, subscriptionId: sub.id },
            'digest scan failed; retried on the next tick',
          );
          return;
        }
        const result = outcome.result;
        // A scan that waited for the engine's catch-up after a start (seconds, more than a period
        // at a fast replay) can end after its period is over, with verdicts of closes after it: the
        // period is left unsent (counted as skipped) and the next pass sends the current one. Once
        // per subscription and start, so an engine slower than a period still gets digests out.
        if (
          !this.digestsFired.has(sub.id) &&
          !this.passedDropped.has(sub.id) &&
          passedWithLaterCloses(
            sub.cadence!,
            periodStart,
            (this.options.now ?? Date.now)(),
            result.calls.map((call) => call.timestamp * 1000),
          )
        ) {
          this.passedDropped.add(sub.id);
          this.logger.info(
            { subscriptionId: sub.id, periodStart: new Date(periodStart).toISOString() },
            'digest of a period that passed while its scan waited for the engine left unsent: its verdicts are of later closes',
          );
          return;
        }
        // The subscription's last digest before this one, read before this one is claimed: once
        // claimed, its sequence event may already be in the log (on LMDB it is by the time the claim
        // returns) and would read as the last one sent, hiding every period skipped before it.
        const lastSent = fired?.periodStart ?? lastDigestOf(log, sub.id);
        const envelope = scanDigestEnvelope({
          deliveryId,
          // The wall clock, as every other delivery's: the period it covers is on the feed's clock.
          createdAt: new Date().toISOString(),
          cadence: sub.cadence!,
          periodStart,
          scan: result,
        });
        const job = await claiming(() =>
          this.options.worker.claimFirst({
            deliveryId,
            subscription: sub,
            eventId,
            event: 'scan_digest',
            trigger: 'digest',
            body: JSON.stringify(pinnedEnvelope(envelope, sub.eventVersion)),
          }),
        );
        this.digestsFired.set(sub.id, { deliveryId, periodStart });
        // Periods whose boundary passed while no dispatcher ran, or past a long pass, are not sent
        // late (dueDigests): said here, for the operator; the subscriber sees `period_start` skip.
        // Those it spent disabled were not due: not counted.
        const skipped = skippedPeriods(sub.cadence!, periodStart, since, lastSent, enabledSince);
        if (skipped) {
          this.digestPeriodsSkippedCount += skipped;
          this.logger.warn(
            {
              subscriptionId: sub.id,
              cadence: sub.cadence,
              periodStart: new Date(periodStart).toISOString(),
              skipped,
            },
            'digest periods passed unsent (the dispatcher was stopped or starting, or a pass ran past them); only the current one is sent',
          );
        }
        if (job) this.submit(job);
      }),
    );
    const failed = claims.find((claim) => claim.status === 'rejected');
    if (failed) throw failed.reason;
    // A deleted subscription's entries go with it: over a long run of creates and deletes they
    // would otherwise pile up, one per subscription ever seen.
    const live = this.options.runner.state.subscriptions.subs;
    for (const id of this.firstSeen.keys()) if (!Object.hasOwn(live, id)) this.firstSeen.delete(id);
    for (const id of this.digestsFired.keys()) if (!Object.hasOwn(live, id)) this.digestsFired.delete(id);
    for (const id of this.enabledSeen.keys()) if (!Object.hasOwn(live, id)) this.enabledSeen.delete(id);
    for (const id of this.passedDropped) if (!Object.hasOwn(live, id)) this.passedDropped.delete(id);
    this.digestPassCount++;
  }

  /**
   * Since when the subscription is active again after its latest disable, on the digests' clock
   * (-Infinity: never re-enabled): its recording time, or on a replay clock the feed time this
   * dispatcher first saw the re-enable at; null for one recorded before it started there (its
   * feed time is not known).
   */
  private enabledSince(sub: SubscriptionRecord, now: number): number | null {
    if (sub.enabledSince === undefined || sub.enabledSincePosition === undefined) {
      return Number.NEGATIVE_INFINITY;
    }
    if (!this.options.feedClock) return Date.parse(sub.enabledSince);
    return this.feedTimeSeen(this.enabledSeen, sub.id, sub.enabledSincePosition, now, null);
  }

  /**
   * On a replay clock, the feed time this dispatcher first saw a subscription's record at
   * `position` (a digest series' start, a re-enable) in `seen`; `beforeStart` for a record from
   * before this dispatcher started, whose feed time is not known.
   */
  private feedTimeSeen<T>(
    seen: Map<string, { position: number; at: number | T }>,
    id: string,
    position: number,
    now: number,
    beforeStart: T,
  ): number | T {
    let first = seen.get(id);
    if (first?.position !== position) {
      first = { position, at: position <= this.headAtStart ? beforeStart : now };
      seen.set(id, first);
    }
    return first.at;
  }

  /** Digest passes run to their end (each reads the subscriptions and the feed clock once). */
  get digestPasses(): number {
    return this.digestPassCount;
  }

  /** Digest periods passed unsent before the digests this dispatcher fired, where that is known. */
  get digestPeriodsSkipped(): number {
    return this.digestPeriodsSkippedCount;
  }

  /** Subscriptions the digest bookkeeping holds an entry for: first seen (replay clocks), fired. */
  get digestsTracked(): { seen: number; fired: number } {
    return { seen: this.firstSeen.size, fired: this.digestsFired.size };
  }
}

/**
 * The period of the subscription's latest digest delivery the log remembers; -Infinity when it
 * remembers none and keeps every delivery the subscription had (none, or its oldest kept is its
 * `seq` 1), undefined when older ones may have been dropped.
 */
function lastDigestOf(log: DeliveryLogState, subscriptionId: string): number | undefined {
  const ids = log.bySub[subscriptionId] ?? [];
  for (let i = ids.length - 1; i >= 0; i--) {
    const record = findDelivery(log, ids[i]!);
    const period = record?.event === 'scan_digest' ? digestPeriodOf(subscriptionId, record.eventId) : null;
    if (period !== null) return period;
  }
  const oldest = ids.length === 0 ? undefined : findDelivery(log, ids[0]!);
  return ids.length === 0 || oldest?.seq === 1 ? Number.NEGATIVE_INFINITY : undefined;
}

/**
 * When a pending delivery's last attempt makes it due again: a retry, or a stale attempt; null for
 * never. A claimed attempt is stale once it went `stuckAfterMs` without an outcome from its claim,
 * which is made at its turn or a bounded few requests before it (the worker's `preclaimRounds`, which
 * the stuck time has room for): waiting in an endpoint's queue does not count.
 * A queued attempt still waiting `stuckAfterMs` after it was queued may have lost its dispatcher:
 * it is queued here too, and whichever dispatcher's turn comes first claims and sends it.
 */
function dueTime(last: AttemptRecord, stuckAfterMs: number): number | null {
  if (last.outcome === 'failed') return last.nextAttemptAt === null ? null : Date.parse(last.nextAttemptAt);
  if (last.outcome === 'pending') return Date.parse(last.claimedAt ?? last.attemptedAt) + stuckAfterMs;
  return null;
}

/**
 * A subscription that filters an event at `position` by a venue's top N markets (its ranking must
 * be ready): the filters matching reads for it (filtersAt), not every earlier edit's, so a top:N
 * edited away loads no ranking for the events after the edit.
 */
function ranksTopN(s: SubscriptionRecord, position: number): boolean {
  return s.status === 'active' && largestTopN(filtersAt(s, position).assets) !== null;
}

/** The fields of an event that matching reads, and no more (not a copy of the whole verdict). */
function candidate(
  event: Candidate['event'],
  d: {
    coin: string;
    timeframe: Candidate['timeframe'];
    exchange: Candidate['exchange'];
    candleCloseTime: number;
  },
  confidence: Candidate['confidence'],
  position: number,
): Candidate {
  const { coin, timeframe, exchange, candleCloseTime } = d;
  return { event, coin, timeframe, exchange, confidence, position, candleCloseTime };
}
