import type { z } from 'zod';
import type { ScanTradeCallsInput, ScanTradeCallsOutput } from '../../contracts/tools.ts';

export type ScanRow = ScanTradeCallsOutput['calls'][number] & { volume: number };

/**
 * Which calls a scan lists and in what order: the same rule whether the calls were computed now
 * (the engine's scan) or read from the latest recorded verdicts (webhook digests).
 */
export function rankScanRows(
  rows: ScanRow[],
  input: Pick<z.output<typeof ScanTradeCallsInput>, 'includeHolds' | 'minConfidence' | 'rankBy' | 'limit'>,
): ScanTradeCallsOutput['calls'] {
  return rows
    .filter((r) => (input.includeHolds || r.call !== 'HOLD') && r.confidence >= input.minConfidence)
    .sort((a, b) =>
      input.rankBy === 'volume'
        ? b.volume - a.volume || a.coin.localeCompare(b.coin)
        : b.confidence - a.confidence ||
          Math.abs(b.score) - Math.abs(a.score) ||
          a.coin.localeCompare(b.coin),
    )
    .slice(0, input.limit)
    .map(({ volume: _volume, ...row }, i) => ({ ...row, rank: i + 1 }));
}
