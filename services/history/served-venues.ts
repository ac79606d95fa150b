import { performance } from 'node:perf_hooks';
import { endedBy } from '../../adapters/before-abort.ts';
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
 * How long one check waits for the venues' answers, every probe of it together: the feed's probe
 * bound at selection (FEED_PROBE_TIMEOUT_MS's default); the service gives its setting.
 */
export const PROBE_TIMEOUT_MS = 3_000;

/** A probe that gave no answer by the check's deadline. */
const NO_ANSWER = Symbol('no answer');

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
 *
 * A check waits for the venues' answers up to a deadline (`probeTimeoutMs` from its start, every
 * probe of it together): a venue slow or hung on the filter's own venue or timeframe leaves it
 * unjudged, let through as a feed fault is (never refused for what the venue may serve); one
 * slow on the timeframes listed in a "served nowhere" refusal is named in it, with those it gave
 * no answer about. A probe past the deadline goes on: its answer, when it comes, is kept for the
 * next check, and a check asks no venue again what a probe in flight asks.
 */
export class ServedVenues {
  readonly #seen = new Map<string, { refusal: Error | null; at: number }>();
  /** Probes in flight, by venue and timeframe. */
  readonly #asking = new Map<string, Promise<Error | null>>();

  constructor(
    /** The feed to ask; null: none in this process (nothing is refused). Asked only when needed. */
    private readonly feed: () => MarketFeed | null | Promise<MarketFeed | null>,
    private readonly held: HeldMarkets,
    private readonly clock: () => number = Date.now,
    /** How long a check waits for the venues' answers (PROBE_TIMEOUT_MS). */
    private readonly probeTimeoutMs: number = PROBE_TIMEOUT_MS,
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
    const at = performance.now() + this.probeTimeoutMs;
    if (exchange !== undefined) {
      const refusal = await this.#refusalBy(feed, exchange, timeframe ?? ANY_TIMEFRAME, at);
      // A venue asked alone: refused only when the venue itself is not served.
      if (
        refusal !== NO_ANSWER &&
        refusal &&
        (timeframe !== undefined || (refusal as { code?: string }).code === 'unsupported_exchange')
      )
        throw refusal;
      return;
    }
    const venues = [defaultExchange(feed), ...feed.exchanges()].filter((v, i, all) => all.indexOf(v) === i);
    const refusing: Exchange[] = [];
    for (const venue of venues) {
      const refusal = await this.#refusalBy(feed, venue, timeframe!, at);
      if (refusal === null || refusal === NO_ANSWER) return;
      if ((refusal as { code?: string }).code === 'unsupported_timeframe') refusing.push(venue);
    }
    // Asked of every venue, refused by each: said of them all (not of the default venue, which
    // the call did not name), with what they serve instead.
    if (refusing.length > 0) {
      const { served, unanswered } = await this.#served(feed, refusing, at);
      throw new TimeframeServedNowhereError(
        timeframe!,
        refusing,
        served,
        unanswered.timeframes.length > 0 ? { ...unanswered, withinMs: this.probeTimeoutMs } : undefined,
      );
    }
  }

  /**
   * The timeframes some of `venues` serve, in TIMEFRAMES order (probed as check probes one, every
   * timeframe of every venue at once, by `at`); and those no venue said it serves while some gave
   * no answer by then, with the venues that gave none.
   */
  async #served(
    feed: MarketFeed,
    venues: readonly Exchange[],
    at: number,
  ): Promise<{ served: Timeframe[]; unanswered: { timeframes: Timeframe[]; venues: Exchange[] } }> {
    const answers = await Promise.all(
      TIMEFRAMES.map((timeframe) =>
        Promise.all(venues.map((venue) => this.#refusalBy(feed, venue, timeframe, at))),
      ),
    );
    const served: Timeframe[] = [];
    const unanswered = { timeframes: [] as Timeframe[], venues: [] as Exchange[] };
    TIMEFRAMES.forEach((timeframe, i) => {
      const refusals = answers[i]!;
      if (refusals.includes(null)) served.push(timeframe);
      else if (refusals.includes(NO_ANSWER)) {
        unanswered.timeframes.push(timeframe);
        refusals.forEach((refusal, v) => {
          if (refusal === NO_ANSWER && !unanswered.venues.includes(venues[v]!))
            unanswered.venues.push(venues[v]!);
        });
      }
    });
    return { served, unanswered };
  }

  /** #refusal's answer, or NO_ANSWER once `at` (a performance.now() time) passes first. */
  async #refusalBy(
    feed: MarketFeed,
    exchange: Exchange,
    timeframe: Timeframe,
    at: number,
  ): Promise<Error | null | typeof NO_ANSWER> {
    let refusal: Error | null = null;
    const answered = await endedBy(
      this.#refusal(feed, exchange, timeframe).then((r) => {
        refusal = r;
      }),
      at,
    );
    return answered ? refusal : NO_ANSWER;
  }

  /** The venue's refusal of the timeframe (null: served), kept LISTING_KEEP_MS; one probe in flight per pair. */
  #refusal(feed: MarketFeed, exchange: Exchange, timeframe: Timeframe): Promise<Error | null> {
    const key = `${exchange}:${timeframe}`;
    const kept = this.#seen.get(key);
    if (kept && this.clock() - kept.at < LISTING_KEEP_MS) return Promise.resolve(kept.refusal);
    let asking = this.#asking.get(key);
    if (asking === undefined) {
      asking = unservedVenue(feed, { exchange, timeframe })
        .then((refusal) => {
          setBounded(this.#seen, key, { refusal, at: this.clock() }, 1_024);
          return refusal;
        })
        .finally(() => this.#asking.delete(key));
      this.#asking.set(key, asking);
    }
    return asking;
  }
}
