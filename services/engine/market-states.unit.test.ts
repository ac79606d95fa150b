import type { Logger } from 'pino';
import { describe, expect, it } from 'vitest';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { onFirstRead } from '../../test/first-read.ts';
import { MarketStates } from './market-states.ts';

const HOUR = TIMEFRAME_MS['1h'];

/**
 * A feed of candles of whatever timeframe is asked, up to its clock, counting the reads it is
 * asked for (`asked`: timeframe and limit); `failing` names a timeframe whose reads throw, as a
 * venue's that times out.
 */
function candleFeed(start: number, failing?: Timeframe) {
  let now = start;
  const asked: { tf: string; limit: number }[] = [];
  let gate: Promise<void> | null = null;
  const feed = {
    kind: 'replay',
    now: () => now,
    async candles(_exchange: string, _coin: string, tf: Timeframe, options: { limit: number }) {
      asked.push({ tf, limit: options.limit });
      if (gate) await gate;
      if (tf === failing) throw new Error('venue timed out');
      const ms = TIMEFRAME_MS[tf];
      const lastOpen = Math.floor(now / ms) * ms - ms;
      const out: Candle[] = [];
      for (let i = options.limit - 1; i >= 0; i--) {
        const openTime = lastOpen - i * ms;
        const price = 100 + ((openTime / HOUR) % 7);
        out.push({ openTime, open: price, high: price + 1, low: price - 1, close: price, volume: 1 });
      }
      return out;
    },
  } as unknown as MarketFeed;
  return {
    feed,
    asked,
    advanceClock: (ms: number) => {
      now += ms;
    },
    hold: () => {
      let release!: () => void;
      gate = new Promise((resolve) => {
        release = resolve;
      });
      return () => {
        gate = null;
        release();
      };
    },
  };
}

describe('MarketStates.advance', () => {
  it('reads the feed once per close however often it is asked, and again after the next close', async () => {
    const f = candleFeed(1_000 * HOUR + 10);
    const states = new MarketStates(f.feed);
    const first = await states.advance('BINANCE', 'BTC', '1h');
    expect(first.lastCloseTime).toBe(1_000 * HOUR);
    for (let i = 0; i < 5; i++) expect(await states.advance('BINANCE', 'BTC', '1h')).toBe(first);
    expect(f.asked).toHaveLength(1);
    f.advanceClock(HOUR);
    const next = await states.advance('BINANCE', 'BTC', '1h');
    expect(next.lastCloseTime).toBe(1_001 * HOUR);
    expect(f.asked).toHaveLength(2);
  });

  it('makes a call that comes while an advance is on its way wait for it', async () => {
    const f = candleFeed(1_000 * HOUR + 10);
    const states = new MarketStates(f.feed);
    await states.advance('BINANCE', 'BTC', '1h');
    f.advanceClock(HOUR);
    const release = f.hold();
    const advancing = states.advance('BINANCE', 'BTC', '1h');
    // The state still says the last close: this call must not take it as current.
    let settled = false;
    const waiting = states.advance('BINANCE', 'BTC', '1h').then((s) => {
      settled = true;
      return s;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(settled).toBe(false);
    release();
    const [a, b] = await Promise.all([advancing, waiting]);
    expect(a.lastCloseTime).toBe(1_001 * HOUR);
    expect(b).toBe(a);
    expect(f.asked).toHaveLength(2);
  });

  it.each(['1h', '4h'] as const)(
    'leaves a kept %s state stopped mid-advance at the last candle fed, and the next advance feeds it from there',
    async (tf) => {
      const ms = TIMEFRAME_MS[tf];
      const start = 3_000 * ms + 10;
      // The same candles, advanced without a stop: what the stopped state must end up as.
      const whole = candleFeed(start);
      const reference = new MarketStates(whole.feed);
      await reference.advance('BINANCE', 'BTC', tf);
      whole.advanceClock(300 * ms);
      const expected = await reference.advance('BINANCE', 'BTC', tf);

      const f = candleFeed(start);
      const stop = new AbortController();
      // Once counting, the candles of `tf` read then, each counted as the state is fed it (its
      // close read, the first time): the 100th stops the advance.
      let counting = false;
      let fed = 0;
      const feed = new Proxy(f.feed, {
        get(target, property) {
          if (property !== 'candles') return Reflect.get(target, property);
          return async (...args: Parameters<MarketFeed['candles']>) => {
            const candles = await target.candles(...args);
            if (args[2] !== tf || !counting) return candles;
            return candles.map((candle) =>
              onFirstRead(candle, 'close', () => {
                if (++fed === 100) stop.abort();
              }),
            );
          };
        },
      });
      const states = new MarketStates(feed);
      const kept = await states.advance('BINANCE', 'BTC', tf);
      const before = kept.candleCount;
      f.advanceClock(300 * ms);
      counting = true;
      await expect(states.advance('BINANCE', 'BTC', tf, stop.signal)).rejects.toMatchObject({
        name: 'AbortError',
      });
      // Stopped while fed its 100th new candle: that one fed whole, none after it.
      expect(kept.candleCount - before).toBe(100);
      expect(kept.lastCloseTime).toBe(3_100 * ms);
      const after = await states.advance('BINANCE', 'BTC', tf);
      expect(after).toBe(kept);
      expect(after.lastCloseTime).toBe(expected.lastCloseTime);
      expect(after.candleCount).toBe(expected.candleCount);
      expect(after.snapshot()).toEqual(expected.snapshot());
      expect(after.savedBandScales()).toEqual(expected.savedBandScales());
    },
  );

  it('advances a 4h state without its 1h candles when the venue fails them, logging why', async () => {
    const H4 = TIMEFRAME_MS['4h'];
    const f = candleFeed(1_000 * H4 + 10, '1h');
    const warnings: unknown[] = [];
    const logger = { warn: (fields: unknown) => warnings.push(fields) } as unknown as Logger;
    const state = await new MarketStates(f.feed, logger).advance('BINANCE', 'BTC', '4h');
    expect(f.asked.map((a) => a.tf)).toEqual(['4h', '1h']);
    expect(state.readsHours).toBe(true);
    expect(state.lastCloseTime).toBe(1_000 * H4);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ exchange: 'BINANCE', coin: 'BTC', timeframe: '4h' });
  });

  it("reads a market's 1h candles once an hour for all its 2h-1d states, not once per state", async () => {
    const f = candleFeed(1_000 * TIMEFRAME_MS['1d'] + 10);
    const states = new MarketStates(f.feed);
    await Promise.all(
      ['2h', '4h', '8h', '12h', '1d'].map((tf) => states.advance('BINANCE', 'BTC', tf as '1d')),
    );
    expect(f.asked.filter((a) => a.tf === '1h')).toEqual([{ tf: '1h', limit: 500 }]);
    // Two hours on: the 2h state advances and the market's hours are read again, as few as it needs.
    f.advanceClock(2 * HOUR);
    const two = await states.advance('BINANCE', 'BTC', '2h');
    expect(two.lastCloseTime).toBe(1_000 * TIMEFRAME_MS['1d'] + 2 * HOUR);
    expect(f.asked.filter((a) => a.tf === '1h')).toEqual([
      { tf: '1h', limit: 500 },
      { tf: '1h', limit: 5 },
    ]);
  });
});
