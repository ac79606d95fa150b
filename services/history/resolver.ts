import type { Logger } from 'pino';
import { type EventStore, type Lease, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import {
  InsufficientHistoryError,
  MarketDataError,
  UnknownCoinError,
  UnsupportedExchangeError,
  UnsupportedTimeframeError,
} from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent, parseDomainEvent } from '../../contracts/events.ts';
import { OUTCOME_AFTER_CANDLES, outcomeStream } from '../../contracts/history.ts';
import type { Exchange } from '../../contracts/market.ts';
import { eventsBehind } from '../../projections/lag.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { forEachLimited } from '../engine/for-each-limited.ts';
import type { Check } from '../shared/readiness.ts';
import { failureFields, type RunFailure } from '../shared/run-failure.ts';
import { resolveOutcome } from './outcome.ts';
import { marketKey, pendingIndex } from './pending-index.ts';
import type { PendingOutcomes, PendingVerdict } from './projections.ts';

/**
 * Longest wait before asking again for candles that will most likely never come: a coin, venue or
 * timeframe the feed does not serve, or one verdict's own history that the venue no longer keeps.
 */
const PERMANENT_BACKOFF_MS = 600_000;
/** Longest wait before asking again for candles that are only missing for now (venue down). */
const TRANSIENT_BACKOFF_MS = 60_000;

interface Backoff {
  retryAt: number;
  delayMs: number;
}

/**
 * The outcome processor: for each pending verdict whose last horizon has closed in feed time,
 * reads the candles that followed it from the same feed and appends VerdictOutcomeResolved to
 * the verdict's own outcome stream. The append expects "no stream" with a deterministic id, so
 * two replicas resolving the same verdict write it once.
 *
 * It waits until the pending view has once come within `maxLag` of the log's head (again after a
 * rebuild): while it catches up (a first boot, a rebuild) the log ahead of it holds most of these
 * outcomes already, and resolving them again would cost a read, a candle fetch and a refused
 * append each. A market whose candles cannot be had is skipped until its backoff passes (doubling
 * from the tick interval), so a coin the feed does not list (delisted, or absent from a replay)
 * costs one failed fetch per backoff, not one per pending verdict per tick. A tick reads the pending
 * view through its index by market and due time (pending-index.ts): it looks at each market's
 * earliest due time and at the verdicts due, so its cost follows what is due, not what is pending.
 *
 * Each outcome is chained to the previous outcome of its verdict stream (outcome.ts): a stream's
 * verdicts are resolved one at a time, oldest first, and the head each links to is the one this
 * process last appended for the stream, else the pending view's, which is waited on to fold the
 * whole log before the first resolution. So one resolver per log writes the chains: two would
 * link two outcomes to one head and fork a chain for good (`history verify` reports it). The
 * outcomes of one chain live in streams of their own (one per verdict), so no expected revision
 * of one stream can refuse the second link; where the store offers a lease shared by every
 * process on the log (PostgreSQL), the resolver works only while it holds it, and one that takes
 * it over waits for the view to fold the whole log again before it links to any head.
 */
export class OutcomeResolver {
  readonly name = 'outcome-resolver';
  private timer: NodeJS.Timeout | null = null;
  private tick: Promise<void> | null = null;
  /** The last pass asked for: the next one starts after it (see resolveDue). */
  private pass: Promise<unknown> = Promise.resolve();
  private readonly inFlight = new Set<string>();
  /** Verdicts whose following candles have a gap: never labelled, reported once. */
  private readonly gaps = new Set<string>();
  /** Backoff of a market whose candles the feed refused (the error is the market's). */
  private readonly markets = new Map<string, Backoff>();
  /** Backoff of one verdict with too little history, which must not hold back its market's newer ones. */
  private readonly verdicts = new Map<string, Backoff>();
  /** Verdicts this process labelled that the pending view has not folded yet: not resolved again. */
  private readonly labelled = new Set<string>();
  /** Verdict stream → the last outcome this process chained on it, and its position in the log. */
  private readonly heads = new Map<string, { hash: string; position: number }>();
  /** This process held the resolver's lease at its last tick (always, without a lease). */
  private leased = false;
  /** The pending view has come within `maxLag` of the head since it last started from scratch. */
  private caughtUp = false;
  /** The last pass found verdicts due and left them for the pending view to catch up. */
  private heldByView = false;
  private viewCheckpoint = 0;
  /** stop() was called: a pass under way takes no further verdict (they stay pending). */
  private stopping = false;
  private readonly intervalMs: number;
  resolved = 0;
  /** Candle fetches the feed refused, over the resolver's life. */
  failedFetches = 0;
  /**
   * The last candle fetch the feed refused (kept once later ones succeed; null before any): the readiness check
   * carries it as its cause, so /readyz shows its reason and the log its words (a venue's host).
   */
  lastFailure: RunFailure<MarketDataError> | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      feed: MarketFeed;
      pending: ProjectionRunner<PendingOutcomes>;
      logger: Logger;
      /** Events the pending view may be behind the head before it counts as caught up (PROJECTION_READY_MAX_LAG). */
      maxLag: number;
      intervalMs?: number;
      concurrency?: number;
      /** Wall clock of the backoff (a replay's feed time may run far faster). */
      clock?: () => number;
      /** Held by the one resolver of a log shared by processes (EventStore.lease). */
      lease?: Lease;
    },
  ) {
    this.intervalMs = deps.intervalMs ?? 1_000;
  }

  /** Markets and verdicts skipped now, waiting out a backoff. */
  get backingOff(): number {
    const wall = (this.deps.clock ?? Date.now)();
    let n = 0;
    for (const b of this.markets.values()) if (b.retryAt > wall) n++;
    for (const b of this.verdicts.values()) if (b.retryAt > wall) n++;
    return n;
  }

  /** Another process holds the resolver's lease: this one resolves nothing until it is free. */
  get standingBy(): boolean {
    return this.deps.lease !== undefined && !this.leased;
  }

  /**
   * Verdicts are due and the resolver leaves them until the pending view catches up. False with
   * nothing due: a view not yet caught up holds back no work then, and /readyz saying it waits
   * would send an operator after a lag that delays nothing.
   */
  get waitingForView(): boolean {
    return this.heldByView;
  }

  start(): void {
    this.stopping = false;
    this.timer = setInterval(() => {
      this.tick ??= this.resolveDue()
        .then(() => undefined)
        .catch((err: unknown) => this.deps.logger.error({ err }, 'outcome resolution failed'))
        .finally(() => {
          this.tick = null;
        });
    }, this.intervalMs);
    this.timer.unref();
  }

  /**
   * Ends the timer and waits for the pass under way, which finishes the verdicts it has in flight
   * and takes no more: after a restore or a long stop a pass can hold thousands of due verdicts
   * (a SIGTERM to a restored log's process waited on one past SHUTDOWN_TIMEOUT_MS and was killed).
   * The rest stay pending for the next resolver.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.tick;
    await this.pass;
    await this.deps.lease?.release();
  }

  /**
   * Resolves every verdict that is due now; returns how many outcomes it appended. A pass already
   * under way (the timer's) is waited for: two passes of one process side by side would each take
   * the other's appends for another writer's and leave those streams to a later pass.
   */
  resolveDue(): Promise<number> {
    // `this.pass` never rejects (the catch below), so the next pass needs no rejection handler.
    const pass = this.pass.then(() => this.resolvePass());
    this.pass = pass.catch(() => undefined);
    return pass;
  }

  private async resolvePass(): Promise<number> {
    const { store, pending, feed, lease } = this.deps;
    if (lease) {
      const held = await lease.hold();
      // Taken over: the heads this process knew may have moved under the last holder.
      if (held && !this.leased) {
        this.caughtUp = false;
        this.heads.clear();
      }
      this.leased = held;
      if (!held) {
        this.heldByView = false;
        return 0;
      }
    }
    // A view that went back (rebuilt) catches up again before the resolver works.
    if (pending.checkpoint < this.viewCheckpoint) this.caughtUp = false;
    this.viewCheckpoint = pending.checkpoint;
    const clock = this.deps.clock ?? Date.now;
    this.forgetStale();
    const now = feed.now();
    const wall = clock();
    const due = pendingIndex(pending.state)
      .due(feed.kind, now, (market) => (this.markets.get(market)?.retryAt ?? Number.NEGATIVE_INFINITY) > wall)
      .filter(
        (p) =>
          !this.inFlight.has(p.verdictId) &&
          !this.labelled.has(p.verdictId) &&
          !this.gaps.has(p.verdictId) &&
          !this.waiting(p, wall),
      );
    if (due.length === 0) {
      this.heldByView = false;
      return 0;
    }
    if (!this.caughtUp) {
      this.heldByView = true;
      const head = await store.headPosition();
      if ((await eventsBehind(store, pending.checkpoint, head, this.deps.maxLag)) > this.deps.maxLag)
        return 0;
      // The chains' heads: every outcome appended before now is folded before one links to them.
      await pending.waitFor(head);
      this.caughtUp = true;
    }
    this.heldByView = false;
    const streams = new Map<string, PendingVerdict[]>();
    for (const p of due) {
      const list = streams.get(p.stream);
      if (list) list.push(p);
      else streams.set(p.stream, [p]);
    }
    for (const list of streams.values()) list.sort((a, b) => a.revision - b.revision);
    let appended = 0;
    await forEachLimited([...streams.values()], this.deps.concurrency ?? 4, async (list) => {
      for (const p of list) {
        if (this.stopping) break;
        const done = await this.resolveQueued(p, clock);
        if (done === 'appended') appended++;
        // Another writer's outcome is the stream's head now, and the view has not folded it: a
        // later verdict linked to the view's head would sit beside it (a fork). They wait for it.
        else if (done === 'taken') break;
      }
    });
    this.resolved += appended;
    return appended;
  }

  /** One verdict of a stream's queue: its outcome appended, left unlabelled for now, or labelled by another writer. */
  private async resolveQueued(p: PendingVerdict, clock: () => number): Promise<Resolution> {
    // A verdict of the same market may have failed since this tick began.
    if (this.waiting(p, clock())) return 'left';
    this.inFlight.add(p.verdictId);
    try {
      const done = await this.resolveOne(p);
      this.markets.delete(marketKey(p));
      this.verdicts.delete(p.verdictId);
      return done;
    } catch (err) {
      // Candles not there yet (venue down, replay behind): the verdict stays pending.
      if (!(err instanceof MarketDataError)) throw err;
      this.failedFetches++;
      this.lastFailure = { error: err };
      if (err instanceof InsufficientHistoryError) {
        backOff(this.verdicts, p.verdictId, this.intervalMs, PERMANENT_BACKOFF_MS, clock());
      } else {
        const permanent =
          err instanceof UnknownCoinError ||
          err instanceof UnsupportedTimeframeError ||
          err instanceof UnsupportedExchangeError;
        const cap = permanent ? PERMANENT_BACKOFF_MS : TRANSIENT_BACKOFF_MS;
        backOff(this.markets, marketKey(p), this.intervalMs, cap, clock());
      }
      this.deps.logger.debug({ err, verdictId: p.verdictId }, 'outcome not resolvable yet');
      return 'left';
    } finally {
      this.inFlight.delete(p.verdictId);
    }
  }

  private waiting(p: PendingVerdict, wall: number): boolean {
    const market = this.markets.size > 0 ? this.markets.get(marketKey(p)) : undefined;
    if (market && market.retryAt > wall) return true;
    const verdict = this.verdicts.size > 0 ? this.verdicts.get(p.verdictId) : undefined;
    return verdict !== undefined && verdict.retryAt > wall;
  }

  /** What is kept of verdicts no longer pending (labelled, here or elsewhere) and of markets with none pending. */
  private forgetStale(): void {
    const { state } = this.deps.pending;
    for (const id of this.labelled) if (!(id in state.pending)) this.labelled.delete(id);
    if (this.verdicts.size === 0 && this.markets.size === 0) return;
    for (const id of this.verdicts.keys()) if (!(id in state.pending)) this.verdicts.delete(id);
    if (this.markets.size === 0) return;
    const index = pendingIndex(state);
    for (const key of this.markets.keys()) if (!index.hasMarket(key)) this.markets.delete(key);
  }

  private async resolveOne(p: PendingVerdict): Promise<Resolution> {
    const { store, feed } = this.deps;
    const [recorded] = await store.readStream(p.stream, { fromRevision: p.revision, maxCount: 1 });
    const verdict = recorded ? parseDomainEvent(recorded) : null;
    if (verdict?.type !== 'VerdictRecorded' || verdict.id !== p.verdictId) {
      throw new Error(`verdict ${p.verdictId} is not at ${p.stream}/${p.revision}`);
    }
    const candles = await feed.candles(p.exchange as Exchange, p.coin, p.timeframe, {
      limit: OUTCOME_AFTER_CANDLES,
      until: p.dueAt,
      min: OUTCOME_AFTER_CANDLES,
    });
    const first = candles[0];
    if (first?.openTime !== p.candleCloseTime) {
      // The feed's candles do not start right after the verdict (a gap): a label from other
      // candles would be wrong, so this verdict stays unlabelled.
      this.gaps.add(p.verdictId);
      this.deps.logger.warn(
        { verdictId: p.verdictId, firstOpen: first?.openTime, expected: p.candleCloseTime },
        'candles after the verdict are not contiguous: outcome left unresolved',
      );
      return 'left';
    }
    // This process's last outcome until the view has folded it; then the view's head, which holds
    // any outcome another writer appended after it as well (linking to ours would fork the chain).
    const own = this.heads.get(p.stream);
    const prevHash =
      own !== undefined && this.deps.pending.checkpoint < own.position
        ? own.hash
        : (this.deps.pending.state.heads[p.stream] ?? null);
    const outcome = resolveOutcome(
      { verdictId: p.verdictId, stream: p.stream, revision: p.revision, prevHash },
      verdict.data,
      candles,
    );
    try {
      const result = await store.append(
        outcomeStream(p.verdictId),
        [
          newEvent('VerdictOutcomeResolved', outcome, {
            id: deterministicId('verdict-outcome', p.verdictId),
            causationId: p.verdictId,
            correlationId: verdict.correlationId,
          }),
        ],
        { expectedRevision: 'no_stream' },
      );
      // The id's repeat is answered as the first append was, not refused (PostgreSQL answers both
      // alike): taking this hash as the head when another outcome holds the stream would link the
      // next outcome to one not in the log. This process repeats none of its own (`labelled`).
      if (result.written === false || (result.written === undefined && !(await this.stored(outcome)))) {
        this.heads.delete(p.stream);
        return 'taken';
      }
      this.heads.set(p.stream, { hash: outcome.hash!, position: result.position });
      this.labelled.add(p.verdictId);
      return 'appended';
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) {
        // Labelled by another writer: the stream's head is the view's once it folds that outcome.
        this.heads.delete(p.stream);
        return 'taken';
      }
      throw err;
    }
  }

  /** Whether the log's outcome of the verdict is this one (an append that may have been a repeat). */
  private async stored(outcome: { verdictId: string; hash?: string | undefined }): Promise<boolean> {
    const [first] = await this.deps.store.readStream(outcomeStream(outcome.verdictId), { maxCount: 1 });
    const event = first ? parseDomainEvent(first) : null;
    return event?.type === 'VerdictOutcomeResolved' && event.data.hash === outcome.hash;
  }
}

/** What became of one due verdict: 'taken' when another writer's outcome holds its stream. */
type Resolution = 'appended' | 'left' | 'taken';

/**
 * Doubles the key's wait, from the tick interval up to `cap`. Siblings that were already in
 * flight fail too: one failure round doubles it once.
 */
function backOff(
  map: Map<string, Backoff>,
  key: string,
  intervalMs: number,
  cap: number,
  wall: number,
): void {
  const last = map.get(key);
  if (last && last.retryAt > wall) return;
  const delayMs = Math.min(cap, last === undefined ? intervalMs : last.delayMs * 2);
  map.set(key, { retryAt: wall + delayMs, delayMs });
}

/**
 * The resolver's /readyz check (processor:history-outcomes): ready once it runs, with its counts,
 * and the reason of the last fetch the feed refused as `lastError`; that error is carried as the
 * cause, so its words go to the log with the check's full result, not to the public answer.
 */
export function outcomesCheck(
  resolver: () => OutcomeResolver | null,
  pending: ProjectionRunner<PendingOutcomes>,
): Check {
  return async () => {
    const r = resolver();
    return {
      ok: r !== null,
      resolved: r?.resolved ?? 0,
      pending: Object.keys(pending.state.pending).length,
      backingOff: r?.backingOff ?? 0,
      failedFetches: r?.failedFetches ?? 0,
      waitingForView: r?.waitingForView ?? false,
      ...(r?.standingBy ? { standingBy: true } : {}),
      ...failureFields(r?.lastFailure ?? null),
    };
  };
}
