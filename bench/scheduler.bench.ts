/**
 * The midnight burst: every timeframe (1m … 1d) closing at once for 100 markets (50 on each of two
 * venues, scheduled by one process), i.e. 1,100 verdicts computed and recorded on an LMDB store
 * by the verdict scheduler, after a warm-up one minute earlier (so each market state is one
 * candle behind, as at a real midnight). Baseline, in the same run: the indicators alone doing
 * the same work (one candle folded into each of the same warmed market states and a verdict
 * computed, no feed, no store). The target: the burst within 10 s on one core.
 *
 *   npx tsx bench/scheduler.bench.ts [--rounds=3] [--markets=100] [--concurrency=16]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { readCandleFile } from '../adapters/market/csv.ts';
import type { MarketFeed } from '../adapters/market/port.ts';
import {
  type Candle,
  type CandleClose,
  type Exchange,
  type MarketInfo,
  TIMEFRAME_MS,
  TIMEFRAMES,
  type Timeframe,
} from '../contracts/market.ts';
import { createSignalEngine } from '../services/engine/engine.ts';
import { warmupCandles } from '../services/engine/market-states.ts';
import { VerdictScheduler } from '../services/engine/scheduler.ts';
import { defaultCalibration } from '../services/engine/signals/default-calibration.ts';
import { createMarketState, type MarketState } from '../services/engine/signals/market-state.ts';
import { computeVerdict } from '../services/engine/signals/verdict.ts';
import { atMost, recordTarget, whenMain } from './harness.ts';

const EXCHANGES: Exchange[] = ['BINANCE_SPOT', 'OKX'];
/** A midnight UTC: every timeframe closes here. */
const MIDNIGHT = Date.UTC(2026, 10, 23);

/**
 * A feed of `markets` synthetic coins whose candles are a real BTC 5m price path re-timed to
 * each timeframe (each coin starts at its own offset in the path and its own price scale).
 */
class BurstFeed implements MarketFeed {
  readonly kind = 'replay' as const;
  private clock = MIDNIGHT - 60_000;
  private readonly listeners = new Map<Timeframe, Set<(close: CandleClose) => void>>();

  constructor(
    private readonly path: Candle[],
    private readonly perExchange: number,
  ) {}

  setNow(ms: number): void {
    this.clock = ms;
  }
  now(): number {
    return this.clock;
  }
  exchanges(): Exchange[] {
    return EXCHANGES;
  }
  async candles(_exchange: Exchange, coin: string, timeframe: Timeframe, options: { limit: number }) {
    const tf = TIMEFRAME_MS[timeframe];
    const lastOpen = Math.floor(this.clock / tf) * tf - tf;
    const n = Number(coin.slice(1));
    const scale = 1 + n / 10;
    const out: Candle[] = [];
    for (let k = options.limit - 1; k >= 0; k--) {
      const openTime = lastOpen - k * tf;
      const src = this.path[Math.abs(Math.floor(openTime / tf) * 7 + n * 13) % this.path.length]!;
      out.push({
        openTime,
        open: src.open * scale,
        high: src.high * scale,
        low: src.low * scale,
        close: src.close * scale,
        volume: src.volume,
      });
    }
    return out;
  }
  async funding() {
    return [];
  }
  async nextFunding(exchange: Exchange, coin: string) {
    return { exchange, coin, nextFundingTime: this.clock + 3_600_000, intervalHours: 8, predictedRate: null };
  }
  async markets(exchange: Exchange): Promise<MarketInfo[]> {
    return Array.from({ length: this.perExchange }, (_, i) => ({
      exchange,
      coin: `C${i}`,
      symbol: `C${i}USDT`,
      quoteVolume24h: 1_000_000 - i,
      openInterest: null,
      hasCandles: true,
      hasFunding: false,
    }));
  }
  venues() {
    return EXCHANGES.map((exchange) => ({ exchange, ok: true }));
  }
  onCandleClose(timeframe: Timeframe, listener: (close: CandleClose) => void) {
    const set = this.listeners.get(timeframe) ?? new Set();
    this.listeners.set(timeframe, set.add(listener));
    return () => set.delete(listener);
  }
  async close() {}
}

async function burstRound(path: Candle[], markets: number, concurrency: number): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-scheduler-'));
  const store = await openLmdbEventStore({ path: dir });
  const feed = new BurstFeed(path, markets / EXCHANGES.length);
  try {
    const engine = await createSignalEngine({ feed, store });
    const scheduler = new VerdictScheduler({
      engine,
      feed,
      timeframes: [...TIMEFRAMES],
      exchange: EXCHANGES[0]!,
      exchanges: EXCHANGES,
      topN: markets / EXCHANGES.length,
      concurrency,
    });
    // Warm-up one minute before midnight: every market state built, its verdicts recorded.
    await Promise.all(TIMEFRAMES.map((tf) => scheduler.tick(tf)));
    const before = scheduler.stats.verdicts;
    feed.setNow(MIDNIGHT);
    const started = performance.now();
    await Promise.all(TIMEFRAMES.map((tf) => scheduler.tick(tf)));
    const ms = performance.now() - started;
    const done = scheduler.stats.verdicts - before;
    if (done !== markets * TIMEFRAMES.length)
      throw new Error(`burst recorded ${done} of ${markets * TIMEFRAMES.length} verdicts`);
    await scheduler.stop();
    return ms;
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The same verdicts from the indicators alone: warmed states, one candle each, compute. */
async function indicatorsRound(path: Candle[], markets: number): Promise<number> {
  const feed = new BurstFeed(path, markets / EXCHANGES.length);
  const states: { state: MarketState; next: Candle }[] = [];
  for (const exchange of EXCHANGES) {
    for (const { coin } of await feed.markets(exchange)) {
      for (const timeframe of TIMEFRAMES) {
        feed.setNow(MIDNIGHT - 60_000);
        const state = createMarketState({ exchange, coin, timeframe });
        for (const c of await feed.candles(exchange, coin, timeframe, { limit: warmupCandles(timeframe) }))
          state.update(c);
        feed.setNow(MIDNIGHT);
        const [next] = await feed.candles(exchange, coin, timeframe, { limit: 1 });
        states.push({ state, next: next! });
      }
    }
  }
  const started = performance.now();
  for (const { state, next } of states) {
    if (state.lastCloseTime !== null && next.openTime + TIMEFRAME_MS[state.timeframe] > state.lastCloseTime)
      state.update(next);
    computeVerdict(state, undefined, defaultCalibration, { includeReasoning: false });
  }
  return performance.now() - started;
}

export async function run(options: { rounds?: number; markets?: number; concurrency?: number } = {}) {
  const rounds = options.rounds ?? 3;
  const markets = options.markets ?? 100;
  const concurrency = options.concurrency ?? 16;
  const dir = join(import.meta.dirname, '..', 'sample-data', 'market', 'candles', 'binance-spot');
  const path = await readCandleFile(join(dir, 'BTCUSDT-5m.csv.gz'));
  const burst: number[] = [];
  const alone: number[] = [];
  for (let round = 0; round < rounds; round++) {
    alone.push(await indicatorsRound(path, markets));
    burst.push(await burstRound(path, markets, concurrency));
  }
  const s = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b);
    return { min: v[0]!, median: v[Math.floor(v.length / 2)]!, max: v[v.length - 1]! };
  };
  const b = s(burst);
  const a = s(alone);
  const ratio = s(burst.map((x, i) => alone[i]! / x));
  const f = (x: { min: number; median: number; max: number }, d = 2) =>
    `${x.min.toFixed(d)} / ${x.median.toFixed(d)} / ${x.max.toFixed(d)}`;
  const verdicts = markets * TIMEFRAMES.length;
  console.log(
    `midnight burst: ${markets} markets (${EXCHANGES.join(' + ')}) x ${TIMEFRAMES.length} timeframes = ${verdicts} verdicts, concurrency ${concurrency}; rounds: ${rounds} (min / median / max)`,
  );
  console.log(`  scheduler: compute + record (LMDB)     ${f(s(burst.map((x) => x / 1000)))} s`);
  console.log(`  indicators alone, same verdicts        ${f(s(alone.map((x) => x / 1000)))} s`);
  console.log(`  indicators / scheduler                 ${f(ratio)}`);
  console.log(`  target: burst <= 10 s (median) ${b.median <= 10_000 ? 'ok' : 'MISSED'}`);
  console.log(
    recordTarget({
      bench: 'scheduler',
      measure: `midnight burst, ${verdicts} verdicts (median)`,
      figure: b.median / 1000,
      unit: ' s',
      target: atMost(10),
    }),
  );
  return { burst, alone, ratio: ratio.median, indicatorsMedianMs: a.median };
}

await whenMain(import.meta.url, { rounds: 'number', markets: 'number', concurrency: 'number' }, run);
