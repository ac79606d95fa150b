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
 *
 * Each round runs both sides from fresh state, interleaved in slices of candle steps, and the
 * ratio is also printed by CPU time: on a shared machine wall time mostly measures the others.
 */

import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { aggregateCandles } from '../adapters/market/aggregate.ts';
import { readCandleFile } from '../adapters/market/csv.ts';
import { parseCandleFileName } from '../adapters/market/replay-layout.ts';
import { SHARED_MARKET_DIR } from '../adapters/market/shared-data.ts';
import { type Candle, TIMEFRAMES, type Timeframe } from '../contracts/market.ts';
import type { Verdict } from '../contracts/signals.ts';
import { defaultCalibration } from '../services/engine/signals/default-calibration.ts';
import {
  createIndicators,
  createMarketState,
  type MarketState,
} from '../services/engine/signals/market-state.ts';
import { computeVerdict } from '../services/engine/signals/verdict.ts';
import { atLeast, recordTarget } from './harness.ts';

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
  const {
    sma: smas,
    ema: emas,
    hma,
    vwma,
    baseHigh,
    baseLow,
    rsi,
    stoch,
    cci,
    adx,
    ao,
    mom,
    macd,
    stochRsi,
    willr,
    elder,
    uo,
    atr,
    bb,
    chop,
    atrPct,
    bbWidth,
    ewma,
  } = createIndicators();
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

/** One side of the comparison: folds candle steps [from, to) of every market, in lock-step. */
interface Side {
  run(from: number, to: number): number;
}

/** Markets advance in lock-step, as candle closes arrive live: step i feeds candle i of each. */
function engineSide(streams: Stream[]): Side & { verdicts: Map<string, Verdict> } {
  const states = streams.map((s) =>
    createMarketState({ exchange: 'BINANCE_SPOT', coin: s.coin, timeframe: s.timeframe }),
  );
  const verdicts = new Map<string, Verdict>();
  return {
    verdicts,
    run: (from, to) =>
      eachCandle(streams, from, to, (c, k) => {
        const state = states[k]!;
        state.update(c);
        if (state.missingForVerdict().length === 0) {
          verdicts.set(state.key, computeVerdict(state, undefined, defaultCalibration));
        }
      }),
  };
}

/** Feeds candles `from` to `to` of every stream, in time order across streams; how many there were. */
function eachCandle(
  streams: Stream[],
  from: number,
  to: number,
  feed: (candle: Stream['candles'][number], stream: number) => void,
): number {
  let candles = 0;
  for (let i = from; i < to; i++) {
    for (let k = 0; k < streams.length; k++) {
      const c = streams[k]!.candles[i];
      if (c === undefined) continue;
      feed(c, k);
      candles++;
    }
  }
  return candles;
}

/** The baseline's results are summed into a sink the caller can read, so none is dead code. */
function baselineSide(streams: Stream[]): Side & { sink: () => number } {
  const sets = streams.map(() => baselineSet());
  let sink = 0;
  return {
    sink: () => sink,
    run: (from, to) =>
      eachCandle(streams, from, to, (c, k) => {
        sink += sets[k]!(c);
      }),
  };
}

interface Timed {
  candles: number;
  /** Wall-clock seconds. */
  seconds: number;
  /** CPU seconds of the process (main thread plus V8's GC helpers) over the same stretches. */
  cpuSeconds: number;
}

/** Candle steps per slice: 300 steps × 220 markets is a second or more of work per side. */
const SLICE = 300;

/**
 * One round: both sides from fresh state over every candle, interleaved in slices of SLICE
 * steps (first one side, then the other, the order flipping each slice), so load elsewhere on a
 * shared machine lands on both sides alike instead of on whichever pass it happened to overlap.
 */
function round(
  streams: Stream[],
  steps = PER_STREAM,
): { base: Timed; engine: Timed; verdicts: Map<string, Verdict> } {
  const baseSide = baselineSide(streams);
  const engSide = engineSide(streams);
  const base: Timed = { candles: 0, seconds: 0, cpuSeconds: 0 };
  const engine: Timed = { candles: 0, seconds: 0, cpuSeconds: 0 };
  const timed = (side: Side, into: Timed, from: number, to: number) => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    into.candles += side.run(from, to);
    into.seconds += (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    into.cpuSeconds += (cpu.user + cpu.system) / 1e6;
  };
  for (let from = 0, slice = 0; from < steps; from += SLICE, slice++) {
    const to = Math.min(steps, from + SLICE);
    if (slice % 2 === 0) {
      timed(baseSide, base, from, to);
      timed(engSide, engine, from, to);
    } else {
      timed(engSide, engine, from, to);
      timed(baseSide, base, from, to);
    }
  }
  return { base, engine, verdicts: engSide.verdicts };
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
  round(streams.slice(0, 11), 600);
  const rounds = 3;
  const baseRates: number[] = [];
  const engineRates: number[] = [];
  const cpuRatios: number[] = [];
  let verdicts = new Map<string, Verdict>();
  for (let r = 0; r < rounds; r++) {
    const { base, engine, verdicts: v } = round(streams);
    baseRates.push(base.candles / base.seconds);
    engineRates.push(engine.candles / engine.seconds);
    cpuRatios.push(engine.candles / engine.cpuSeconds / (base.candles / base.cpuSeconds));
    verdicts = v;
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
  console.log(`rounds: ${rounds}, each side interleaved in slices of ${SLICE} steps (min / median / max)`);
  console.log(`the engine's indicators alone, same candles: ${fmt(spread(baseRates), int)} candles/s`);
  console.log(`engine (indicators + regime + verdict): ${fmt(spread(engineRates), int)} candles/s`);
  console.log(`ratio engine / indicators alone: ${fmt(spread(ratios), (n) => n.toFixed(2))} (target ≥ 0.5)`);
  console.log(
    recordTarget({
      bench: 'engine',
      measure: 'closed candles/s, engine / its indicators alone',
      figure: ratio,
      target: atLeast(0.5),
    }),
  );
  console.log(
    `same ratio by CPU time (less sensitive to other load): ${fmt(spread(cpuRatios), (n) => n.toFixed(2))}`,
  );

  const keys = [...verdicts.keys()];
  const cachedMicros = perOpMicros(2_000_000, (i) => verdicts.get(keys[i % keys.length]!));
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
