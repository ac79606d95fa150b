import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { EventStore, Subscription } from '../adapters/event-store/port.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { type DomainEvent, parseDomainEvent } from '../contracts/events.ts';

/** A follower of the log fed pages of events by the store's shared feed. */
export interface FeedMember {
  /** Global position of the last event it has folded: the feed reads from the lowest of these. */
  readonly checkpoint: number;
  /**
   * Folds the events of `page` past its checkpoint, synchronously. The feed hands a member only
   * pages that start at or before its checkpoint, so nothing between them goes unseen. A member that cannot go on
   * (its fold threw) leaves the feed itself. `index` is shared by every member fed the page.
   */
  receive(page: readonly RecordedEvent[], index?: PageIndex): void;
}

/** What the members of a feed learn about a page once for all of them. */
export interface PageIndex {
  /**
   * `types[i]` is the ordinal of `page[i].type` (see `typeOrdinal`), so a member passes over
   * the events it does not fold without looking at them.
   */
  readonly types: Uint16Array;
  /** `page[i]` validated against the catalog (null: not a valid domain event), once looked at. */
  readonly parsed: (DomainEvent | null | undefined)[];
}

/** `page[i]` of the page `index` describes, validated once for every member. */
export function parsedAt(page: readonly RecordedEvent[], index: PageIndex, i: number): DomainEvent | null {
  let event = index.parsed[i];
  if (event === undefined) {
    event = parseDomainEvent(page[i]!);
    index.parsed[i] = event;
  }
  return event;
}

/** Event type names by ordinal; ordinal 0 stands for a type past the table's size. */
const typeNames: string[] = [''];
const ordinals = new Map<string, number>();
const MAX_ORDINAL = 0xffff;

/** A small integer standing for an event type in this process, stable while it runs. */
function typeOrdinal(type: string): number {
  let ordinal = ordinals.get(type);
  if (ordinal === undefined) {
    if (typeNames.length > MAX_ORDINAL) return 0;
    ordinal = typeNames.length;
    typeNames.push(type);
    ordinals.set(type, ordinal);
  }
  return ordinal;
}

/** The type an ordinal stands for (undefined for 0, which stands for any). */
export function typeOfOrdinal(ordinal: number): string | undefined {
  return ordinal === 0 ? undefined : typeNames[ordinal];
}

function indexOf(page: readonly RecordedEvent[]): PageIndex {
  const types = new Uint16Array(page.length);
  for (let i = 0; i < page.length; i++) types[i] = typeOrdinal(page[i]!.type);
  return { types, parsed: new Array(page.length).fill(undefined) };
}

export interface LogFeedOptions {
  /** Events read per page. */
  pageSize?: number;
  /** How often to look for appends no signal announced (other processes'). */
  pollMs?: number;
  logger?: Logger;
}

const feeds = new WeakMap<EventStore, LogFeed>();

/**
 * The one feed of `store` in this process. Every projection runner on the store is a member, so
 * the log is read (and each event decoded, and validated by the projections that want it) once
 * per page for all of them, not once per projection.
 */
export function feedOf(store: EventStore, options: LogFeedOptions = {}): LogFeed {
  let feed = feeds.get(store);
  if (!feed) {
    feed = new LogFeed(store, options);
    feeds.set(store, feed);
  }
  return feed;
}

/**
 * Reads the log page by page from the lowest checkpoint of its members and hands each page to
 * every member, which folds what it has not seen yet. A member that joins behind the others
 * (a rebuild, a slice started later) pulls the reader back to its checkpoint; the members ahead
 * pass those events over. Once at the head it waits for an append (a live subscription serves as
 * the doorbell) or the poll tick, as a catch-up subscription does.
 */
export class LogFeed {
  private readonly members = new Set<FeedMember>();
  private loop: Promise<void> | null = null;
  private doorbell: Subscription | null = null;
  private rings = 0;
  /** The last position a read of the feed returned: the doorbell rings only past it. */
  private readUpTo = 0;
  private wakeUp: (() => void) | null = null;
  /** Stops the store handing this feed its commits (see take). */
  private stopTaking: (() => void) | null = null;
  private readonly pageSize: number;
  private readonly pollMs: number;

  constructor(
    private readonly store: EventStore,
    private readonly options: LogFeedOptions = {},
  ) {
    this.pageSize = options.pageSize ?? 2_000;
    this.pollMs = options.pollMs ?? 250;
  }

  get size(): number {
    return this.members.size;
  }

  join(member: FeedMember): void {
    this.members.add(member);
    if (this.stopTaking === null && this.store.onAppended && this.store.densePositions) {
      this.stopTaking = this.store.onAppended((events) => this.take(events));
    }
    this.ring();
    this.loop ??= this.run().finally(() => {
      this.loop = null;
      // A member that joined while the loop was ending must not be left unfed.
      if (this.members.size > 0) this.loop = this.run();
    });
  }

  /** Resolves once the feed will hand `member` nothing more. */
  async leave(member: FeedMember): Promise<void> {
    this.members.delete(member);
    this.ring();
    if (this.members.size === 0) {
      this.stopTaking?.();
      this.stopTaking = null;
      await this.loop;
    }
  }

  /**
   * One commit of this process, handed over by the store as appended: when it follows on from
   * what the feed has read, its events go to the members at the head as a page of their own,
   * with no read of the log and no decode. A commit that does not follow on (another process
   * appended in between, or the feed is still catching up) is left to the reads, as are members
   * behind the page.
   */
  private take(events: readonly RecordedEvent[]): void {
    const first = events[0]?.position;
    if (first === undefined || first !== this.readUpTo + 1 || this.members.size === 0) return;
    this.readUpTo = events[events.length - 1]!.position;
    const index = indexOf(events);
    for (const member of [...this.members]) {
      if (this.members.has(member) && member.checkpoint >= first - 1) member.receive(events, index);
    }
  }

  private ring(): void {
    this.rings++;
    const wake = this.wakeUp;
    this.wakeUp = null;
    wake?.();
  }

  private async run(): Promise<void> {
    let failures = 0;
    try {
      while (this.members.size > 0) {
        const rings = this.rings;
        let after = Number.POSITIVE_INFINITY;
        for (const member of this.members) after = Math.min(after, member.checkpoint);
        let page: RecordedEvent[];
        try {
          page = await this.store.readAll({ after, maxCount: this.pageSize });
          failures = 0;
          if (page.length > 0) this.readUpTo = Math.max(this.readUpTo, page.at(-1)!.position);
        } catch (err) {
          // The store away (a remote engine restarting): the members keep their state and wait.
          failures++;
          if (failures === 1) this.options.logger?.warn({ err }, 'log feed read failed; retrying');
          await this.sleep(Math.min(5_000, 100 * 2 ** Math.min(failures, 6)));
          continue;
        }
        const index = indexOf(page);
        for (const member of [...this.members]) {
          // A member that joined behind `after` while the read was in flight (a relay starting
          // after the projections of its process) would skip every event between its checkpoint
          // and the page: it waits for the next read, which starts from its checkpoint.
          if (this.members.has(member) && member.checkpoint >= after) member.receive(page, index);
        }
        if (page.length === this.pageSize) {
          // Catching up: a page of an embedded store is read without yielding, so let timers,
          // sockets (/readyz) and snapshot saves run between pages.
          await yieldToEventLoop();
          continue;
        }
        if (this.rings === rings && this.members.size > 0) {
          if (this.store.appended) await this.waitForAppend(Math.max(this.readUpTo, after));
          else {
            await this.openDoorbell(page.at(-1)?.position ?? after);
            if (this.rings === rings) await this.sleep(this.pollMs);
          }
        }
      }
    } finally {
      const doorbell = this.doorbell;
      this.doorbell = null;
      await doorbell?.close().catch(() => undefined);
    }
  }

  /** Waits up to `ms`, or less when an append or a member rings. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wakeUp = done;
    });
  }

  /**
   * Waits for the store's own doorbell (an append past `after`, a wake, or the poll tick), or a
   * member's ring: a store that has one reads nothing to tell that something was appended. A bell
   * rung by a commit the feed was handed already (take) is not a reason to read: the feed waits
   * again from there, for what is left of the poll interval.
   */
  private async waitForAppend(after: number): Promise<void> {
    const deadline = performance.now() + this.pollMs;
    for (;;) {
      const from = Math.max(this.readUpTo, after);
      const rang = await this.ringOrBell(from, deadline - performance.now());
      if (rang || this.readUpTo <= from || performance.now() >= deadline) return;
    }
  }

  /** True when a member rang; false when the store's doorbell did (or its wait ended). */
  private ringOrBell(after: number, timeoutMs: number): Promise<boolean> {
    const bell = this.store.appended!(after, Math.max(0, timeoutMs));
    return new Promise((resolve) => {
      const done = (rang: boolean) => {
        if (this.wakeUp === ring) this.wakeUp = null;
        bell.cancel();
        resolve(rang);
      };
      const ring = () => done(true);
      this.wakeUp = ring;
      void bell.promise.then(() => done(false));
    });
  }

  /** A live subscription from the head whose only job is to ring when something is appended. */
  private async openDoorbell(after: number): Promise<void> {
    if (this.doorbell) return;
    const subscription = this.store.subscribeToAll({ after });
    this.doorbell = subscription;
    void (async () => {
      try {
        // An event the last read already handed out (one commit rings once per event) needs no
        // read of its own: those empty reads were about a tenth of the dispatcher's time.
        for await (const event of subscription) if (event.position > this.readUpTo) this.ring();
      } catch (err) {
        this.options.logger?.warn({ err }, 'log feed doorbell stopped; polling instead');
      } finally {
        if (this.doorbell === subscription) this.doorbell = null;
      }
    })();
  }
}
