import type { FundingRate } from '../../contracts/market.ts';
import { firstIndex } from '../first-index.ts';

/** Settlements of two sources closer than this are the same settlement (venue stamps jitter by ms). */
const SAME_SETTLEMENT_MS = 60_000;
export const HOUR_MS = 3_600_000;

/**
 * Merges funding series of the same contract from several sources, ordered by preference
 * (index 0 wins): one row per settlement, oldest first.
 */
export function mergeFundingSources(sources: readonly (readonly FundingRate[])[]): FundingRate[] {
  const tagged = sources.flatMap((rows, rank) => rows.map((row) => ({ row, rank })));
  tagged.sort((a, b) => a.row.fundingTime - b.row.fundingTime || a.rank - b.rank);
  const out: { row: FundingRate; rank: number }[] = [];
  for (const item of tagged) {
    const last = out[out.length - 1];
    if (last !== undefined && item.row.fundingTime - last.row.fundingTime < SAME_SETTLEMENT_MS) {
      if (item.rank < last.rank) out[out.length - 1] = item;
      continue;
    }
    out.push(item);
  }
  return out.map((item) => item.row);
}

/**
 * Turns settlement times into intervals where a venue does not state them: each row covers
 * the gap since the previous settlement, rounded to whole hours; the first row takes `first`
 * (the venue's stated current interval) or else the next row's gap. Rows without any usable
 * interval are dropped rather than guessed.
 */
export function intervalsFromGaps(
  times: readonly { fundingTime: number; rate: number }[],
  first?: number,
): FundingRate[] {
  const out: FundingRate[] = [];
  for (let i = 0; i < times.length; i++) {
    const cur = times[i]!;
    const prev = times[i - 1];
    const next = times[i + 1];
    let hours: number | undefined;
    if (prev !== undefined) hours = Math.round((cur.fundingTime - prev.fundingTime) / HOUR_MS);
    else if (first !== undefined) hours = first;
    else if (next !== undefined) hours = Math.round((next.fundingTime - cur.fundingTime) / HOUR_MS);
    if (hours !== undefined && hours > 0)
      out.push({ fundingTime: cur.fundingTime, rate: cur.rate, intervalHours: hours });
  }
  return out;
}

/** Index of the first settlement after `t` (series sorted oldest first). */
export function firstAfter(series: readonly FundingRate[], t: number): number {
  return firstIndex(series.length, (i) => series[i]!.fundingTime > t);
}

/** A settlement time stamped with venue jitter, put back on its minute. */
export function roundToMinute(t: number): number {
  return Math.round(t / 60_000) * 60_000;
}
