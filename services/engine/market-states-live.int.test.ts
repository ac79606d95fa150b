import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { VenueUnavailableError } from '../../adapters/market/errors.ts';
import { LiveFeed } from '../../adapters/market/live.ts';
import { type LocalVenue, startLocalVenue } from '../../adapters/market/local-venue.ts';
import { SignalEngine } from './engine.ts';
import { MarketStates } from './market-states.ts';
import { describeFailure } from './operation-errors.ts';
import { InsufficientHistoryError } from './signals/errors.ts';
import { computeRiskHorizons } from './signals/risk-forecast.ts';

/**
 * Market states warmed up through the live feed (ccxt over a socket) from Binance spot's API on a
 * local server that fails a market's 1h candles while it serves its daily ones.
 */
describe('market states on a live venue that fails the 1h read', () => {
  const NOW = Date.UTC(2025, 9, 25, 10, 32);
  let venue: LocalVenue;
  let feed: LiveFeed;
  beforeAll(async () => {
    venue = await startLocalVenue(() => NOW);
  });
  afterAll(async () => {
    await feed?.close();
    await venue.close();
  });
  beforeEach(() => {
    venue.hits.clear();
    feed = new LiveFeed({
      exchanges: ['BINANCE_SPOT'],
      now: () => NOW,
      fetchImplementation: venue.fetch,
      sleep: async () => undefined,
    });
  });

  it('serves a new 1d state built without its hours once, and builds it again with them once the venue answers', async () => {
    let failing = true;
    venue.fault = (req, res) => {
      if (!failing || req.path !== '/api/v3/klines' || req.query.get('interval') !== '1h') return false;
      res.writeHead(500, { 'content-type': 'text/html' });
      res.end('<html>oops</html>');
      return true;
    };
    const states = new MarketStates(feed);
    const first = await states.advance('BINANCE_SPOT', 'BTC', '1d');
    expect(first.lastCloseTime).toBe(Date.UTC(2025, 9, 25));
    // Its risk rows have no σ without the hours: not the market's history, a failed read, which
    // the risk forecast answers (venue_unavailable) instead of insufficient_history.
    expect(() => computeRiskHorizons(first)).toThrow(InsufficientHistoryError);
    expect(states.hoursFailure(first)).toBeInstanceOf(VenueUnavailableError);
    expect(states.hoursFailure(first)?.message).toMatch(/fetchOHLCV BTC\/USDT 1h failed/);
    failing = false;
    // Kept, the state answered insufficient_history (not retryable) for every request after.
    const again = await states.advance('BINANCE_SPOT', 'BTC', '1d');
    expect(again).not.toBe(first);
    expect(states.hoursFailure(again)).toBeUndefined();
    const rows = computeRiskHorizons(again);
    expect(rows.every((r) => r.expected_move_pct > 0)).toBe(true);
    expect(await states.advance('BINANCE_SPOT', 'BTC', '1d')).toBe(again);
  });
  it('answers a risk forecast on such a state venue_unavailable (retryable), then the forecast once the venue answers', async () => {
    let failing = true;
    venue.fault = (req, res) => {
      if (!failing || req.path !== '/api/v3/klines' || req.query.get('interval') !== '1h') return false;
      res.writeHead(500, { 'content-type': 'text/html' });
      res.end('<html>oops</html>');
      return true;
    };
    const engine = new SignalEngine({ feed, store: new MemoryEventStore() });
    const input = { coin: 'ETH', timeframe: '1d', exchange: 'BINANCE_SPOT' } as const;
    const error = await engine.getRiskForecast(input).catch((e: unknown) => e);
    // Answered insufficient_history (422, not retryable), the caller was told not to ask again.
    expect(describeFailure(error)).toMatchObject({ status: 503, code: 'venue_unavailable', retryable: true });
    failing = false;
    const forecast = await engine.getRiskForecast(input);
    expect(forecast.horizons.every((h) => h.expected_move_pct > 0)).toBe(true);
  });
});
