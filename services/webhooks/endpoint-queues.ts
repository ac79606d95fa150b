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

/**
 * One queue per endpoint (an API key's origin, see `keyOf`) with its own concurrency limit, so a
 * slow or dead endpoint only ever holds its own slots: every other endpoint's deliveries, another
 * key's on the same host included, start at once.
 */
export class EndpointQueues {
  private readonly queues = new Map<string, Queue>();
  private readonly idle = new Set<() => void>();
  /** Tasks running or waiting over every endpoint, kept as they come and go (read per task). */
  private count = 0;

  constructor(
    private readonly concurrency: number,
    /** Waiting tasks, from the head, that are prepared (see `Task`); 0 for none. */
    private readonly prepareAhead = 0,
  ) {}

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
    let queue = this.queues.get(key);
    if (!queue) {
      queue = { running: 0, waiting: [], head: 0 };
      this.queues.set(key, queue);
    }
    this.count++;
    if (queue.running < this.concurrency) this.run(key, queue, task);
    else {
      queue.waiting.push(task);
      if (waitingIn(queue) <= this.prepareAhead) task.prepare?.();
    }
  }

  /**
   * Takes a slot of the endpoint now if one is free and nothing waits for it (true), so that what
   * the caller records before running its task already knows the task will not wait. The slot is
   * the caller's until it passes a task to `runIn` or gives it back with `release`.
   */
  acquire(key: string): boolean {
    let queue = this.queues.get(key);
    if (!queue) {
      queue = { running: 0, waiting: [], head: 0 };
      this.queues.set(key, queue);
    }
    if (queue.running >= this.concurrency || waitingIn(queue) > 0) {
      if (queue.running === 0 && waitingIn(queue) === 0) this.queues.delete(key);
      return false;
    }
    queue.running++;
    this.count++;
    return true;
  }

  /** Runs the task in a slot `acquire` took. */
  runIn(key: string, task: Task): void {
    const queue = this.queues.get(key)!;
    queue.running--;
    this.run(key, queue, task);
  }

  /** Gives back a slot `acquire` took, without running anything in it. */
  release(key: string): void {
    this.runIn(key, NOTHING);
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

  private run(key: string, queue: Queue, task: Task): void {
    queue.running++;
    // One reaction for either end: a catch and a finally made four promises and as many closures per task.
    const ran = () => this.ran(key, queue);
    void task.run().then(ran, ran);
  }

  /** A task of `queue` ended, well or not: its slot goes to the next one waiting. */
  private ran(key: string, queue: Queue): void {
    queue.running--;
    this.count--;
    const next = takeNext(queue);
    // The one that just moved up among the next `prepareAhead` to run.
    if (this.prepareAhead > 0) queue.waiting[queue.head + this.prepareAhead - 1]?.prepare?.();
    if (next) this.run(key, queue, next);
    else if (queue.running === 0) this.queues.delete(key);
    if (this.size === 0) {
      for (const resolve of this.idle) resolve();
      this.idle.clear();
    }
  }
}
