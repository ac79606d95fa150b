import { fileURLToPath } from 'node:url';

/**
 * The full real data set (`shared/data/market`) that sits beside a checkout of this repository,
 * used by tests, benchmarks and the evaluation; SHARED_MARKET_DIR points elsewhere.
 */
export const SHARED_MARKET_DIR =
  process.env.SHARED_MARKET_DIR ?? fileURLToPath(new URL('../../../shared/data/market', import.meta.url));
