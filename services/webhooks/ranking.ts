import type { Logger } from 'pino';

/** How long a failed ranking read answers the events of its close before that close reads again. */
export const FAILED_READ_HOLD_MS = 1_000;

export interface RankedMarket {
  coin: string;
  quoteVolume24h: number | null;
}

/**
 * The venues' market rankings for `top:N` filters and digests, each held with the feed time it
 * was read at. The engine's ranking rule decides (open interest, else 24 h volume), so top:N means
 * what scans mean by it; open interest and volume are not in the event log, so the list comes from
 * a feed, whose ranking moves with the feed's clock (a replay's hour passes in seconds).
 */
export class MarketRanking {
  private readonly lists = new Map<
    string,
    { at: number; coins: Map<string, number>; ranked: RankedMarket[] }
  >();
  private readonly refreshing = new Map<string, { at: number; done: Promise<void> }>();
  /**
   * Per venue, its last read that failed: the feed time it read at (a close up to it is not read
   * again for a while) and the wall time it failed at.
   */
  private readonly failed = new Map<string, { at: number; wall: number }>();
  /** Per venue, the close its last warning was for: a close's later failed reads log at debug. */
  private readonly warnedFor = new Map<string, number>();

  constructor(
    private readonly load: (exchange: string) => Promise<RankedMarket[]>,
    private readonly logger: Logger,
    /** The feed's clock (replay time on the replay feed). */
    private readonly now: () => number,
    /** Wall time, for how long a failed read answers its close. */
    private readonly wallNow: () => number = Date.now,
  ) {}

  /**
   * Makes sure the venue's ranking was read at feed time `asOf` or later (an event's candle
   * close, a digest's): the one read before that close may rank another market N-th, as the
   * scheduler ranked it at that close. Read at most once per close, never later than the clock's
   * now; never throws: a read that fails (a warning once per close) keeps the last one for every event of that
   * close for FAILED_READ_HOLD_MS of wall time, and the next close reads again. A failed read is
   * not retried at once: the live feed retries a venue's request itself, and not one whose
   * endpoint is failing already, so a venue timing out does not hold the close's burst of events
   * (and a stop waiting on them) for its timeout again and again. After the hold the same close
   * reads again: a digest asks at its period's start on every tick until a ranking loads.
   */
  async prepare(exchange: string, asOf: number): Promise<void> {
    const needed = Math.min(asOf, this.now());
    if ((this.lists.get(exchange)?.at ?? Number.NEGATIVE_INFINITY) >= needed) return;
    const failed = this.failed.get(exchange);
    if (failed && failed.at >= needed && this.wallNow() - failed.wall < FAILED_READ_HOLD_MS) return;
    let pending = this.refreshing.get(exchange);
    if (!pending || pending.at < needed) {
      const at = this.now();
      const loading = { at, done: Promise.resolve() };
      loading.done = this.load(exchange)
        .then((ranked) => {
          // Loads may end out of order: the latest read is kept.
          if ((this.lists.get(exchange)?.at ?? Number.NEGATIVE_INFINITY) > at) return;
          this.lists.set(exchange, {
            at,
            coins: new Map(ranked.map((m, i) => [m.coin.toUpperCase(), i])),
            ranked,
          });
        })
        .catch((err: unknown) => {
          const before = this.failed.get(exchange)?.at ?? Number.NEGATIVE_INFINITY;
          this.failed.set(exchange, { at: Math.max(at, before), wall: this.wallNow() });
          // A digest asks again every tick while the venue is down: one warning per close.
          const first = needed > (this.warnedFor.get(exchange) ?? Number.NEGATIVE_INFINITY);
          if (first) this.warnedFor.set(exchange, needed);
          this.logger[first ? 'warn' : 'debug'](
            { err, exchange },
            'market ranking unavailable; top:N filters keep the last one for this close',
          );
        })
        .finally(() => {
          if (this.refreshing.get(exchange) === loading) this.refreshing.delete(exchange);
        });
      pending = loading;
      this.refreshing.set(exchange, pending);
    }
    await pending.done;
  }

  rankOf(exchange: string, coin: string): number | null {
    return this.lists.get(exchange)?.coins.get(coin.toUpperCase()) ?? null;
  }

  /** The venue's markets in rank order, as last loaded (empty before the first load). */
  ranked(exchange: string): readonly RankedMarket[] {
    return this.lists.get(exchange)?.ranked ?? [];
  }
}
