import { type Logger, pino } from 'pino';
import type { Bus } from '../../adapters/bus/port.ts';
import { DEFAULT_SUBJECT_PREFIX, eventSubject } from '../../adapters/bus/subjects.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import { eventsBehind } from '../../projections/lag.ts';
import { type FeedMember, feedOf } from '../../projections/log-feed.ts';

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
  /**
   * Events taken from the log and not yet published, at most (default 4,096; at least
   * maxInFlight): a bus that is away holds this much of the log in memory, no more.
   */
  maxQueued?: number;
  retry?: { initialMs?: number; maxMs?: number };
  logger?: Logger;
  /**
   * Event types to publish; others are passed over (the checkpoint still moves past them). Null
   * or absent: every type. Publishing only what some consumer subscribes to spares the bus, and
   * this process, a publish per event nobody reads (delivery outcomes are most of the log).
   */
  types?: ReadonlySet<string> | null;
  /**
   * A checkpoint that only passes over events (nothing published since the last save) is saved
   * at most this often (default 1,000 ms) or once this many events were passed over (default
   * 4,096), and on stop. Passing over events is most of what the relay does (delivery outcomes
   * and debits are most of the log), and saving after each page was a statement per page on the
   * shared store; a crash re-reads at most this stretch and publishes nothing from it.
   */
  skipSave?: { everyMs?: number; everyEvents?: number };
}

export interface RelayStats {
  checkpoint: number;
  published: number;
  duplicates: number;
  failures: number;
}

/** Queued events at which the relay stops taking pages (see `receive`). */
const DEFAULT_MAX_QUEUED = 4_096;

const NOT_READY = Symbol('not ready');
const CHECKPOINT_VERSION = 1;
const encoder = new TextEncoder();

/** The bytes the relay publishes: the JSON of the recorded envelope. */
export function encodeEvent(event: RecordedEvent): Uint8Array {
  return encoder.encode(JSON.stringify(event));
}

/**
 * Follows the event store from its checkpoint and publishes every event to the bus, msgId = event
 * id. It is a member of the store's one log feed (projections/log-feed.ts), so a process that also
 * runs projections reads and decodes each page once for all of them instead of once more for the
 * relay (most of the log is delivery outcomes nobody on the bus reads). The events it publishes
 * wait in a queue; a page of them is published pipelined, and the checkpoint moves only past
 * events whose publish was acknowledged (and the passed-over events before them), so a crash or a
 * failed publish means a re-publish (dropped by the bus's msgId window, or by idempotent
 * consumers), never a gap.
 */
export class Relay {
  private readonly store: EventStore;
  private readonly bus: Bus;
  private readonly checkpoints: ProjectionStore;
  private readonly name: string;
  private readonly subjectPrefix: string;
  private readonly maxInFlight: number;
  private readonly maxQueued: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly logger: Logger;
  private readonly types: ReadonlySet<string> | null;
  /** Every event up to here was acknowledged or passed over. */
  private current = 0;
  /** The checkpoint last saved (at most `current`): a restart resumes here. */
  private saved = 0;
  private savedAt = 0;
  /** Events taken since the last save (positions are no count: PostgreSQL's leave gaps). */
  private unsaved = 0;
  private readonly skipSaveMs: number;
  private readonly skipSaveEvents: number;
  /** Handed over by the feed: every event up to here is queued, published or passed over. */
  private received = 0;
  /** Events to publish, in log order; `queue[0]` is the oldest unpublished. */
  private queue: RecordedEvent[] = [];
  private published = 0;
  private duplicates = 0;
  private failures = 0;
  /** What the loop is doing, so a failure's log line names the side that failed. */
  private step: 'publish' | 'checkpoint' = 'publish';
  private running = false;
  /** Whether the feed hands this relay pages (not while the queue is full). */
  private fed = false;
  private loop: Promise<void> | null = null;
  private wakeUp: (() => void) | null = null;
  private stopped: Promise<typeof NOT_READY> = new Promise(() => {});
  private interrupt: (() => void) | null = null;
  /** The relay as the feed sees it: its checkpoint is what it has taken, not what is acknowledged. */
  private readonly member: FeedMember;

  constructor(options: RelayOptions) {
    this.store = options.store;
    this.bus = options.bus;
    this.checkpoints = options.checkpoints;
    this.name = options.name ?? 'relay';
    this.subjectPrefix = options.subjectPrefix ?? DEFAULT_SUBJECT_PREFIX;
    this.maxInFlight = Math.max(1, options.maxInFlight ?? 256);
    this.maxQueued = Math.max(this.maxInFlight, options.maxQueued ?? DEFAULT_MAX_QUEUED);
    this.retryInitialMs = options.retry?.initialMs ?? 200;
    this.retryMaxMs = options.retry?.maxMs ?? 10_000;
    this.logger = (options.logger ?? pino({ name: 'relay' })).child({ component: 'relay', relay: this.name });
    this.types = options.types ?? null;
    this.skipSaveMs = Math.max(0, options.skipSave?.everyMs ?? 1_000);
    this.skipSaveEvents = Math.max(1, options.skipSave?.everyEvents ?? 4_096);
    const relay = this;
    this.member = {
      get checkpoint() {
        return relay.received;
      },
      receive: (page) => this.receive(page),
    };
  }

  /**
   * Global position up to which every event was published (acknowledged) or passed over; the
   * saved checkpoint may trail it by passed-over events only (see `skipSave`).
   */
  get checkpoint(): number {
    return this.current;
  }

  /** The checkpoint as saved: where a restart would resume. */
  get savedCheckpoint(): number {
    return this.saved;
  }

  get stats(): RelayStats {
    return {
      checkpoint: this.current,
      published: this.published,
      duplicates: this.duplicates,
      failures: this.failures,
    };
  }

  /** Events in the store not yet published; on a store of byte positions, counted up to `cap` + 1. */
  async lag(cap = 10_000): Promise<number> {
    return eventsBehind(this.store, this.current, await this.store.headPosition(), cap);
  }

  async start(): Promise<void> {
    if (this.running) return;
    const saved = await this.checkpoints.load<null>(this.name);
    this.current = saved?.checkpoint ?? 0;
    this.saved = this.current;
    this.savedAt = Date.now();
    this.received = this.current;
    this.queue = [];
    this.running = true;
    this.stopped = new Promise((resolve) => {
      this.interrupt = () => resolve(NOT_READY);
    });
    this.logger.info({ checkpoint: this.current }, 'relay started');
    this.feed(true);
    this.loop = this.run();
  }

  /** Lets the page in flight finish and its checkpoint be saved, then stops. */
  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    this.interrupt?.();
    this.ring();
    await this.feed(false);
    await this.loop;
    this.queue = [];
    this.logger.info({ checkpoint: this.current }, 'relay stopped');
  }

  /** Joins or leaves the store's log feed. */
  private feed(on: boolean): Promise<void> {
    if (on === this.fed) return Promise.resolve();
    this.fed = on;
    const feed = feedOf(this.store, { logger: this.logger });
    if (on) {
      feed.join(this.member);
      return Promise.resolve();
    }
    return feed.leave(this.member);
  }

  /**
   * Takes the page's events past what it already took, synchronously (the feed's contract). Types
   * nobody consumes are passed over. A full queue (the bus away or slower than the log) makes the
   * relay leave the feed rather than hold the log in memory; it joins again, from where it left
   * off, once the queue has drained to half.
   */
  private receive(page: readonly RecordedEvent[]): void {
    if (!this.running || page.length === 0) return;
    const last = page[page.length - 1]!.position;
    if (last <= this.received) return;
    for (const event of page) {
      if (event.position <= this.received) continue;
      this.unsaved++;
      if (this.types === null || this.types.has(event.type)) this.queue.push(event);
    }
    this.received = last;
    if (this.queue.length >= this.maxQueued) void this.feed(false);
    this.ring();
  }

  private ring(): void {
    const wake = this.wakeUp;
    this.wakeUp = null;
    wake?.();
  }

  /** Publishes queued pages until stopped; a failed page is retried from its first unacknowledged event. */
  private async run(): Promise<void> {
    let attempt = 0;
    while (this.running) {
      if (this.queue.length === 0 && this.received === this.current) {
        const dueIn = this.saved < this.current ? this.skipSaveMs - (Date.now() - this.savedAt) : null;
        if (dueIn === null || dueIn > 0) {
          await this.idle(dueIn);
          continue;
        }
      }
      try {
        if (this.queue.length === 0 && this.received === this.current) {
          this.step = 'checkpoint';
          await this.save(this.current);
        } else await this.publishNext();
        attempt = 0;
      } catch (err) {
        this.failures++;
        attempt++;
        // Which side failed, in words: a bus that is away and a store that is away both end in a
        // bare "timeout" from their drivers, and an operator reading it must know which to look at.
        this.logger.warn(
          { err, checkpoint: this.current, attempt, bus: this.bus.kind },
          this.step === 'publish'
            ? 'relay: publishing to the bus failed; retrying from the checkpoint'
            : 'relay: saving the checkpoint to the projection store failed; retrying',
        );
        if (this.running) await this.sleep(this.backoffMs(attempt));
      }
      if (this.running && !this.fed && this.queue.length <= this.maxQueued / 2) void this.feed(true);
    }
    if (this.saved < this.current) {
      await this.save(this.current).catch((err: unknown) =>
        this.logger.warn(
          { err, checkpoint: this.saved },
          'relay checkpoint not saved at stop; a restart re-reads from the last one',
        ),
      );
    }
  }

  /** Waits for the feed (or stop), or at most `ms` when a passed-over checkpoint is due then. */
  private async idle(ms: number | null): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.wakeUp = resolve;
      if (ms !== null) timer = setTimeout(() => this.ring(), ms);
    });
    clearTimeout(timer);
  }

  private async save(checkpoint: number): Promise<void> {
    await this.checkpoints.save<null>(this.name, { version: CHECKPOINT_VERSION, checkpoint, state: null });
    this.saved = checkpoint;
    this.savedAt = Date.now();
    this.unsaved = 0;
  }

  /**
   * Publishes up to `maxInFlight` queued events at once and checkpoints the acknowledged prefix:
   * every event before the first unacknowledged one was published or passed over. What was not
   * acknowledged, and the rest of its page, stay queued and go out again (the bus drops the ones
   * that did get through by msgId).
   */
  private async publishNext(): Promise<void> {
    this.step = 'publish';
    const page = this.queue.slice(0, this.maxInFlight);
    const results = await Promise.allSettled(
      page.map((event) => {
        const subject = eventSubject(event.type, this.subjectPrefix);
        // An in-process bus takes the event itself: its consumer here needs no JSON of it.
        return this.bus.publishValue
          ? this.bus.publishValue(subject, event, encodeEvent, { msgId: event.id })
          : this.bus.publish(subject, encodeEvent(event), { msgId: event.id });
      }),
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
    // Taken now: the feed may queue more while the checkpoint is saved.
    const done = acked === page.length && this.queue.length === page.length;
    const checkpoint = done
      ? this.received
      : acked < page.length
        ? page[acked]!.position - 1
        : this.queue[page.length]!.position - 1;
    if (checkpoint > this.current) {
      this.step = 'checkpoint';
      // Saved at once after a publish; a stretch of passed-over events waits for the throttle
      // (its events are read again after a crash, none published).
      if (acked > 0 || this.unsaved >= this.skipSaveEvents || Date.now() - this.savedAt >= this.skipSaveMs) {
        await this.save(checkpoint);
      }
      this.current = checkpoint;
    }
    this.queue.splice(0, acked);
    this.published += acked;
    if (failure !== null) {
      // The acknowledged prefix's checkpoint was saved; what is thrown is the publish's failure.
      this.step = 'publish';
      throw failure;
    }
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
