import { beforeAll, describe, expect, it } from 'vitest';
import { aggregateCandles } from '../../../adapters/market/aggregate.ts';
import { readCandleFile } from '../../../adapters/market/csv.ts';
import { openReplayFeed } from '../../../adapters/market/replay.ts';
import type { Candle } from '../../../contracts/market.ts';
import type { RiskHorizonKey, VolatilityModel } from '../../../contracts/signals.ts';
import { MarketStates } from '../market-states.ts';
import { defaultVolatility } from '../signals/default-volatility.ts';
import { stateVolatility } from '../signals/market-regime.ts';
import { MarketState } from '../signals/market-state.ts';
import { computeRiskHorizons } from '../signals/risk-forecast.ts';
import {
  atPriceScale,
  BandScale,
  FineVariance,
  fitQlike,
  forecastVarianceOf,
  HourlyVariance,
  utcHour,
} from '../signals/volatility.ts';
import {
  bandScales,
  deskHorizons,
  deskSeries,
  fitDesk,
  fitGarch,
  type GarchParams,
  intervalScore,
  isWeekendUtc,
  prepareCoins,
  scoreDesk,
} from './risk-desk.ts';

const DIR = new URL('../../../sample-data/market/candles/binance-spot/', import.meta.url).pathname;
const COINS = ['BTCUSDT', 'ETHUSDT', 'SOLUSDT', 'BNBUSDT', 'DOGEUSDT'];

let m5: Candle[][];
let split: number;
beforeAll(async () => {
  m5 = await Promise.all(COINS.map((c) => readCandleFile(`${DIR}${c}-5m.csv.gz`)));
  const first = m5[0]!;
  const mid = first[Math.floor(first.length * 0.6)]!.openTime;
  split = mid - (mid % 86_400_000);
});

/** A seeded uniform generator, so simulated series are the same on every run. */
function lcg(seed: number): () => number {
  let x = seed >>> 0;
  return () => {
    x = (Math.imul(x, 1_664_525) + 1_013_904_223) >>> 0;
    return (x + 0.5) / 4_294_967_296;
  };
}

function normal(rnd: () => number): number {
  return Math.sqrt(-2 * Math.log(rnd())) * Math.cos(2 * Math.PI * rnd());
}

describe('QLIKE fit', () => {
  it('makes the forecast the mean of the target on the data it was fitted on, zeros included', () => {
    const rnd = lcg(7);
    const rows: number[][] = [];
    const ys: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const x = normal(rnd);
      const sigma2 = Math.exp(-9 + 0.8 * x);
      // A squared normal: the one-candle case whose log is far from normal; some exact zeros.
      const r = normal(rnd);
      rows.push([1, x]);
      ys.push(i % 50 === 0 ? 0 : sigma2 * r * r);
    }
    const b = fitQlike(rows, ys);
    let ratio = 0;
    for (let i = 0; i < rows.length; i++) ratio += ys[i]! / Math.exp(b[0]! + b[1]! * rows[i]![1]!);
    expect(ratio / rows.length).toBeCloseTo(1, 6);
    expect(b[1]).toBeGreaterThan(0.7);
    expect(b[1]).toBeLessThan(0.9);
  });

  it('weighs each point as that many copies of it (the recent training months count more)', () => {
    const rnd = lcg(11);
    const rows: number[][] = [];
    const ys: number[] = [];
    const weights: number[] = [];
    const copies: number[][] = [];
    const copyYs: number[] = [];
    for (let i = 0; i < 5_000; i++) {
      const x = normal(rnd);
      const r = normal(rnd);
      const y = Math.exp(-9 + 0.5 * x + (i % 3 === 0 ? 0.4 : 0)) * r * r;
      const w = i % 3 === 0 ? 3 : 1;
      rows.push([1, x]);
      ys.push(y);
      weights.push(w);
      for (let k = 0; k < w; k++) {
        copies.push([1, x]);
        copyYs.push(y);
      }
    }
    const weighted = fitQlike(rows, ys, undefined, weights);
    const copied = fitQlike(copies, copyYs);
    expect(weighted[0]).toBeCloseTo(copied[0]!, 6);
    expect(weighted[1]).toBeCloseTo(copied[1]!, 6);
    expect(weighted[0]).not.toBeCloseTo(fitQlike(rows, ys)[0]!, 3);
  });
});

describe('hourly variance', () => {
  it('is the bias-corrected one-day EWMA of squared one-hour log returns per candle', () => {
    const rnd = lcg(5);
    const closes = [100];
    for (let i = 1; i < 2_000; i++) closes.push(closes[i - 1]! * Math.exp(0.002 * normal(rnd)));
    const hv = new HourlyVariance('15m');
    const decay = 2 ** (-1 / 96);
    let sum = 0;
    let weight = 0;
    for (let i = 0; i < closes.length; i++) {
      const got = hv.push(closes[i]!);
      if (i < 4) {
        expect(got).toBeNull();
        continue;
      }
      const r = Math.log(closes[i]! / closes[i - 4]!);
      sum = decay * sum + (r * r) / 4;
      weight = decay * weight + 1;
      expect(got).toBeCloseTo(sum / weight, 15);
    }
  });
});

describe('fine variance', () => {
  it("is the bias-corrected one-day EWMA of each candle's summed squared 1h log returns, its own squared return where an hour is missing", () => {
    const rnd = lcg(9);
    const HOUR = 3_600_000;
    const hours: Candle[] = [];
    let price = 100;
    for (let i = 0; i < 24 * 40; i++) {
      price *= Math.exp(0.003 * normal(rnd));
      // Hour 100 is missing: the 4h candle holding it counts its own squared return.
      if (i !== 100)
        hours.push({ openTime: i * HOUR, open: price, high: price, low: price, close: price, volume: 1 });
    }
    const fours = aggregateCandles(hours, '1h', '4h');
    const fv = new FineVariance('4h');
    const decay = 2 ** (-1 / 6);
    let sum = 0;
    let weight = 0;
    let complete = false;
    let h = 0;
    for (let c = 0; c < fours.length; c++) {
      const candle = fours[c]!;
      const inside: number[] = [];
      while (h < hours.length && hours[h]!.openTime + HOUR <= candle.openTime + 4 * HOUR) {
        fv.pushHour(hours[h]!.openTime, hours[h]!.close);
        if (
          h > 0 &&
          hours[h]!.openTime - hours[h - 1]!.openTime === HOUR &&
          hours[h]!.openTime >= candle.openTime
        )
          inside.push(Math.log(hours[h]!.close / hours[h - 1]!.close) ** 2);
        h++;
      }
      const got = fv.push(candle.openTime, candle.close);
      let x = Number.NaN;
      if (inside.length === 4) x = inside.reduce((a, b) => a + b, 0);
      else if (c > 0) x = Math.log(candle.close / fours[c - 1]!.close) ** 2;
      complete ||= inside.length === 4;
      if (Number.isFinite(x)) {
        sum = decay * sum + x;
        weight = decay * weight + 1;
      }
      if (!complete) expect(got).toBeNull();
      else expect(got).toBeCloseTo(sum / weight, 15);
    }
  });
});

describe('adaptive band scale', () => {
  it('resolves a forecast exactly `candles` closes after it, skips closes that served none, and steps less on longer horizons', () => {
    // Closes rising 1 % a candle: a band of ±0.5 % over 1 candle misses every time, one over 3 candles
    // (a 3 % move) misses too.
    const closes = Array.from({ length: 10 }, (_, i) => 100 * 1.01 ** i);
    // Bands of ±0.5 % at σ 1 (the log-return edges the state serves are the band × σ).
    const NARROW = { low: -0.005, high: 0.005 };
    const next = new BandScale(1, 0.2, NARROW);
    // The first close has nothing to resolve; each later one resolves the close before: +0.02 × 0.8.
    expect(next.push(closes[0]!, 1)).toBe(1);
    expect(next.push(closes[1]!, 1)).toBeCloseTo(Math.exp(0.016), 12);
    expect(next.push(closes[2]!, null)).toBeCloseTo(Math.exp(0.032), 12);
    // The close before served no band: nothing resolves.
    expect(next.push(closes[3]!, 1)).toBeCloseTo(Math.exp(0.032), 12);
    const three = new BandScale(3, 0.2, NARROW);
    const scales = closes.slice(0, 5).map((c) => three.push(c, 1));
    // Nothing resolves before the fourth close; from it on, one miss a close. Up to 6 candles the step is
    // 0.02; a 12-candle horizon steps 0.01.
    expect(scales.slice(0, 3)).toEqual([1, 1, 1]);
    expect(scales[3]).toBeCloseTo(Math.exp(0.016), 12);
    expect(scales[4]).toBeCloseTo(Math.exp(0.032), 12);
    const twelve = new BandScale(12, 0.2, NARROW);
    const long = Array.from({ length: 13 }, (_, i) => twelve.push(100 * 1.01 ** i, 1));
    expect(long[12]).toBeCloseTo(Math.exp(0.01 * 0.8), 12);
    // A band that holds the move: each resolved close steps down by 0.02 × 0.2.
    const wide = new BandScale(1, 0.2, { low: -0.5, high: 0.5 });
    wide.push(100, 1);
    expect(wide.push(101, 1)).toBeCloseTo(Math.exp(-0.004), 12);
  });

  it('brings a band fitted too narrow, or too wide, to its nominal miss share on real candles', () => {
    const tf = '15m' as const;
    const series = m5.map((c) => deskSeries(aggregateCandles(c, '5m', tf), tf, c));
    const { coins } = prepareCoins(series, split);
    const fit = fitDesk(coins, tf, { key: 'verdict', candles: 6 }, split, 0.8)!;
    for (const factor of [0.5, 2]) {
      const model = {
        ...fit.service,
        bandLow: fit.service.bandLow * factor,
        bandHigh: fit.service.bandHigh * factor,
      };
      let scaledMisses = 0;
      let fixedMisses = 0;
      let n = 0;
      for (const s of series) {
        const scales = bandScales(s, model, 6, false, 0.2);
        // The second half of each coin's closes: the scale has had its first half to settle.
        for (let i = Math.floor(s.close.length / 2); i + 6 < s.close.length; i++) {
          const vars = [s.v0[i]!, s.v1[i]!, s.v2[i]!];
          const sigma = Math.sqrt(forecastVarianceOf(model, vars, 6, s.hourly[i], utcHour(s.closeTime[i]!)));
          const r = Math.log(s.close[i + 6]! / s.close[i]!);
          const outside = (k: number) => r < model.bandLow * sigma * k || r > model.bandHigh * sigma * k;
          if (outside(scales[i]!)) scaledMisses++;
          if (outside(1)) fixedMisses++;
          n++;
        }
      }
      expect(n).toBeGreaterThan(5_000);
      // Unscaled, the band misses far from 20 % (half as wide: about half the closes; twice: a few).
      expect(Math.abs(fixedMisses / n - 0.2)).toBeGreaterThan(0.1);
      expect(scaledMisses / n).toBeGreaterThan(0.17);
      expect(scaledMisses / n).toBeLessThan(0.23);
    }
  });
});

describe('GARCH(1,1) fit', () => {
  it('recovers α and β of a simulated series', () => {
    const rnd = lcg(11);
    const alpha = 0.1;
    const beta = 0.85;
    const longRun = 1e-4;
    const r2 = new Float64Array(40_000);
    let v = longRun;
    for (let i = 1; i < r2.length; i++) {
      const r = Math.sqrt(v) * normal(rnd);
      r2[i] = r * r;
      v = longRun * (1 - alpha - beta) + alpha * r2[i]! + beta * v;
    }
    const p = fitGarch([{ r2, trainEnd: r2.length, longRun }]);
    expect(p.alpha).toBeGreaterThan(0.08);
    expect(p.alpha).toBeLessThan(0.12);
    expect(p.beta).toBeGreaterThan(0.82);
    expect(p.beta).toBeLessThan(0.88);
  });
});

describe('risk desk on real candles', () => {
  it('fits on the months before the split only', () => {
    const series = m5.map((c) => deskSeries(c, '5m'));
    const { coins, garch } = prepareCoins(series, split);
    const h = deskHorizons('5m', 6)[1]!;
    const fit = fitDesk(coins, '5m', h, split, 0.8)!;
    // Test-month closes moved wildly: neither the fit nor GARCH may change.
    const scrambled = m5.map((candles) =>
      candles.map((c, i) => (c.openTime >= split ? { ...c, close: c.close * (1 + 0.05 * Math.sin(i)) } : c)),
    );
    const again = prepareCoins(
      scrambled.map((c) => deskSeries(c, '5m')),
      split,
    );
    expect(again.garch).toEqual(garch);
    expect(fitDesk(again.coins, '5m', h, split, 0.8)).toEqual(fit);
  });

  it('states the level, coverage and sizing of each horizon, and scores every forecaster', () => {
    const tf = '15m' as const;
    const series = m5.map((c) => deskSeries(aggregateCandles(c, '5m', tf), tf, c));
    const { coins, garch } = prepareCoins(series, split);
    for (const h of deskHorizons(tf, 6)) {
      const fit = fitDesk(coins, tf, h, split, 0.8)!;
      // A QLIKE fit makes mean(r²/h) 1 on the closes it was fitted on (with an intercept, exactly):
      // a position sized by it realises its target; its band covers ~80 %. σ served ÷ realised
      // (a ratio of means, not a mean of ratios) is not pinned by the fit: on this short slice's
      // day horizon it is 1.47.
      const train = scoreDesk(coins, tf, fit, garch, Number.NEGATIVE_INFINITY, split, 20);
      expect(train.sizing.service.value!).toBeGreaterThan(0.95);
      expect(train.sizing.service.value!).toBeLessThan(1.05);
      expect(train.sigmaRatio.value!).toBeGreaterThan(0);
      expect(train.sigmaRatio.low!).toBeLessThanOrEqual(train.sigmaRatio.high!);
      expect(train.coverage.value!).toBeGreaterThan(0.75);
      expect(train.coverage.value!).toBeLessThan(0.85);
      const test = scoreDesk(coins, tf, fit, garch, split, Number.POSITIVE_INFINITY, 20);
      expect(test.points).toBeGreaterThan(500);
      for (const k of ['service', 'ewma', 'garch', 'harRv'] as const) expect(test.qlike[k]).not.toBeNull();
      expect(test.qlikeVs.garch.value).toBeCloseTo(test.qlike.service! - test.qlike.garch!, 9);
      expect(test.qlikeVs.garch.low!).toBeLessThanOrEqual(test.qlikeVs.garch.high!);
      expect(test.sizing.service.value!).toBeGreaterThan(0);
    }
  });

  it('reports the band against the free band, its misses after a miss or a hit, and weekdays apart from weekends', () => {
    // The interval score: the width, plus 2 ÷ miss × the distance outside.
    expect(intervalScore(-1, 1, 0, 0.2)).toBe(2);
    expect(intervalScore(-1, 1, 2, 0.2)).toBe(12);
    expect(intervalScore(-1, 1, -1.5, 0.2)).toBe(7);
    expect(isWeekendUtc(Date.UTC(2025, 5, 7, 12))).toBe(true); // a Saturday
    expect(isWeekendUtc(Date.UTC(2025, 5, 8, 23, 59))).toBe(true); // a Sunday
    expect(isWeekendUtc(Date.UTC(2025, 5, 9))).toBe(false); // a Monday
    expect(isWeekendUtc(Date.UTC(2025, 5, 6, 23, 59))).toBe(false); // a Friday
    const tf = '15m' as const;
    const series = m5.map((c) => deskSeries(aggregateCandles(c, '5m', tf), tf, c));
    const { coins, garch } = prepareCoins(series, split);
    const h = deskHorizons(tf, 6)[1]!;
    const fit = fitDesk(coins, tf, h, split, 0.8)!;
    const test = scoreDesk(coins, tf, fit, garch, split, Number.POSITIVE_INFINITY, 20);
    const { weekday, weekend } = test.byDay;
    expect(weekday.points + weekend.points).toBe(test.points);
    expect(weekend.points).toBeGreaterThan(0.2 * test.points);
    expect(weekend.points).toBeLessThan(0.35 * test.points);
    // The two days' coverages pool to the row's.
    expect(
      (weekday.coverage.value! * weekday.points + weekend.coverage.value! * weekend.points) / test.points,
    ).toBeCloseTo(test.coverage.value!, 9);
    expect(weekend.sigmaRatio.value!).toBeGreaterThan(0);
    for (const x of [test.missAfter.miss, test.missAfter.hit, test.missAfter.freeMiss]) {
      expect(x!).toBeGreaterThan(0);
      expect(x!).toBeLessThan(1);
    }
    expect(test.sharpness.width.value!).toBeGreaterThan(0);
    expect(test.sharpness.winkler.value!).toBeGreaterThan(0);
    // A free band twice as wide halves the width ratio and changes no figure of ours.
    const wide = {
      ...fit,
      freeBand: { ...fit.freeBand, low: 2 * fit.freeBand.low, high: 2 * fit.freeBand.high },
    };
    const again = scoreDesk(coins, tf, wide, garch, split, Number.POSITIVE_INFINITY, 20);
    expect(again.sharpness.width.value!).toBeCloseTo(test.sharpness.width.value! / 2, 9);
    expect(again.coverage).toEqual(test.coverage);
    expect(again.missAfter.miss).toBe(test.missAfter.miss);
    expect(again.missAfter.freeMiss).not.toBe(test.missAfter.freeMiss);
  });

  it('serves from a market state what it scores: hour-of-day factors on every horizon, the day model with its hourly slope, the scaled band on a perpetual venue', () => {
    const tf = '15m' as const;
    const candles = aggregateCandles(m5[0]!, '5m', tf);
    const series = m5.map((c) => deskSeries(aggregateCandles(c, '5m', tf), tf, c));
    const { coins, garch } = prepareCoins(series, split);
    const risk = deskHorizons(tf, 6).map((h) => {
      const fit = fitDesk(coins, tf, h, split, 0.8)!;
      return { key: fit.key, candles: fit.candles, model: fit.service, garch };
    });
    const day = risk.find((r) => r.key === 'day')!;
    const verdict = risk.find((r) => r.key === 'verdict')!;
    // Candles shorter than an hour: the day's model reads the hourly variance, the others do not;
    // every horizon's model has hour-of-day factors.
    expect(day.model.hourly).toBeDefined();
    expect(risk.filter((r) => r.model.hourly !== undefined)).toHaveLength(1);
    expect(risk.filter((r) => r.model.hourOfDay !== undefined).map((r) => r.key)).toEqual([
      'next',
      'verdict',
      'day',
    ]);
    // The verdict horizon's model is also the table's model for the timeframe (the evaluator's
    // withRisk): the one a trade call's volatility and the regime's percentile read.
    const state = new MarketState({
      exchange: 'BINANCE_SPOT',
      coin: 'BTC',
      timeframe: tf,
      volatility: {
        ...defaultVolatility,
        models: { ...defaultVolatility.models, [tf]: verdict.model },
        risk: { ...defaultVolatility.risk, [tf]: risk },
      },
    });
    for (const c of candles) state.update(c);
    const s = series[0]!;
    const last = s.close.length - 1;
    const served = computeRiskHorizons(state);
    for (const row of risk) {
      const scored = forecastVarianceOf(
        row.model,
        [s.v0[last]!, s.v1[last]!, s.v2[last]!],
        row.candles,
        s.hourly[last],
        utcHour(s.closeTime[last]!),
      );
      const spotRow = served.find((r) => r.horizon === row.key)!;
      expect(spotRow.expected_move_pct).toBe(100 * Math.sqrt(scored));
      if (row.key === 'verdict') expect(state.volForecastVariance).toBe(scored);
      // The band's width as the evaluator scales it (BandScale, fed every close of the same candles).
      const scale = bandScales(s, row.model, row.candles, false, 0.2)[last]!;
      expect(scale).not.toBe(1);
      const sigma = Math.sqrt(scored);
      // Served at the price's scale (six significant digits of the close).
      const at = s.close[last]!;
      expect(spotRow.band_low).toBe(atPriceScale(at * Math.exp(row.model.bandLow * sigma * scale), at));
    }
    // A perpetual venue serves the same σ with the band scaled by perpBandScale, in the risk
    // forecast and in a trade call's volatility alike (as scoreDesk scores its perp rows).
    const k = 0.9;
    const perpRisk = risk.map((r) => ({ ...r, model: { ...r.model, perpBandScale: k } }));
    const perpState = new MarketState({
      exchange: 'BINANCE',
      coin: 'BTC',
      timeframe: tf,
      volatility: {
        ...defaultVolatility,
        models: { ...defaultVolatility.models, [tf]: perpRisk.find((r) => r.key === 'verdict')!.model },
        risk: { ...defaultVolatility.risk, [tf]: perpRisk },
      },
    });
    for (const c of candles) perpState.update(c);
    const close = candles.at(-1)!.close;
    const perpServed = computeRiskHorizons(perpState);
    for (const row of risk) {
      const spotRow = served.find((r) => r.horizon === row.key)!;
      const perpRow = perpServed.find((r) => r.horizon === row.key)!;
      const sigma = spotRow.expected_move_pct / 100;
      expect(perpRow.expected_move_pct).toBe(spotRow.expected_move_pct);
      const perpModel = perpRisk.find((r) => r.key === row.key)!.model;
      const scale = bandScales(s, perpModel, row.candles, true, 0.2)[last]!;
      expect(perpRow.band_low).toBe(
        atPriceScale(close * Math.exp(row.model.bandLow * k * sigma * scale), close),
      );
      expect(perpRow.band_high).toBe(
        atPriceScale(close * Math.exp(row.model.bandHigh * k * sigma * scale), close),
      );
    }
    const vol = stateVolatility(perpState);
    const verdictRow = perpServed.find((r) => r.horizon === 'verdict')!;
    expect([vol.band_low, vol.band_high]).toEqual([verdictRow.band_low, verdictRow.band_high]);
  });

  it("serves on 4h what it scores: a state advanced by MarketStates reads the market's 1h candles into the next candle's model", async () => {
    const tf = '4h' as const;
    const h1 = await Promise.all(COINS.map((c) => readCandleFile(`${DIR}${c}-1h.csv.gz`)));
    const first = h1[0]!;
    const mid = first[Math.floor(first.length * 0.6)]!.openTime;
    const split4 = mid - (mid % 86_400_000);
    const series = h1.map((c) => deskSeries(aggregateCandles(c, '1h', tf), tf, undefined, c));
    const { coins, garch } = prepareCoins(series, split4);
    // As the evaluator ships them: a horizon as long as an earlier one is that one's model (4h:
    // a day is the verdict's six candles).
    const risk: { key: RiskHorizonKey; candles: number; model: VolatilityModel; garch: GarchParams }[] = [];
    for (const h of deskHorizons(tf, 6)) {
      const same = risk.find((r) => r.candles === h.candles);
      const model = same ? same.model : fitDesk(coins, tf, h, split4, 0.8)!.service;
      risk.push({ key: h.key, candles: h.candles, model, garch });
    }
    // 4h: the next candle's model reads the fine variance; the verdict's (and so the day's) does not.
    expect(risk.filter((r) => r.model.hourly !== undefined).map((r) => r.key)).toEqual(['next']);
    const volatility = {
      ...defaultVolatility,
      models: { ...defaultVolatility.models, [tf]: risk.find((r) => r.key === 'verdict')!.model },
      risk: { ...defaultVolatility.risk, [tf]: risk },
    };
    const btc = h1[0]!;
    const feed = await openReplayFeed({ run: false, start: btc.at(-1)!.openTime + 3_600_000 });
    try {
      const states = new MarketStates(feed);
      const state = await states.advance('BINANCE_SPOT', 'BTC', tf);
      // The market state's arithmetic is the desk's on the candles it was fed (the last 500 of
      // each): the same doubles.
      const fed = await feed.candles('BINANCE_SPOT', 'BTC', tf, { limit: 500 });
      const fedHours = await feed.candles('BINANCE_SPOT', 'BTC', '1h', { limit: 500 });
      const own = deskSeries(fed, tf, undefined, fedHours);
      const last = own.close.length - 1;
      expect(state.lastCloseTime).toBe(own.closeTime[last]);
      expect(state.snapshot()!.volHourly).toBe(own.hourly[last]);
      // 500 hours are enough: within 1e-5 of the fine variance over the whole history.
      const full = series[0]!;
      const at = full.closeTime.indexOf(own.closeTime[last]!);
      expect(Math.abs(state.snapshot()!.volHourly! / full.hourly[at]! - 1)).toBeLessThan(1e-5);
      const scoredState = new MarketState({
        exchange: 'BINANCE_SPOT',
        coin: 'BTC',
        timeframe: tf,
        volatility,
      });
      let h = 0;
      for (const c of fed) {
        h = scoredState.updateHours(fedHours, h, c.openTime + 4 * 3_600_000);
        scoredState.update(c);
      }
      const served = computeRiskHorizons(scoredState);
      for (const row of risk) {
        const scored = forecastVarianceOf(
          row.model,
          [own.v0[last]!, own.v1[last]!, own.v2[last]!],
          row.candles,
          own.hourly[last],
          utcHour(own.closeTime[last]!),
        );
        expect(served.find((r) => r.horizon === row.key)!.expected_move_pct).toBe(100 * Math.sqrt(scored));
      }
      // A state never fed 1h candles has no fine variance, and no risk forecast on the models
      // that read it (rather than a degraded one).
      const blind = new MarketState({ exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: tf, volatility });
      for (const c of fed) blind.update(c);
      expect(blind.snapshot()!.volHourly).toBeNull();
      expect(() => computeRiskHorizons(blind)).toThrow();
    } finally {
      await feed.close();
    }
  });
});
