import { ServiceError } from '../../contracts/errors.ts';
import type { Exchange } from '../../contracts/market.ts';
import { UnknownCoinError, UnsupportedExchangeError } from './errors.ts';
import type { MarketFeed } from './port.ts';

/** How long the feed's answer about what it lists (a coin, a venue's timeframe) is kept: listings change with a deployment or a delisting, not per request. */
export const LISTING_KEEP_MS = 10 * 60_000;

/**
 * Whether a coin a caller names outside a tool call (a history filter, a webhook's `assets`) is
 * one the service knows, answered as the tools answer it: a coin the feed lists on none of the
 * venues asked is refused with `unknown_coin` (404), the tools' refusal, rather than served as an
 * empty history or a subscription that never fires. A coin the caller's own records hold (`held`:
 * the history's verdicts of a delisted coin) on a venue asked is known whatever the feed says now;
 * held on another venue only, it is judged on the venue asked, as get_trade_call judges it. When the feed
 * cannot tell (a venue down, too little history), the coin is accepted: a read or a subscription
 * does not fail because a venue is unreachable.
 */
export class KnownCoins {
  readonly #seen = new Map<string, { listed: boolean; detail: string; at: number }>();

  constructor(
    /** The process's feed (the projections role may open its own at start). */
    private readonly feed: () => MarketFeed | null,
    /**
     * Coins known whatever the feed says, with what the refusal says of them (the history: the
     * coins it holds verdicts of, on `exchange` when one is asked, else on any venue); none when
     * absent.
     */
    private readonly held: {
      has: (coin: string, exchange?: Exchange) => boolean;
      missing: (coin: string, exchange?: Exchange) => string;
    } | null,
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * Throws ServiceError `unknown_coin` (naming `field` when given) when no venue asked lists `coin`
   * and `held` does not hold it.
   */
  async check(coin: string, exchange?: Exchange, field?: string): Promise<void> {
    const symbol = coin.toUpperCase();
    const feed = this.feed();
    // Held on the venue asked (any venue when none is): known. Held only elsewhere is no answer
    // for this venue: `coin=ZEC&exchange=BINANCE` was served as an empty history while
    // get_trade_call refused ZEC on BINANCE.
    if (feed === null || this.held?.has(symbol, exchange)) return;
    const venues = exchange ? [exchange] : feed.exchanges();
    const refusals: string[] = [];
    for (const venue of venues) {
      const answer = await this.#listing(feed, venue, symbol);
      if (answer.listed) return;
      refusals.push(answer.detail);
    }
    const held = this.held ? `; ${this.held.missing(symbol, exchange)}` : '';
    throw new ServiceError('unknown_coin', { detail: `${refusals.join('; ')}${held}` }, field);
  }

  async #listing(
    feed: MarketFeed,
    exchange: Exchange,
    coin: string,
  ): Promise<{ listed: boolean; detail: string }> {
    const key = `${exchange}:${coin}`;
    const kept = this.#seen.get(key);
    if (kept && this.clock() - kept.at < LISTING_KEEP_MS) return kept;
    let answer: { listed: boolean; detail: string };
    try {
      await feed.candles(exchange, coin, '1h', { limit: 1 });
      answer = { listed: true, detail: '' };
    } catch (err) {
      // Only the feed's own "not listed" refuses; any other failure cannot tell, and serves.
      if (!(err instanceof UnknownCoinError) && !(err instanceof UnsupportedExchangeError)) {
        return { listed: true, detail: '' };
      }
      answer = { listed: false, detail: err.message };
    }
    if (this.#seen.size >= 4_096) this.#seen.clear();
    this.#seen.set(key, { ...answer, at: this.clock() });
    return answer;
  }
}
