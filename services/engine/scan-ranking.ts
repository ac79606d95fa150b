import type { z } from 'zod';
import type { ScanRankBy, ScanTradeCallsInput, ScanTradeCallsOutput } from '../../contracts/tools.ts';

export type ScanRow = ScanTradeCallsOutput['calls'][number] & { volume: number };
type Skipped = ScanTradeCallsOutput['skipped'][number];

type Order = (a: ScanRow, b: ScanRow) => number;
const byCoin: Order = (a, b) => a.coin.localeCompare(b.coin);
const byConfidence: Order = (a, b) => b.confidence - a.confidence;
const byLean: Order = (a, b) => Math.abs(b.score) - Math.abs(a.score);
/** Largest expected move first; a row without a forecast after every row with one. */
const byMove: Order = (a, b) => (b.expectedMovePct ?? -1) - (a.expectedMovePct ?? -1);

const ORDERS: Record<ScanRankBy, Order[]> = {
  confidence: [byConfidence, byLean, byCoin],
  lean: [byLean, byConfidence, byCoin],
  expectedMove: [byMove, byCoin],
  volume: [(a, b) => b.volume - a.volume, byCoin],
};

export const HOLD_LEFT_OUT = 'HOLD, left out: calls only was asked (includeHolds: false)';

/**
 * Which rows a scan lists and in what order, and why the others of the top-N are not listed: the
 * same rule whether the rows were computed now (the engine's scan) or read from the latest
 * recorded verdicts (webhook digests). `notEvaluated` are the markets that have no row (no
 * candles, no verdict); with the rows a filter left out and those ranked below `limit` they make
 * `skipped`, so every market of the top-N is either listed or named. When no row is listed,
 * `note` says why in words.
 */
export function rankedScan(
  rows: readonly ScanRow[],
  notEvaluated: readonly Skipped[],
  input: Pick<z.output<typeof ScanTradeCallsInput>, 'includeHolds' | 'minConfidence' | 'rankBy' | 'limit'>,
  scanned: number,
): Pick<ScanTradeCallsOutput, 'calls' | 'skipped' | 'note'> {
  const kept: ScanRow[] = [];
  let holds = 0;
  let below = 0;
  const skipped: Skipped[] = [...notEvaluated];
  for (const row of rows) {
    if (!input.includeHolds && row.call === 'HOLD') {
      holds++;
      skipped.push({ coin: row.coin, reason: HOLD_LEFT_OUT });
    } else if (row.confidence < input.minConfidence) {
      below++;
      skipped.push({
        coin: row.coin,
        reason: `confidence ${row.confidence} below the minimum asked, ${input.minConfidence}`,
      });
    } else kept.push(row);
  }
  const order = ORDERS[input.rankBy];
  kept.sort((a, b) => {
    for (const compare of order) {
      const d = compare(a, b);
      if (d !== 0) return d;
    }
    return 0;
  });
  const calls = kept.slice(0, input.limit).map(({ volume: _volume, ...row }, i) => ({ ...row, rank: i + 1 }));
  // A market cut by `limit` was evaluated like the listed ones: it is named with where it ranked,
  // so a caller can raise the limit rather than guess which markets the scan covered.
  kept.slice(input.limit).forEach((row, i) => {
    skipped.push({ coin: row.coin, reason: belowLimit(input.limit + i + 1, input.rankBy, input.limit) });
  });
  skipped.sort((a, b) => a.coin.localeCompare(b.coin));
  if (calls.length > 0) return { calls, skipped };
  return { calls, skipped, note: emptyNote(scanned, holds, below, notEvaluated.length, input.minConfidence) };
}

/** Why a row ranked `rank` by `rankBy` is not listed. */
export function belowLimit(rank: number, rankBy: ScanRankBy, limit: number): string {
  return `ranked ${rank} by ${rankBy}, below the limit asked (limit: ${limit})`;
}

function emptyNote(scanned: number, holds: number, below: number, failed: number, min: number): string {
  if (scanned === 0) return 'no market scanned: the venue ranking listed none';
  const parts = [
    holds > 0 ? `${holds} answered HOLD and calls only was asked (includeHolds: false)` : null,
    below > 0 ? `${below} had a confidence below the minimum asked, ${min}` : null,
    failed > 0 ? `${failed} could not be evaluated` : null,
  ].filter((p) => p !== null);
  // A scan of one market (topN 1) says so in the singular: "none of the 1 markets" reads as a slip.
  const head =
    scanned === 1
      ? 'the 1 market scanned is not listed (it is named in skipped)'
      : `none of the ${scanned} markets scanned is listed (each is named in skipped)`;
  return `${head}: ${parts.join('; ')}`;
}
