import { TimeframeServedNowhereError } from '../../adapters/market/errors.ts';
import { LISTING_KEEP_MS } from '../../adapters/market/known-coins.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { type Exchange, TIMEFRAMES, type Timeframe } from '../../contracts/market.ts';
import { defaultExchange, unservedVenue } from '../engine/engine.ts';
import { parseVerdictStream } from '../engine/verdict-recorder.ts';
import { setBounded } from '../shared/bounded-map.ts';

/** A timeframe every venue serves where it serves candles at all: what asks a venue about itself. */
const ANY_TIMEFRAME: Timeframe = '1h';

/**
 * Whether the history holds verdicts of `coin` (upper case) on `exchange`, or on any venue when
 * none is asked, from its verdict streams' names (`verdicts-<exchange>-<coin>-<timeframe>`).
 */
export function holdsCoin(streams: Iterable<string>, coin: string, exchange?: Exchange): boolean {
  for (const stream of streams) {
    const market = parseVerdictStream(stream);
    if (market?.coin === coin && (exchange === undefined || market.exchange === exchange)) return true;
  }
  return false;
}

/**
 * What the history holds verdicts of: a venue, a timeframe, or the two together. The service
 * answers from its projections at once; the analyst CLI's `--store` reads the log for it.
 */
export interface HeldMarkets {
  has(ask: { exchange?: Exchange; timeframe?: Timeframe }): boolean | Promise<boolean>;
}

/**
 * Refuses a venue or timeframe filter (the history's /api/verdicts, get_track_record, and
 * `npm run history -- export --store`, which asks the configured feed) as the
 * tools refuse them, with the feed's own error (unsupported_exchange / unsupported_timeframe,
 * the code and words of scan_trade_calls and get_trade_call: services/engine unservedVenue),
 * rather than answering an empty history. What the history holds verdicts of stays readable
 * whatever the feed serves now (a venue delisted or no longer served keeps its record), as
 * KnownCoins keeps a held coin.
 */
export class ServedVenues {
  readonly #seen = new Map<string, { refusal: Error | null; at: number }>();

  constructor(
    /** The feed to ask; null: none in this process (nothing is refused). Asked only when needed. */
    private readonly feed: () => MarketFeed | null | Promise<MarketFeed | null>,
    private readonly held: HeldMarkets,
    private readonly clock: () => number = Date.now,
  ) {}

  /**
   * Throws the feed's refusal when the history holds nothing asked and the feed serves it
   * nowhere: a venue alone is refused only as a venue (unsupported_exchange); a timeframe alone
   * when no venue serves it, said of every venue with the timeframes they serve.
   */
  async check(ask: { exchange?: Exchange | undefined; timeframe?: Timeframe | undefined }): Promise<void> {
    const { exchange, timeframe } = ask;
    if (exchange === undefined && timeframe === undefined) return;
    const held = {
      ...(exchange === undefined ? {} : { exchange }),
      ...(timeframe === undefined ? {} : { timeframe }),
    };
    if (await this.held.has(held)) return;
    const feed = await this.feed();
    if (feed === null) return;
    if (exchange !== undefined) {
      const refusal = await this.#refusal(feed, exchange, timeframe ?? ANY_TIMEFRAME);
      // A venue asked alone: refused only when the venue itself is not served.
      if (
        refusal &&
        (timeframe !== undefined || (refusal as { code?: string }).code === 'unsupported_exchange')
      )
        throw refusal;
      return;
    }
    const venues = [defaultExchange(feed), ...feed.exchanges()].filter((v, i, all) => all.indexOf(v) === i);
    const refusing: Exchange[] = [];
    for (const venue of venues) {
      const refusal = await this.#refusal(feed, venue, timeframe!);
      if (refusal === null) return;
      if ((refusal as { code?: string }).code === 'unsupported_timeframe') refusing.push(venue);
    }
    // Asked of every venue, refused by each: said of them all (not of the default venue, which
    // the call did not name), with what they serve instead.
    if (refusing.length > 0)
      throw new TimeframeServedNowhereError(timeframe!, refusing, await this.#served(feed, refusing));
  }

  /** The timeframes some of `venues` serve, in TIMEFRAMES order (probed as check probes one). */
  async #served(feed: MarketFeed, venues: readonly Exchange[]): Promise<Timeframe[]> {
    const served: Timeframe[] = [];
    for (const timeframe of TIMEFRAMES) {
      for (const venue of venues) {
        if ((await this.#refusal(feed, venue, timeframe)) === null) {
          served.push(timeframe);
          break;
        }
      }
    }
    return served;
  }

  async #refusal(feed: MarketFeed, exchange: Exchange, timeframe: Timeframe): Promise<Error | null> {
    const key = `${exchange}:${timeframe}`;
    const kept = this.#seen.get(key);
    if (kept && this.clock() - kept.at < LISTING_KEEP_MS) return kept.refusal;
    const refusal = await unservedVenue(feed, { exchange, timeframe });
    setBounded(this.#seen, key, { refusal, at: this.clock() }, 1_024);
    return refusal;
  }
}
