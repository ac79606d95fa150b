import type { Logger } from 'pino';
import { describe, expect, it } from 'vitest';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { type Candle, TIMEFRAME_MS } from '../../contracts/market.ts';
import { MarketStates } from './market-states.ts';

const HOUR = TIMEFRAME_MS['1h'];

/** A feed of hourly candles up to its clock, counting the candle reads it is asked for. */
function hourlyFeed(start: number) {
  let now = start;
  const reads: number[] = [];
  let gate: Promise<void> | null = null;
  const feed = {
    kind: 'replay',
    now: () => now,
    async candles(_exchange: string, _coin: string, _tf: string, options: { limit: number }) {
      reads.push(options.limit);
      if (gate) await gate;
      const lastOpen = Math.floor(now / HOUR) * HOUR - HOUR;
      const out: Candle[] = [];
      for (let i = options.limit - 1; i >= 0; i--) {
        const openTime = lastOpen - i * HOUR;
        const price = 100 + ((openTime / HOUR) % 7);
        out.push({ openTime, open: price, high: price + 1, low: price - 1, close: price, volume: 1 });
      }
      return out;
    },
  } as unknown as MarketFeed;
  return {
    feed,
    reads,
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
    const f = hourlyFeed(1_000 * HOUR + 10);
    const states = new MarketStates(f.feed);
    const first = await states.advance('BINANCE', 'BTC', '1h');
    expect(first.lastCloseTime).toBe(1_000 * HOUR);
    for (let i = 0; i < 5; i++) expect(await states.advance('BINANCE', 'BTC', '1h')).toBe(first);
    expect(f.reads).toHaveLength(1);
    f.advanceClock(HOUR);
    const next = await states.advance('BINANCE', 'BTC', '1h');
    expect(next.lastCloseTime).toBe(1_001 * HOUR);
    expect(f.reads).toHaveLength(2);
  });

  it('makes a call that comes while an advance is on its way wait for it', async () => {
    const f = hourlyFeed(1_000 * HOUR + 10);
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
    expect(f.reads).toHaveLength(2);
  });

  it('advances a 4h state without its 1h candles when the venue fails them, logging why', async () => {
    const H4 = TIMEFRAME_MS['4h'];
    const now = 1_000 * H4 + 10;
    const asked: string[] = [];
    const feed = {
      kind: 'replay',
      now: () => now,
      async candles(_exchange: string, _coin: string, tf: string, options: { limit: number }) {
        asked.push(tf);
        if (tf === '1h') throw new Error('venue timed out');
        const out: Candle[] = [];
        for (let i = options.limit - 1; i >= 0; i--) {
          const openTime = (999 - i) * H4;
          const price = 100 + (i % 5);
          out.push({ openTime, open: price, high: price + 1, low: price - 1, close: price, volume: 1 });
        }
        return out;
      },
    } as unknown as MarketFeed;
    const warnings: unknown[] = [];
    const logger = { warn: (fields: unknown) => warnings.push(fields) } as unknown as Logger;
    const state = await new MarketStates(feed, logger).advance('BINANCE', 'BTC', '4h');
    expect(asked).toEqual(['4h', '1h']);
    expect(state.readsHours).toBe(true);
    expect(state.lastCloseTime).toBe(1_000 * H4);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ exchange: 'BINANCE', coin: 'BTC', timeframe: '4h' });
  });

  it("reads a market's 1h candles once an hour for all its 2h-1d states, not once per state", async () => {
    let now = 1_000 * TIMEFRAME_MS['1d'] + 10;
    const asked: { tf: string; limit: number }[] = [];
    const feed = {
      kind: 'replay',
      now: () => now,
      async candles(_exchange: string, _coin: string, tf: string, options: { limit: number }) {
        asked.push({ tf, limit: options.limit });
        const ms = TIMEFRAME_MS[tf as '1h'];
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
    const states = new MarketStates(feed);
    await Promise.all(
      ['2h', '4h', '8h', '12h', '1d'].map((tf) => states.advance('BINANCE', 'BTC', tf as '1d')),
    );
    expect(asked.filter((a) => a.tf === '1h')).toEqual([{ tf: '1h', limit: 500 }]);
    // Two hours on: the 2h state advances and the market's hours are read again, as few as it needs.
    now += 2 * HOUR;
    const two = await states.advance('BINANCE', 'BTC', '2h');
    expect(two.lastCloseTime).toBe(Math.floor(now / HOUR) * HOUR);
    expect(asked.filter((a) => a.tf === '1h')).toEqual([
      { tf: '1h', limit: 500 },
      { tf: '1h', limit: 5 },
    ]);
  });
});
