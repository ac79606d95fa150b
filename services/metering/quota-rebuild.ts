import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { type Cache, CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import type { RecordedEvent } from '../../contracts/envelope.ts';
import {
  addUnits,
  DEBIT_EVENT_TYPES,
  debitedUnits,
  type QuotaBalances,
  quotaBalancesProjection,
} from './quota-projection.ts';
import { chatKey, counterExpiry, resetsAtOf } from './windows.ts';

/** The cache's family of quota counters (calls and monthly chats): its marker names the live generation. */
export const QUOTA_FAMILY = 'quota';

/** How late after the switch a debit counted in the replaced generation may still be appended. */
const DEFAULT_SETTLE_MS = 10_000;

export interface RebuildOutcome {
  generation: string;
  previous: string | null;
  /** False when another rebuild, or a loss, switched first: this one was discarded. */
  switched: boolean;
  windows: number;
  events: number;
  position: number;
  /** Debits counted in another generation and appended after the switch. */
  replayed: number;
  /** Builds started over because the cache lost the one being built. */
  restarts: number;
}

const COUNTED = new Set<string>([...DEBIT_EVENT_TYPES, 'ChatQuotaConsumed', 'ChatQuotaRefunded']);
const DEBITS = new Set<string>(DEBIT_EVENT_TYPES);

/** Adds one counted event to a page's deltas (a chat delta may go below 0: the cache clamps). */
function fold(state: QuotaBalances, event: RecordedEvent): void {
  if (DEBITS.has(event.type)) {
    quotaBalancesProjection.evolve(state, event);
    return;
  }
  const { subject, month } = event.data as { subject: string; month: string };
  const delta = event.type === 'ChatQuotaConsumed' ? 1 : -1;
  addUnits(state, chatKey(subject, month), delta, counterExpiry(resetsAtOf(month)));
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
  /** A checkpoint to start from (only for a build that replaces no live generation). */
  from?: QuotaCheckpoint;
}

export interface QuotaCheckpoint {
  position: number;
  state: QuotaBalances;
}

function newGenerationId(): string {
  return `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}`;
}

const MAX_BUILDS = 5;

/**
 * Rebuilds the quota counters from the log into a new generation while debits go on: fold the log
 * into it (not live yet), switch the marker to it in one compare-and-set (refused when the cache
 * lost the build: it starts over), then replay the debits counted in the replaced generation and
 * appended after the fold, until its count is all on the log or, unknown, up to the head as it is
 * `settleMs` after the switch. The new counters end equal to the log.
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
  try {
    await cache.beginGeneration(generation);
    if (deps.from) windows += await write(structuredClone(deps.from.state));
    // Up to the head as it was when each pass began (never chasing it); the second pass narrows
    // what the new generation undercounts between the switch and the replay.
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
    // Nothing else switched: this build's mark went with the cache's data. Build again.
    const current = (await cache.liveGeneration(QUOTA_FAMILY))?.id ?? null;
    if (current === previous) return 'lost';
    return { generation, previous, switched, ...done, replayed: 0 };
  }
  deps.onLive?.(generation);

  // The replaced generation's count is final now (missing: none taken); with no previous one, unknown.
  const debitedOnPrevious = previous === null ? null : ((await cache.generationDebits(previous)) ?? 0);
  const deadline = Date.now() + (deps.settleMs ?? DEFAULT_SETTLE_MS);
  const debitsAtSwitch = debits;
  // The head once the settle time is over: the replay reads up to it however long that takes
  // (a reader that stopped at the deadline left the counters short of the log: free calls).
  let last: number | null = null;
  for (;;) {
    const complete = debitedOnPrevious !== null && loggedOnPrevious >= debitedOnPrevious;
    if (complete || deps.signal?.aborted) break;
    if (last === null && Date.now() >= deadline) last = await store.headPosition();
    if (last !== null && position >= last) break;
    const state = quotaBalancesProjection.initial();
    const more = await readPage(state);
    await write(state);
    // A page short of `last` is a store holding reads back (PostgreSQL): wait, do not spin.
    if (!more && (last === null || position < last)) await sleep(deps.pollMs ?? 50, deps.signal);
  }
  if (previous !== null) await cache.dropGeneration(previous);
  return { generation, previous, switched, ...done, replayed: debits - debitsAtSwitch };
}

function debitGeneration(event: RecordedEvent): string | undefined {
  const tag = (event.data as { generation?: unknown }).generation;
  return typeof tag === 'string' ? tag : undefined;
}

/** Units an event stands for in its generation's count of operations (a return's as positive, as refundLive counts). */
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

export const QUOTA_CHECKPOINT = 'quota-counters';
// 2: QuotaDebitsReturned folded.
export const CHECKPOINT_VERSION = 2;
const DEFAULT_CHECKPOINT_EVERY_MS = 5 * 60_000;

/**
 * Keeps one process's quota counters live: rebuilds them from the log when their generation is
 * gone, once at a time per process (the marker's compare-and-set lets one replica win). With a
 * projection store the fold is checkpointed (every few minutes and at stop), so a boot folds only
 * the events after it.
 */
export class QuotaCounters {
  private pending: Promise<void> | null = null;
  private readonly abort = new AbortController();
  private readonly tails = new Set<Promise<unknown>>();
  private checkpoint: QuotaCheckpoint | null = null;
  private checkpointing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      cache: Cache;
      logger?: Logger;
      checkpoints?: ProjectionStore;
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

  /** Folds the counted events after the last checkpoint (from the log, not the cache) into a new one. */
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
    if (!base) return; // no rebuild yet: the first one makes it
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
    // Past the head: another log's (a replaced data directory).
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
    }, DEFAULT_CHECKPOINT_EVERY_MS);
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
    const run = rebuildQuotaGeneration({
      store,
      cache,
      expected: null,
      onLive: () => live(),
      signal: this.abort.signal,
      // The in-process cache has no other process's debits in flight.
      settleMs: cache.kind === 'memory' ? 0 : undefined,
      ...(from ? { from } : {}),
    });
    const tail = run
      .then(async (outcome) => {
        logger?.info(
          { ...outcome, from: from?.position ?? 0, ms: Date.now() - started },
          outcome.switched
            ? 'quota counters rebuilt from the log'
            : 'quota counters rebuilt by another process first',
        );
        // The checkpoint folds the log (not the counters) from the one the build started at.
        this.checkpoint ??= from ?? { position: 0, state: {} };
        await this.saveCheckpoint();
        this.keepCheckpointing();
      })
      .catch((err: unknown) => logger?.error({ err }, 'quota counter rebuild failed'));
    this.tails.add(tail);
    void tail.finally(() => this.tails.delete(tail));
    await Promise.race([isLive, run.then(() => undefined)]);
  }
}
