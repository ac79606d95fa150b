import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from 'pino';
import { type Cache, CacheUnavailableError } from '../../adapters/cache/port.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import type { ProjectionStore } from '../../adapters/projection-store/port.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { DEBITS, debitedUnits, type QuotaBalances, quotaBalancesProjection } from './quota-projection.ts';

/** The cache's family of quota counters (calls and monthly chats): its marker names the live generation. */
export const QUOTA_FAMILY = 'quota';

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

const COUNTED = new Set<string>(quotaBalancesProjection.eventTypes);

export interface RebuildDeps {
  store: EventStore;
  cache: Cache;
  /** The live generation to replace; undefined: whatever is live now. */
  expected?: string | null;
  now?: () => number;
  pageSize?: number;
  /** How late after the switch a debit counted in the replaced generation may still be appended (10 s). */
  settleMs?: number;
  /** Called as soon as the new generation is live, before the replay of late debits. */
  onLive?: (generation: string) => void;
  signal?: AbortSignal;
  /** A checkpoint to start from (only for a build that replaces no live generation). */
  from?: { position: number; state: QuotaBalances };
}

const MAX_BUILDS = 5;

/**
 * Rebuilds the quota counters from the log into a new generation while debits go on: fold the log into
 * it, switch the marker to it in one compare-and-set (refused when the cache lost the build: it starts
 * over), then replay the replaced generation's debits appended after the fold, until its count is all on
 * the log or, unknown, up to the head `settleMs` after the switch. The counters end equal to the log.
 */
export async function rebuildQuotaGeneration(deps: RebuildDeps): Promise<RebuildOutcome> {
  const previous =
    deps.expected === undefined
      ? ((await deps.cache.liveGeneration(QUOTA_FAMILY))?.id ?? null)
      : deps.expected;
  if (deps.from && previous !== null)
    throw new Error('quota rebuild: a checkpoint only seeds a build that replaces no generation');
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
  const generation = `${Date.now().toString(36)}-${randomBytes(6).toString('hex')}`;
  let position = deps.from?.position ?? 0;
  let events = 0;
  let debits = 0;
  let loggedOnPrevious = 0;
  let windows = 0;

  const write = async (state: QuotaBalances): Promise<void> => {
    const at = now();
    const live = Object.entries(state)
      .filter(([, w]) => w.expiresAt > at)
      .map(([key, w]) => ({ key, count: w.count, expiresAt: w.expiresAt }));
    for (let i = 0; i < live.length; i += 500)
      await cache.addToGeneration(generation, live.slice(i, i + 500));
    windows += live.length;
  };
  /** Folds the next page of the log into the new generation; false once a page ends short (the head). */
  const step = async (): Promise<boolean> => {
    const state = quotaBalancesProjection.initial();
    const page = await store.readAll({ after: position, maxCount: pageSize });
    for (const event of page) {
      if (!COUNTED.has(event.type)) continue;
      const tag = (event.data as { generation?: unknown }).generation;
      // Counted in its generation as an operation of its units (a return's as positive, as refundLive counts).
      if (previous !== null && tag === previous)
        loggedOnPrevious += DEBITS.has(event.type) ? Math.abs(debitedUnits(event)) : 1;
      if (tag === generation) continue;
      quotaBalancesProjection.evolve(state, event);
      debits++;
    }
    events += page.length;
    if (page.length > 0) position = page[page.length - 1]!.position;
    await write(state);
    return page.length === pageSize;
  };

  let switched: boolean;
  try {
    await cache.beginGeneration(generation);
    if (deps.from) await write(structuredClone(deps.from.state));
    // Up to the head as each pass began (never chasing it); the second narrows the undercount at the switch.
    for (let pass = 0; pass < 2; pass++) {
      const target = await store.headPosition();
      for (let more = true; more && position < target; ) more = await step();
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
  const deadline = Date.now() + (deps.settleMs ?? 10_000);
  const debitsAtSwitch = debits;
  // The head once the settle time is over: read up to however long it takes (stopping short is free calls).
  let last: number | null = null;
  for (;;) {
    const complete = debitedOnPrevious !== null && loggedOnPrevious >= debitedOnPrevious;
    if (complete || deps.signal?.aborted) break;
    if (last === null && Date.now() >= deadline) last = await store.headPosition();
    if (last !== null && position >= last) break;
    const more = await step();
    // A page short of `last` is a store holding reads back (PostgreSQL): wait, do not spin.
    if (!more && (last === null || position < last))
      await delay(50, undefined, { signal: deps.signal, ref: false }).catch(() => undefined);
  }
  if (previous !== null) await cache.dropGeneration(previous);
  return { generation, previous, switched, ...done, replayed: debits - debitsAtSwitch };
}

/**
 * Keeps one process's quota counters live: rebuilds them from the log when their generation is gone, one
 * at a time (the marker's compare-and-set lets one replica win). With a projection store the fold runs as
 * a projection with snapshots, and a rebuild starts from its state.
 */
export class QuotaCounters {
  private pending: Promise<void> | null = null;
  private readonly abort = new AbortController();
  private readonly tails = new Set<Promise<unknown>>();
  private readonly fold: ProjectionRunner<QuotaBalances> | null;

  constructor(
    private readonly deps: {
      store: EventStore;
      cache: Cache;
      logger?: Logger;
      checkpoints?: ProjectionStore;
    },
  ) {
    this.fold = deps.checkpoints
      ? new ProjectionRunner(deps.store, deps.checkpoints, quotaBalancesProjection, {
          // Its state (a month of windows) only seeds a rebuild: saved every 5 minutes, nothing waits on it.
          snapshotIntervalMs: 300_000,
          snapshotGapMs: 300_000,
          gatesReadiness: false,
          ...(deps.logger ? { logger: deps.logger } : {}),
        })
      : null;
  }

  /** Resolves once a generation is live, rebuilding first when none is. */
  ensure(): Promise<void> {
    this.pending ??= this.rebuildIfLost().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  /** Stops replays still running in the background, and the fold once it holds the log's head. */
  async stop(): Promise<void> {
    this.abort.abort();
    await Promise.allSettled([...this.tails]);
    await this.fold?.stop({ drainMs: 2_000 });
  }

  private async rebuildIfLost(): Promise<void> {
    const { cache, store, logger } = this.deps;
    const { fold } = this;
    // Not once stopping (no fold on a closing store). A fold past the log's head is another log's: redone.
    if (fold && !this.abort.signal.aborted) {
      await fold.start();
      if (fold.checkpoint > (await store.headPosition())) {
        logger?.warn(
          { checkpoint: fold.checkpoint },
          'quota checkpoint is ahead of the log: ignoring it, folding the log from the start',
        );
        await fold.rebuild();
      }
    }
    if ((await cache.liveGeneration(QUOTA_FAMILY)) !== null) return;
    // State and position copied together; a fold that threw may be past its checkpoint: from the start.
    const from =
      this.fold && !this.fold.error
        ? { position: this.fold.checkpoint, state: structuredClone(this.fold.state) }
        : null;
    logger?.[from?.position || cache.kind === 'memory' ? 'info' : 'warn'](
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
      .then((outcome) =>
        logger?.info(
          { ...outcome, from: from?.position ?? 0, ms: Date.now() - started },
          outcome.switched
            ? 'quota counters rebuilt from the log'
            : 'quota counters rebuilt by another process first',
        ),
      )
      .catch((err: unknown) => logger?.error({ err }, 'quota counter rebuild failed'));
    this.tails.add(tail);
    void tail.finally(() => this.tails.delete(tail));
    await Promise.race([isLive, run.then(() => undefined)]);
  }
}
