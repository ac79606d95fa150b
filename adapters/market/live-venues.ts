import type { Exchange } from '../../contracts/market.ts';

/**
 * How each service venue maps to a ccxt exchange: which ccxt class, which markets to load,
 * and which market of a coin the service means (BINANCE is the USDT-M perpetual, never spot).
 */
export interface LiveVenue {
  exchange: Exchange;
  ccxtId: 'binance' | 'binanceusdm' | 'bybit' | 'okx' | 'hyperliquid';
  /** ccxt `options.fetchMarkets.types`: load only the market kind the service uses. */
  marketTypes: string[];
  kind: 'spot' | 'swap';
  quote: string;
  /** Most candles one request returns. */
  maxCandlesPerRequest: number;
  /** The REST API's origin (what ccxt calls): asked once at start whether anything answers there. */
  origin: string;
}

export const LIVE_VENUES: Readonly<Record<Exchange, LiveVenue>> = {
  BINANCE: {
    exchange: 'BINANCE',
    ccxtId: 'binanceusdm',
    marketTypes: ['linear'],
    kind: 'swap',
    quote: 'USDT',
    maxCandlesPerRequest: 1500,
    origin: 'https://fapi.binance.com',
  },
  BINANCE_SPOT: {
    exchange: 'BINANCE_SPOT',
    ccxtId: 'binance',
    marketTypes: ['spot'],
    kind: 'spot',
    quote: 'USDT',
    maxCandlesPerRequest: 1000,
    origin: 'https://api.binance.com',
  },
  BYBIT: {
    exchange: 'BYBIT',
    ccxtId: 'bybit',
    marketTypes: ['linear'],
    kind: 'swap',
    quote: 'USDT',
    maxCandlesPerRequest: 1000,
    origin: 'https://api.bybit.com',
  },
  OKX: {
    exchange: 'OKX',
    ccxtId: 'okx',
    marketTypes: ['swap'],
    kind: 'swap',
    quote: 'USDT',
    maxCandlesPerRequest: 300,
    origin: 'https://www.okx.com',
  },
  HYPERLIQUID: {
    exchange: 'HYPERLIQUID',
    ccxtId: 'hyperliquid',
    marketTypes: ['swap'],
    kind: 'swap',
    quote: 'USDC',
    maxCandlesPerRequest: 5000,
    origin: 'https://api.hyperliquid.xyz',
  },
};

/** The unified symbol the service means for a coin: BTC/USDT, BTC/USDT:USDT, BTC/USDC:USDC. */
export function unifiedSymbol(venue: LiveVenue, coin: string): string {
  return venue.kind === 'spot' ? `${coin}/${venue.quote}` : `${coin}/${venue.quote}:${venue.quote}`;
}

/** ccxt states funding intervals as '8h', '1h', '4h'. */
export function parseIntervalHours(interval: unknown): number | undefined {
  if (typeof interval !== 'string') return undefined;
  const m = /^(\d+)h$/.exec(interval.trim());
  const hours = m === null ? Number.NaN : Number(m[1]);
  return hours > 0 ? hours : undefined;
}
