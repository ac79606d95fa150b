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
  data: Uint8Array;
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

  async publish(subject: string, payload: Uint8Array, options: { msgId: string }): Promise<PublishAck> {
    if (this.closed) throw new Error('memory bus is closed');
    const now = Date.now();
    this.forgetExpiredIds(now);
    const seen = this.seenIds.get(options.msgId);
    if (seen) return { duplicate: true, sequence: seen.seq };
    const seq = ++this.lastSeq;
    this.messages.push({ seq, subject, msgId: options.msgId, data: payload.slice() });
    this.seenIds.set(options.msgId, { seq, at: now });
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
    const ackTimer = setTimeout(() => {
      if (state.pending.get(message.seq)?.count !== count) return;
      state.pending.delete(message.seq);
      state.redeliver.set(message.seq, { dueAt: Date.now(), count });
      state.wakeup.notify();
    }, state.ackWaitMs);
    ackTimer.unref();
    state.pending.set(message.seq, { count, ackTimer });
    // Only the first settlement of a delivery counts, as with JetStream acks.
    let settled = false;
    const settle = (): Delivery | undefined => {
      if (settled) return undefined;
      settled = true;
      const delivery = state.pending.get(message.seq);
      if (delivery?.count !== count) return undefined;
      clearTimeout(delivery.ackTimer);
      state.pending.delete(message.seq);
      return delivery;
    };
    return {
      subject: message.subject,
      msgId: message.msgId,
      data: message.data,
      deliveryCount: count,
      ack: async () => {
        if (settled) return;
        settle();
        // A late ack (after the ack wait expired) still cancels the queued redelivery.
        if (state.redeliver.get(message.seq)?.count === count) state.redeliver.delete(message.seq);
      },
      nak: (delayMs?: number) => {
        if (!settle()) return;
        const dueAt = Date.now() + Math.max(0, delayMs ?? 0);
        state.redeliver.set(message.seq, { dueAt, count });
        state.scheduleWake(dueAt);
        state.wakeup.notify();
      },
      term: () => {
        if (settled) return;
        settle();
        if (state.redeliver.get(message.seq)?.count === count) state.redeliver.delete(message.seq);
      },
    };
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
