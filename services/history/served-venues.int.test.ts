import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KnownCoins } from '../../adapters/market/known-coins.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { openReplayFeed } from '../../adapters/market/replay.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { holdsCoin, ServedVenues } from './served-venues.ts';

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

describe('KnownCoins with what the history holds (the coin filter)', () => {
  it('judges a coin held on one venue on the venue asked, as get_trade_call does', async () => {
    // ZEC held on BINANCE_SPOT only (a delisted coin's record); the replay lists it nowhere.
    const streams = ['verdicts-BINANCE_SPOT-ZEC-1h', 'verdicts-BINANCE-BTC-1h'];
    const coins = new KnownCoins(() => feed, {
      has: (coin, exchange) => holdsCoin(streams, coin, exchange),
      missing: (coin, exchange) =>
        `the history holds no verdict of ${coin}${exchange ? ` on ${exchange}` : ''}`,
    });
    const judge = (coin: string, exchange?: Exchange) =>
      coins.check(coin, exchange, 'coin').then(
        () => 'known',
        (err: { code?: string; field?: string; message: string }) =>
          `${err.code} ${err.field} ${err.message}`,
      );
    expect(await judge('ZEC')).toBe('known');
    expect(await judge('ZEC', 'BINANCE_SPOT')).toBe('known');
    // Was served as an empty history: held elsewhere says nothing of BINANCE.
    const refused = await judge('ZEC', 'BINANCE');
    expect(refused).toMatch(/^unknown_coin coin /);
    expect(refused).toContain('the history holds no verdict of ZEC on BINANCE');
    expect(await judge('BTC', 'BINANCE_SPOT')).toBe('known');
  });
});
