import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { MemoryCache } from '../adapters/cache/memory.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { openReplayFeed, type ReplayFeed } from '../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { deterministicId } from '../contracts/deterministic-id.ts';
import { type EventData, newEvent } from '../contracts/events.ts';
import { EXCHANGES, type Exchange, TIMEFRAME_MS, type Timeframe } from '../contracts/market.ts';
import type { CalibrationTable } from '../contracts/signals.ts';
import { verdictHash } from '../contracts/verdict-hash.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import { buildApp } from '../services/api/app.ts';
import { createSignalEngine, type SignalEngine } from '../services/engine/engine.ts';
import { defaultCalibration } from '../services/engine/signals/index.ts';
import { verdictStream } from '../services/engine/verdict-recorder.ts';
import { FIRST_PAGE } from '../services/history/scan.ts';
import { historySlice } from '../services/history/slice.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { keyRegistryProjection } from '../services/keys/key-registry.ts';
import { KeyResolver } from '../services/keys/key-resolver.ts';
import { callerPlugin } from '../services/metering/caller.ts';
import { planTable } from '../services/metering/plans.ts';
import { QuotaMeter } from '../services/metering/quota-meter.ts';
import { RateLimiter, rateLimitPlugin } from '../services/metering/rate-limit.ts';
import { Readiness } from '../services/shared/readiness.ts';
import { HANG_MS } from './waits.ts';

export const HOUR = 3_600_000;

/**
 * Counts the looks a long poll makes on `store` once it waits: reads of a scan's first page
 * (FIRST_PAGE events) after `from()` that found nothing. A test waits for one instead of a pause
 * a loaded machine may outlast before the poll has even looked.
 */
export function countWaitingLooks(store: MemoryEventStore, from: () => number = () => 0): { count: number } {
  const looks = { count: 0 };
  const readAll = store.readAll.bind(store);
  store.readAll = async (options) => {
    const page = await readAll(options);
    if (options?.maxCount === FIRST_PAGE && page.length === 0 && (options.after ?? 0) >= from())
      looks.count++;
    return page;
  };
  return looks;
}
/** Inside the shipped slice (2025-09-20 .. 2025-11-01), with weeks of history before it. */
export const FIXTURE_START = Date.parse('2025-10-15T00:00:00Z');
/**
 * Two perp 1h markets, where the shipped fit answers HOLD ("no measured edge"), and one spot 5m
 * market, made to emit BUY/SELL (HISTORY_CALIBRATION): the history holds both kinds of verdict.
 */
export const MARKETS: { exchange: Exchange; coin: string; timeframe: Timeframe }[] = [
  { exchange: 'BINANCE', coin: 'BTC', timeframe: '1h' },
  { exchange: 'BINANCE', coin: 'ETH', timeframe: '1h' },
  { exchange: 'BINANCE_SPOT', coin: 'SOL', timeframe: '5m' },
];

/**
 * A real verdict history: the real engine over the shipped replay data, one verdict per
 * market per hourly step (asked for, as a caller would) with the replay clock stepped by hand, then the real outcome resolver. The
 * last steps stay younger than their reveal time, so every suite has commitments to guard.
 */
/**
 * The shipped table with spot:5m emitting. The shipped gate lets no cell emit (no cell's calls
 * beat the fee), but the history's folds, exports and track record must be exercised on BUY/SELL
 * verdicts too; spot:5m keeps its shipped direction and curve.
 */
export const HISTORY_CALIBRATION: CalibrationTable = {
  ...defaultCalibration,
  cells: {
    ...defaultCalibration.cells,
    'spot:5m': { ...defaultCalibration.cells['spot:5m']!, emit: true },
  },
};

export async function recordHistory(options: {
  steps: number;
  store?: EventStore;
  settleHours?: number;
  /** The markets asked at each step (MARKETS unless given). */
  markets?: typeof MARKETS;
  /** Feed time of the first step (FIXTURE_START unless given). */
  start?: number;
  /** A later lap's prices as scaled, not rounded to the data's decimals (ReplayFeedOptions.exactLaps). */
  exactLaps?: boolean;
}) {
  const feed: ReplayFeed = await openReplayFeed({
    run: false,
    start: options.start ?? FIXTURE_START,
    ...(options.exactLaps ? { exactLaps: true } : {}),
  });
  const store = options.store ?? new MemoryEventStore();
  const engine: SignalEngine = await createSignalEngine({ feed, store, calibration: HISTORY_CALIBRATION });
  for (let step = 0; step < options.steps; step++) {
    // Asked for, not scheduled: a scheduled verdict would backfill every 5m close of the hour.
    for (const m of options.markets ?? MARKETS) await engine.getTradeCall(m);
    feed.clock.advance(HOUR);
  }
  // Let outcomes of the early verdicts come due (24 candles), while the last ones stay unrevealed.
  feed.clock.advance((options.settleHours ?? 0) * HOUR);
  return { feed, store, engine };
}

/** The history routes on a real port, with a real key registry and quota meter. */
export async function startHistoryServer(options: {
  store: EventStore;
  feed: ReplayFeed | null;
  pageSize?: number;
  /** More settings (the anchor's, say) over the test defaults. */
  env?: Record<string, string>;
  /** The request-rate limiter in front of the routes, as the service has it (RATE_LIMIT_* in env). */
  rateLimited?: boolean;
}) {
  const config = loadConfig({ EVENT_STORE: 'memory', NODE_ENV: 'test', LOG_LEVEL: 'silent', ...options.env });
  // Silent in tests; a bench may ask for the server's errors (HISTORY_LOG_LEVEL=error).
  const logger = pino({ level: process.env.HISTORY_LOG_LEVEL ?? 'silent' }, pino.destination(2));
  const projectionStore = new MemoryProjectionStore();
  const slice = historySlice({
    config,
    adapters: { eventStore: options.store, projectionStore },
    logger,
    // Without a feed (a bench over a prepared log) there is nothing to resolve outcomes from.
    roles: options.feed ? ['api', 'projections'] : ['api'],
    feed: options.feed,
    resolverIntervalMs: 50,
  });
  const registry = new ProjectionRunner(options.store, projectionStore, keyRegistryProjection, { logger });
  await registry.start();
  const keys = new KeyResolver({ runner: registry, store: options.store });
  const quota = new QuotaMeter({ cache: new MemoryCache(), store: options.store, plans: planTable(config) });
  await slice.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [
      callerPlugin(keys),
      ...(options.rateLimited
        ? [rateLimitPlugin({ limiter: new RateLimiter(config, null, quota), quota })]
        : []),
      slice.routes({ quota }),
    ],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  return {
    app,
    slice,
    /** The key registry: stopped, a presented key cannot be checked. */
    registry,
    url: `http://127.0.0.1:${port}`,
    async issue() {
      const issued = await issueKey(options.store, { plan: 'pro', owner: 'analyst', via: 'operator' });
      await registry.waitFor(issued.position, HANG_MS);
      return issued.key;
    },
    /** Resolves every due outcome now and waits until the track record has folded them. */
    async settle() {
      // Until a pass appends nothing: a stream whose verdict a pass finds labelled by another
      // writer waits for the next pass, and a pass appends only what its view has caught up to.
      do await slice.pending.waitFor(await options.store.headPosition(), HANG_MS);
      while ((await slice.processors[0]!.resolveDue()) > 0);
      await slice.trackRecord.waitFor(await options.store.headPosition(), HANG_MS);
      await slice.pending.waitFor(await options.store.headPosition(), HANG_MS);
    },
    async close() {
      await app.close();
      await slice.stop();
      await registry.stop();
    },
  };
}

/** A recorded history: the feed, the store and the engine recordHistory (or another recorder) returns. */
export type RecordedHistory = Awaited<ReturnType<typeof recordHistory>>;

/** What startSettledHistory started: the recorded history and its server. */
export interface ServedHistory {
  fx: RecordedHistory;
  server: Awaited<ReturnType<typeof startHistoryServer>>;
  /** Stops the server and the engine (and removes the directory, when one was made). */
  close(): Promise<void>;
}

/** What startSettledHistory started with `tmpPrefix`: besides, a pro key and a directory. */
export interface SettledHistory extends ServedHistory {
  key: string;
  dir: string;
}

/**
 * The history startSettledHistory serves: recordHistory's options, or `record`, a recorder of
 * another history (recordIntervalHistory, say) called once.
 */
export type HistorySource = Parameters<typeof recordHistory>[0] | { record: () => Promise<RecordedHistory> };

/**
 * A recorded history (recordHistory, or the given recorder's) served on a real port
 * (startHistoryServer), its due outcomes resolved and folded (settle): the setup of the suites
 * that read the history as an analyst does. With `tmpPrefix`, a pro key is issued and an empty
 * temporary directory made (named from it). `close` stops the server and the engine and removes
 * the directory; a start that fails part-way undoes what it had started before rethrowing.
 */
export async function startSettledHistory(
  options: HistorySource & { tmpPrefix: string },
): Promise<SettledHistory>;
export async function startSettledHistory(options: HistorySource): Promise<ServedHistory>;
export async function startSettledHistory(
  options: HistorySource & { tmpPrefix?: string },
): Promise<ServedHistory | SettledHistory> {
  const { tmpPrefix, ...source } = options;
  const fx = 'record' in source ? await source.record() : await recordHistory(source);
  let server: Awaited<ReturnType<typeof startHistoryServer>> | undefined;
  let dir: string | undefined;
  const close = async () => {
    // Each step runs even when the one before throws: a server that fails to close must not
    // leave the engine open (its timers would hold the test process) or the directory behind.
    try {
      await server?.close();
    } finally {
      try {
        await fx.engine.close();
      } finally {
        if (dir) rmSync(dir, { recursive: true, force: true });
      }
    }
  };
  try {
    server = await startHistoryServer({ store: fx.store, feed: fx.feed });
    await server.settle();
    if (tmpPrefix === undefined) return { fx, server, close };
    const key = await server.issue();
    dir = mkdtempSync(join(tmpdir(), tmpPrefix));
    return { fx, server, key, dir, close };
  } catch (err) {
    await close().catch(() => {});
    throw err;
  }
}

// ---- synthetic history for benchmarks and streaming tests (a real hash chain, fake markets) ----

export const SYNTHETIC_TIMEFRAMES: Timeframe[] = ['5m', '15m', '1h', '4h'];
export const SYNTHETIC_MARKETS = 200;

export function syntheticMarket(i: number) {
  return {
    exchange: EXCHANGES[i % 2]!,
    coin: `C${Math.floor(i / SYNTHETIC_TIMEFRAMES.length)}`,
    timeframe: SYNTHETIC_TIMEFRAMES[i % SYNTHETIC_TIMEFRAMES.length]!,
  };
}

/**
 * Appends `perMarket` chained synthetic verdicts to each of the first `markets` synthetic markets'
 * verdict streams, one append per market, ids derived from `idPrefix` (fixed across runs).
 */
export async function appendSyntheticHistory(
  store: EventStore,
  options: { markets: number; perMarket: number; idPrefix: string },
): Promise<void> {
  for (let m = 0; m < options.markets; m++) {
    const stream = verdictStream(syntheticMarket(m));
    let prev: string | null = null;
    const events = [];
    for (let n = 0; n < options.perMarket; n++) {
      const data = syntheticVerdict(m, n, options.perMarket, prev);
      prev = data.hash;
      events.push(newEvent('VerdictRecorded', data, { id: deterministicId(options.idPrefix, stream, n) }));
    }
    await store.append(stream, events);
  }
}

/** The inputs the engine records (signals-3), besides the few every synthetic verdict has. */
const ENGINE_INPUTS = [
  'stoch_k',
  'stoch_d',
  'plus_di',
  'minus_di',
  'ao',
  'momentum',
  'macd_signal',
  'stoch_rsi_k',
  'williams_r',
  'bull_power',
  'bear_power',
  'ultimate',
  'ema20',
  'ema50',
  'ema200',
  'sma200',
  'ma_rating',
  'oscillator_rating',
  'technical_rating',
  'vol_expected_move_pct',
  'vol_band_low',
  'vol_band_high',
  'vol_percentile',
] as const;

/**
 * Verdict n of market m: a real hash chain, times ending a month before now (all revealed).
 * `fullInputs`: inputs as many and as long as the engine's (~1 KB of JSON, full-precision floats)
 * instead of seven short ones, for benches whose cost grows with a verdict's size.
 */
export function syntheticVerdict(
  m: number,
  n: number,
  perMarket: number,
  prevHash: string | null,
  fullInputs = false,
): EventData<'VerdictRecorded'> {
  const k = syntheticMarket(m);
  const step = TIMEFRAME_MS[k.timeframe];
  const end = Math.floor((Date.now() - 30 * 86_400_000) / step) * step;
  const x = Math.sin(m * 7919 + n * 104_729);
  const content = {
    ...k,
    call: x > 0.2 ? ('BUY' as const) : x < -0.2 ? ('SELL' as const) : ('HOLD' as const),
    confidence: 40 + Math.floor(Math.abs(x) * 30),
    score: Number(x.toFixed(6)),
    regime: 'ranging' as const,
    price: 100 + 10 * x,
    candleCloseTime: end - (perMarket - n) * step,
    feed: 'replay' as const,
    engineVersion: 'bench-1',
    inputs: {
      rsi: 50 + 20 * x,
      macd: x / 10,
      adx: 25,
      cci: 100 * x,
      stoch: 50,
      perp_lean: null,
      calibrated_probability: 0.5,
      ...(fullInputs
        ? {
            ...Object.fromEntries(ENGINE_INPUTS.map((key, i) => [key, (100 + i) * Math.sin(x * (i + 2))])),
            funding_apr: null,
            basis: null,
            edge_cell: `spot:${k.timeframe}`,
            edge_measured: true,
            vol_horizon_candles: 6,
            vol_band_coverage: 0.8,
          }
        : {}),
    },
    prevHash,
    trigger: 'schedule' as const,
  };
  return { ...content, hash: verdictHash(content) };
}

export function syntheticOutcome(
  v: EventData<'VerdictRecorded'>,
  id: string,
  stream: string,
  revision: number,
): EventData<'VerdictOutcomeResolved'> {
  const r6 = Math.sin(v.candleCloseTime / 3_600_000) / 100;
  const dir = v.call === 'BUY' ? 1 : v.call === 'SELL' ? -1 : 0;
  return {
    exchange: v.exchange,
    coin: v.coin,
    timeframe: v.timeframe,
    verdictId: id,
    verdictStream: stream,
    verdictRevision: revision,
    verdictHash: v.hash,
    call: v.call,
    confidence: v.confidence,
    candleCloseTime: v.candleCloseTime,
    feed: v.feed,
    price: v.price,
    return1: r6 / 3,
    return6: r6,
    return24: r6 * 2,
    result: dir === 0 ? 'no-call' : dir * r6 > 0.001 ? 'hit' : 'miss',
    feeBps: 10,
    horizonCandles: 6,
    netCentiBps: dir === 0 ? null : Math.round((dir * r6 * 10_000 - 10) * 100),
    maeBps: dir === 0 ? null : -20,
    mfeBps: dir === 0 ? null : 30,
    realisedVol: 0.004,
  };
}
