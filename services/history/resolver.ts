import type { Logger } from 'pino';
import { type EventStore, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import { MarketDataError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import { newEvent, parseDomainEvent } from '../../contracts/events.ts';
import { OUTCOME_AFTER_CANDLES, outcomeStream } from '../../contracts/history.ts';
import type { Exchange } from '../../contracts/market.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { forEachLimited } from '../engine/for-each-limited.ts';
import { resolveOutcome } from './outcome.ts';
import type { PendingOutcomes, PendingVerdict } from './projections.ts';

/**
 * The outcome processor: for each pending verdict whose last horizon has closed in feed time,
 * reads the candles that followed it from the same feed and appends VerdictOutcomeResolved to
 * the verdict's own outcome stream. The append expects "no stream" with a deterministic id, so
 * two replicas resolving the same verdict write it once.
 */
export class OutcomeResolver {
  readonly name = 'outcome-resolver';
  private timer: NodeJS.Timeout | null = null;
  private tick: Promise<void> | null = null;
  private readonly inFlight = new Set<string>();
  /** Verdicts whose following candles have a gap: never labelled, reported once. */
  private readonly gaps = new Set<string>();
  resolved = 0;
  lastError: string | null = null;

  constructor(
    private readonly deps: {
      store: EventStore;
      feed: MarketFeed;
      pending: ProjectionRunner<PendingOutcomes>;
      logger: Logger;
      intervalMs?: number;
      concurrency?: number;
    },
  ) {}

  start(): void {
    const every = this.deps.intervalMs ?? 1_000;
    this.timer = setInterval(() => {
      this.tick ??= this.resolveDue()
        .then(() => undefined)
        .catch((err: unknown) => this.deps.logger.error({ err }, 'outcome resolution failed'))
        .finally(() => {
          this.tick = null;
        });
    }, every);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.tick;
  }

  /** Resolves every verdict that is due now; returns how many outcomes it appended. */
  async resolveDue(): Promise<number> {
    const now = this.deps.feed.now();
    const due = Object.values(this.deps.pending.state.pending).filter(
      (p) =>
        p.dueAt <= now &&
        p.feed === this.deps.feed.kind &&
        !this.inFlight.has(p.verdictId) &&
        !this.gaps.has(p.verdictId),
    );
    let appended = 0;
    await forEachLimited(due, this.deps.concurrency ?? 4, async (p) => {
      this.inFlight.add(p.verdictId);
      try {
        if (await this.resolveOne(p)) appended++;
      } catch (err) {
        // Candles not there yet (venue down, replay behind): the verdict stays pending.
        if (!(err instanceof MarketDataError)) throw err;
        this.lastError = err.message;
        this.deps.logger.debug({ err, verdictId: p.verdictId }, 'outcome not resolvable yet');
      } finally {
        this.inFlight.delete(p.verdictId);
      }
    });
    this.resolved += appended;
    return appended;
  }

  private async resolveOne(p: PendingVerdict): Promise<boolean> {
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
      return false;
    }
    const outcome = resolveOutcome(
      { verdictId: p.verdictId, stream: p.stream, revision: p.revision },
      verdict.data,
      candles,
    );
    try {
      await store.append(
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
      return true;
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) return false;
      throw err;
    }
  }
}
