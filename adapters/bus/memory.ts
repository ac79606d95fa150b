import { ConsumeLoop } from './consume-loop.ts';
import {
  type Bus,
  type BusMessage,
  type ConsumeOptions,
  type Consumer,
  consumeSettings,
  DEFAULT_DUPLICATE_WINDOW_MS,
  type PublishAck,
} from './port.ts';
import { subjectMatches } from './subjects.ts';

export interface MemoryBusOptions {
  /** How long a msgId is remembered for de-duplication (JetStream's duplicate window). */
  duplicateWindowMs?: number;
  /** Oldest messages are discarded beyond this count, like a limits-retention stream. */
  maxMessages?: number;
  /**
   * Messages a running consumer may have waiting (published, not yet taken) before a publish
   * waits for it (default 4,096): the producer is held back to the slowest running consumer
   * instead of the bus holding the difference, which on a first boot is the whole log.
   */
  maxBacklog?: number;
  /**
   * Of the messages every durable has taken and settled, the newest this many are kept (default
   * 1,024) for a durable created later; the older ones are dropped. While no durable exists,
   * every message is kept up to `maxMessages`.
   */
  keepSettled?: number;
}

/** Wakes everything waiting at the time of notify(). */
class Wakeup {
  private waiters: Array<() => void> = [];

  wait(): Promise<void> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}

interface StoredMessage {
  seq: number;
  subject: string;
  msgId: string;
  /** Its bytes: a copy of those published, or made from `value` when a consumer first reads them. */
  bytes: Uint8Array | null;
  /** What `publishValue` published, and how its bytes are made; null for bytes published. */
  encode: ((value: unknown) => Uint8Array) | null;
  value: unknown;
}

interface Delivery {
  count: number;
  ackTimer: NodeJS.Timeout;
}

/** What a durable consumer remembers between stop and start, like a JetStream consumer. */
class DurableState {
  filterSubject: string;
  ackWaitMs: number;
  /** Next stream sequence not yet considered for a first delivery. */
  nextSeq = 1;
  /** Delivered and awaiting ack/nak/term. */
  readonly pending = new Map<number, Delivery>();
  /** seq → [due time, deliveries so far] for messages waiting to be redelivered. */
  readonly redeliver = new Map<number, { dueAt: number; count: number }>();
  readonly wakeup = new Wakeup();
  /** Workers consuming this durable now: only a running consumer holds publishers back. */
  workers = 0;
  private timer: NodeJS.Timeout | null = null;
  private timerDueAt = Number.POSITIVE_INFINITY;

  constructor(filterSubject: string, ackWaitMs: number) {
    this.filterSubject = filterSubject;
    this.ackWaitMs = ackWaitMs;
  }

  /** Makes sure a sleeping worker wakes when the earliest scheduled redelivery falls due. */
  scheduleWake(dueAt: number): void {
    if (dueAt >= this.timerDueAt) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerDueAt = dueAt;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.timerDueAt = Number.POSITIVE_INFINITY;
        this.wakeup.notify();
      },
      Math.max(0, dueAt - Date.now()),
    );
    this.timer.unref();
  }

  /** The lowest sequence this durable may still be handed (taken next, in flight, or to redeliver). */
  floor(): number {
    let floor = this.nextSeq;
    for (const seq of this.pending.keys()) if (seq < floor) floor = seq;
    for (const seq of this.redeliver.keys()) if (seq < floor) floor = seq;
    return floor;
  }

  clearTimers(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.timerDueAt = Number.POSITIVE_INFINITY;
    for (const delivery of this.pending.values()) clearTimeout(delivery.ackTimer);
  }
}

/**
 * The in-process bus: one stream in memory with JetStream's semantics — msgId de-duplication
 * within a window, durable consumers that resume where they stopped (for the life of this
 * instance), redelivery after a nak delay or an expired ack wait, and term.
 *
 * What it holds is bounded by its consumers rather than by the log: a publish resolves only once
 * every running consumer has at most `maxBacklog` messages waiting (the relay, which awaits its
 * acks, then stops taking the log until they catch up), and a message every durable has taken and
 * settled is dropped once `keepSettled` newer ones are settled too. Bounded by the log alone, a
 * first boot on a long log would hold what the relay publishes ahead of the dispatcher (up to
 * `maxMessages` verdicts, about 1.6 KB each) for the life of the process.
 */
export class MemoryBus implements Bus {
  readonly kind = 'memory' as const;
  private readonly duplicateWindowMs: number;
  private readonly maxMessages: number;
  private readonly maxBacklog: number;
  private readonly keepSettled: number;
  private messages: StoredMessage[] = [];
  /** Publishes waiting for a running consumer's backlog to shrink, resolved in publish order. */
  private roomWaiters: Array<() => void> = [];
  private lastSeq = 0;
  private readonly seenIds = new Map<string, { seq: number; at: number }>();
  private readonly durables = new Map<string, DurableState>();
  private readonly workers = new Set<ConsumeLoop>();
  private closed = false;

  constructor(options: MemoryBusOptions = {}) {
    this.duplicateWindowMs = options.duplicateWindowMs ?? DEFAULT_DUPLICATE_WINDOW_MS;
    this.maxMessages = options.maxMessages ?? 100_000;
    this.maxBacklog = Math.max(1, options.maxBacklog ?? 4_096);
    this.keepSettled = Math.max(0, options.keepSettled ?? 1_024);
  }

  publish(subject: string, payload: Uint8Array, options: { msgId: string }): Promise<PublishAck> {
    return this.store(subject, options.msgId, payload, null, undefined);
  }

  /**
   * Keeps `value` itself, not its bytes: a consumer in this process takes it as it was published
   * (`message.value`), with no encoding for it and no parse back; `data` is made on first read.
   */
  publishValue<T>(
    subject: string,
    value: T,
    encode: (value: T) => Uint8Array,
    options: { msgId: string },
  ): Promise<PublishAck> {
    return this.store(subject, options.msgId, null, encode as (value: unknown) => Uint8Array, value);
  }

  private async store(
    subject: string,
    msgId: string,
    payload: Uint8Array | null,
    encode: ((value: unknown) => Uint8Array) | null,
    value: unknown,
  ): Promise<PublishAck> {
    if (this.closed) throw new Error('memory bus is closed');
    const now = Date.now();
    this.forgetExpiredIds(now);
    const seen = this.seenIds.get(msgId);
    if (seen) return { duplicate: true, sequence: seen.seq };
    const seq = ++this.lastSeq;
    this.messages.push({
      seq,
      subject,
      msgId,
      bytes: payload === null ? null : payload.slice(),
      encode,
      value,
    });
    this.seenIds.set(msgId, { seq, at: now });
    this.applyLimits();
    for (const state of this.durables.values()) state.wakeup.notify();
    // Stored and handed to the consumers already; only the ack waits, so publish order holds.
    if (this.backlogFull()) await new Promise<void>((resolve) => this.roomWaiters.push(resolve));
    return { duplicate: false, sequence: seq };
  }

  async consume(options: ConsumeOptions, handler: (message: BusMessage) => Promise<void>): Promise<Consumer> {
    if (this.closed) throw new Error('memory bus is closed');
    const { ackWaitMs, maxInFlight, defaultNakDelayMs } = consumeSettings(options);
    let state = this.durables.get(options.durable);
    if (!state) {
      state = new DurableState(options.filterSubject, ackWaitMs);
      this.durables.set(options.durable, state);
    } else {
      state.filterSubject = options.filterSubject;
      state.ackWaitMs = ackWaitMs;
    }
    state.workers++;
    return new Worker(this, state, handler, maxInFlight, defaultNakDelayMs).open(this.workers);
  }

  /** Messages held now: the backlog of the slowest durable and the settled ones kept behind it. */
  get retained(): number {
    return this.messages.length;
  }

  async health() {
    return this.closed ? { ok: false, detail: 'closed' } : { ok: true };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.all([...this.workers].map((worker) => worker.stop()));
    this.workers.clear();
    for (const state of this.durables.values()) state.clearTimers();
    this.releaseRoom();
  }

  /** A worker of `state` has stopped: it no longer holds publishers back. */
  workerStopped(state: DurableState): void {
    state.workers--;
    this.releaseRoom();
  }

  /** Whether some running consumer has more than `maxBacklog` messages waiting for it. */
  private backlogFull(): boolean {
    if (this.closed) return false;
    for (const state of this.durables.values()) {
      if (state.workers > 0 && this.lastSeq - state.nextSeq + 1 > this.maxBacklog) return true;
    }
    return false;
  }

  /** Lets the waiting publishes resolve once no running consumer's backlog is over the bound. */
  private releaseRoom(): void {
    if (this.roomWaiters.length === 0 || this.backlogFull()) return;
    const waiters = this.roomWaiters;
    this.roomWaiters = [];
    for (const resolve of waiters) resolve();
  }

  /** Picks the next message for a durable: due redeliveries first (lowest seq), then new ones. */
  take(state: DurableState): { message: StoredMessage; count: number } | null {
    const now = Date.now();
    let dueSeq = Number.POSITIVE_INFINITY;
    let earliestFuture = Number.POSITIVE_INFINITY;
    for (const [seq, entry] of state.redeliver) {
      if (entry.dueAt <= now) dueSeq = Math.min(dueSeq, seq);
      else earliestFuture = Math.min(earliestFuture, entry.dueAt);
    }
    if (dueSeq !== Number.POSITIVE_INFINITY) {
      const entry = state.redeliver.get(dueSeq)!;
      state.redeliver.delete(dueSeq);
      const message = this.messageAt(dueSeq);
      // Discarded by the retention limit while waiting: nothing left to redeliver.
      if (!message) return this.take(state);
      return { message, count: entry.count + 1 };
    }
    if (earliestFuture !== Number.POSITIVE_INFINITY) state.scheduleWake(earliestFuture);
    const first = this.messages[0]?.seq ?? this.lastSeq + 1;
    state.nextSeq = Math.max(state.nextSeq, first);
    while (state.nextSeq <= this.lastSeq) {
      const message = this.messageAt(state.nextSeq)!;
      state.nextSeq++;
      if (subjectMatches(state.filterSubject, message.subject)) {
        this.releaseRoom();
        return { message, count: 1 };
      }
    }
    this.releaseRoom();
    this.dropSettled();
    return null;
  }

  /** Records a delivery and builds the handler's view of it. */
  deliver(state: DurableState, message: StoredMessage, count: number): BusMessage {
    const delivered = new MemoryMessage(state, message, count);
    const ackTimer = setTimeout(ackWaitPassed, state.ackWaitMs, delivered);
    ackTimer.unref();
    state.pending.set(message.seq, { count, ackTimer });
    return delivered;
  }

  private messageAt(seq: number): StoredMessage | undefined {
    const first = this.messages[0]?.seq;
    if (first === undefined || seq < first) return undefined;
    return this.messages[seq - first];
  }

  private forgetExpiredIds(now: number): void {
    // Map iteration is insertion order, which is publish order, so the oldest come first.
    for (const [id, entry] of this.seenIds) {
      if (now - entry.at < this.duplicateWindowMs) break;
      this.seenIds.delete(id);
    }
  }

  private applyLimits(): void {
    // Trim in chunks so a full stream does not pay an O(n) splice on every publish.
    const slack = Math.max(1, Math.floor(this.maxMessages / 100));
    if (this.messages.length > this.maxMessages + slack) {
      this.messages = this.messages.slice(this.messages.length - this.maxMessages);
    }
    this.dropSettled();
  }

  /**
   * Drops the messages every durable has taken and settled, but the newest `keepSettled` of them,
   * in chunks (at least `keepSettled`, at least 256) so that each is copied out O(1) times.
   */
  private dropSettled(): void {
    const first = this.messages[0]?.seq;
    if (first === undefined || this.durables.size === 0) return;
    let floor = Number.POSITIVE_INFINITY;
    for (const state of this.durables.values()) floor = Math.min(floor, state.floor());
    const droppable = Math.min(floor, this.lastSeq + 1) - first - this.keepSettled;
    if (droppable >= Math.max(256, this.keepSettled)) this.messages = this.messages.slice(droppable);
  }
}

/** The ack wait of a delivery ran out before it was settled: it is redelivered. */
function ackWaitPassed(delivered: MemoryMessage): void {
  const { state, stored, deliveryCount: count } = delivered;
  if (state.pending.get(stored.seq)?.count !== count) return;
  state.pending.delete(stored.seq);
  state.redeliver.set(stored.seq, { dueAt: Date.now(), count });
  state.wakeup.notify();
}

/**
 * One delivery of a stored message, as its handler sees it: one object per delivery, its
 * settlement methods on the class rather than closures made for each.
 */
class MemoryMessage implements BusMessage {
  /** Only the first settlement of a delivery counts, as with JetStream acks. */
  private settled = false;

  constructor(
    readonly state: DurableState,
    readonly stored: StoredMessage,
    readonly deliveryCount: number,
  ) {}

  get subject(): string {
    return this.stored.subject;
  }

  get msgId(): string {
    return this.stored.msgId;
  }

  get data(): Uint8Array {
    const stored = this.stored;
    if (stored.bytes === null) stored.bytes = stored.encode!(stored.value);
    return stored.bytes;
  }

  get value(): unknown {
    return this.stored.encode === null ? undefined : this.stored.value;
  }

  async ack(): Promise<void> {
    if (this.settled) return;
    this.settle();
    // A late ack (after the ack wait expired) still cancels the queued redelivery.
    this.dropRedelivery();
  }

  nak(delayMs?: number): void {
    if (!this.settle()) return;
    const dueAt = Date.now() + Math.max(0, delayMs ?? 0);
    this.state.redeliver.set(this.stored.seq, { dueAt, count: this.deliveryCount });
    this.state.scheduleWake(dueAt);
    this.state.wakeup.notify();
  }

  term(): void {
    if (this.settled) return;
    this.settle();
    this.dropRedelivery();
  }

  private settle(): Delivery | undefined {
    if (this.settled) return undefined;
    this.settled = true;
    const { state, stored } = this;
    const delivery = state.pending.get(stored.seq);
    if (delivery?.count !== this.deliveryCount) return undefined;
    clearTimeout(delivery.ackTimer);
    state.pending.delete(stored.seq);
    return delivery;
  }

  private dropRedelivery(): void {
    const { state, stored } = this;
    if (state.redeliver.get(stored.seq)?.count === this.deliveryCount) state.redeliver.delete(stored.seq);
  }
}

/** Deliveries a worker starts between two yields to the event loop. */
const YIELD_EVERY = 64;

/** One consume() call: pulls from the durable's state and runs the handler. */
class Worker extends ConsumeLoop {
  private inFlight = new Set<Promise<void>>();
  private readonly slotFreed = new Wakeup();

  constructor(
    private readonly bus: MemoryBus,
    private readonly state: DurableState,
    private readonly handler: (message: BusMessage) => Promise<void>,
    private readonly maxInFlight: number,
    private readonly defaultNakDelayMs: number,
  ) {
    super();
  }

  protected interrupt(): void {
    this.state.wakeup.notify();
    this.slotFreed.notify();
  }

  protected async run(): Promise<void> {
    let sinceYield = 0;
    while (this.running) {
      if (this.inFlight.size >= this.maxInFlight) {
        await this.slotFreed.wait();
        continue;
      }
      const next = this.bus.take(this.state);
      if (!next) {
        // Same synchronous turn as take(), so no publish can slip in between.
        await this.state.wakeup.wait();
        continue;
      }
      const message = this.bus.deliver(this.state, next.message, next.count);
      const task = this.handle(message).finally(() => {
        this.inFlight.delete(task);
        this.slotFreed.notify();
      });
      this.inFlight.add(task);
      // Yield so a burst of deliveries does not starve timers and I/O, but once per
      // YIELD_EVERY deliveries, not per delivery: while the process is busy (a catch-up folding
      // the log page by page) an event-loop turn takes tens of milliseconds, and a yield per
      // message held the dispatcher to a few messages a second and the relay, waiting for it,
      // to as few.
      if (++sinceYield >= YIELD_EVERY) {
        sinceYield = 0;
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
    }
    this.bus.workerStopped(this.state);
    await Promise.all(this.inFlight);
  }

  private async handle(message: BusMessage): Promise<void> {
    try {
      await this.handler(message);
    } catch {
      message.nak(this.defaultNakDelayMs);
    }
  }
}
