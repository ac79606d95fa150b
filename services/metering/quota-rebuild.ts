import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { type Cache, CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import {
  DEBIT_EVENT_TYPES,
  debitedUnits,
  type QuotaBalances,
  quotaBalancesProjection,
} from './quota-projection.ts';
import { chatKey, counterExpiry, resetsAtOf } from './windows.ts';

/**
 * The cache's family of quota counters: its marker names the live generation. It holds the call
 * windows (QuotaDebitsRecorded less QuotaDebitsReturned, and QuotaDebited in older logs) and the monthly chat windows
 * (ChatQuotaConsumed / ChatQuotaRefunded), so both come back from the log together after a loss.
 */
export const QUOTA_FAMILY = 'quota';

/**
 * How late after the switch a debit counted in the replaced generation may still be appended:
 * past it, a rebuild that cannot tell that all of them are on the log (the replaced generation was
 * lost with the server's data, or some append failed) replays up to the head and stops. A debit
 * is appended right after it is counted, inside its request, so this bounds the time between the two.
 */
const DEFAULT_SETTLE_MS = 10_000;

export interface RebuildOutcome {
  generation: string;
  /** The generation it replaced (null: none was live). */
  previous: string | null;
  /** False when another rebuild, or a loss, switched first: this one was discarded. */
  switched: boolean;
  /** Open windows written, and events folded, before the switch. */
  windows: number;
  events: number;
  /** Log position folded up to at the switch (the marker's position). */
  position: number;
  /** Debits counted in another generation and appended after the switch, replayed afterwards. */
  replayed: number;
  /** Builds started over because the cache lost the generation being built (its sentinel). */
  restarts: number;
}

/** The events that change a counter of the quota family. */
const COUNTED = new Set<string>([...DEBIT_EVENT_TYPES, 'ChatQuotaConsumed', 'ChatQuotaRefunded']);
const DEBITS = new Set<string>(DEBIT_EVENT_TYPES);

/**
 * Adds one counted event to a page's deltas. Not the projections' own folds: a page may hold a
 * chat's refund without its consumption, so a chat delta may go below 0 (the cache clamps).
 */
function fold(state: QuotaBalances, event: RecordedEvent): void {
  if (DEBITS.has(event.type)) {
    quotaBalancesProjection.evolve(state, event);
    return;
  }
  const { subject, month } = event.data as { subject: string; month: string };
  const key = chatKey(subject, month);
  const delta = event.type === 'ChatQuotaConsumed' ? 1 : -1;
  const current = state[key];
  if (current) current.count += delta;
  else state[key] = { count: delta, expiresAt: counterExpiry(resetsAtOf(month)) };
}

export interface RebuildDeps {
  store: EventStore;
  cache: Cache;
  /** The live generation to replace; undefined: whatever is live now. */
  expected?: string | null;
  now?: () => number;
  pageSize?: number;
  settleMs?: number;
  pollMs?: number;
  /** Called as soon as the new generation is live, before the replay of late debits. */
  onLive?: (generation: string) => void;
  signal?: AbortSignal;
  /**
   * Counters already folded from the log up to `position` (a checkpoint): the build starts from
   * them and folds only the events after it. Only for a build that replaces no live generation
   * (`expected: null`), since the debits a replaced generation logged before `position` are
   * not counted again here.
   */
  from?: QuotaCheckpoint;
  /** Called at the switch with every counted event up to its position folded (`from` included). */
  onFolded?: (checkpoint: QuotaCheckpoint) => void;
}

/** Every counted event up to `position`, folded: where the next build can start instead of 0. */
export interface QuotaCheckpoint {
  position: number;
  state: QuotaBalances;
}

function newGenerationId(): string {
  return `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}`;
}

/** Builds started over after the cache lost the one in progress, before giving up. */
const MAX_BUILDS = 5;

/**
 * Rebuilds the quota counters from the log into a new generation, while debits go on:
 *
 * 1. mark the new generation as being built, fold every counted event into its counters (not
 *    live yet: debits keep landing on the live one), and catch up to the head;
 * 2. switch the marker to it in one compare-and-set, so each debit lands on exactly one
 *    generation and says which on its event; the switch refuses a generation whose build mark
 *    is gone (the cache lost data mid-build: what it holds is partial), and the build starts over;
 * 3. keep replaying the debits appended after the fold that were counted in another generation
 *    (in flight at the switch), until the replaced generation's debit count is all on the log,
 *    or, when that count is unknown or never reached, up to the head as it is `settleMs` after
 *    the switch; debits counted in the new generation are skipped.
 *
 * So the new counters end equal to the log: no debit lost, none counted twice.
 */
export async function rebuildQuotaGeneration(deps: RebuildDeps): Promise<RebuildOutcome> {
  const previous =
    deps.expected === undefined
      ? ((await deps.cache.liveGeneration(QUOTA_FAMILY))?.id ?? null)
      : deps.expected;
  for (let restarts = 0; ; restarts++) {
    const outcome = await buildOnce(deps, previous, restarts);
    if (outcome !== 'lost') return outcome;
    if (restarts + 1 >= MAX_BUILDS)
      throw new CacheUnavailableError(
        `quota counters: the cache lost ${MAX_BUILDS} generations in a row while they were built`,
      );
  }
}

async function buildOnce(
  deps: RebuildDeps,
  previous: string | null,
  restarts: number,
): Promise<RebuildOutcome | 'lost'> {
  const { store, cache } = deps;
  const now = deps.now ?? Date.now;
  const pageSize = deps.pageSize ?? 1_000;
  const generation = newGenerationId();
  if (deps.from && previous !== null)
    throw new Error('quota rebuild: a checkpoint only seeds a build that replaces no generation');
  let position = deps.from?.position ?? 0;
  // Every counted event folded so far, for the next checkpoint: a page's state is written and gone.
  const folded: QuotaBalances | null = deps.onFolded ? structuredClone(deps.from?.state ?? {}) : null;
  let events = 0;
  let debits = 0;
  let loggedOnPrevious = 0;

  /** Folds the next page of the log into `state`; false once a page ends short (the head). */
  const readPage = async (state: QuotaBalances): Promise<boolean> => {
    const page = await store.readAll({ after: position, maxCount: pageSize });
    for (const event of page) {
      if (!COUNTED.has(event.type)) continue;
      const tag = debitGeneration(event);
      if (previous !== null && tag === previous) loggedOnPrevious += units(event);
      if (tag === generation) continue;
      fold(state, event);
      if (folded && !live) fold(folded, event);
      debits++;
    }
    events += page.length;
    if (page.length > 0) position = page[page.length - 1]!.position;
    return page.length === pageSize;
  };
  const write = async (state: QuotaBalances): Promise<number> => {
    const at = now();
    const windows = Object.entries(state)
      .filter(([, w]) => w.expiresAt > at)
      .map(([key, w]) => ({ key, count: w.count, expiresAt: w.expiresAt }));
    for (let i = 0; i < windows.length; i += 500)
      await cache.addToGeneration(generation, windows.slice(i, i + 500));
    return windows.length;
  };

  let windows = 0;
  let switched: boolean;
  let live = false;
  try {
    await cache.beginGeneration(generation);
    if (deps.from) windows += await write(structuredClone(deps.from.state));
    // Up to the head as it was when each pass began: traffic faster than the fold must not keep
    // it chasing the head forever (debits after it are replayed after the switch). The second
    // pass narrows the stretch the new generation undercounts between the switch and the replay.
    for (let pass = 0; pass < 2; pass++) {
      const target = await store.headPosition();
      for (let more = true; more && position < target; ) {
        const state = quotaBalancesProjection.initial();
        more = await readPage(state);
        windows += await write(state);
      }
    }
    switched = await cache.switchGeneration(QUOTA_FAMILY, previous, { id: generation, position });
  } catch (err) {
    await cache.dropGeneration(generation).catch(() => undefined);
    throw err;
  }
  const done = { windows, events, position, restarts };
  if (!switched) {
    await cache.dropGeneration(generation);
    // Still the generation it meant to replace: nothing else switched, so the refusal was this
    // build's mark gone with the cache's data. Build again from scratch.
    const current = (await cache.liveGeneration(QUOTA_FAMILY))?.id ?? null;
    if (current === previous) return 'lost';
    return { generation, previous, switched, ...done, replayed: 0 };
  }
  live = true;
  if (folded) deps.onFolded?.({ position, state: folded });
  deps.onLive?.(generation);

  // The replaced generation takes no more debits: its count is now final. Its marker was there at
  // the switch, so a missing count means it never took a debit; without a previous one, the
  // debits in flight (of a generation lost with the server's data) are unknown.
  const debitedOnPrevious = previous === null ? null : ((await cache.generationDebits(previous)) ?? 0);
  const deadline = Date.now() + (deps.settleMs ?? DEFAULT_SETTLE_MS);
  const debitsAtSwitch = debits;
  // The head once the settle time is over: every debit counted before the switch is on the log
  // by then, so the replay reads up to it and no further. The deadline bounds how late a debit is
  // appended, not how long the reading takes: a reader slower than the traffic (a loaded machine,
  // a long log) that stopped at the deadline left the counters short of the log, free calls.
  let last: number | null = null;
  for (;;) {
    const complete = debitedOnPrevious !== null && loggedOnPrevious >= debitedOnPrevious;
    if (complete || deps.signal?.aborted) break;
    if (last === null && Date.now() >= deadline) last = await store.headPosition();
    if (last !== null && position >= last) break;
    const state = quotaBalancesProjection.initial();
    const more = await readPage(state);
    await write(state);
    // A short page before the deadline is the head; after it, a page short of `last` is a store
    // holding reads back (PostgreSQL, below a write still open): wait for it instead of spinning.
    if (!more && (last === null || position < last)) await sleep(deps.pollMs ?? 50, deps.signal);
  }
  if (previous !== null) await cache.dropGeneration(previous);
  return { generation, previous, switched, ...done, replayed: debits - debitsAtSwitch };
}

function debitGeneration(event: RecordedEvent): string | undefined {
  const tag = (event.data as { generation?: unknown }).generation;
  return typeof tag === 'string' ? tag : undefined;
}

/**
 * Units an event stands for in its generation's count of logged operations (a chat's: 1). A
 * lease's return counts its units there as positive (refundLive counted them so), though it folds
 * them as taken back.
 */
function units(event: RecordedEvent): number {
  return DEBITS.has(event.type) ? Math.abs(debitedUnits(event)) : 1;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    timer.unref();
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** The projection-store entry of the quota checkpoint; a changed fold bumps its version. */
export const QUOTA_CHECKPOINT = 'quota-counters';
// 2: QuotaDebitsReturned folded (a checkpoint of version 1 may have passed returns over).
export const CHECKPOINT_VERSION = 2;
/** How often a running process folds the debits since its last checkpoint into a new one. */
const DEFAULT_CHECKPOINT_EVERY_MS = 5 * 60_000;

/**
 * Keeps one process's quota counters live: rebuilds them from the log when their generation is
 * gone (at start, after a reconnection, or when a debit finds none), once at a time per process.
 * Several replicas may rebuild at once; the marker's compare-and-set lets exactly one win.
 *
 * With a projection store, the counters folded from the log are kept there with their position
 * (a checkpoint, refreshed every few minutes and at stop), so a rebuild folds only the events
 * after it: the in-process cache starts empty at every boot, and folding the whole log each time
 * would make start-up grow with it.
 */
export class QuotaCounters {
  private pending: Promise<void> | null = null;
  private readonly abort = new AbortController();
  private readonly tails = new Set<Promise<unknown>>();
  /** The newest checkpoint this process holds (loaded, built, or advanced), null before any. */
  private checkpoint: QuotaCheckpoint | null = null;
  private checkpointing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      cache: Cache;
      logger?: Logger;
      settleMs?: number;
      /** Where the checkpoint is kept; without it every rebuild folds the log from 0. */
      checkpoints?: ProjectionStore;
      checkpointEveryMs?: number;
      now?: () => number;
    },
  ) {}

  /** Resolves once a generation is live, rebuilding first when none is. */
  ensure(): Promise<void> {
    this.pending ??= this.rebuildIfLost().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  /** Stops replays still running in the background, and saves a checkpoint up to the head. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    this.abort.abort();
    await Promise.allSettled([...this.tails]);
    await this.saveCheckpoint().catch((err: unknown) =>
      this.deps.logger?.warn({ err }, 'quota checkpoint not saved at stop'),
    );
  }

  /**
   * Folds the counted events after the last checkpoint into a new one and saves it. The fold is
   * of the log alone (not of the cache), so it holds whichever generation the debits landed on.
   */
  saveCheckpoint(): Promise<void> {
    this.checkpointing ??= this.advanceCheckpoint().finally(() => {
      this.checkpointing = null;
    });
    return this.checkpointing;
  }

  private async advanceCheckpoint(): Promise<void> {
    const { store, checkpoints } = this.deps;
    if (!checkpoints) return;
    const base = this.checkpoint ?? (await this.loadCheckpoint());
    if (!base) return; // no rebuild yet: the first one folds the log and makes it
    const state = structuredClone(base.state);
    let position = base.position;
    const head = await store.headPosition();
    while (position < head) {
      const page = await store.readAll({ after: position, maxCount: 1_000 });
      if (page.length === 0) break;
      for (const event of page) if (COUNTED.has(event.type)) fold(state, event);
      position = page[page.length - 1]!.position;
    }
    if (position === base.position && this.checkpoint) return;
    await this.storeCheckpoint({ position, state });
  }

  private async loadCheckpoint(): Promise<QuotaCheckpoint | null> {
    const { checkpoints, store, logger } = this.deps;
    if (!checkpoints) return null;
    const stored = await checkpoints.load<QuotaBalances>(QUOTA_CHECKPOINT);
    if (!stored || stored.version !== CHECKPOINT_VERSION) return null;
    // A checkpoint past the head belongs to another log (a replaced data directory): fold from 0.
    if (stored.checkpoint > (await store.headPosition())) {
      logger?.warn(
        { checkpoint: stored.checkpoint },
        'quota checkpoint is ahead of the log: ignoring it, folding the log from the start',
      );
      return null;
    }
    return { position: stored.checkpoint, state: stored.state };
  }

  private async storeCheckpoint(checkpoint: QuotaCheckpoint): Promise<void> {
    const { checkpoints } = this.deps;
    if (!checkpoints) return;
    const at = (this.deps.now ?? Date.now)();
    // Closed windows are never read again: the checkpoint keeps only the open ones.
    const state: QuotaBalances = {};
    for (const [key, window] of Object.entries(checkpoint.state))
      if (window.expiresAt > at) state[key] = window;
    await checkpoints.save<QuotaBalances>(QUOTA_CHECKPOINT, {
      version: CHECKPOINT_VERSION,
      checkpoint: checkpoint.position,
      state,
    });
    this.checkpoint = { position: checkpoint.position, state };
  }

  private keepCheckpointing(): void {
    if (!this.deps.checkpoints || this.timer || this.abort.signal.aborted) return;
    this.timer = setInterval(() => {
      this.saveCheckpoint().catch((err: unknown) =>
        this.deps.logger?.warn({ err }, 'quota checkpoint not saved'),
      );
    }, this.deps.checkpointEveryMs ?? DEFAULT_CHECKPOINT_EVERY_MS);
    this.timer.unref();
  }

  private async rebuildIfLost(): Promise<void> {
    const { cache, store, logger } = this.deps;
    if ((await cache.liveGeneration(QUOTA_FAMILY)) !== null) {
      this.keepCheckpointing();
      return;
    }
    const from = (await this.loadCheckpoint()) ?? undefined;
    logger?.[from || cache.kind === 'memory' ? 'info' : 'warn'](
      { from: from?.position ?? 0 },
      'quota counters missing (new or emptied cache): rebuilding them from the log',
    );
    const started = Date.now();
    let live!: () => void;
    const isLive = new Promise<void>((resolve) => {
      live = resolve;
    });
    let folded: QuotaCheckpoint | null = null;
    const run = rebuildQuotaGeneration({
      store,
      cache,
      expected: null,
      onLive: () => live(),
      signal: this.abort.signal,
      // The in-process cache has no debits of another process or of a lost generation in flight.
      settleMs: this.deps.settleMs ?? (cache.kind === 'memory' ? 0 : undefined),
      ...(from ? { from } : {}),
      ...(this.deps.checkpoints
        ? {
            onFolded: (checkpoint: QuotaCheckpoint) => {
              folded = checkpoint;
            },
          }
        : {}),
    });
    const tail = run
      .then(async (outcome) => {
        logger?.info(
          { ...outcome, from: from?.position ?? 0, ms: Date.now() - started },
          outcome.switched
            ? 'quota counters rebuilt from the log'
            : 'quota counters rebuilt by another process first',
        );
        // A fold that started from 0 is worth keeping at once; one from a checkpoint only moved it.
        const checkpoint = folded as QuotaCheckpoint | null;
        if (checkpoint && checkpoint.position > (from?.position ?? -1))
          await this.storeCheckpoint(checkpoint);
        else if (from) this.checkpoint = from;
        this.keepCheckpointing();
      })
      .catch((err: unknown) => logger?.error({ err }, 'quota counter rebuild failed'));
    this.tails.add(tail);
    void tail.finally(() => this.tails.delete(tail));
    // A rebuild that lost the race ends without going live: another one did.
    await Promise.race([isLive, run.then(() => undefined)]);
  }
}
