import type { Logger } from 'pino';

export interface RankedMarket {
  coin: string;
  quoteVolume24h: number | null;
}

/**
 * The venues' market rankings for `top:N` filters and digests, refreshed at most every `ttlMs`.
 * The engine's ranking rule decides (open interest, else 24 h volume), so top:N means what scans
 * mean by it; open interest and volume are not in the event log, so the list comes from a feed.
 */
export class MarketRanking {
  private readonly lists = new Map<
    string,
    { at: number; coins: Map<string, number>; ranked: RankedMarket[] }
  >();
  private readonly refreshing = new Map<string, Promise<void>>();

  constructor(
    private readonly load: (exchange: string) => Promise<RankedMarket[]>,
    private readonly logger: Logger,
    private readonly ttlMs = 5 * 60_000,
  ) {}

  /**
   * Makes sure a ranking for the venue is loaded and no older than `maxAgeMs` (default the TTL);
   * never throws: a failed load keeps the last one.
   */
  async prepare(exchange: string, maxAgeMs = this.ttlMs): Promise<void> {
    const cached = this.lists.get(exchange);
    if (cached && Date.now() - cached.at < maxAgeMs) return;
    let pending = this.refreshing.get(exchange);
    if (!pending) {
      pending = this.load(exchange)
        .then((ranked) => {
          this.lists.set(exchange, {
            at: Date.now(),
            coins: new Map(ranked.map((m, i) => [m.coin.toUpperCase(), i])),
            ranked,
          });
        })
        .catch((err: unknown) =>
          this.logger.warn({ err, exchange }, 'market ranking unavailable; top:N filters keep the last one'),
        )
        .finally(() => this.refreshing.delete(exchange));
      this.refreshing.set(exchange, pending);
    }
    await pending;
  }

  rankOf(exchange: string, coin: string): number | null {
    return this.lists.get(exchange)?.coins.get(coin.toUpperCase()) ?? null;
  }

  /** The venue's markets in rank order, as last loaded (empty before the first load). */
  ranked(exchange: string): readonly RankedMarket[] {
    return this.lists.get(exchange)?.ranked ?? [];
  }
}
