import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SHIPPED_MARKET_DIR } from './replay.ts';
import { CANDLE_FOLDERS } from './replay-layout.ts';

/**
 * The full real data set (`shared/data/market`) that sits beside a checkout of this repository,
 * used by tests, benchmarks, the evaluation and (when present) the service's default replay;
 * SHARED_MARKET_DIR points elsewhere.
 */
export const SHARED_MARKET_DIR =
  process.env.SHARED_MARKET_DIR ?? fileURLToPath(new URL('../../../shared/data/market', import.meta.url));

export interface DefaultReplayData {
  dir: string;
  /** `shared`: the full set beside the checkout; `shipped`: the slice in sample-data/market. */
  source: 'shared' | 'shipped';
}

/**
 * What the service replays when MARKET_DATA_DIR is not set: the full data set when it is beside
 * the checkout (every coin, venue and timeframe it can build), else the slice the repository
 * ships. The full set is read in place, never copied into the repository: two of its candle
 * sources state no licence (sample-data/market/README.md).
 */
export function defaultReplayData(shared = SHARED_MARKET_DIR): DefaultReplayData {
  const hasCandles = Object.keys(CANDLE_FOLDERS).some((folder) => {
    const path = join(shared, 'candles', folder);
    return existsSync(path) && readdirSync(path).some((name) => name.endsWith('.csv.gz'));
  });
  return hasCandles ? { dir: shared, source: 'shared' } : { dir: SHIPPED_MARKET_DIR, source: 'shipped' };
}
