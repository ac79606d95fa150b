import type { Exchange } from '../../contracts/market.ts';

/** Venues whose markets are perpetuals (funding applies); BINANCE_SPOT is the spot book. */
export const PERP_VENUES: readonly Exchange[] = ['BINANCE', 'BYBIT', 'OKX', 'HYPERLIQUID'];

/** Markets evaluated at once by a scan: enough to overlap feed latency, few enough for rate limits. */
export const SCAN_CONCURRENCY = 4;
