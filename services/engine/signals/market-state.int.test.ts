import {
  ADX,
  AO,
  ATR,
  CCI,
  ElderRay,
  EMA,
  MACD,
  MOM,
  RSI,
  UltimateOscillator,
  WilliamsR,
} from 'trading-signals';
import { beforeAll, describe, expect, it } from 'vitest';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import type { Candle } from '../../../contracts/market.ts';
import { createMarketState, OutOfOrderCandleError } from './market-state.ts';

const FILE = new URL('../../../sample-data/market/candles/binance-spot/ETHUSDT-1h.csv.gz', import.meta.url)
  .pathname;
let candles: Candle[];
beforeAll(async () => {
  candles = await readCandleFile(FILE);
});

const last = <T>(xs: readonly T[]) => xs[xs.length - 1]!;

describe('MarketState: streaming readings equal trading-signals batch results (real ETH 1h candles)', () => {
  it('after every candle fed once, readings match indicators run over the whole batch', () => {
    const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'ETH', timeframe: '1h' });
    for (const c of candles) state.update(c);
    const r = state.snapshot()!;
    const closes = candles.map((c) => c.close);

    expect(r.ema.p200).toBeCloseTo(last(new EMA(200).updates(closes)), 8);
    expect(r.sma.p50).toBeCloseTo(closes.slice(-50).reduce((a, b) => a + b, 0) / 50, 8);
    expect(r.rsi).toBeCloseTo(last(new RSI(14).updates(closes))!, 10);
    expect(r.cci).toBeCloseTo(last(new CCI(20).updates(candles))!, 10);
    expect(r.mom).toBeCloseTo(last(new MOM(10).updates(closes))!, 10);
    expect(r.ao).toBeCloseTo(last(new AO(5, 34).updates(candles))!, 10);
    expect(r.williamsR).toBeCloseTo(last(new WilliamsR(14).updates(candles))!, 10);
    expect(r.ultimate).toBeCloseTo(last(new UltimateOscillator().updates(candles))!, 10);
    const macd = last(new MACD(new EMA(12), new EMA(26), new EMA(9)).updates(closes))!;
    expect(r.macd).toBeCloseTo(macd.macd, 10);
    expect(r.macdSignal).toBeCloseTo(macd.signal, 10);
    const elder = last(new ElderRay(13).updates(candles))!;
    expect(r.bullPower).toBeCloseTo(elder.bullPower, 10);
    const adx = new ADX(14);
    const adxSeries = adx.updates(candles);
    expect(r.adx).toBeCloseTo(last(adxSeries)!, 10);
    expect(r.adxSlope).toBeCloseTo(last(adxSeries)! - adxSeries[adxSeries.length - 6]!, 10);
    expect(r.plusDi).toBeCloseTo(100 * (adx.pdi as number), 10);
    expect(r.minusDi).toBeCloseTo(100 * (adx.mdi as number), 10);
    const atr = last(new ATR(14).updates(candles))!;
    expect(r.regimeMetrics!.atr_pct).toBeCloseTo((100 * atr) / last(candles).close, 10);
    const hi26 = Math.max(...candles.slice(-26).map((c) => c.high));
    const lo26 = Math.min(...candles.slice(-26).map((c) => c.low));
    expect(r.ichimokuBase).toBeCloseTo((hi26 + lo26) / 2, 8);
    expect(r.closeTime).toBe(last(candles).openTime + 3_600_000);
    expect(state.lastCloseTime).toBe(r.closeTime);
    expect(r.candles).toBe(candles.length);
  });

  it('readings at candle i depend only on candles up to i', () => {
    const a = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'ETH', timeframe: '1h' });
    const b = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'ETH', timeframe: '1h' });
    for (const c of candles.slice(0, 500)) a.update(c);
    for (const c of candles.slice(0, 500)) b.update(c);
    b.update({ ...candles[500]!, close: candles[500]!.close * 1.5 });
    expect(b.snapshot()!.rsi).not.toBe(a.snapshot()!.rsi);
    a.update(candles[500]!);
    expect(a.snapshot()!.rsiPrev).toBe(b.snapshot()!.rsiPrev);
  });

  it('rejects a candle that is not after the last one (duplicate or out of order)', () => {
    const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'ETH', timeframe: '1h' });
    state.update(candles[0]!);
    state.update(candles[1]!);
    expect(() => state.update(candles[1]!)).toThrow(OutOfOrderCandleError);
    expect(() => state.update(candles[0]!)).toThrow(OutOfOrderCandleError);
    expect(state.candleCount).toBe(2);
  });

  it('reports what is missing until the indicators are stable', () => {
    const state = createMarketState({ exchange: 'BINANCE_SPOT', coin: 'ETH', timeframe: '1h' });
    expect(state.missingForVerdict()).toEqual(['candles']);
    expect(state.snapshot()).toBeNull();
    let readyAt = -1;
    for (const [i, c] of candles.entries()) {
      state.update(c);
      if (state.missingForVerdict().length === 0) {
        readyAt = i + 1;
        break;
      }
      if (i === 20)
        expect(state.missingForVerdict()).toEqual(expect.arrayContaining(['sma50', 'regime_metrics']));
    }
    expect(readyAt).toBeGreaterThan(50);
    expect(readyAt).toBeLessThan(120);
  });
});
