import { z } from 'zod';
import type { Exchange } from '../../../contracts/market.ts';

/**
 * Funding carry as it is collected. A spread seen now decays: the funding actually received on
 * the short leg minus the funding paid on the long leg over the next hours is, on average, a
 * fraction of "spread now × hours". The evaluation fits that fraction per horizon and per size
 * of the spread from the funding history (ratio of realised to naive carry over the training
 * opportunities, recent ones weighted more: see halfLifeDays), together with the share of those opportunities that ended net positive after
 * the fee for entering and leaving both legs. Pure: no clock, no I/O.
 */

export const CARRY_HORIZONS_HOURS = [8, 24, 72, 168] as const;

/** Taker fee per side per leg in bps, from the venues' public fee schedules (lowest tier). */
const TAKER_FEE_BPS: Readonly<Record<Exchange, number>> = {
  BINANCE: 5,
  BINANCE_SPOT: 10,
  BYBIT: 5.5,
  OKX: 5,
  HYPERLIQUID: 4.5,
};

/** Entering and leaving both legs: two sides on each venue, in bps of one leg's notional. */
export function roundTripFeeBps(longVenue: Exchange, shortVenue: Exchange): number {
  return 2 * (TAKER_FEE_BPS[longVenue] + TAKER_FEE_BPS[shortVenue]);
}

const HorizonFit = z.object({
  hours: z.number().int().positive(),
  /** Realised carry ÷ (spread now × hours) over the training opportunities of the bucket. */
  retention: z.number(),
  /** Share of the bucket's training opportunities whose carry beat the fee by this horizon. */
  shareNetPositive: z.number().min(0).max(1),
  samples: z.number().int().nonnegative(),
});

export const CarryTableSchema = z.object({
  version: z.literal(1),
  trainFrom: z.number().int(),
  trainTo: z.number().int(),
  fittedAt: z.iso.datetime(),
  /** Opportunities were sampled every this many hours per coin. */
  sampleEveryHours: z.number().positive(),
  /**
   * Training opportunities were weighted by 2^(−age / half-life), age counted back from the end
   * of training; null or absent = unweighted. Chosen by walk-forward inside the training months.
   */
  halfLifeDays: z.number().positive().nullable().optional(),
  /** Spread buckets (bps per 8 h, lower edges, ascending); the first edge is the fit's threshold. */
  buckets: z
    .array(z.object({ fromBps: z.number().nonnegative(), horizons: z.array(HorizonFit).min(1) }))
    .min(1),
});
export type CarryTable = z.infer<typeof CarryTableSchema>;

export function parseCarryTable(json: unknown): CarryTable {
  const table = CarryTableSchema.parse(json);
  for (let i = 1; i < table.buckets.length; i++) {
    if (!(table.buckets[i]!.fromBps > table.buckets[i - 1]!.fromBps)) {
      throw new Error(`carry table: bucket ${i} is not above bucket ${i - 1}`);
    }
  }
  return table;
}

export interface CarryHorizon {
  hours: number;
  /** Spread now × hours, in bps: what the spread alone advertises. */
  naiveCarryBps: number;
  expectedCarryBps: number;
  expectedNetBps: number;
  shareNetPositive: number;
  samples: number;
}

export interface CarryFigures {
  feeBps: number;
  horizons: CarryHorizon[];
  /** Hours until the expected carry covers the fee (interpolated); null when not within 7 days. */
  breakEvenHours: number | null;
  /** Best expected net carry over the horizons, and the horizon it is reached at. */
  expectedNetCarryBps: number;
  bestHorizonHours: number;
}

function bucketFor(table: CarryTable, spreadBps: number): CarryTable['buckets'][number] {
  let pick = table.buckets[0]!;
  for (const b of table.buckets) if (spreadBps >= b.fromBps) pick = b;
  return pick;
}

/** Expected carry of a pair whose hourly spread now is `spreadBpsPerHour`. */
export function carryFigures(
  table: CarryTable,
  spreadBpsPerHour: number,
  longVenue: Exchange,
  shortVenue: Exchange,
): CarryFigures {
  const feeBps = roundTripFeeBps(longVenue, shortVenue);
  const bucket = bucketFor(table, spreadBpsPerHour * 8);
  const horizons = bucket.horizons.map((h) => {
    const naive = spreadBpsPerHour * h.hours;
    const expected = naive * h.retention;
    return {
      hours: h.hours,
      naiveCarryBps: naive,
      expectedCarryBps: expected,
      expectedNetBps: expected - feeBps,
      // The fit's weighted share to 4 decimals (0.01 %), as the track record serves it: the table
      // stores it unrounded, and a buyer reads 8.5e-7 as noise rather than as 'none'.
      shareNetPositive: Number(h.shareNetPositive.toFixed(4)),
      samples: h.samples,
    };
  });
  let breakEvenHours: number | null = null;
  let prev = { hours: 0, expectedCarryBps: 0 };
  for (const h of horizons) {
    if (h.expectedCarryBps >= feeBps) {
      const span = h.expectedCarryBps - prev.expectedCarryBps;
      breakEvenHours =
        span <= 0 ? h.hours : prev.hours + ((feeBps - prev.expectedCarryBps) / span) * (h.hours - prev.hours);
      break;
    }
    prev = h;
  }
  let best = horizons[0]!;
  for (const h of horizons) if (h.expectedNetBps > best.expectedNetBps) best = h;
  return {
    feeBps,
    horizons,
    breakEvenHours,
    expectedNetCarryBps: best.expectedNetBps,
    bestHorizonHours: best.hours,
  };
}
