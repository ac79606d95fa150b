import type { Exchange } from '../../contracts/market.ts';
import type { ScanFundingArbOutput } from '../../contracts/tools.ts';

const HOURS_PER_YEAR = 8760;

/** One venue's latest settled funding for a coin, as the feed reported it. */
export interface VenueFundingInput {
  exchange: Exchange;
  rate: number;
  intervalHours: number;
  fundingTime: number;
  nextFundingTime: number | null;
  quoteVolume24h: number | null;
}

export type FundingArbRow = Omit<ScanFundingArbOutput['opportunities'][number], 'carry'>;

/**
 * Ranks one coin's venues for a funding carry: rates are first normalised to one hour with each
 * symbol's own interval (1h, 4h and 8h intervals are all in use), then the pair with the widest
 * hourly spread is chosen: long where funding is lowest, short where it is highest. Returns null
 * when fewer than two venues remain. Pure: no clock, no I/O.
 */
export function bestFundingPair(coin: string, venues: VenueFundingInput[]): FundingArbRow | null {
  if (venues.length < 2) return null;
  const rows = venues
    .map((v) => {
      const hourlyRate = v.rate / v.intervalHours;
      return {
        exchange: v.exchange,
        rate: v.rate,
        intervalHours: v.intervalHours,
        hourlyRate,
        annualizedPct: hourlyRate * HOURS_PER_YEAR * 100,
        fundingTime: v.fundingTime,
        nextFundingTime: v.nextFundingTime,
        quoteVolume24h: v.quoteVolume24h,
      };
    })
    .sort((a, b) => a.hourlyRate - b.hourlyRate || a.exchange.localeCompare(b.exchange));
  const long = rows[0]!;
  const short = rows[rows.length - 1]!;
  const spreadPerHour = short.hourlyRate - long.hourlyRate;
  return {
    coin,
    venues: rows,
    best: {
      longVenue: long.exchange,
      shortVenue: short.exchange,
      spreadBps: spreadPerHour * 8 * 10_000,
      spreadBpsPerHour: spreadPerHour * 10_000,
      annualizedPct: spreadPerHour * HOURS_PER_YEAR * 100,
      longNextFundingTime: long.nextFundingTime,
      shortNextFundingTime: short.nextFundingTime,
    },
  };
}

/**
 * A settled rate older than two of its own intervals says nothing about the carry now (a
 * delisted or halted market): such a venue is left out rather than compared.
 */
export function isFresh(v: Pick<VenueFundingInput, 'fundingTime' | 'intervalHours'>, now: number): boolean {
  return now - v.fundingTime <= 2 * v.intervalHours * 3_600_000;
}
