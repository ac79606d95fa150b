import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { createGunzip } from 'node:zlib';
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

/** The candle folders the evaluator reads, in the shared layout. */
export const CANDLE_FOLDERS = ['binance-spot', 'binance-usdm', 'binance-spot-2022'] as const;

/**
 * Why a folder given as --data or --warmup cannot be read, or null: it must exist and hold candle
 * files. A mistyped path used to be read as an empty folder: every cell scored at 0 points (or a
 * warm-up silently dropped), exit 0, and a report of 0 rows written over the last one.
 */
export async function folderProblem(dir: string, flag: string): Promise<string | null> {
  try {
    if (!(await stat(dir)).isDirectory()) return `${flag} ${dir} is not a directory`;
  } catch {
    return `${flag} ${dir} does not exist`;
  }
  for (const folder of CANDLE_FOLDERS) {
    try {
      const names = await readdir(join(dir, 'candles', folder));
      if (names.some((n) => n.endsWith('.csv.gz'))) return null;
    } catch {}
  }
  return `${flag} ${dir} holds no market files (no candles/{${CANDLE_FOLDERS.join(',')}}/*.csv.gz)`;
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

/** The first row's open time of a candle file, read from its opening bytes only. */
async function firstOpenTime(path: string): Promise<number | null> {
  const lines = createInterface({ input: createReadStream(path).pipe(createGunzip()), crlfDelay: Infinity });
  let header = true;
  try {
    for await (const line of lines) {
      if (header || line.trim() === '') {
        header = false;
        continue;
      }
      const t = Number(line.slice(0, line.indexOf(',')));
      return Number.isFinite(t) ? t : null;
    }
    return null;
  } finally {
    lines.close();
  }
}

/**
 * The earliest candle open time in the folders of the data folder the evaluator scores (the
 * warm-up folder not counted), or null: each file's first row only.
 */
export async function dataStart(data: string): Promise<number | null> {
  let start = Number.POSITIVE_INFINITY;
  for (const folder of ['binance-spot', 'binance-usdm']) {
    let names: string[];
    try {
      names = await readdir(join(data, 'candles', folder));
    } catch {
      continue;
    }
    for (const name of names) {
      if (!name.endsWith('.csv.gz')) continue;
      const first = await firstOpenTime(join(data, 'candles', folder, name));
      if (first !== null) start = Math.min(start, first);
    }
  }
  return Number.isFinite(start) ? start : null;
}
