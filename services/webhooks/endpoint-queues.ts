/** Origins of subscription URLs already parsed. */
const origins = new Map<string, string>();

/**
 * `prepare`, when given, starts what the task must do before its turn can use a slot (its
 * claim): called once it is among the next `prepareAhead` to run, so that work overlaps the
 * requests running ahead of it instead of holding a slot (idempotent; the task awaits the same work).
 */
interface Task {
  run(): Promise<void>;
  prepare?(): void;
}

/** What a slot given back runs: nothing. */
const NOTHING: Task = { run: () => Promise.resolve() };

/**
 * An endpoint's tasks: those running, and those waiting in order from `head` on. A busy endpoint's
 * backlog has no bound, so taking the next one must not shift the whole array each time.
 */
interface Queue {
  running: number;
  waiting: Task[];
  head: number;
  /** Its origin's shared state (the cap over every key's endpoint there). */
  origin: Origin;
}

/**
 * One origin (scheme, host, port) over every key's endpoint there: requests running at it, under
 * `originCap`, and the endpoints whose next task waits only for the origin's cap, in turn order.
 */
interface Origin {
  name: string;
  running: number;
  /** Endpoints (queues) at this origin with tasks running or waiting. */
  endpoints: number;
  /** Endpoints with a task waiting that their own slots would let run: served round-robin. */
  ready: Set<string>;
}

/** The origin part of an endpoint's key (`keyOf`); a bare origin is its own. */
function originPart(key: string): string {
  const space = key.indexOf(' ');
  return space < 0 ? key : key.slice(space + 1);
}

function waitingIn(queue: Queue): number {
  return queue.waiting.length - queue.head;
}

function takeNext(queue: Queue): Task | undefined {
  if (queue.head >= queue.waiting.length) return undefined;
  const next = queue.waiting[queue.head]!;
  queue.waiting[queue.head++] = undefined as never;
  // Drop the taken prefix once it is most of the array.
  if (queue.head >= 1_024 && queue.head * 2 >= queue.waiting.length) {
    queue.waiting = queue.waiting.slice(queue.head);
    queue.head = 0;
  }
  return next;
}

export interface OriginLimit {
  /** Requests running at one origin over every key's endpoint there (WEBHOOK_ORIGIN_CONCURRENCY). */
  cap: number;
  /**
   * API keys with active subscriptions at an origin (the caller's view, may lag): each key's share
   * of the cap is reserved for it before it has anything to send.
   */
  keysAt?: (origin: string) => number;
}

/**
 * One queue per endpoint (an API key's origin, see `keyOf`) with its own concurrency limit, so a
 * slow or dead endpoint only ever holds its own slots: every other endpoint's deliveries, another
 * key's on the same host included, start at once.
 *
 * Over every key's endpoint at one origin, at most `origin.cap` tasks run. Each key's endpoint there
 * may run at most its share of the cap: `cap / keys` (at least 1, at most `concurrency`), `keys`
 * being the keys with subscriptions at the origin (`keysAt`) or with tasks there, whichever is
 * more. The shares of that many keys fit in the cap, so a key under its share always finds the
 * origin's room free: another key's hung requests hold that key's share and no more. With more keys
 * than the cap, each gets one and they take the origin's free slots in turn (round-robin).
 */
export class EndpointQueues {
  private readonly queues = new Map<string, Queue>();
  private readonly origins = new Map<string, Origin>();
  private readonly idle = new Set<() => void>();
  /** Tasks running or waiting over every endpoint, kept as they come and go (read per task). */
  private count = 0;
  private readonly cap: number;
  private readonly keysAt: ((origin: string) => number) | undefined;

  constructor(
    private readonly concurrency: number,
    /** Waiting tasks, from the head, that are prepared (see `Task`); 0 for none. */
    private readonly prepareAhead = 0,
    origin?: OriginLimit,
  ) {
    this.cap = origin?.cap ?? Number.POSITIVE_INFINITY;
    this.keysAt = origin?.keysAt;
  }

  /**
   * The endpoint a subscription's deliveries go to: its URL's origin (scheme, host, port) as seen
   * by its API key. Another key's subscriptions on the same origin are another endpoint, with
   * slots, queue and breaker of their own: a tenant's slow or dead path on a shared host holds only
   * that tenant's deliveries there, never another's.
   */
  static keyOf(sub: { keyId: string; url: string }): string {
    // An origin has no space in it, so the pair reads back unambiguously.
    return `${sub.keyId} ${EndpointQueues.originOf(sub.url)}`;
  }

  /** A URL's origin (scheme, host, port). */
  static originOf(url: string): string {
    // Asked twice per delivery, of the few URLs subscriptions have: parsing each time showed up in
    // the dispatcher's profile.
    let origin = origins.get(url);
    if (origin === undefined) {
      origin = new URL(url).origin;
      if (origins.size >= 10_000) origins.clear();
      origins.set(url, origin);
    }
    return origin;
  }

  /**
   * Runs the task, or queues it behind the endpoint's others: every task is taken, in order. How
   * much of a waiting task stays in memory is the caller's to decide (see `waiting`).
   */
  push(key: string, task: Task): void {
    const queue = this.queueOf(key);
    this.count++;
    if (waitingIn(queue) === 0 && this.free(queue)) {
      this.run(key, queue, task);
      return;
    }
    queue.waiting.push(task);
    if (waitingIn(queue) <= this.prepareAhead && this.prepares(queue)) task.prepare?.();
    // Waiting for the origin's room only: it takes its turn among the origin's endpoints.
    if (queue.running < this.limitOf(queue)) {
      queue.origin.ready.add(key);
      this.pump(queue.origin);
    }
  }

  /**
   * Takes a slot of the endpoint now if one is free and nothing waits for it (true), so that what
   * the caller records before running its task already knows the task will not wait. The slot is
   * the caller's until it passes a task to `runIn` or gives it back with `release`.
   */
  acquire(key: string): boolean {
    const queue = this.queueOf(key);
    if (waitingIn(queue) > 0 || !this.free(queue)) {
      this.dropIfIdle(key, queue);
      return false;
    }
    queue.running++;
    queue.origin.running++;
    this.count++;
    return true;
  }

  /** Runs the task in a slot `acquire` took. */
  runIn(key: string, task: Task): void {
    const queue = this.queues.get(key)!;
    queue.running--;
    queue.origin.running--;
    this.run(key, queue, task);
  }

  /** Gives back a slot `acquire` took, without running anything in it. */
  release(key: string): void {
    this.runIn(key, NOTHING);
  }

  /**
   * Moves the waiting tasks of endpoint `from` that `replace` maps to a task (null for one that
   * stays) to the end of endpoint `to`'s queue, in their order, where they take `to`'s slots; the
   * rest keep their places. Returns how many moved.
   */
  move(from: string, to: string, replace: (task: Task) => Task | null): number {
    const source = this.queues.get(from);
    if (!source || from === to || waitingIn(source) === 0) return 0;
    const staying: Task[] = [];
    const moving: Task[] = [];
    for (let i = source.head; i < source.waiting.length; i++) {
      const task = source.waiting[i]!;
      const moved = replace(task);
      if (moved) moving.push(moved);
      else staying.push(task);
    }
    if (moving.length === 0) return 0;
    source.waiting = staying;
    source.head = 0;
    // Those that moved up among the next `prepareAhead` (preparing is idempotent).
    if (this.prepares(source)) for (const task of staying.slice(0, this.prepareAhead)) task.prepare?.();
    // `push` counts each again.
    this.count -= moving.length;
    for (const task of moving) this.push(to, task);
    this.dropIfIdle(from, source);
    return moving.length;
  }

  /**
   * Runs every waiting task now, whatever the concurrency: for a stopping dispatcher, whose
   * waiting tasks only let their deliveries go (see DeliveryWorker.abandon) and must not wait
   * for slots behind requests that may run until their timeout.
   */
  flush(): void {
    for (const [key, queue] of this.queues)
      for (let next = takeNext(queue); next !== undefined; next = takeNext(queue)) this.run(key, queue, next);
  }

  /** Tasks waiting for a slot of this endpoint (not those running). */
  waiting(key: string): number {
    const queue = this.queues.get(key);
    return queue ? waitingIn(queue) : 0;
  }

  /** Tasks running or waiting, over every endpoint. */
  get size(): number {
    return this.count;
  }

  /** Endpoints and origins with tasks running or waiting (idle ones are dropped). */
  get tracked(): { endpoints: number; origins: number } {
    return { endpoints: this.queues.size, origins: this.origins.size };
  }

  /** Tasks running or waiting per endpoint (endpoints with none are absent). */
  depths(): Map<string, number> {
    const depths = new Map<string, number>();
    for (const [key, q] of this.queues) depths.set(key, q.running + waitingIn(q));
    return depths;
  }

  /** Resolves when nothing is running or waiting. */
  async drained(): Promise<void> {
    if (this.size === 0) return;
    await new Promise<void>((resolve) => this.idle.add(resolve));
  }

  private queueOf(key: string): Queue {
    let queue = this.queues.get(key);
    if (!queue) {
      const name = originPart(key);
      let origin = this.origins.get(name);
      if (!origin) {
        origin = { name, running: 0, endpoints: 0, ready: new Set() };
        this.origins.set(name, origin);
      }
      origin.endpoints++;
      queue = { running: 0, waiting: [], head: 0, origin };
      this.queues.set(key, queue);
    }
    return queue;
  }

  /** An endpoint with nothing running or waiting is forgotten, and its origin with its last one. */
  private dropIfIdle(key: string, queue: Queue): void {
    if (queue.running > 0 || waitingIn(queue) > 0) return;
    this.queues.delete(key);
    const { origin } = queue;
    origin.ready.delete(key);
    if (--origin.endpoints === 0) this.origins.delete(origin.name);
  }

  /** Whether the origin's keys could together run more than its cap (their shares then bind). */
  private contended(origin: Origin): boolean {
    if (this.cap === Number.POSITIVE_INFINITY) return false;
    return this.keysOf(origin) * this.concurrency > this.cap;
  }

  private keysOf(origin: Origin): number {
    return Math.max(origin.endpoints, this.keysAt?.(origin.name) ?? 0);
  }

  /** Tasks the endpoint may run at once: its slots, or its share of its origin's cap when less. */
  private limitOf(queue: Queue): number {
    if (!this.contended(queue.origin)) return this.concurrency;
    return Math.max(1, Math.min(this.concurrency, Math.floor(this.cap / this.keysOf(queue.origin))));
  }

  private free(queue: Queue): boolean {
    return queue.running < this.limitOf(queue) && queue.origin.running < this.cap;
  }

  /**
   * Whether waiting tasks are prepared ahead: only where the origin's cap cannot slow the endpoint
   * below its own slots, the pace a claim made ahead of its turn counts on (preclaimRounds).
   */
  private prepares(queue: Queue): boolean {
    return this.prepareAhead > 0 && !this.contended(queue.origin);
  }

  /** Starts the endpoint's next waiting task (there is one). */
  private startNext(key: string, queue: Queue): void {
    const next = takeNext(queue)!;
    // The one that just moved up among the next `prepareAhead` to run.
    if (this.prepares(queue)) queue.waiting[queue.head + this.prepareAhead - 1]?.prepare?.();
    this.run(key, queue, next);
  }

  /** Gives the origin's free room to its waiting endpoints, one task each in turn. */
  private pump(origin: Origin): void {
    while (origin.running < this.cap && origin.ready.size > 0) {
      const key = origin.ready.values().next().value as string;
      origin.ready.delete(key);
      const queue = this.queues.get(key);
      if (!queue || waitingIn(queue) === 0 || queue.running >= this.limitOf(queue)) continue;
      this.startNext(key, queue);
      if (waitingIn(queue) > 0 && queue.running < this.limitOf(queue)) origin.ready.add(key);
    }
  }

  private run(key: string, queue: Queue, task: Task): void {
    queue.running++;
    queue.origin.running++;
    // One reaction for either end: a catch and a finally made four promises and as many closures per task.
    const ran = () => this.ran(key, queue);
    void task.run().then(ran, ran);
  }

  /** A task of `queue` ended, well or not: its slot goes to the next one waiting. */
  private ran(key: string, queue: Queue): void {
    queue.running--;
    queue.origin.running--;
    this.count--;
    const { origin } = queue;
    if (waitingIn(queue) > 0) {
      // Alone at its origin (or the origin's room to spare): its own next, at once.
      if (origin.ready.size === 0 && this.free(queue)) this.startNext(key, queue);
      else if (queue.running < this.limitOf(queue)) origin.ready.add(key);
    }
    this.pump(origin);
    this.dropIfIdle(key, queue);
    if (this.size === 0) {
      for (const resolve of this.idle) resolve();
      this.idle.clear();
    }
  }
}
