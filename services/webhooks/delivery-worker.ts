import type { Logger } from 'pino';
import type { Dispatcher } from 'undici';
import { type Aggregate, handleCommand } from '../../adapters/event-store/command.ts';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEventId } from '../../contracts/event-id.ts';
import type { EventData, EventType, NewDomainEvent, WebhookEventType } from '../../contracts/events.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { type BreakerState, CircuitBreakers } from './circuit-breaker.ts';
import {
  type AttemptResult,
  type DeliveryCommand,
  DeliveryConflictError,
  type DeliveryState,
  deliveryDecider,
  goneReason,
  initialDelivery,
  outcomeKind,
  persistentFailureReason,
  seriesAttemptOf,
  type Trigger,
} from './delivery-decider.ts';
import { deliveryStream, NO_STREAM, sequenceStream } from './delivery-log-fold.ts';
import { EndpointQueues } from './endpoint-queues.ts';
import type { DeliveryObserver } from './metrics.ts';
import { withSeq } from './payloads.ts';
import { readSequenced } from './recovery.ts';
import type { RetryPolicy } from './retry-policy.ts';
import type { SecretBox } from './secret-box.ts';
import { type SendResult, sendSigned } from './sender.ts';
import { disableSubscription } from './subscription-commands.ts';
import { findSubscription, SUBSCRIPTION_DISABLED, type SubscriptionRecord } from './subscription-fold.ts';
import type { WebhookState } from './webhook-projection.ts';

export interface DeliveryJob {
  deliveryId: string;
  subscription: SubscriptionRecord;
  eventId: string;
  event: WebhookEventType;
  body: string;
  attempt: number;
  /** The delivery's per-subscription sequence number (null for unsequenced old deliveries). */
  seq: number | null;
  /** Position of this attempt in its run through the retry schedule (1 = first). */
  seriesAttempt: number;
  /** What started the attempt (its claim at the turn says the same). */
  trigger: Trigger;
  /**
   * Revision of the delivery stream after the claim (outcomes append against it), or, for an
   * attempt still queued, the revision its claim at the turn, or its outcome sent under its queue
   * lease, expects.
   */
  revision: number;
  /**
   * Claimed: sent when its turn comes. Not claimed: queued, and at its turn sent under its queue
   * lease (`leaseUntil`) or else claimed first, unless taken over meanwhile.
   */
  claimed: boolean;
  /**
   * Queued by this process: no other dispatcher takes the attempt over before this time (its
   * queue time plus the stuck time), so while its request and outcome fit before it, it is sent at
   * its turn without a claim (see `leaseHolds`). Absent for claimed attempts and for queued ones
   * taken over from another dispatcher (their lease ran out: that is why they were taken over).
   */
  leaseUntil?: number;
  /**
   * The endpoint whose slot it holds and runs in (taken when it was claimed: its turn was then);
   * null for none. Named because its subscription's url may move meanwhile (the projection's record
   * changes in place): the slot is used and given back where it was taken.
   */
  slot: string | null;
  /** When it entered this process's queue: the attempt's queue time runs from here to its send. */
  queuedAt: number;
  /**
   * When this attempt was due by the retry schedule (a retry: its recorded next_attempt_at; a
   * first attempt: its claim). The next attempt's delay counts from here.
   */
  dueAt: number;
}

/** A new attempt's place as `DeliveryWorker.admit` decided it. */
interface Admission {
  endpoint: string;
  /** When it entered this process's queue (read before its append). */
  queuedAt: number;
  /** It took a free slot of its endpoint. */
  slot: boolean;
  /** Claimed now: sent in its slot, or held back by an open breaker. Otherwise queued. */
  claimNow: boolean;
}

/** What a job says of its attempt beyond its admission and its stream's revision. */
type JobAttempt = Pick<
  DeliveryJob,
  | 'deliveryId'
  | 'subscription'
  | 'eventId'
  | 'event'
  | 'body'
  | 'attempt'
  | 'seq'
  | 'seriesAttempt'
  | 'trigger'
> & { dueAt?: number };

type Outcome = AttemptResult;

/**
 * The error of an attempt held because this dispatcher's WEBHOOK_MASTER_KEY does not open the
 * subscription's secret: an operator's mistake, so it is no failure of the endpoint.
 */
export const SECRET_UNREADABLE =
  'held: the dispatcher cannot open the subscription secret with its master key; sent once it can';

/** An attempt held back (an open breaker, a disabled subscription): never sent, recorded as held. */
function held(reason: string): Outcome {
  return { ...failure(reason), held: true };
}

/** A request that got no complete answer in time (the endpoint may hold it open forever). */
export function isTimeout(result: SendResult): boolean {
  return result.status === null && result.error !== null && result.error.startsWith('timeout');
}

/**
 * An event built from values this worker already holds typed. `newEvent` would validate it
 * with zod again; the sequence append is idempotent and needs no decision.
 */
function typedEvent<T extends EventType>(
  type: T,
  data: NewDomainEvent<T>['data'],
  id: string,
): NewDomainEvent<T> {
  return { type, data, id };
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
  /**
   * Requests in flight at one origin over every API key's endpoint there; each key's share of it is
   * reserved (see EndpointQueues). Unbounded when not given.
   */
  originConcurrency?: number;
  endpointQueueLimit: number;
  /**
   * Bytes of bodies that deliveries past their endpoint's `endpointQueueLimit` may keep, over
   * every endpoint together, counted at two per character (see `enqueue`); 0: each of them waits
   * without its bytes.
   */
  queueBytesLimit: number;
  /** Timeouts in a row that open an endpoint's circuit breaker. */
  breakerTimeouts: number;
  /**
   * When another dispatcher takes over an attempt claimed or queued without an outcome; with it
   * long enough, a waiting attempt is claimed while the requests ahead of it run
   * (`preclaimRounds`), or sent at its turn with no claim at all (`leaseHolds`). Every replica must
   * run with the same value: a shorter one elsewhere would take over attempts still under lease here.
   */
  stuckAfterMs?: number;
}

/** The expected revision of a delivery stream that does not exist yet (`NO_STREAM`) is null. */
function streamRevision(revision: number): number | null {
  return revision === NO_STREAM ? null : revision;
}

/** Room left for the store's own delays when a claim is made ahead of its turn. */
const PRECLAIM_MARGIN_MS = 1_000;
/** Rounds of an endpoint's slots claimed ahead, at most: a claim waits longer the further ahead. */
const MAX_PRECLAIM_ROUNDS = 4;

/**
 * Whether a queued attempt may be sent at `sendAt` without a claim: its request (at most
 * `timeoutMs`) and its outcome's append end before its queue lease does, i.e. before any other
 * dispatcher could find it stuck and take it over. The queue event then serves as the claim it
 * replaces, with the same time bound a claim made ahead of its turn relies on (`preclaimRounds`):
 * in a flood it saves one flushed append of the four a delivery made (sequence, queue, claim,
 * outcome).
 */
export function leaseHolds(
  job: Pick<DeliveryJob, 'leaseUntil'>,
  sendAt: number,
  settings: Pick<WorkerSettings, 'timeoutMs'>,
): boolean {
  return job.leaseUntil !== undefined && sendAt + settings.timeoutMs + PRECLAIM_MARGIN_MS <= job.leaseUntil;
}

/**
 * How many rounds of an endpoint's slots (`endpointConcurrency` waiting attempts each, from the
 * head of its queue) are claimed before their turn, while the requests ahead of them run: a claim
 * is a flushed append, and made only at the turn every slot waited for one between its requests.
 * An attempt claimed k rounds ahead is sent within k requests' time (each running request frees
 * its slot within `timeoutMs`, and fewer attempts than the slots are ahead of it per round), so
 * it goes without an outcome for at most k + 1 of them: only as many rounds as the stuck time has
 * room for, else another dispatcher could take a claimed attempt over before it is sent. 0: each
 * waiting attempt is claimed at its turn.
 */
export function preclaimRounds(settings: Pick<WorkerSettings, 'stuckAfterMs' | 'timeoutMs'>): number {
  if (settings.stuckAfterMs === undefined) return 0;
  const rounds = Math.floor((settings.stuckAfterMs - PRECLAIM_MARGIN_MS) / settings.timeoutMs) - 1;
  return Math.max(0, Math.min(MAX_PRECLAIM_ROUNDS, rounds));
}

/**
 * One attempt waiting for its turn in its endpoint's queue (the queue's task): what `enqueue`
 * decided for it, in one object whose methods run it, rather than the three closures and an async
 * function made per delivery before. It holds the job as it waits (`waiting`, without its bytes
 * when parked), never the one submitted, so a parked job's bytes are not kept alive.
 */
class QueuedAttempt {
  private turn: Promise<DeliveryJob | null> | null = null;

  constructor(
    private readonly worker: DeliveryWorker,
    /** The endpoint whose queue it waits in (its subscription's when queued). */
    readonly endpoint: string,
    readonly waiting: DeliveryJob,
    /** Bytes of its body counted in the worker's overflow until its turn (0: none). */
    readonly keptBytes: number,
    /** It waits without its bytes: they are read back from the log at its turn. */
    readonly parked: boolean,
    readonly resolve: (result: SendResult) => void,
    readonly reject: (err: unknown) => void,
  ) {}

  run(): Promise<void> {
    return this.worker.runQueued(this);
  }

  /**
   * Its claim at its turn, unless its queue lease covers the send (and the bytes of a parked job),
   * made once: at the turn, or earlier when the queue prepares it (see `preclaimRounds`), when the
   * lease must cover the latest time the turn can come (`aheadMs`).
   */
  take(aheadMs: number): Promise<DeliveryJob | null> {
    this.turn ??= this.worker.turnOf(this, aheadMs);
    return this.turn;
  }

  /** Claimed (before it was queued, ahead of its turn, or at it): it is sent from the queue it is in. */
  get taken(): boolean {
    return this.waiting.claimed || this.turn !== null;
  }

  /**
   * A failure is the run's to report when its turn comes (it awaits the same promise). Not for an
   * attempt whose subscription's url moved to another endpoint: claimed here, it would have to be
   * sent from this queue, in a slot of the old origin; unclaimed, it moves at its turn.
   */
  prepare(): void {
    if (this.worker.movedEndpoint(this) !== null) return;
    this.take(this.worker.prepareHorizonMs).catch(ignore);
  }
}

function ignore(): void {}

/**
 * The I/O around the delivery decider: claims attempts, sends them and records the outcome. A
 * claim is decided against the delivery stream as the caller read it and appended at that
 * revision, when the attempt's turn in its endpoint's queue comes or shortly before (see
 * `preclaimRounds`), so two dispatchers never run the same attempt and a long wait in a queue
 * never looks stuck. An attempt this process queued whose turn comes well inside the stuck time
 * needs no claim: its queue event holds it until then (`leaseHolds`). The outcome appends against
 * the claim's (or queue event's) revision, so a stale worker's late outcome never overwrites a
 * newer attempt.
 */
export class DeliveryWorker {
  private readonly queues: EndpointQueues;
  /** How long after it is prepared a waiting attempt's turn comes, at the latest (see `preclaimRounds`). */
  readonly prepareHorizonMs: number;
  readonly breakers: CircuitBreakers;
  /** Deliveries this process has queued or claimed and not finished. */
  readonly owned = new Set<string>();
  /** Deliveries whose next claim this process is making: a second one would only conflict. */
  private readonly claiming = new Set<string>();
  /** Opened secrets by subscription, with the sealed form they came from (a new one misses). */
  private readonly opened = new Map<string, { sealed: SubscriptionRecord['secret']; secret: string }>();
  /** Secrets that did not open with this process's master key, each reported once (see `openSecret`). */
  private readonly unopened = new Map<string, { sealed: SubscriptionRecord['secret']; error: Error }>();
  /**
   * Told the due time of each retry this process schedules, so the dispatcher wakes for it
   * instead of finding it on its next periodic scan (up to a tick late, 20-30 % of a short step).
   */
  onRetryScheduled: ((dueMs: number) => void) | null = null;
  /** Submitted jobs whose outcome is not recorded yet. */
  private readonly recording = new Set<Promise<SendResult>>();
  /** Bytes of the bodies kept by jobs waiting past their endpoint's queue limit (see `enqueue`). */
  private overflowBytes = 0;
  /** The log's head when this process began handling deliveries (`startedAt`); 0 before. */
  private headAtStart = 0;
  /** Stopping: jobs whose turn comes from here are let go unsent (see `abandon`). */
  private abandoned = false;
  private readonly logger: Logger;
  /** Keys with active subscriptions per origin, as last counted (see `keysAt`). */
  private keysIndex: { at: number; checkpoint: number; counts: Map<string, number> } | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      runner: ProjectionRunner<WebhookState>;
      secrets: SecretBox;
      agent: Dispatcher;
      settings: WorkerSettings;
      logger: Logger;
      observer?: DeliveryObserver;
    },
  ) {
    const rounds = preclaimRounds(deps.settings);
    this.queues = new EndpointQueues(
      deps.settings.endpointConcurrency,
      deps.settings.endpointConcurrency * rounds,
      {
        cap: deps.settings.originConcurrency ?? Number.POSITIVE_INFINITY,
        keysAt: (origin) => this.keysAt(origin),
      },
    );
    this.prepareHorizonMs = rounds * deps.settings.timeoutMs;
    const probeDelays = deps.settings.retry.schedule.filter((ms) => ms > 0);
    this.breakers = new CircuitBreakers(deps.settings.breakerTimeouts, probeDelays, deps.settings.timeoutMs);
    this.logger = deps.logger.child({ component: 'webhook-worker' });
  }

  /**
   * API keys with active subscriptions at an origin, from the projected subscriptions: read as
   * each endpoint's share of the origin's cap is worked out, so counted over every subscription at
   * most once a second, and only when the projection has moved.
   */
  private keysAt(origin: string): number {
    const now = Date.now();
    const { checkpoint } = this.deps.runner;
    if (
      this.keysIndex === null ||
      (now - this.keysIndex.at >= 1_000 && checkpoint !== this.keysIndex.checkpoint)
    ) {
      const keys = new Map<string, Set<string>>();
      for (const sub of Object.values(this.deps.runner.state.subscriptions.subs)) {
        if (sub.status !== 'active') continue;
        const at = EndpointQueues.originOf(sub.url);
        const set = keys.get(at) ?? new Set<string>();
        set.add(sub.keyId);
        keys.set(at, set);
      }
      this.keysIndex = { at: now, checkpoint, counts: new Map([...keys].map(([o, set]) => [o, set.size])) };
    }
    return this.keysIndex.counts.get(origin) ?? 0;
  }

  /**
   * Notes the log's head before the first delivery is handled: a sequence event at or before it
   * was appended before this process began, so an append of the same one that returns it is a
   * repeat (see `claimFirst`), whether or not the projection has folded that far yet.
   */
  async startedAt(): Promise<void> {
    this.headAtStart = await this.deps.store.headPosition();
  }

  /**
   * Runs `claim` unless this process is already claiming or running the delivery (then null):
   * the one place a delivery in flight is remembered.
   */
  async claimingAlone(
    deliveryId: string,
    claim: () => Promise<DeliveryJob | null>,
  ): Promise<DeliveryJob | null> {
    if (this.claiming.has(deliveryId) || this.owned.has(deliveryId)) return null;
    this.claiming.add(deliveryId);
    try {
      return await claim();
    } finally {
      this.claiming.delete(deliveryId);
    }
  }

  /**
   * For a delivery already recorded (a retry, a recovery, a resend, or a queued attempt taken
   * over; a new delivery's first attempt is `claimFirst`'s), appends the claim of an attempt whose
   * turn in its endpoint's queue is now (a free slot, taken here), or, when it has to wait, its
   * place in the queue (`DeliveryQueued`): then it is sent at its turn under that record's lease,
   * or claimed at its turn or a few rounds of slots before it (see `enqueue`). Either way the
   * attempt is this process's from here, and no other dispatcher queues it again unless it waits
   * past the stuck time; even then the one claim made at a turn decides who sends it. Returns null
   * when the delivery stream moved on (someone else claimed it).
   */
  async claim(input: {
    deliveryId: string;
    subscription: SubscriptionRecord;
    eventId: string;
    event: DeliveryJob['event'];
    attempt: number;
    seq?: number | null;
    seriesAttempt?: number;
    trigger: Trigger;
    body: string;
    /** The delivery stream's revision (`NO_STREAM` while its only record is its sequence event). */
    expected: number;
    /** The stream's state at `expected`, when the caller folded it (a projected record). */
    state?: DeliveryState;
    /** When a retry was due by the schedule; other attempts are due when claimed. */
    dueAt?: number;
    /**
     * `attempt` is already queued in the log (by a dispatcher that let it wait past the stuck
     * time): it is taken over, claimed at its turn here, not queued again.
     */
    queuedAttempt?: boolean;
  }): Promise<DeliveryJob | null> {
    const admission = this.admit(input.subscription);
    const { endpoint, slot, claimNow } = admission;
    const job = (revision: number, claimed: boolean, leased = false): DeliveryJob =>
      this.jobOf(
        {
          ...input,
          seq: input.seq ?? null,
          seriesAttempt: seriesAttemptOf(input.trigger, input.attempt, input.seriesAttempt),
        },
        admission,
        revision,
        claimed,
        leased,
      );
    if (input.queuedAttempt && !claimNow) {
      this.owned.add(input.deliveryId);
      return job(input.expected, false);
    }
    const known: Aggregate<DeliveryState> = {
      state: input.queuedAttempt
        ? { attempt: input.attempt, queued: true, recorded: false, outcome: null, nextAttemptAt: null }
        : // Unknown: taken as an outcome recorded with nothing scheduled (a recovery or a resend).
          (input.state ?? {
            attempt: input.attempt - 1,
            recorded: true,
            outcome: 'failed',
            nextAttemptAt: null,
          }),
      revision: streamRevision(input.expected),
    };
    try {
      const claimed = await handleCommand(
        this.deps.store,
        deliveryStream(input.deliveryId),
        deliveryDecider,
        {
          kind: claimNow ? 'claim' : 'queue',
          claimId: newEventId(),
          data: {
            deliveryId: input.deliveryId,
            subscriptionId: input.subscription.id,
            attempt: input.attempt,
            eventId: input.eventId,
            webhookEvent: input.event,
            url: input.subscription.url,
            trigger: input.trigger,
            ...(input.seq != null ? { seq: input.seq } : {}),
          },
        },
        // Built from the dispatcher's typed values: no second zod pass on the delivery path.
        { known, trusted: true },
      );
      this.owned.add(input.deliveryId);
      if (claimNow) this.deps.observer?.attempt(input.trigger);
      return job(claimed.revision!, claimNow, !claimNow);
    } catch (err) {
      if (slot) this.queues.release(endpoint);
      if (err instanceof WrongExpectedRevisionError || err instanceof DeliveryConflictError) return null;
      throw err;
    }
  }

  /**
   * The claim of a queued attempt at its turn (or up to `preclaimRounds` before it); null when the stream moved
   * on (another dispatcher took it over and claimed it first, or it was re-sent or recovered).
   */
  private async claimTurn(job: DeliveryJob): Promise<DeliveryJob | null> {
    try {
      const claimed = await handleCommand(
        this.deps.store,
        deliveryStream(job.deliveryId),
        deliveryDecider,
        {
          kind: 'claim',
          claimId: newEventId(),
          data: {
            deliveryId: job.deliveryId,
            subscriptionId: job.subscription.id,
            attempt: job.attempt,
            eventId: job.eventId,
            webhookEvent: job.event,
            url: job.subscription.url,
            trigger: job.trigger,
            ...(job.seq !== null ? { seq: job.seq } : {}),
          },
        },
        {
          known: {
            state: {
              attempt: job.attempt,
              queued: true,
              recorded: false,
              outcome: null,
              nextAttemptAt: null,
            },
            revision: streamRevision(job.revision),
          },
          trusted: true,
        },
      );
      this.deps.observer?.attempt(job.trigger);
      return { ...job, claimed: true, revision: claimed.revision! };
    } catch (err) {
      // Let go either way: on a store error the stale-attempt check queues it again later.
      this.owned.delete(job.deliveryId);
      if (err instanceof WrongExpectedRevisionError || err instanceof DeliveryConflictError) return null;
      throw err;
    }
  }

  /**
   * Claims or queues the first attempt of a new delivery in its sequence number's event: one
   * append (`DeliverySequenced` carrying `first`) instead of the number's and the attempt's, and
   * the delivery's own stream begins with what follows (its outcome, or its claim at its turn). The
   * number's event id derives from the delivery id, so appending it again (a redelivered bus
   * message, a digest fired by two dispatchers) writes nothing and returns the original, saying so
   * (`written: false`; on a store that does not say, the record read back names the claim that won,
   * `claimId`): the others get null, as a claim at 'no_stream' did when the attempt had a stream of
   * its own.
   */
  async claimFirst(
    input: Omit<
      Parameters<DeliveryWorker['claim']>[0],
      'attempt' | 'expected' | 'seq' | 'seriesAttempt' | 'state' | 'dueAt' | 'queuedAttempt'
    >,
  ): Promise<DeliveryJob | null> {
    // A fresh append lands past every position folded here and past the log's head when this
    // process started; the original of a repeated one may not.
    const known = Math.max(this.deps.runner.checkpoint, this.headAtStart);
    const admission = this.admit(input.subscription);
    const { endpoint, slot, claimNow } = admission;
    const claimId = newEventId();
    // The attempt as the decider records it, with the sequence event's own fields: one object
    // rather than the decided data spread into a copy.
    const first: NonNullable<EventData<'DeliverySequenced'>['first']> = {
      deliveryId: input.deliveryId,
      subscriptionId: input.subscription.id,
      attempt: 1,
      eventId: input.eventId,
      webhookEvent: input.event,
      url: input.subscription.url,
      trigger: input.trigger,
      body: input.body,
      claimId,
    };
    if (!claimNow) first.queued = true;
    // The decider's rules for a first attempt (its trigger) still decide: it throws what they refuse.
    deliveryDecider.decide({ kind: claimNow ? 'claim' : 'queue', claimId, data: first }, initialDelivery());
    const stream = sequenceStream(input.subscription.id);
    let seq: number;
    try {
      // Flushed, not only committed: a number lost in a server crash would be handed to another
      // delivery, and the receiver would see it twice and no gap.
      const { nextRevision, position, written } = await this.deps.store.append(stream, [
        typedEvent(
          'DeliverySequenced',
          { subscriptionId: input.subscription.id, deliveryId: input.deliveryId, first },
          deterministicId('webhook-seq', input.deliveryId),
        ),
      ]);
      seq = nextRevision + 1;
      // Recorded before (by this event or, in an older log, by a claim of its own), the append
      // wrote nothing and returned the original. Even a bus message's first delivery may be such
      // a repeat: a handling stalled past the ack wait runs beside its redelivery (here or in
      // another dispatcher), and a relay can publish an event twice outside the bus's dedupe
      // window. A store that says whether it wrote (`written`) has told them apart; with one that
      // cannot (PostgreSQL), a repeat sits at a position already known here, or else the record
      // read back names another claim (10-19 us per delivery on LMDB, when it read it).
      const repeated =
        written !== undefined
          ? !written
          : position <= known ||
            (
              (await readSequenced(this.deps.store, input.subscription.id, seq))?.data as
                | EventData<'DeliverySequenced'>
                | undefined
            )?.first?.claimId !== claimId;
      if (repeated) {
        if (slot) this.queues.release(endpoint);
        return null;
      }
    } catch (err) {
      if (slot) this.queues.release(endpoint);
      throw err;
    }
    this.owned.add(input.deliveryId);
    if (claimNow) this.deps.observer?.attempt(input.trigger);
    // Nothing in its own stream yet: its claim at the turn, or its outcome, is the stream's first event.
    return this.jobOf(
      {
        deliveryId: input.deliveryId,
        subscription: input.subscription,
        eventId: input.eventId,
        event: input.event,
        body: withSeq(input.body, input.deliveryId, seq),
        attempt: 1,
        seq,
        seriesAttempt: 1,
        trigger: input.trigger,
      },
      admission,
      NO_STREAM,
      claimNow,
      !claimNow,
    );
  }

  /**
   * Where a new attempt goes (for `claim` and `claimFirst` alike): an open breaker holds it back
   * without queueing it (claimed, and recorded held); a free endpoint slot, taken here, sends it
   * now (claimed); otherwise it is queued. A caller whose append fails releases the slot.
   */
  private admit(subscription: SubscriptionRecord): Admission {
    const endpoint = EndpointQueues.keyOf(subscription);
    const queuedAt = Date.now();
    const open = this.breakers.peek(endpoint, queuedAt) !== null;
    const slot = !open && this.queues.acquire(endpoint);
    return { endpoint, queuedAt, slot, claimNow: open || slot };
  }

  /**
   * The job of an attempt admitted at `admission`, its stream at `revision`. `leased`: this
   * process queued it, so its queue record holds it until the queue time plus the stuck time.
   */
  private jobOf(
    attempt: JobAttempt,
    admission: Admission,
    revision: number,
    claimed: boolean,
    leased: boolean,
  ): DeliveryJob {
    const { stuckAfterMs } = this.deps.settings;
    const job: DeliveryJob = {
      deliveryId: attempt.deliveryId,
      subscription: attempt.subscription,
      eventId: attempt.eventId,
      event: attempt.event,
      body: attempt.body,
      attempt: attempt.attempt,
      seq: attempt.seq,
      seriesAttempt: attempt.seriesAttempt,
      trigger: attempt.trigger,
      revision,
      claimed,
      slot: admission.slot ? admission.endpoint : null,
      queuedAt: admission.queuedAt,
      dueAt: attempt.dueAt ?? admission.queuedAt,
    };
    // The queue time is read before the append, so the log's is no earlier: the lease ends no
    // later than another dispatcher's stale check begins (clocks in step, as for `preclaimRounds`).
    if (leased && stuckAfterMs !== undefined) job.leaseUntil = admission.queuedAt + stuckAfterMs;
    return job;
  }

  /**
   * The delivery's sequence number for its subscription: appended once (its event id derives from
   * the delivery id, so a redelivered bus message gets the same number back, never a new one).
   */
  async sequence(subscriptionId: string, deliveryId: string): Promise<number> {
    const event = typedEvent(
      'DeliverySequenced',
      { subscriptionId, deliveryId },
      deterministicId('webhook-seq', deliveryId),
    );
    // Flushed, not only committed: a number lost in a server crash would be handed to another
    // delivery, and the receiver would see it twice and no gap.
    const { nextRevision } = await this.deps.store.append(sequenceStream(subscriptionId), [event]);
    return nextRevision + 1;
  }

  /**
   * The first attempt's body, which every later attempt re-sends: in the delivery's
   * `DeliverySequenced` (`first`), or, in logs written before it carried the first attempt, in the
   * delivery stream's first event.
   */
  async bodyOf(delivery: {
    deliveryId: string;
    subscriptionId: string;
    seq: number | null;
  }): Promise<string | null> {
    if (delivery.seq !== null) {
      const sequenced = await readSequenced(this.deps.store, delivery.subscriptionId, delivery.seq);
      const first = (sequenced?.data as EventData<'DeliverySequenced'> | undefined)?.first;
      if (first?.deliveryId === delivery.deliveryId && typeof first.body === 'string') return first.body;
    }
    const [first] = await this.deps.store.readStream(deliveryStream(delivery.deliveryId), { maxCount: 1 });
    const body = (first?.data as { body?: unknown } | undefined)?.body;
    return typeof body === 'string' ? body : null;
  }

  /**
   * Queues the job on its endpoint and resolves once its outcome is recorded. The endpoint's
   * slot is held for the request only: recording the outcome waits on the store, not on the
   * endpoint, so the endpoint's next request starts meanwhile. A full queue is backpressure, not
   * a failure: the job still waits its turn, in order. Beyond `endpointQueueLimit` waiting jobs it
   * keeps its bytes while those of every such job fit in `queueBytesLimit`, and waits without
   * them past that (the delivery is in the log; they are read back when its turn comes), so a
   * busy endpoint's backlog costs a bounded amount of memory and then its ids only.
   */
  submit(job: DeliveryJob): Promise<SendResult> {
    // No closure here refers to `job`: one that did (the promise's executor) would put it in the
    // context `forget` shares, and a job parked without its bytes would keep them alive until its
    // outcome (9 of 9 parked jobs still reachable after a forced GC, in a test of it).
    const task = this.started(job);
    this.recording.add(task);
    const forget = () => this.recording.delete(task);
    task.then(forget, forget);
    return task;
  }

  private started(job: DeliveryJob): Promise<SendResult> {
    return new Promise<SendResult>((resolve, reject) => this.start(job, resolve, reject));
  }

  private start(
    submitted: DeliveryJob,
    resolve: (r: SendResult) => void,
    reject: (err: unknown) => void,
  ): void {
    let job = submitted;
    // The request goes to the url the subscription has now, so that endpoint's breaker decides,
    // even for a job holding a slot of the origin it was claimed at (a PATCH folded meanwhile): the
    // old origin's open breaker is no reason to hold it, and the slot is only given back there.
    const current =
      findSubscription(this.deps.runner.state.subscriptions, job.subscription.id) ?? job.subscription;
    const target = EndpointQueues.keyOf(current);
    const endpoint = job.slot ?? target;
    const open = this.breakers.peek(target, Date.now());
    // Claimed without a slot: its breaker was open when it was claimed. It is never queued
    // claimed (a claim waiting in the queue would pass for a stuck one): it runs now or is held.
    if (job.claimed && !job.slot && !open && this.queues.acquire(endpoint)) job = { ...job, slot: endpoint };
    if (job.claimed && (open || !job.slot)) {
      // Not queued: it would only wait for the breaker to let a probe through.
      if (job.slot) this.queues.release(endpoint);
      const skipped = held(open?.reason ?? 'circuit open');
      this.recordOutcome(job, skipped, open?.until ?? Date.now()).then(() => resolve(skipped), reject);
      return;
    }
    this.enqueue(endpoint, job, resolve, reject);
  }

  /**
   * Queues the request of `job` on its endpoint. Past the endpoint's limit the job keeps its body
   * while the bytes so kept over every endpoint stay within `queueBytesLimit` (given back when its
   * turn starts); otherwise the queued task holds the job without its body (nothing in it refers
   * to the original), so the bytes are not kept alive, and they are read back from the log at its
   * turn. In a flood of one endpoint (8,000 deliveries of ~700 characters, up to 6,992 of them
   * past the limit: at most 9.8 MB counted) reading them back made the dispatcher's CPU per
   * delivery 0.84 ms against 0.71 ms with them kept (bench/README.md as of 0b068c1). One endpoint's backlog may take
   * the whole budget; the others' then wait without their bytes, as all did before.
   */
  private enqueue(
    endpoint: string,
    queued: DeliveryJob,
    resolve: (result: SendResult) => void,
    reject: (err: unknown) => void,
  ): void {
    const overLimit = !queued.slot && this.queues.waiting(endpoint) >= this.deps.settings.endpointQueueLimit;
    // UTF-16 code units, two bytes each: what V8 holds at most for the string.
    const bodyBytes = overLimit ? queued.body.length * 2 : 0;
    const kept = overLimit && this.overflowBytes + bodyBytes <= this.deps.settings.queueBytesLimit;
    if (kept) this.overflowBytes += bodyBytes;
    const parked = overLimit && !kept;
    const waiting = parked ? { ...queued, body: '' } : queued;
    const attempt = new QueuedAttempt(this, endpoint, waiting, kept ? bodyBytes : 0, parked, resolve, reject);
    if (queued.slot) this.queues.runIn(endpoint, attempt);
    else {
      this.queues.push(endpoint, attempt);
      this.noteQueued(queued.subscription.id, endpoint);
    }
    if (this.abandoned) this.queues.flush();
  }

  /**
   * A request outside the delivery log (the api role's test send), run in a slot of the
   * subscription's endpoint, as its deliveries are: within the key's slots and its share of the
   * origin's cap, so another key's hung requests on the same host never hold it.
   */
  sendOutside(subscription: SubscriptionRecord, send: () => Promise<SendResult>): Promise<SendResult> {
    return new Promise((resolve, reject) => {
      this.queues.push(EndpointQueues.keyOf(subscription), { run: () => send().then(resolve, reject) });
    });
  }

  /** A queued attempt's claim at its turn (see QueuedAttempt.take, which asks for it once). */
  async turnOf(queued: QueuedAttempt, aheadMs: number): Promise<DeliveryJob | null> {
    const { waiting } = queued;
    // From here the body is the turn's (bounded by the slots and the rounds prepared ahead).
    this.overflowBytes -= queued.keptBytes;
    // Stopping: a queued attempt is not claimed only to be let go.
    if (this.abandoned && !waiting.claimed) return null;
    const leased = !waiting.claimed && leaseHolds(waiting, Date.now() + aheadMs, this.deps.settings);
    if (leased) this.deps.observer?.attempt(waiting.trigger);
    const ready = waiting.claimed || leased ? waiting : await this.claimTurn(waiting);
    // Stopping, a parked job's bytes are not read back: nothing will send them.
    return ready && queued.parked && !this.abandoned ? await this.unpark(ready) : ready;
  }

  /**
   * The endpoint a waiting attempt's subscription is at now, when its url moved (a PATCH) off the
   * endpoint whose queue the attempt waits in; null when it did not.
   */
  movedEndpoint(queued: QueuedAttempt): string | null {
    const current = findSubscription(this.deps.runner.state.subscriptions, queued.waiting.subscription.id);
    if (!current) return null;
    const endpoint = EndpointQueues.keyOf(current);
    return endpoint === queued.endpoint ? null : endpoint;
  }

  /**
   * A waiting attempt whose subscription's url moved (a PATCH) to another endpoint, as the same
   * attempt waiting there; null for one that stays (not moved, or claimed already: sent from here).
   * It is sent to the new origin, so it waits for and takes that endpoint's slots (its concurrency,
   * its share of the origin's cap), not the old one's, whose hung or slow requests are no longer
   * its business.
   */
  private relocated(task: unknown): { endpoint: string; attempt: QueuedAttempt } | null {
    if (!(task instanceof QueuedAttempt) || task.taken || this.abandoned) return null;
    const endpoint = this.movedEndpoint(task);
    if (endpoint === null) return null;
    const current = findSubscription(this.deps.runner.state.subscriptions, task.waiting.subscription.id)!;
    const { waiting, keptBytes, parked, resolve, reject } = task;
    const job = { ...waiting, subscription: current };
    return { endpoint, attempt: new QueuedAttempt(this, endpoint, job, keptBytes, parked, resolve, reject) };
  }

  /**
   * The endpoints each subscription's attempts were queued at here (dropped by `followMoves` once
   * none waits there), and the projection position `followMoves` last looked at.
   */
  private readonly queuedOn = new Map<string, Set<string>>();
  private movesCheckpoint = -1;

  private noteQueued(subscriptionId: string, endpoint: string): void {
    const at = this.queuedOn.get(subscriptionId);
    if (at) at.add(endpoint);
    else this.queuedOn.set(subscriptionId, new Set([endpoint]));
  }

  /**
   * Moves the attempts waiting in an endpoint's queue whose subscription's url a PATCH moved to
   * another endpoint into that one's queue, at once rather than at their turn (which a hung old
   * origin would hold back for up to `timeoutMs` per request ahead of them). Called by the
   * dispatcher's scan; looks only when the projection moved, and only at subscriptions with
   * attempts queued here.
   */
  followMoves(): void {
    const { checkpoint, state } = this.deps.runner;
    if (checkpoint === this.movesCheckpoint) return;
    this.movesCheckpoint = checkpoint;
    for (const [id, at] of this.queuedOn) {
      const current = findSubscription(state.subscriptions, id);
      const endpoint = current ? EndpointQueues.keyOf(current) : null;
      for (const before of at) {
        if (endpoint !== null && before !== endpoint && this.queues.waiting(before) > 0) {
          this.queues.move(before, endpoint, (task) => {
            const moved = this.relocated(task);
            return moved?.endpoint === endpoint ? moved.attempt : null;
          });
          at.add(endpoint);
        }
        if (this.queues.waiting(before) === 0) at.delete(before);
      }
      if (at.size === 0) this.queuedOn.delete(id);
    }
  }

  /** A queued attempt's turn: its request, then its outcome recorded (see `enqueue`). */
  async runQueued(queued: QueuedAttempt): Promise<void> {
    const { waiting, resolve, reject } = queued;
    // Its url moved while it waited and `followMoves` has not moved it yet: its turn here used no request.
    const moved = this.relocated(queued);
    if (moved) {
      this.queues.push(moved.endpoint, moved.attempt);
      this.noteQueued(waiting.subscription.id, moved.endpoint);
      return;
    }
    let job: DeliveryJob | null;
    let sent: { result: Outcome; record: boolean; notBefore?: number };
    try {
      job = await queued.take(0);
      if (this.abandoned) {
        // Stopping: not sent. Claimed (at its turn, ahead of it, or when submitted), it is
        // recorded held; otherwise its queue record stands (see `letGo`).
        this.letGo(waiting, job?.claimed ? job : null).then(resolve, reject);
        return;
      }
      if (!job) {
        resolve(failure('superseded: another dispatcher claimed this attempt first'));
        return;
      }
      sent = await this.send(job);
    } catch (err) {
      reject(err);
      return;
    }
    const done = job;
    // Not awaited: the slot is released as soon as the response is in.
    (sent.record ? this.recordOutcome(done, sent.result, sent.notBefore) : Promise.resolve()).then(
      () => resolve(sent.result),
      reject,
    );
  }

  /**
   * Stops sending: every job waiting for its turn, and any submitted later, is let go unsent
   * (`letGo`) at once, rather than sent when a slot frees (after the dispatcher's drain the HTTP
   * client is closed, and each such send was recorded as a failed attempt of a healthy endpoint,
   * scheduling a retry and starting its disable clock). Requests already sent run to their end.
   */
  abandon(): void {
    this.abandoned = true;
    this.queues.flush();
  }

  /**
   * A job let go by a stopping dispatcher. Queued, it is left to its queue record: another
   * dispatcher takes it over once that record's lease ends, as after a crash. Claimed ahead of its
   * turn, it is recorded held and due now (unnumbered, using up no retry: nothing was sent), so
   * the next dispatcher sends it at once, as the attempt it is.
   */
  private async letGo(job: DeliveryJob, claimed: DeliveryJob | null): Promise<SendResult> {
    const result = held('not sent: the dispatcher stopped');
    if (claimed) await this.recordOutcome(claimed, result, Date.now());
    else this.owned.delete(job.deliveryId);
    return result;
  }

  /**
   * A job that waited without its bytes, with them again. When they cannot be read, the job is
   * let go (no longer owned) and the stale-attempt check sends it later, as after a crash.
   */
  private async unpark(job: DeliveryJob): Promise<DeliveryJob> {
    let stored: string | null;
    try {
      stored = await this.bodyOf({
        deliveryId: job.deliveryId,
        subscriptionId: job.subscription.id,
        seq: job.seq,
      });
    } catch (err) {
      this.owned.delete(job.deliveryId);
      throw err;
    }
    if (stored === null) {
      this.owned.delete(job.deliveryId);
      throw new Error(`delivery ${job.deliveryId} has no stored body`);
    }
    return { ...job, body: job.seq === null ? stored : withSeq(stored, job.deliveryId, job.seq) };
  }

  /** Deliveries queued or sending, by the breaker state of their endpoint. */
  queueDepth(): Record<BreakerState, number> {
    const depth: Record<BreakerState, number> = { closed: 0, open: 0, half_open: 0 };
    for (const [endpoint, n] of this.queues.depths()) depth[this.breakers.state(endpoint)] += n;
    return depth;
  }

  /** Bytes of the bodies kept by jobs waiting past their endpoint's queue limit (see `enqueue`). */
  get keptBytes(): number {
    return this.overflowBytes;
  }

  /** Resolves when no job is queued, sending, or waiting for its outcome to be recorded. */
  async drained(): Promise<void> {
    while (this.recording.size > 0) await Promise.allSettled([...this.recording]);
    await this.queues.drained();
  }

  /** The request of one attempt; `record` is false when there is nothing left to record. */
  private async send(job: DeliveryJob): Promise<{ result: Outcome; record: boolean; notBefore?: number }> {
    const current = findSubscription(this.deps.runner.state.subscriptions, job.subscription.id);
    if (!current) {
      this.owned.delete(job.deliveryId);
      return { result: failure('subscription deleted'), record: false };
    }
    let secret: { current: string; previous: string | null };
    try {
      secret = this.openSecrets(current, Date.now());
    } catch {
      // The operator's master key, not the endpoint: held (unnumbered, no retry used, not counted
      // toward a disable) and due at once, for a dispatcher that can open it. This one's retry scan
      // passes it over (`canOpen`) until it restarts with the right key; its /readyz says so.
      return { result: held(SECRET_UNREADABLE), record: true, notBefore: Date.now() };
    }
    // Not sent: held, so the log numbers it with no request (`attempt` null) and the disable clock
    // ignores it; never retried on the schedule (no next attempt): a re-enable sends it (the
    // dispatcher's retry scan finds it once the subscription is active again).
    if (current.status !== 'active') return { result: held(SUBSCRIPTION_DISABLED), record: true };
    const endpoint = EndpointQueues.keyOf(current);
    const decision = this.breakers.decide(endpoint, Date.now());
    // Opened while this one waited in the queue.
    if (decision.kind === 'open') {
      return { result: held(decision.reason), record: true, notBefore: decision.until };
    }
    const sentAt = Date.now();
    const result: Outcome = await sendSigned(this.deps.agent, {
      url: current.url,
      secret: secret.current,
      previousSecret: secret.previous,
      event: job.event,
      deliveryId: job.deliveryId,
      seq: job.seq,
      eventVersion: current.eventVersion ?? 1,
      body: job.body,
      timeoutMs: this.deps.settings.timeoutMs,
    });
    result.sentAt = sentAt;
    this.breakers.record(endpoint, isTimeout(result), Date.now());
    if (decision.kind === 'probe' || isTimeout(result)) {
      this.logger.info(
        {
          endpoint: EndpointQueues.originOf(current.url),
          keyId: current.keyId,
          probe: decision.kind === 'probe',
          breaker: this.breakers.state(endpoint),
        },
        isTimeout(result) ? 'endpoint timed out' : 'breaker probe answered',
      );
    }
    return { result, record: true };
  }

  /** The secret, and during a rotation's overlap the previous one, which signs beside it. */
  openSecrets(sub: SubscriptionRecord, now: number): { current: string; previous: string | null } {
    const inOverlap =
      sub.previousSecret && sub.previousSecretValidUntil && now < Date.parse(sub.previousSecretValidUntil);
    const current = this.openSecret(sub, sub.secret);
    if (!inOverlap) return { current, previous: null };
    try {
      return { current, previous: this.openSecret(sub, sub.previousSecret!, 'previous') };
    } catch {
      // Sealed under an earlier master key (a rotation made to move off it): the subscriber took
      // the new secret from the rotation's answer, so the current one alone signs (logged once).
      return { current, previous: null };
    }
  }

  /** Whether this process's master key opens the subscription's secrets (it can sign for it). */
  canOpen(sub: SubscriptionRecord, now = Date.now()): boolean {
    try {
      this.openSecrets(sub, now);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * The dispatcher role's readiness: not ready while an active subscription's secret does not open
   * with WEBHOOK_MASTER_KEY (a key other than the one it was sealed with), since its deliveries are
   * held until the process restarts with the right key.
   */
  secretsCheck(): { ok: boolean; detail?: string; unreadable?: number } {
    const now = Date.now();
    const subs = Object.values(this.deps.runner.state.subscriptions.subs).filter(
      (s) => s.status === 'active',
    );
    const unreadable = subs.filter((s) => !this.canOpen(s, now));
    if (unreadable.length === 0) return { ok: true };
    const sealedWith = [...new Set(unreadable.map((s) => s.secret.keyVersion))].join(', ');
    return {
      ok: false,
      unreadable: unreadable.length,
      detail:
        `${unreadable.length} active webhook subscription(s) have secrets sealed with master key ${sealedWith}; ` +
        `the master keys here are ${this.deps.secrets.keyVersions.join(', ')} (WEBHOOK_MASTER_KEY, then ` +
        'WEBHOOK_MASTER_KEYS_PREVIOUS). Their deliveries are held, not failed: restart with the key they ' +
        'were sealed with in WEBHOOK_MASTER_KEY or WEBHOOK_MASTER_KEYS_PREVIOUS',
    };
  }

  /** Decrypting per delivery costs more than the signature; a subscription's secret rarely changes. */
  private openSecret(
    sub: SubscriptionRecord,
    sealed: SubscriptionRecord['secret'],
    which: 'current' | 'previous' = 'current',
  ): string {
    const cacheKey = which === 'current' ? sub.id : `${sub.id}:previous`;
    const cached = this.opened.get(cacheKey);
    if (cached?.sealed === sealed) return cached.secret;
    // Known not to open: the retry scan and /readyz ask for it often; it is logged once.
    const failed = this.unopened.get(cacheKey);
    if (failed?.sealed === sealed) throw failed.error;
    let secret: string;
    try {
      secret = this.deps.secrets.open(sealed, sub.id);
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      if (this.unopened.size >= 10_000) this.unopened.clear();
      this.unopened.set(cacheKey, { sealed, error });
      const fields = {
        err: error,
        subscriptionId: sub.id,
        secret: which,
        sealedWith: sealed.keyVersion,
        configured: this.deps.secrets.keyVersions,
      };
      // A previous secret that does not open holds nothing (openSecrets signs with the current one
      // alone), so it is said as what happens to it, and as a warning.
      if (which === 'previous') {
        this.logger.warn(
          fields,
          'previous webhook secret does not open with WEBHOOK_MASTER_KEY: it is left out of the ' +
            "signature until the rotation's overlap ends; the current secret is used alone",
        );
      } else {
        this.logger.error(
          fields,
          'webhook secret does not open with WEBHOOK_MASTER_KEY: its deliveries are held (not failed) ' +
            'until this process restarts with the key the api role sealed it with',
        );
      }
      throw error;
    }
    this.unopened.delete(cacheKey);
    if (this.opened.size >= 10_000) this.opened.clear();
    this.opened.set(cacheKey, { sealed, secret });
    return secret;
  }

  /** `notBefore`: the breaker's end of the open period; the next attempt is not due before it. */
  private async recordOutcome(job: DeliveryJob, result: Outcome, notBefore?: number): Promise<void> {
    const now = Date.now();
    this.deps.observer?.outcome(
      outcomeKind(result),
      result.sentAt === undefined ? null : result.latencyMs,
      result.sentAt === undefined ? null : Math.max(0, result.sentAt - job.queuedAt),
    );
    let position: number;
    let nextAttemptAt: string | null;
    // Written out with every field (undefined where absent) rather than spread together from
    // conditional parts: one object each, not one per part. The decider reads absent and undefined alike.
    const command: DeliveryCommand = {
      kind: 'record',
      deliveryId: job.deliveryId,
      subscriptionId: job.subscription.id,
      attempt: job.attempt,
      seq: job.seq !== null ? job.seq : undefined,
      seriesAttempt: job.seriesAttempt,
      result,
      claimedAt: job.queuedAt,
      dueAt: job.dueAt,
      fromQueue: job.claimed ? undefined : true,
      now,
      notBefore,
      retry: this.deps.settings.retry,
      jitterSample: Math.random(),
    };
    const state: DeliveryState = {
      attempt: job.attempt,
      queued: job.claimed ? undefined : true,
      recorded: false,
      outcome: null,
      nextAttemptAt: null,
    };
    try {
      ({
        position,
        state: { nextAttemptAt },
      } = (await handleCommand(this.deps.store, deliveryStream(job.deliveryId), deliveryDecider, command, {
        known: { state, revision: streamRevision(job.revision) },
        trusted: true,
      })) as { position: number; state: { nextAttemptAt: string | null } });
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
    if (nextAttemptAt !== null) this.onRetryScheduled?.(Date.parse(nextAttemptAt));
    // Held for the master key: nothing was sent, so nothing is said of the endpoint.
    if (result.ok || result.error === SECRET_UNREADABLE) return;
    // Both judgements read the projection's failed deliveries in a row: read once this attempt is
    // folded, so it counts. A 410's disable records them as its fold left them (the notice's
    // consecutive_failures), not with the deliveries beside it that failed after it.
    await this.deps.runner.waitFor(position, 5_000).catch(() => undefined);
    const sub = findSubscription(this.deps.runner.state.subscriptions, job.subscription.id);
    const gone = goneReason(result);
    if (gone) {
      await this.disable(job.subscription, gone, sub?.failedDeliveriesAtGone);
      return;
    }
    const cause = persistentFailureReason(sub, this.deps.settings, now);
    if (sub && cause) await this.disable(sub, cause.reason, cause.consecutiveFailures);
  }

  /** `consecutiveFailures`: what the disable records; the projection's count when not given. */
  async disable(sub: SubscriptionRecord, reason: string, consecutiveFailures?: number): Promise<void> {
    const current = findSubscription(this.deps.runner.state.subscriptions, sub.id) ?? sub;
    const disabled = await disableSubscription(this.deps.store, {
      keyId: sub.keyId,
      subscriptionId: sub.id,
      reason,
      consecutiveFailures: consecutiveFailures ?? current.failedDeliveries,
    });
    if (disabled) this.logger.warn({ subscriptionId: sub.id, reason }, 'webhook subscription disabled');
  }
}
