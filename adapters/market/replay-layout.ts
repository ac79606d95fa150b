import { type Exchange, TIMEFRAMES, type Timeframe } from '../../contracts/market.ts';

/**
 * The directory layout of the market data set (see sample-data/market/README.md) and how its
 * folders map to the service's venues. BINANCE means the USDT-M perpetual, so spot candles are
 * never served for it; folders of other eras or layouts (binance-spot-2022, funding-2020-2023)
 * are not part of the replay timeline and are ignored.
 */
export const CANDLE_FOLDERS: Readonly<Record<string, Exchange>> = {
  'binance-spot': 'BINANCE_SPOT',
  'binance-usdm': 'BINANCE',
};

/**
 * Funding folders: `rank` orders sources describing the same contract (lower wins when both
 * have a settlement), `quote` is the suffix that names the contract the service trades
 * (BTCUSDT; Bybit's BTCPERP is the USDC contract and is not the same market).
 */
export const FUNDING_FOLDERS: Readonly<Record<string, { exchange: Exchange; rank: number; quote: string }>> =
  {
    binance: { exchange: 'BINANCE', rank: 0, quote: 'USDT' },
    'binance-usdm': { exchange: 'BINANCE', rank: 1, quote: 'USDT' },
    bybit: { exchange: 'BYBIT', rank: 0, quote: 'USDT' },
    hyperliquid: { exchange: 'HYPERLIQUID', rank: 0, quote: '' },
  };

const CANDLE_FILE = /^([A-Za-z0-9]+)USDT-([0-9]+[mhd])\.csv(?:\.gz)?$/;

export function parseCandleFileName(name: string): { coin: string; timeframe: Timeframe } | undefined {
  const m = CANDLE_FILE.exec(name);
  if (m === null) return undefined;
  const timeframe = TIMEFRAMES.find((tf) => tf === m[2]);
  return timeframe === undefined ? undefined : { coin: m[1]!.toUpperCase(), timeframe };
}

export function parseFundingFileName(name: string, quote: string): { coin: string } | undefined {
  const m = /^([A-Za-z0-9]+)\.csv(?:\.gz)?$/.exec(name);
  if (m === null) return undefined;
  const symbol = m[1]!;
  if (!symbol.endsWith(quote) || symbol.length === quote.length) return undefined;
  return { coin: symbol.slice(0, symbol.length - quote.length).toUpperCase() };
}
