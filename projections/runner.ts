import type { Logger } from 'pino';
import { endedBy } from '../adapters/before-abort.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { firstIndex } from '../adapters/first-index.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../contracts/envelope.ts';
import { type FeedMember, feedOf, type PageIndex, parsedAt, typeOfOrdinal } from './log-feed.ts';
import { FoldProgress } from './position-waiters.ts';
import type { Projection } from './projection.ts';

export interface RunnerOptions {
  /** Events folded between two snapshots. */
  snapshotEvery?: number;
  /**
   * Least time between two snapshots taken by count (a catch-up reaches `snapshotEvery` fast).
   * Default 5 s; longer for a state slow to save (see SAVE_COST_SHARE).
   */
  snapshotGapMs?: number;
  /** A snapshot is also taken this often while events trickle in below `snapshotEvery` (same cost rule). */
  snapshotIntervalMs?: number;
  /**
   * False for a fold no request reads (the quota counters' seed): its lag is measured like any
   * other's but never makes /readyz unready, so a replica serves while it catches up.
   */
  gatesReadiness?: boolean;
  logger?: Logger;
}

/**
 * A snapshot takes at most about one part in this many of the time: a state that is slow to
 * encode (hundreds of ms once it holds a large log's worth) is saved less often than the gap.
 */
const SAVE_COST_SHARE = 20;
/**
 * However slow the last save (it also waits for the environment's flush, which a disk stall or
 * another writer can stretch), the next waits no longer than this: a crash re-folds at most this
 * much more.
 */
const MAX_SAVE_GAP_MS = 60_000;

/**
 * The runners tailing each event store, whoever created them (the projections role, the api's
 * key registry, webhooks, payments, history...): the service reports every projection's lag
 * without each feature having to hand its runners to the metrics.
 */
const runningOn = new WeakMap<EventStore, Set<ProjectionRunner<unknown>>>();

/** The runners currently started on `store`. */
export function runnersOn(store: EventStore): ProjectionRunner<unknown>[] {
  return [...(runningOn.get(store) ?? [])];
}

/**
 * When the stops of the runners on a store must be done (performance.now()), set by the service's
 * shutdown. The slices stop their runners one after another, and with the store silent (a
 * partition, a hung server: connections open, no answer) each one's head read, drain and final
 * save would wait in turn, past SHUTDOWN_TIMEOUT_MS. One deadline bounds them all: a stop that
 * reaches it leaves its snapshot unsaved, which costs only a re-fold from the last saved snapshot
 * at the next start (every projection store keeps the last save whole; none is written part way).
 */
const stopDeadlines = new WeakMap<EventStore, number>();

/** Bounds every later stop of a runner on `store` to end by `at` (performance.now() time). */
export function stopRunnersBy(store: EventStore, at: number): void {
  stopDeadlines.set(store, at);
}

/** Whether `work` ended before the store's stop deadline (it is awaited whole when none is set). */
export async function beforeStopDeadline(store: EventStore, work: Promise<unknown>): Promise<boolean> {
  const at = stopDeadlines.get(store);
  if (at === undefined) return work.then(() => true);
  return endedBy(work, at);
}

/**
 * Runs one projection: loads its snapshot (state and checkpoint, saved atomically together),
 * catches up from the checkpoint, then tails the log live. After a crash it resumes from the
 * last snapshot and re-folds what followed, which is safe because folds are deterministic.
 *
 * Every runner on a store is fed by the store's one feed (./log-feed.ts): the log is read and
 * decoded once per page for all projections, each page folded synchronously, the waiters and
 * the snapshot looked at once per page rather than once per event.
 */
export class ProjectionRunner<S> extends FoldProgress implements FeedMember {
  private current: S;
  private changes = 0;
  private savedPosition = 0;
  private saving: Promise<void> = Promise.resolve();
  /** A save is queued or running: a later one would save the same or a newer position anyway. */
  private savePending = false;
  private savedAt = Number.NEGATIVE_INFINITY;
  /** How long the last save took, from its start until it was stored. */
  private lastSaveMs = 0;
  /** `changes` when the last save began: the state saved then is the state now while they are equal. */
  private savedChanges = -1;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly store: EventStore,
    private readonly snapshots: ProjectionStore,
    private readonly projection: Projection<S>,
    private readonly options: RunnerOptions = {},
  ) {
    super(projection.name);
    this.current = projection.initial();
    this.folds = projection.eventTypes ? new Set<string>(projection.eventTypes) : null;
  }

  /** Whether /readyz waits for this fold to be near the head (RunnerOptions.gatesReadiness). */
  get gatesReadiness(): boolean {
    return this.options.gatesReadiness ?? true;
  }

  get name(): string {
    return this.projection.name;
  }

  get state(): S {
    return this.current;
  }

  /**
   * Moves whenever the state may have changed (an event folded in, the state loaded or rebuilt),
   * and only then: what is derived from the state can be kept while it stays the same. Events of
   * types the projection does not fold do not move it.
   */
  get revision(): number {
    return this.changes;
  }

  async start(): Promise<void> {
    if (this.joined) return;
    const snapshot = await this.snapshots.load<S>(this.projection.name);
    if (snapshot && snapshot.version === this.projection.version) {
      this.current = snapshot.state;
      this.position = this.savedPosition = snapshot.checkpoint;
    } else {
      if (snapshot) {
        this.options.logger?.info(
          { projection: this.name, stored: snapshot.version, current: this.projection.version },
          'projection version changed: rebuilding from position 0',
        );
      }
      this.current = this.projection.initial();
      this.position = this.savedPosition = 0;
    }
    this.changes++;
    this.failure = null;
    this.joined = true;
    feedOf(this.store, this.options.logger ? { logger: this.options.logger } : {}).join(this);
    const running = runningOn.get(this.store) ?? new Set();
    runningOn.set(this.store, running.add(this as ProjectionRunner<unknown>));
    this.timer = setInterval(() => this.maybeSave(0), this.options.snapshotIntervalMs ?? 5_000);
    this.timer.unref();
  }

  /**
   * Stops tailing and saves a final snapshot, so a restart resumes exactly here. With
   * `drainMs`, it first folds what the log holds now (bounded by that time), so a graceful
   * shutdown leaves nothing to re-fold.
   */
  async stop(options: { drainMs?: number } = {}): Promise<void> {
    if (options.drainMs && this.joined && !this.failure) {
      // The drain is best effort, its head read too: a log already gone (closed under the
      // process) still lets the runner stop and keep what it folded.
      const drained = async () => this.waitFor(await this.store.headPosition(), options.drainMs!);
      let late = false;
      // A drain left at the deadline fails later (the store closed under it): already told.
      const drain = drained().catch((err: unknown) => {
        if (!late)
          this.options.logger?.warn({ err, projection: this.name }, 'stopped before reaching the head');
      });
      late = !(await beforeStopDeadline(this.store, drain));
      if (late)
        this.options.logger?.warn(
          { projection: this.name, position: this.position },
          'stopped before reaching the head: the log did not answer by the stop deadline',
        );
    }
    const wasJoined = this.joined;
    this.joined = false;
    runningOn.get(this.store)?.delete(this as ProjectionRunner<unknown>);
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // The last member's leave waits for the feed's read in flight, which a silent store never ends.
    const left = wasJoined ? feedOf(this.store).leave(this) : Promise.resolve();
    const saved = left.then(() => this.saveSnapshot());
    // Rejected here when awaited below; when left behind at the deadline, its failure is moot.
    saved.catch(() => undefined);
    if (!(await beforeStopDeadline(this.store, saved))) {
      this.options.logger?.warn(
        { projection: this.name, position: this.position, saved: this.savedPosition },
        'projection snapshot not saved by the stop deadline: the next start re-folds from the last saved one',
      );
      return;
    }
    await saved;
  }

  /** Throws the state away and folds the whole log again from position 0. */
  async rebuild(): Promise<void> {
    await this.stop();
    await this.snapshots.delete(this.projection.name);
    await this.start();
  }

  /**
   * Per event type ordinal (see log-feed.ts): 1 when the projection folds that type, 2 when it
   * passes it over, 0 not yet looked at. Most projections fold a few of the log's types, and a
   * rebuild would otherwise call every projection's `evolve` for every event.
   */
  private wants = new Uint8Array(64);
  private readonly folds: ReadonlySet<string> | null;

  private foldsOrdinal(ordinal: number): boolean {
    if (ordinal >= this.wants.length) {
      const grown = new Uint8Array(Math.max(ordinal + 1, this.wants.length * 2));
      grown.set(this.wants);
      this.wants = grown;
    }
    let w = this.wants[ordinal]!;
    if (w === 0) {
      const type = typeOfOrdinal(ordinal);
      w = type === undefined || !this.folds || this.folds.has(type) ? 1 : 2;
      // Ordinal 0 stands for any type past the table: never remembered, always folded.
      if (ordinal !== 0) this.wants[ordinal] = w;
    }
    return w === 1;
  }

  /** Folds the events of a page past the checkpoint; called by the feed, synchronously. */
  receive(page: readonly RecordedEvent[], index?: PageIndex): void {
    if (!this.joined || this.failure) return;
    const { evolve, evolveValid } = this.projection;
    let state = this.current;
    const from = firstIndex(page.length, (i) => page[i]!.position > this.position);
    let i = from;
    try {
      if (index && this.folds) {
        const types = index.types;
        for (; i < page.length; i++) {
          const ordinal = types[i]!;
          if (!this.foldsOrdinal(ordinal)) continue;
          if (evolveValid && ordinal !== 0) {
            // One of its types: validated once for all the projections folding it.
            const event = parsedAt(page, index, i);
            if (event) state = evolveValid(state, event);
          } else {
            state = evolve(state, page[i]!);
          }
          this.current = state;
          this.changes++;
        }
      } else {
        for (; i < page.length; i++) {
          state = evolve(state, page[i]!);
          this.current = state;
          this.changes++;
        }
      }
      if (from < page.length) this.position = page[page.length - 1]!.position;
    } catch (err) {
      // A fold that threw may have changed the state part way.
      this.changes++;
      // The checkpoint a snapshot saves: up to the event before the one that threw.
      if (i > from) this.position = page[i - 1]!.position;
      // A fold that throws stops this projection (and shows in /readyz) rather than skipping
      // an event, which would make the state silently differ from a rebuild.
      this.failure = err instanceof Error ? err : new Error(String(err));
      this.options.logger?.error(
        { err, projection: this.name, position: this.position },
        'projection stopped',
      );
      void feedOf(this.store).leave(this);
    }
    this.releaseWaiters();
    // A snapshot that cannot be saved (a full disk) must not stop the fold: the state stays
    // right in memory and the next save (by count or by the interval) tries again.
    // Also at most once per `snapshotGapMs`: a catch-up folds thousands of events a millisecond,
    // and encoding the whole state for every `snapshotEvery` of them would cost more than the folds.
    if (this.position - this.savedPosition >= (this.options.snapshotEvery ?? 1000)) {
      this.maybeSave(this.options.snapshotGapMs ?? 5_000);
    }
  }

  /**
   * Saves unless a save is already queued or running (by count or by the timer: queued behind a
   * slow one, they would all run) or the last one was too recent for `gapMs` and its own cost.
   */
  private maybeSave(gapMs: number): void {
    if (this.savePending || !this.saveDue(gapMs)) return;
    this.savePending = true;
    this.saveSnapshot()
      .catch((err: unknown) =>
        this.options.logger?.warn(
          { err, projection: this.name },
          'projection snapshot not saved; will retry',
        ),
      )
      .finally(() => {
        this.savePending = false;
      });
  }

  /**
   * At least `gapMs` since the last save, and long enough for that save's cost to stay a small
   * share. A state unchanged since the last save, whose checkpoint moved only over events of types
   * it passes over (a busy log's verdicts and debits, for most projections), waits MAX_SAVE_GAP_MS
   * (or `gapMs`, when longer: a runner that saves rarely by design keeps doing so):
   * a save would encode and write the same state again only to shorten the re-read after a crash,
   * and that re-read is of events this fold skips. On a 1M-event log under keyed calls, four of the
   * eleven projections (payment states, open payments, key registry, webhooks) re-encoded an
   * unchanged state every 5 s.
   */
  private saveDue(gapMs: number): boolean {
    const since = performance.now() - this.savedAt;
    if (this.changes === this.savedChanges) return since >= Math.max(gapMs, MAX_SAVE_GAP_MS);
    const costGap = Math.min(MAX_SAVE_GAP_MS, SAVE_COST_SHARE * this.lastSaveMs);
    return since >= Math.max(gapMs, costGap);
  }

  /** Saves are chained so that an older snapshot can never land after a newer one. */
  private saveSnapshot(): Promise<void> {
    this.saving = this.saving
      .catch(() => undefined)
      .then(async () => {
        if (this.position === this.savedPosition) return;
        const checkpoint = this.position;
        const changes = this.changes;
        const started = performance.now();
        await this.snapshots.save(this.projection.name, {
          version: this.projection.version,
          checkpoint,
          state: this.current,
        });
        this.savedPosition = checkpoint;
        this.savedChanges = changes;
        this.savedAt = performance.now();
        this.lastSaveMs = this.savedAt - started;
      });
    return this.saving;
  }
}
