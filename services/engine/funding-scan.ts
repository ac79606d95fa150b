import type { Logger } from 'pino';
import type { z } from 'zod';
import { MarketDataError, UnsupportedExchangeError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import type { Exchange, MarketInfo } from '../../contracts/market.ts';
import { ScanFundingArbInput, type ScanFundingArbOutput } from '../../contracts/tools.ts';
import { failureReason } from '../shared/failure-reason.ts';
import { forEachLimited } from './for-each-limited.ts';
import { carryFigures } from './funding/carry.ts';
import { defaultCarry } from './funding/default-carry.ts';
import { bestFundingPair, isFresh, type VenueFundingInput } from './funding-arb.ts';
import { OperationError } from './operation-errors.ts';
import { PERP_VENUES, SCAN_CONCURRENCY } from './venues.ts';

/**
 * scan_funding_arb: for every coin listed with funding on at least two perpetual venues, the
 * latest fresh settlement per venue, normalised per hour by its own interval, the widest
 * long/short pair, and the carry expected to be collected over 8 h–7 d after both legs' fees.
 *
 * What is not served is refused, as every tool refuses it: a venue named in `exchanges` that the
 * feed serves no funding on (a spot book, a venue the feed does not carry) with the feed's
 * `unsupported_exchange`, a coin of `coins` listed with funding on none of the venues with
 * `unknown_coin`. A served venue that cannot answer now is left out and shows as down in `venues`
 * with its reason (`lastError`, as /readyz words it); when none can answer, the call is refused
 * with the first one's error. A venue's data is never replaced by another venue's.
 */
export async function scanFundingArb(
  feed: MarketFeed,
  raw: ScanFundingArbInput,
  logger?: Logger,
): Promise<ScanFundingArbOutput> {
  const input = ScanFundingArbInput.parse(raw);
  const now = feed.now();
  const named = input.exchanges !== undefined;
  const venues = named ? input.exchanges! : feed.exchanges().filter((e) => PERP_VENUES.includes(e));
  const listed = new Map<Exchange, Map<string, MarketInfo>>();
  const leftOut = new Map<Exchange, MarketDataError>();
  await Promise.all(
    venues.map(async (exchange) => {
      try {
        listed.set(exchange, await fundingMarkets(feed, exchange));
      } catch (err) {
        if (!(err instanceof MarketDataError)) throw err;
        leftOut.set(exchange, err);
      }
    }),
  );
  // Refused or left out in the order the venues were asked, not the order their listings came back.
  for (const exchange of venues) {
    const err = leftOut.get(exchange);
    if (err === undefined) continue;
    if (named && err instanceof UnsupportedExchangeError) throw err;
    logger?.warn({ exchange, err: err.message }, 'funding scan: venue left out');
  }
  if (listed.size === 0 && leftOut.size > 0) throw leftOut.get(venues.find((e) => leftOut.has(e))!)!;
  if (input.coins && leftOut.size === 0) assertListed(input.coins, venues, listed);
  const wanted = input.coins ? new Set(input.coins) : null;
  const coins = new Map<string, Exchange[]>();
  for (const exchange of venues) {
    for (const coin of listed.get(exchange)?.keys() ?? []) {
      if (wanted && !wanted.has(coin)) continue;
      coins.set(coin, [...(coins.get(coin) ?? []), exchange]);
    }
  }
  const rows: ScanFundingArbOutput['opportunities'] = [];
  const candidates = [...coins].filter(([, exchanges]) => exchanges.length >= 2);
  const tally: Tally = {
    coins: coins.size,
    single: coins.size - candidates.length,
    tooFewLegs: 0,
    legs: { stale: 0, failed: 0, unknownVolume: new Set(), unknownVolumeLegs: 0, lowVolume: 0 },
    narrow: 0,
    widestNarrow: null,
  };
  await forEachLimited(candidates, SCAN_CONCURRENCY, async ([coin, exchanges]) => {
    const inputs: VenueFundingInput[] = [];
    // This coin's listings left out, counted in the note only when the coin is left with fewer
    // than two venues: the note's per-listing counts explain those coins, not the others.
    const dropped: { reason: 'stale' | 'failed' | 'unknownVolume' | 'lowVolume'; exchange: Exchange }[] = [];
    for (const exchange of exchanges) {
      const v = await venueFunding(feed, exchange, coin, listed.get(exchange)!.get(coin)!, now);
      if (v === 'stale' || v === 'failed') {
        dropped.push({ reason: v, exchange });
        continue;
      }
      if (input.minLiquidityUsd !== undefined) {
        if (v.quoteVolume24h === null) {
          dropped.push({ reason: 'unknownVolume', exchange });
          continue;
        }
        if (v.quoteVolume24h < input.minLiquidityUsd) {
          dropped.push({ reason: 'lowVolume', exchange });
          continue;
        }
      }
      inputs.push(v);
    }
    const row = bestFundingPair(coin, inputs);
    if (row === null) {
      tally.tooFewLegs++;
      for (const { reason, exchange } of dropped) {
        if (reason === 'unknownVolume') {
          tally.legs.unknownVolumeLegs++;
          tally.legs.unknownVolume.add(exchange);
        } else tally.legs[reason]++;
      }
    } else if (row.best.spreadBps < input.minSpreadBps) {
      tally.narrow++;
      tally.widestNarrow = Math.max(tally.widestNarrow ?? 0, row.best.spreadBps);
    } else {
      const carry = carryFigures(
        defaultCarry,
        row.best.spreadBpsPerHour,
        row.best.longVenue,
        row.best.shortVenue,
      );
      rows.push({ ...row, carry });
    }
  });
  // Ranked by what is expected to be collected net of fees, not by the spread now: a wide
  // spread that decays fast can be worth less than a narrower one that persists.
  rows.sort(
    (a, b) =>
      b.carry.expectedNetCarryBps - a.carry.expectedNetCarryBps ||
      b.best.spreadBps - a.best.spreadBps ||
      a.coin.localeCompare(b.coin),
  );
  const opportunities = rows.slice(0, input.limit);
  return {
    feed: feed.kind,
    timestamp: Math.floor(now / 1000),
    opportunities,
    venues: venueStates(feed, venues, leftOut),
    ...(opportunities.length > 0
      ? { fees: feesNote(opportunities) }
      : { note: emptyNote(tally, input, venues, leftOut.size) }),
  };
}

/** What the scan left out and why, counted as it went: the words of an empty answer. */
interface Tally {
  /** Coins listed with funding on any venue scanned (of those asked, when `coins` is given). */
  coins: number;
  /** Listed with funding on fewer than two of the venues scanned. */
  single: number;
  /** Left with fewer than two venues to compare once the legs below were left out. */
  tooFewLegs: number;
  /** The listings left out of those coins (not of a coin still on two venues or more). */
  legs: {
    /** No settlement within two of the venue's intervals. */
    stale: number;
    /** The venue could not answer for the coin now. */
    failed: number;
    /** Left out by minLiquidityUsd for a 24 h volume the feed does not know, and on which venues. */
    unknownVolume: Set<Exchange>;
    unknownVolumeLegs: number;
    /** Left out by minLiquidityUsd for a known volume below it. */
    lowVolume: number;
  };
  /** The best pair's spread was below minSpreadBps; the widest of them, bps per 8 h. */
  narrow: number;
  widestNarrow: number | null;
}

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`;

/**
 * Why no opportunity is listed: each filter with how many coins it left out and, where it acted on
 * a coin's venues one by one, how many listings (a coin on a venue) of the coins it left with
 * fewer than two venues.
 */
function emptyNote(
  tally: Tally,
  input: z.output<typeof ScanFundingArbInput>,
  venues: readonly Exchange[],
  down: number,
): string {
  if (tally.coins === 0)
    return `no coin asked is listed with funding on the venues scanned (${venues.join(', ')})`;
  const { legs } = tally;
  const legParts = [
    legs.stale > 0
      ? `${plural(legs.stale, 'listing had', 'listings had')} no settlement within two funding intervals`
      : null,
    legs.failed > 0 ? `${plural(legs.failed, 'listing', 'listings')} could not be read now` : null,
    legs.unknownVolumeLegs > 0
      ? `minLiquidityUsd ${input.minLiquidityUsd} left out ${plural(legs.unknownVolumeLegs, 'listing', 'listings')} whose 24 h volume is unknown (quoteVolume24h null, on ${[...legs.unknownVolume].sort().join(', ')})`
      : null,
    legs.lowVolume > 0
      ? `minLiquidityUsd ${input.minLiquidityUsd} left out ${plural(legs.lowVolume, 'listing', 'listings')} whose 24 h volume is below it`
      : null,
  ].filter((p) => p !== null);
  const parts = [
    tally.single > 0
      ? `${plural(tally.single, 'is', 'are')} listed with funding on fewer than two of the venues scanned (${venues.join(', ')})`
      : null,
    tally.tooFewLegs > 0
      ? `${plural(tally.tooFewLegs, 'has', 'have')} fewer than two venues left to compare (${legParts.join('; ')})`
      : null,
    tally.narrow > 0
      ? `${plural(tally.narrow, 'has its', 'have their')} best spread below the minimum asked, minSpreadBps ${input.minSpreadBps} (bps per 8 h; the widest was ${Number(tally.widestNarrow!.toPrecision(3))})`
      : null,
    down > 0
      ? `${plural(down, 'venue', 'venues')} could not answer and ${down === 1 ? 'was' : 'were'} left out (see venues)`
      : null,
  ].filter((p) => p !== null);
  return `no opportunity is listed for the ${plural(tally.coins, 'coin', 'coins')} scanned: ${parts.join('; ')}`;
}

/** Hours within which an opportunity is said to cover its fees, in words. */
const FEES_WITHIN_HOURS = 72;

/** How many opportunities listed are expected to cover both legs' fees within 72 h, in words. */
export function feesNote(opportunities: ScanFundingArbOutput['opportunities']): string {
  const n = opportunities.length;
  const within = opportunities.filter(
    (o) => o.carry.breakEvenHours !== null && o.carry.breakEvenHours <= FEES_WITHIN_HOURS,
  ).length;
  const never = opportunities.filter((o) => o.carry.breakEvenHours === null).length;
  const fees = `cover both legs' entry and exit fees within ${FEES_WITHIN_HOURS} h (breakEvenHours ≤ ${FEES_WITHIN_HOURS})`;
  const laterNot = ' within 7 days (breakEvenHours null)';
  if (n === 1) {
    if (within === 1) return `the opportunity listed is expected to ${fees}`;
    return `the opportunity listed is not expected to ${fees}${never === 1 ? `, nor${laterNot}` : ''}`;
  }
  const who = within === 0 ? 'none' : within === n ? 'all' : String(within);
  const head = `${who} of the ${n} opportunities listed ${within <= 1 ? 'is' : 'are'} expected to ${fees}`;
  if (never === 0) return head;
  if (never === n) return `${head}, nor${laterNot}`;
  return `${head}; ${never} ${never === 1 ? 'is' : 'are'} not expected to${laterNot}`;
}

/**
 * A venue's markets with funding. A venue whose markets have none is refused by the feed itself
 * (asked for the funding of one of them), as a funding read on it is: a spot book, a venue whose
 * data holds no funding.
 */
async function fundingMarkets(feed: MarketFeed, exchange: Exchange): Promise<Map<string, MarketInfo>> {
  const markets = await feed.markets(exchange);
  const funded = markets.filter((m) => m.hasFunding);
  if (funded.length === 0 && markets.length > 0) {
    await feed.funding(exchange, markets[0]!.coin, { limit: 1 });
  }
  return new Map(funded.map((m) => [m.coin, m]));
}

/** Coins named in a refusal at most; the rest are counted. */
const LISTED_IN_REFUSAL = 40;

/** Refuses `unknown_coin` when a coin asked is listed with funding on none of the venues scanned. */
function assertListed(
  coins: readonly string[],
  venues: readonly Exchange[],
  listed: ReadonlyMap<Exchange, ReadonlyMap<string, MarketInfo>>,
): void {
  const served = [...new Set([...listed.values()].flatMap((m) => [...m.keys()]))].sort();
  const unknown = coins.filter((c) => !served.includes(c));
  if (unknown.length === 0) return;
  const shown = served.slice(0, LISTED_IN_REFUSAL).join(', ');
  const more = served.length > LISTED_IN_REFUSAL ? ` and ${served.length - LISTED_IN_REFUSAL} more` : '';
  throw new OperationError({
    code: 'unknown_coin',
    message: `${unknown.join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not listed with funding on ${venues.join(', ')} (coins served there: ${shown}${more})`,
  });
}

/**
 * The feed's state of each venue scanned; one left out is down. Its `lastError` is the reason
 * /readyz gives (failureReason), not the error's words: those name the venue's URL or a server
 * path, and change with the client library; the words are in the scan's log line.
 */
function venueStates(
  feed: MarketFeed,
  venues: readonly Exchange[],
  leftOut: ReadonlyMap<Exchange, MarketDataError>,
): ScanFundingArbOutput['venues'] {
  const states = new Map(feed.venues().map((v) => [v.exchange, v]));
  return venues.map((exchange) => {
    const { lastError, ...state } = states.get(exchange) ?? { exchange, ok: true };
    const err = leftOut.get(exchange);
    if (err) return { ...state, ok: false, lastError: failureReason(err) };
    return lastError === undefined ? state : { ...state, lastError: failureReason(lastError) };
  });
}

/** A venue's latest settlement for a coin; `stale` when it has none fresh, `failed` when it cannot answer. */
async function venueFunding(
  feed: MarketFeed,
  exchange: Exchange,
  coin: string,
  market: MarketInfo,
  now: number,
): Promise<VenueFundingInput | 'stale' | 'failed'> {
  try {
    const [latest] = (await feed.funding(exchange, coin, { limit: 1 })).slice(-1);
    if (!latest || !isFresh(latest, now)) return 'stale';
    const next = await feed.nextFunding(exchange, coin).catch((err: unknown) => {
      if (err instanceof MarketDataError) return null;
      throw err;
    });
    return {
      exchange,
      rate: latest.rate,
      intervalHours: latest.intervalHours,
      fundingTime: latest.fundingTime,
      nextFundingTime: next?.nextFundingTime ?? null,
      quoteVolume24h: market.quoteVolume24h,
    };
  } catch (err) {
    if (err instanceof MarketDataError) return 'failed';
    throw err;
  }
}
