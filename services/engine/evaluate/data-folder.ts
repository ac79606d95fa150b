import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';

/**
 * Where the evaluator reads candles: a data folder in the shared layout and, optionally, a
 * warm-up folder in the same layout (the months before, say the shared data beside a folder of
 * later months). A coin's warm-up candles that open before its first candle in the data folder
 * come first: indicators and forecasters read them, scores start at the data folder.
 */
export interface DataFolder {
  data: string;
  warmup?: string | undefined;
}

async function readIfPresent(path: string): Promise<Candle[]> {
  try {
    return await readCandleFile(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** candles/<folder>/<name> of the data folder, after the warm-up folder's earlier candles. */
export async function readCandles(df: DataFolder, folder: string, name: string): Promise<Candle[]> {
  const main = await readCandleFile(join(df.data, 'candles', folder, name));
  if (!df.warmup) return main;
  const first = main[0]?.openTime ?? Number.POSITIVE_INFINITY;
  const before = (await readIfPresent(join(df.warmup, 'candles', folder, name))).filter(
    (c) => c.openTime < first,
  );
  return before.length === 0 ? main : [...before, ...main];
}

/** The earliest candle open time in the data folder (the warm-up folder not counted), or null. */
export async function dataStart(data: string): Promise<number | null> {
  let start = Number.POSITIVE_INFINITY;
  let folders: string[];
  try {
    folders = await readdir(join(data, 'candles'));
  } catch {
    return null;
  }
  for (const folder of folders) {
    for (const name of await readdir(join(data, 'candles', folder))) {
      if (!name.endsWith('.csv.gz')) continue;
      const candles = await readCandleFile(join(data, 'candles', folder, name));
      if (candles[0]) start = Math.min(start, candles[0].openTime);
    }
  }
  return Number.isFinite(start) ? start : null;
}
