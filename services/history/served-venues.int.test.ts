import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { openReplayFeed } from '../../adapters/market/replay.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { ServedVenues } from './served-venues.ts';

let feed: MarketFeed & { close?: () => Promise<void> };
beforeAll(async () => {
  feed = await openReplayFeed({ run: false });
});
afterAll(async () => {
  await feed?.close?.();
});

/** What a check answers: 'served', or the refusal's code. */
async function judged(venues: ServedVenues, ask: { exchange?: Exchange; timeframe?: Timeframe }) {
  return venues.check(ask).then(
    () => 'served',
    (err: { code?: string }) => err.code ?? String(err),
  );
}

describe('ServedVenues (the history’s venue and timeframe filters)', () => {
  it('refuses what the replay serves no market of, and keeps what the history holds readable', async () => {
    const held: { exchange?: Exchange; timeframe?: Timeframe }[] = [
      { exchange: 'BYBIT', timeframe: '4h' },
      { exchange: 'BINANCE', timeframe: '1m' },
    ];
    const venues = new ServedVenues(() => feed, {
      has: (ask) =>
        held.some(
          (h) =>
            (ask.exchange === undefined || h.exchange === ask.exchange) &&
            (ask.timeframe === undefined || h.timeframe === ask.timeframe),
        ),
    });
    const cases: [{ exchange?: Exchange; timeframe?: Timeframe }, string][] = [
      [{}, 'served'],
      [{ exchange: 'OKX' }, 'unsupported_exchange'],
      [{ exchange: 'OKX', timeframe: '1h' }, 'unsupported_exchange'],
      [{ exchange: 'HYPERLIQUID', timeframe: '1h' }, 'unsupported_exchange'],
      [{ exchange: 'BINANCE', timeframe: '5m' }, 'unsupported_timeframe'],
      [{ exchange: 'BINANCE_SPOT', timeframe: '1m' }, 'unsupported_timeframe'],
      [{ exchange: 'BINANCE_SPOT' }, 'served'],
      [{ exchange: 'BINANCE', timeframe: '4h' }, 'served'],
      [{ timeframe: '15m' }, 'served'],
      // Held: a venue the feed serves no candles of, a timeframe no venue serves.
      [{ exchange: 'BYBIT' }, 'served'],
      [{ exchange: 'BYBIT', timeframe: '4h' }, 'served'],
      [{ exchange: 'BYBIT', timeframe: '1h' }, 'unsupported_exchange'],
      [{ timeframe: '1m' }, 'served'],
      [{ exchange: 'BINANCE', timeframe: '1m' }, 'served'],
      [{ exchange: 'BINANCE_SPOT', timeframe: '1m' }, 'unsupported_timeframe'],
    ];
    for (const [ask, expected] of cases)
      expect(await judged(venues, ask), JSON.stringify(ask)).toBe(expected);
    // Nothing held: a timeframe no venue serves is refused.
    const bare = new ServedVenues(() => feed, { has: () => false });
    expect(await judged(bare, { timeframe: '1m' })).toBe('unsupported_timeframe');
    expect(await judged(bare, { exchange: 'BYBIT' })).toBe('unsupported_exchange');
    // No feed in this process: nothing to judge by, nothing refused.
    expect(await judged(new ServedVenues(() => null, { has: () => false }), { exchange: 'OKX' })).toBe(
      'served',
    );
  });
});
