import { type Logger, pino } from 'pino';
import type { Bus } from '../../adapters/bus/port.ts';
import { DEFAULT_SUBJECT_PREFIX, eventSubject } from '../../adapters/bus/subjects.ts';
import type { EventStore, Subscription } from '../../adapters/event-store/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';

export interface RelayOptions {
  store: EventStore;
  bus: Bus;
  /** Where the relay keeps its checkpoint (as a projection with no state). */
  checkpoints: ProjectionStore;
  /** Checkpoint name; two relays with different names publish independently. */
  name?: string;
  subjectPrefix?: string;
  /** Publishes awaiting their ack at once; also the largest page checkpointed in one step. */
  maxInFlight?: number;
  retry?: { initialMs?: number; maxMs?: number };
  logger?: Logger;
  /**
   * Event types to publish; others are passed over (the checkpoint still moves past them). Null
   * or absent: every type. Publishing only what some consumer subscribes to spares the bus, and
   * this process, a publish per event nobody reads (delivery outcomes are most of the log).
   */
  types?: ReadonlySet<string> | null;
}

export interface RelayStats {
  checkpoint: number;
  published: number;
  duplicates: number;
  failures: number;
}

interface OutgoingEvent {
  position: number;
  id: string;
  subject: string;
  /** null: a type nobody consumes, passed over. */
  payload: Uint8Array | null;
}

const PASSED_OVER = Promise.resolve({ duplicate: false, sequence: 0 });

const CHECKPOINT_VERSION = 1;
const NOT_READY = Symbol('not ready');
const NEVER = new Promise<never>(() => {});
const encoder = new TextEncoder();

/** The bytes the relay publishes: the JSON of the recorded envelope. */
export function encodeEvent(event: RecordedEvent): Uint8Array {
  return encoder.encode(JSON.stringify(event));
}

/**
 * Follows the event store from its checkpoint and publishes every event to the bus, msgId = event
 * id. A page of events is published pipelined; the checkpoint moves only past events whose publish
 * was acknowledged, so a crash or a failed publish means a re-publish (dropped by the bus's msgId
 * window, or by idempotent consumers), never a gap.
 */
export class Relay {
  private readonly store: EventStore;
  private readonly bus: Bus;
  private readonly checkpoints: ProjectionStore;
  private readonly name: string;
  private readonly subjectPrefix: string;
  private readonly maxInFlight: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly logger: Logger;
  private readonly types: ReadonlySet<string> | null;
  private current = 0;
  private published = 0;
  private duplicates = 0;
  private failures = 0;
  private running = false;
  private loop: Promise<void> | null = null;
  private interrupt: (() => void) | null = null;
  private stopped: Promise<typeof NOT_READY> = new Promise(() => {});

  constructor(options: RelayOptions) {
    this.store = options.store;
    this.bus = options.bus;
    this.checkpoints = options.checkpoints;
    this.name = options.name ?? 'relay';
    this.subjectPrefix = options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 256);
    this.retryInitialMs = options.retry?.initialMs ?? 200;
    this.retryMaxMs = options.retry?.maxMs ?? 10_000;
    this.logger = (options.logger ?? pino({ name: 'relay' })).child({ component: 'relay', relay: this.name });
    this.types = options.types ?? null;
  }

  /** Global position of the last event whose publish was acknowledged and checkpointed. */
  get checkpoint(): number {
    return this.current;
  }

  get stats(): RelayStats {
    return {
      checkpoint: this.current,
      published: this.published,
      duplicates: this.duplicates,
      failures: this.failures,
    };
  }

  /** Events in the store not yet published (head position − checkpoint). */
  async lag(): Promise<number> {
    return Math.max(0, (await this.store.headPosition()) - this.current);
  }

  async start(): Promise<void> {
    if (this.running) return;
    const saved = await this.checkpoints.load<null>(this.name);
    this.current = saved?.checkpoint ?? 0;
    this.running = true;
    this.stopped = new Promise((resolve) => {
      this.interrupt = () => resolve(NOT_READY);
    });
    this.logger.info({ checkpoint: this.current }, 'relay started');
    this.loop = this.run();
  }

  /** Lets the page in flight finish and its checkpoint be saved, then stops. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.interrupt?.();
    await this.loop;
    this.logger.info({ checkpoint: this.current }, 'relay stopped');
  }

  private async run(): Promise<void> {
    let attempt = 0;
    while (this.running) {
      const subscription = this.store.subscribeToAll({ after: this.current });
      try {
        await this.pump(subscription, () => {
          attempt = 0;
        });
      } catch (err) {
        this.failures++;
        attempt++;
        this.logger.warn(
          { err, checkpoint: this.current, attempt },
          'relay page failed; retrying from checkpoint',
        );
      } finally {
        await subscription
          .close()
          .catch((err: unknown) => this.logger.warn({ err }, 'closing subscription failed'));
      }
      if (this.running && attempt > 0) await this.sleep(this.backoffMs(attempt));
    }
  }

  /**
   * Reads pages from the subscription and publishes them until stopped; throws on failure. While
   * one page's acks are awaited the next page is read and encoded, so store reads and JSON work
   * overlap the round trip; it is published only after the previous page is checkpointed, so at
   * most `maxInFlight` publishes are ever unacknowledged and checkpoints advance in order.
   */
  private async pump(subscription: Subscription, onProgress: () => void): Promise<void> {
    const events = subscription[Symbol.asyncIterator]();
    // A read that lost a race stays pending; it must be the next one consumed, or an event is lost.
    let pending: Promise<IteratorResult<RecordedEvent>> | null = null;
    const take = () => {
      pending ??= events.next();
      return pending;
    };
    let inFlight: Promise<void> | null = null;
    try {
      while (this.running) {
        // A failure of the page in flight must end the wait for more events.
        const failed = inFlight ? inFlight.then(() => NEVER) : NEVER;
        const first = await Promise.race([take(), this.stopped, failed]);
        if (first === NOT_READY) return;
        pending = null;
        if (first.done) return;
        const page = [this.prepare(first.value)];
        // Take whatever the subscription has ready in this turn of the event loop, up to the
        // limit; under load the page fills up while the previous page's acks are awaited.
        const turnEnded = new Promise<typeof NOT_READY>((resolve) => setImmediate(() => resolve(NOT_READY)));
        while (page.length < this.maxInFlight) {
          const next = await Promise.race([take(), turnEnded]);
          if (next === NOT_READY) break;
          pending = null;
          if (next.done) break;
          page.push(this.prepare(next.value));
        }
        if (inFlight) {
          const previous = inFlight;
          inFlight = null;
          await previous;
        }
        if (!this.running) return;
        inFlight = this.publishPage(page, onProgress);
        // Observed later by the await above or in finally; this keeps it from counting as unhandled.
        inFlight.catch(() => {});
      }
    } finally {
      // stop() and failures both wait for the page already sent, so its acks are checkpointed.
      if (inFlight) await inFlight;
    }
  }

  private prepare(event: RecordedEvent): OutgoingEvent {
    const wanted = this.types === null || this.types.has(event.type);
    return {
      position: event.position,
      id: event.id,
      subject: wanted ? eventSubject(event.type, this.subjectPrefix) : '',
      payload: wanted ? encodeEvent(event) : null,
    };
  }

  private async publishPage(page: OutgoingEvent[], onProgress: () => void): Promise<void> {
    const results = await Promise.allSettled(
      page.map((event) =>
        event.payload === null
          ? PASSED_OVER
          : this.bus.publish(event.subject, event.payload, { msgId: event.id }),
      ),
    );
    let acked = 0;
    let failure: unknown = null;
    for (const result of results) {
      if (result.status === 'rejected') {
        failure = result.reason;
        break;
      }
      acked++;
      if (result.value.duplicate) this.duplicates++;
    }
    if (acked > 0) {
      const checkpoint = page[acked - 1]!.position;
      await this.checkpoints.save<null>(this.name, { version: CHECKPOINT_VERSION, checkpoint, state: null });
      this.current = checkpoint;
      for (let i = 0; i < acked; i++) if (page[i]!.payload !== null) this.published++;
      onProgress();
    }
    if (failure !== null) throw failure;
  }

  private backoffMs(attempt: number): number {
    const base = Math.min(this.retryMaxMs, this.retryInitialMs * 2 ** (attempt - 1));
    return base / 2 + Math.random() * (base / 2);
  }

  private async sleep(ms: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([new Promise((resolve) => (timer = setTimeout(resolve, ms))), this.stopped]);
    clearTimeout(timer);
  }
}
