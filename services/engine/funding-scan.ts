import type { Logger } from 'pino';
import { MarketDataError } from '../../adapters/market/errors.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import type { Exchange, MarketInfo } from '../../contracts/market.ts';
import { ScanFundingArbInput, type ScanFundingArbOutput } from '../../contracts/tools.ts';
import { forEachLimited } from './for-each-limited.ts';
import { carryFigures } from './funding/carry.ts';
import { defaultCarry } from './funding/default-carry.ts';
import { bestFundingPair, isFresh, type VenueFundingInput } from './funding-arb.ts';
import { PERP_VENUES, SCAN_CONCURRENCY } from './venues.ts';

/**
 * scan_funding_arb: for every coin listed with funding on at least two perpetual venues, the
 * latest fresh settlement per venue, normalised per hour by its own interval, the widest
 * long/short pair, and the carry expected to be collected over 8 h–7 d after both legs' fees. A venue that cannot answer is left out and shows as down in `venues`; its
 * data is never replaced by another venue's.
 */
export async function scanFundingArb(
  feed: MarketFeed,
  raw: ScanFundingArbInput,
  logger?: Logger,
): Promise<ScanFundingArbOutput> {
  const input = ScanFundingArbInput.parse(raw);
  const now = feed.now();
  const venues = (input.exchanges ?? feed.exchanges()).filter((e) => PERP_VENUES.includes(e));
  const listed = new Map<Exchange, Map<string, MarketInfo>>();
  await Promise.all(
    venues.map(async (exchange) => {
      try {
        const markets = await feed.markets(exchange);
        listed.set(exchange, new Map(markets.filter((m) => m.hasFunding).map((m) => [m.coin, m])));
      } catch (err) {
        if (!(err instanceof MarketDataError)) throw err;
        logger?.warn({ exchange, err: err.message }, 'funding scan: venue left out');
      }
    }),
  );
  const wanted = input.coins ? new Set(input.coins) : null;
  const coins = new Map<string, Exchange[]>();
  for (const [exchange, markets] of listed) {
    for (const coin of markets.keys()) {
      if (wanted && !wanted.has(coin)) continue;
      coins.set(coin, [...(coins.get(coin) ?? []), exchange]);
    }
  }
  const rows: ScanFundingArbOutput['opportunities'] = [];
  const candidates = [...coins].filter(([, exchanges]) => exchanges.length >= 2);
  await forEachLimited(candidates, SCAN_CONCURRENCY, async ([coin, exchanges]) => {
    const inputs: VenueFundingInput[] = [];
    for (const exchange of exchanges) {
      const v = await venueFunding(feed, exchange, coin, listed.get(exchange)!.get(coin)!, now);
      if (!v) continue;
      const liquid = v.quoteVolume24h !== null && v.quoteVolume24h >= (input.minLiquidityUsd ?? 0);
      if (input.minLiquidityUsd !== undefined && !liquid) continue;
      inputs.push(v);
    }
    const row = bestFundingPair(coin, inputs);
    if (row && row.best.spreadBps >= input.minSpreadBps) {
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
  return {
    feed: feed.kind,
    timestamp: Math.floor(now / 1000),
    opportunities: rows.slice(0, input.limit),
    venues: feed.venues().filter((v) => venues.includes(v.exchange)),
  };
}

/** A venue's latest settlement for a coin, or null when it has none fresh or cannot answer. */
async function venueFunding(
  feed: MarketFeed,
  exchange: Exchange,
  coin: string,
  market: MarketInfo,
  now: number,
): Promise<VenueFundingInput | null> {
  try {
    const [latest] = (await feed.funding(exchange, coin, { limit: 1 })).slice(-1);
    if (!latest || !isFresh(latest, now)) return null;
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
    if (err instanceof MarketDataError) return null;
    throw err;
  }
}
