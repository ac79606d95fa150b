import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import type { FetchImplementation } from './live.ts';

/**
 * Test support: Binance spot's REST API (exchangeInfo, ticker/24hr, klines) on a local HTTP server, so the
 * live feed's ccxt client is exercised over a real socket (status lines, headers such as
 * Retry-After, bodies cut short, timeouts) with every request counted. `fault` answers a request
 * in place of the venue when it returns true. Klines are a fixed function of open time, up to
 * and including the candle still open at `now`, as Binance sends them.
 */
export interface LocalVenue {
  /** Requests received, by path (/api/v3/klines). */
  readonly hits: Map<string, number>;
  /** The fetch to hand LiveFeed: the venue's URLs answered by this server. */
  fetch: FetchImplementation;
  fault: ((req: LocalRequest, res: ServerResponse, rows: unknown[][]) => boolean) | undefined;
  close(): Promise<void>;
}

export interface LocalRequest {
  path: string;
  query: URLSearchParams;
  /** How many requests this path has had, this one included. */
  n: number;
}

const FIXTURES = new URL('./fixtures/', import.meta.url);

/** Binance spot's kline row: [openTime, o, h, l, c, v, closeTime, quoteVolume, trades, …]. */
export function klineRow(openTime: number, interval: Timeframe): unknown[] {
  const k = openTime / 60_000;
  const close = 100 + 10 * Math.sin(k / 500) + Math.sin(k / 7);
  const open = close - Math.cos(k / 3) * 0.2;
  const high = Math.max(open, close) + 0.3;
  const low = Math.min(open, close) - 0.3;
  const volume = 10 + (k % 13);
  const f = (x: number) => x.toFixed(4);
  return [
    openTime,
    f(open),
    f(high),
    f(low),
    f(close),
    f(volume),
    openTime + TIMEFRAME_MS[interval] - 1,
    f(volume * close),
    10,
    f(volume / 2),
    f((volume * close) / 2),
    '0',
  ];
}

export async function startLocalVenue(now: () => number): Promise<LocalVenue> {
  const hits = new Map<string, number>();
  const venue: LocalVenue = {
    hits,
    fault: undefined,
    fetch: () => Promise.reject(new Error('not started')),
    close: async () => undefined,
  };
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://venue');
    const n = (hits.get(url.pathname) ?? 0) + 1;
    hits.set(url.pathname, n);
    const json = (status: number, body: string) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(body);
    };
    const rows: unknown[][] = [];
    if (url.pathname === '/api/v3/klines') {
      const interval = url.searchParams.get('interval') as Timeframe;
      const ms = TIMEFRAME_MS[interval];
      const limit = Math.min(1000, Number(url.searchParams.get('limit') ?? 500));
      const start = Math.ceil(Number(url.searchParams.get('startTime') ?? 0) / ms) * ms;
      for (let t = start; t <= now() && rows.length < limit; t += ms) rows.push(klineRow(t, interval));
    }
    if (venue.fault?.({ path: url.pathname, query: url.searchParams, n }, res, rows)) return;
    if (url.pathname === '/api/v3/exchangeInfo') {
      return json(200, readFileSync(new URL('binance-spot/exchangeInfo.json', FIXTURES), 'utf8'));
    }
    if (url.pathname === '/api/v3/ticker/24hr') {
      return json(200, readFileSync(new URL('binance-spot/ticker-24hr.json', FIXTURES), 'utf8'));
    }
    if (url.pathname === '/api/v3/klines') return json(200, JSON.stringify(rows));
    json(404, JSON.stringify({ code: -1, msg: `no ${url.pathname} here` }));
  };
  // Ports 19000-19999 are this project's for test servers; a taken one is skipped.
  const server: Server = createServer(handle);
  for (let port = 19_400 + Math.floor(Math.random() * 500); ; port++) {
    const ok = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (ok) break;
    if (port >= 19_999) throw new Error('no free port in 19400-19999');
  }
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  venue.fetch = (url, init) => {
    const u = new URL(url);
    return fetch(`${base}${u.pathname}${u.search}`, {
      method: init.method ?? 'GET',
      headers: init.headers as Record<string, string>,
      ...(typeof init.body === 'string' ? { body: init.body } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
    });
  };
  venue.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return venue;
}
