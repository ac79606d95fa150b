import { describe, expect, it } from 'vitest';
import { aggregateCandles } from '../../adapters/market/aggregate.ts';
import { openReplayFeed } from '../../adapters/market/replay.ts';
import { SHARED_MARKET_DIR } from '../../adapters/market/shared-data.ts';
import { type Candle, TIMEFRAME_MS, type Timeframe } from '../../contracts/market.ts';
import { readCandles } from './evaluate/data-folder.ts';
import { MarketStates } from './market-states.ts';
import { createMarketState, type MarketState } from './signals/market-state.ts';

/**
 * The σ a market state serves after a restart (MarketStates rebuilds it from the feed's last
 * warm-up candles) is the σ the evaluation scored: that of a state fed the coin's whole history,
 * candle by candle, as the evaluator feeds it. Real spot candles of the shared data, read back
 * through the replay feed the service runs on, at closes spread over 2025.
 */

const COINS = ['BTC', 'ETH', 'SOL', 'DOGE', 'XRP', 'SUI'];
const TIMEFRAMES: Timeframe[] = ['5m', '1h', '4h'];
const AT = [
  '2025-03-17T12:00:00Z',
  '2025-05-29T00:00:00Z',
  '2025-08-08T20:00:00Z',
  '2025-10-21T08:00:00Z',
].map(Date.parse);

const sigmas = (state: MarketState) => state.snapshot()!.volRisk.map((r) => r.sigma!);

/** Every close's σ of a state fed the whole history, at each of AT (the evaluator's way). */
function fullHistory(candles: readonly Candle[], hours: readonly Candle[], coin: string, tf: Timeframe) {
  const state = createMarketState({ exchange: 'BINANCE_SPOT', coin, timeframe: tf });
  const tfMs = TIMEFRAME_MS[tf];
  const out = new Map<number, number[]>();
  let h = 0;
  for (const c of candles) {
    const close = c.openTime + tfMs;
    if (close > AT[AT.length - 1]!) break;
    if (state.readsHours) h = state.updateHours(hours, h, close);
    state.update(c);
    if (AT.includes(close)) out.set(close, sigmas(state));
  }
  return out;
}

describe('served σ after a restart', () => {
  it("equals the evaluator's whole-history σ within 0.5 % on every risk row", async () => {
    const feed = await openReplayFeed({ dir: SHARED_MARKET_DIR, start: AT[0]!, run: false, loop: false });
    const data = { data: SHARED_MARKET_DIR };
    const ratios: { coin: string; tf: Timeframe; at: string; row: number; ratio: number }[] = [];
    const evaluated = new Map<string, Map<number, number[]>>();
    for (const coin of COINS) {
      const hours = await readCandles(data, 'binance-spot', `${coin}USDT-1h.csv.gz`);
      const fives = await readCandles(data, 'binance-spot', `${coin}USDT-5m.csv.gz`);
      for (const tf of TIMEFRAMES) {
        const candles = tf === '5m' ? fives : tf === '1h' ? hours : aggregateCandles(hours, '1h', tf);
        evaluated.set(`${coin}:${tf}`, fullHistory(candles, hours, coin, tf));
      }
    }
    for (const at of AT) {
      feed.clock.setTime(at);
      // A new MarketStates is a restarted engine: every state built afresh from the feed.
      const states = new MarketStates(feed);
      for (const coin of COINS) {
        for (const tf of TIMEFRAMES) {
          const served = sigmas(await states.advance('BINANCE_SPOT', coin, tf));
          const full = evaluated.get(`${coin}:${tf}`)!.get(at)!;
          expect(served).toHaveLength(full.length);
          served.forEach((s, row) => {
            ratios.push({ coin, tf, at: new Date(at).toISOString(), row, ratio: s / full[row]! });
          });
        }
      }
    }
    expect(ratios).toHaveLength(COINS.length * TIMEFRAMES.length * AT.length * 3);
    const off = ratios.filter((r) => Math.abs(r.ratio - 1) > 0.005);
    expect(off).toEqual([]);
  }, 120_000);
});
