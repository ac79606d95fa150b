/**
 * Signal-engine throughput: closed candles per second through the full indicator set + regime
 * + verdict for 20 coins × 11 timeframes, against `trading-signals` indicators alone on the
 * same candles (ratio, target ≥ 0.5); plus a cached verdict lookup against a recompute.
 *
 *   npx tsx bench/engine.bench.ts [--data ../shared/data/market]
 *
 * Inputs are real Binance spot candles. There is no 1m data: the 1m and 3m slots replay the
 * 5m series as a stand-in input stream, and coins without a 5m file borrow another coin's 5m
 * series for the sub-hour slots. Each stream is cut to its last 3,000 candles to stay short.
 */

import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  ADX,
  AO,
  ATR,
  BollingerBands,
  CCI,
  ElderRay,
  EMA,
  HMA,
  MACD,
  MOM,
  RSI,
  SMA,
  StochasticOscillator,
  StochasticRSI,
  UltimateOscillator,
  VWMA,
  WilliamsR,
  WSMA,
} from 'trading-signals';
import { aggregateCandles } from '../adapters/market/aggregate.ts';
import { readCandleFile } from '../adapters/market/csv.ts';
import { parseCandleFileName } from '../adapters/market/replay-layout.ts';
import { SHARED_MARKET_DIR } from '../adapters/market/shared-data.ts';
import { type Candle, TIMEFRAMES, type Timeframe } from '../contracts/market.ts';
import type { Verdict } from '../contracts/signals.ts';
import { Choppiness } from '../services/engine/signals/choppiness.ts';
import { defaultCalibration } from '../services/engine/signals/default-calibration.ts';
import {
  createMarketState,
  MA_PERIODS,
  type MarketState,
  PERCENTILE_WINDOW,
} from '../services/engine/signals/market-state.ts';
import { RollingPercentile } from '../services/engine/signals/rolling-percentile.ts';
import { RollingExtreme, RollingMean } from '../services/engine/signals/rolling-window.ts';
import { computeVerdict } from '../services/engine/signals/verdict.ts';
import { EwmaVariances } from '../services/engine/signals/volatility.ts';

const COINS = 20;
const PER_STREAM = 3000;

interface Stream {
  coin: string;
  timeframe: Timeframe;
  candles: Candle[];
}

async function loadStreams(dataDir: string): Promise<Stream[]> {
  const dir = join(dataDir, 'candles', 'binance-spot');
  const names = (await readdir(dir)).sort();
  const hourly = names.filter((n) => parseCandleFileName(n)?.timeframe === '1h').slice(0, COINS);
  const fiveNames = names.filter((n) => parseCandleFileName(n)?.timeframe === '5m');
  const five = new Map<string, Candle[]>();
  for (const n of fiveNames) five.set(parseCandleFileName(n)!.coin, await readCandleFile(join(dir, n)));
  const fivePool = [...five.values()];
  const streams: Stream[] = [];
  for (const [i, n] of hourly.entries()) {
    const coin = parseCandleFileName(n)!.coin;
    const h1 = await readCandleFile(join(dir, n));
    const m5 = five.get(coin) ?? fivePool[i % fivePool.length]!;
    for (const tf of TIMEFRAMES) {
      const series =
        tf === '1m' || tf === '3m' || tf === '5m'
          ? m5
          : tf === '15m' || tf === '30m'
            ? aggregateCandles(m5, '5m', tf)
            : aggregateCandles(h1, '1h', tf);
      streams.push({ coin, timeframe: tf, candles: series.slice(-PER_STREAM) });
    }
  }
  return streams;
}

/**
 * The indicators alone doing the engine's work: the very indicator objects a market state folds
 * each candle into (the same classes and settings: trading-signals where the engine uses them, its
 * own rolling windows, choppiness, percentile windows and EWMA variances elsewhere), without the
 * regime, the verdict and the readings kept between them. So the ratio is what the engine adds
 * on top of its indicators, and it cannot exceed 1 by doing less work than the baseline.
 */
function baselineSet() {
  const smas = MA_PERIODS.map((p) => new RollingMean(p));
  const emas = MA_PERIODS.map((p) => new EMA(p));
  const hma = new HMA(9);
  const vwma = new VWMA(20);
  const baseHigh = new RollingExtreme(26, 'max');
  const baseLow = new RollingExtreme(26, 'min');
  const rsi = new RSI(14);
  const stoch = new StochasticOscillator({ kPeriod: 14, kSlowingPeriod: 3, dPeriod: 3 });
  const cci = new CCI(20);
  const adx = new ADX(14);
  const ao = new AO(5, 34);
  const mom = new MOM(10);
  const macd = new MACD(new EMA(12), new EMA(26), new EMA(9));
  const stochRsi = new StochasticRSI(14, WSMA, { k: new SMA(3), d: new SMA(3) });
  const willr = new WilliamsR(14);
  const elder = new ElderRay(13);
  const uo = new UltimateOscillator({ shortPeriod: 7, mediumPeriod: 14, longPeriod: 28 });
  const atr = new ATR(14);
  const bb = new BollingerBands(20, 2);
  const chop = new Choppiness(14);
  const atrPct = new RollingPercentile(PERCENTILE_WINDOW);
  const bbWidth = new RollingPercentile(PERCENTILE_WINDOW);
  const ewma = new EwmaVariances();
  return (c: Candle): number => {
    let acc = 0;
    for (const m of smas) acc += m.push(c.close) ?? 0;
    for (const e of emas) acc += e.add(c.close) ?? 0;
    acc += hma.add(c.close) ?? 0;
    acc += vwma.add(c) ?? 0;
    acc += (baseHigh.push(c.high) ?? 0) + (baseLow.push(c.low) ?? 0);
    acc += rsi.add(c.close) ?? 0;
    acc += stoch.add(c)?.stochK ?? 0;
    acc += cci.add(c) ?? 0;
    acc += adx.add(c) ?? 0;
    acc += ao.add(c) ?? 0;
    acc += mom.add(c.close) ?? 0;
    acc += macd.add(c.close)?.macd ?? 0;
    acc += stochRsi.add(c.close) ?? 0;
    acc += willr.add(c) ?? 0;
    acc += elder.add(c)?.bullPower ?? 0;
    acc += uo.add(c) ?? 0;
    const a = atr.add(c);
    const bands = bb.add(c.close);
    acc += chop.update(c) ?? 0;
    if (a !== null) atrPct.push((100 * a) / c.close);
    if (bands !== null && bands.middle !== 0) bbWidth.push((bands.upper - bands.lower) / bands.middle);
    acc += ewma.push(c.close) === null ? 0 : 1;
    return acc;
  };
}

/** Markets advance in lock-step, as candle closes arrive live: step i feeds candle i of each. */
function runEngine(streams: Stream[]): { candles: number; seconds: number; verdicts: Map<string, Verdict> } {
  const states = streams.map((s) =>
    createMarketState({ exchange: 'BINANCE_SPOT', coin: s.coin, timeframe: s.timeframe }),
  );
  const verdicts = new Map<string, Verdict>();
  let candles = 0;
  const t0 = performance.now();
  for (let i = 0; i < PER_STREAM; i++) {
    for (let k = 0; k < streams.length; k++) {
      const c = streams[k]!.candles[i];
      if (c === undefined) continue;
      const state = states[k]!;
      state.update(c);
      candles++;
      if (state.missingForVerdict().length === 0) {
        verdicts.set(state.key, computeVerdict(state, undefined, defaultCalibration));
      }
    }
  }
  return { candles, seconds: (performance.now() - t0) / 1000, verdicts };
}

function runBaseline(streams: Stream[]): { candles: number; seconds: number; sink: number } {
  const sets = streams.map(() => baselineSet());
  let candles = 0;
  let sink = 0;
  const t0 = performance.now();
  for (let i = 0; i < PER_STREAM; i++) {
    for (let k = 0; k < streams.length; k++) {
      const c = streams[k]!.candles[i];
      if (c === undefined) continue;
      sink += sets[k]!(c);
      candles++;
    }
  }
  return { candles, seconds: (performance.now() - t0) / 1000, sink };
}

function perOpMicros(n: number, fn: (i: number) => unknown): number {
  let sink = 0;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) if (fn(i) !== undefined) sink++;
  const us = ((performance.now() - t0) * 1000) / n;
  return sink >= 0 ? us : Number.NaN;
}

export async function run(dataDir = process.env.MARKET_DATA_DIR ?? SHARED_MARKET_DIR): Promise<{
  ratio: number;
  engineRate: number;
  baselineRate: number;
  cachedMicros: number;
  recomputeMicros: number;
}> {
  const streams = await loadStreams(dataDir);
  console.log(
    `engine bench: ${streams.length} markets (20 coins × 11 timeframes), ≤ ${PER_STREAM} closed candles each`,
  );
  // Warm-up on a slice so both sides run JIT-compiled code.
  runBaseline(streams.slice(0, 11));
  runEngine(streams.slice(0, 11));
  // Alternating rounds, so a burst of load elsewhere on the machine hits both sides alike.
  const rounds = 3;
  const baseRates: number[] = [];
  const engineRates: number[] = [];
  let engine = runEngine(streams.slice(0, 1));
  for (let r = 0; r < rounds; r++) {
    const base = runBaseline(streams);
    baseRates.push(base.candles / base.seconds);
    engine = runEngine(streams);
    engineRates.push(engine.candles / engine.seconds);
  }
  const ratios = engineRates.map((e, i) => e / baseRates[i]!);
  const spread = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b);
    return { min: v[0]!, median: v[Math.floor(v.length / 2)]!, max: v[v.length - 1]! };
  };
  const fmt = (x: { min: number; median: number; max: number }, f: (n: number) => string) =>
    `${f(x.min)} / ${f(x.median)} / ${f(x.max)}`;
  const int = (n: number) => Math.round(n).toLocaleString();
  const baselineRate = spread(baseRates).median;
  const engineRate = spread(engineRates).median;
  const ratio = spread(ratios).median;
  console.log(`rounds: ${rounds} (min / median / max)`);
  console.log(`the engine's indicators alone, same candles: ${fmt(spread(baseRates), int)} candles/s`);
  console.log(`engine (indicators + regime + verdict): ${fmt(spread(engineRates), int)} candles/s`);
  console.log(`ratio engine / indicators alone: ${fmt(spread(ratios), (n) => n.toFixed(2))} (target ≥ 0.5)`);

  const keys = [...engine.verdicts.keys()];
  const cachedMicros = perOpMicros(2_000_000, (i) => engine.verdicts.get(keys[i % keys.length]!));
  const sample = streams.find((s) => s.timeframe === '1h')!;
  const window = sample.candles.slice(-400);
  const recomputeMicros = perOpMicros(200, () => {
    const state: MarketState = createMarketState({
      exchange: 'BINANCE_SPOT',
      coin: sample.coin,
      timeframe: '1h',
    });
    for (const c of window) state.update(c);
    return computeVerdict(state, undefined, defaultCalibration);
  });
  console.log(`cached verdict lookup (Map by market key): ${cachedMicros.toFixed(3)} µs`);
  console.log(
    `recompute from 400 closed candles: ${recomputeMicros.toFixed(1)} µs (${Math.round(recomputeMicros / cachedMicros).toLocaleString()}× the lookup)`,
  );
  return { ratio, engineRate, baselineRate, cachedMicros, recomputeMicros };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({ options: { data: { type: 'string' } } });
  await run(values.data);
}
