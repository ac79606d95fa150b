import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import type { Registry } from 'prom-client';
import { afterAll, beforeAll } from 'vitest';
import { MemoryBus } from '../adapters/bus/memory.ts';
import { connectNatsBus } from '../adapters/bus/nats.ts';
import type { Bus } from '../adapters/bus/port.ts';
import { openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { KnownCoins } from '../adapters/market/known-coins.ts';
import type { MarketFeed } from '../adapters/market/port.ts';
import { openReplayFeed } from '../adapters/market/replay.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import type { ProjectionStore } from '../adapters/projection-store/port.ts';
import { type Config, loadConfig } from '../contracts/config.ts';
import { deterministicId } from '../contracts/deterministic-id.ts';
import { newEvent } from '../contracts/events.ts';
import type { Call, Regime } from '../contracts/market.ts';
import { parseEventTypes } from '../contracts/setting-lists.ts';
import { type WebhookData, WebhookEnvelope } from '../contracts/webhooks.ts';
import { ProjectionRunner } from '../projections/runner.ts';
import { buildApp } from '../services/api/app.ts';
import { createSignalEngine, type SignalEngine } from '../services/engine/engine.ts';
import { VerdictScheduler } from '../services/engine/scheduler.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { keyRegistryProjection } from '../services/keys/key-registry.ts';
import { KeyResolver } from '../services/keys/key-resolver.ts';
import { callerPlugin } from '../services/metering/caller.ts';
import { Relay } from '../services/relay/relay.ts';
import { Readiness } from '../services/shared/readiness.ts';
import { keepTickShape } from '../services/shared/tick-shape.ts';
import { digestCoverageOf, dispatcherComponent, webhookApi } from '../services/webhooks/component.ts';
import type { EngineProgress } from '../services/webhooks/digest-scan.ts';
import type { WebhookSettings } from '../services/webhooks/settings.ts';
import { deleteStream, NATS_URL } from './nats-server.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

export const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

/** The digest subscription the digest suites make: BINANCE's top 3 on the 1h timeframe, hourly. */
export const HOURLY_DIGEST = {
  events: ['scan_digest'],
  timeframe: '1h',
  exchange: 'BINANCE',
  top_n: 3,
  cadence: '1h',
};

/**
 * Polls `probe` until `ok` holds. The deadline is generous: only a condition that never comes
 * ends the wait (load 10-30 is expected on a shared machine).
 */
export async function until<T>(
  probe: () => T | Promise<T>,
  ok: (v: T) => boolean,
  timeoutMs = 120_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline)
      throw new Error(`condition not met in ${timeoutMs} ms: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Resolves once the dispatcher has run a whole digest pass that began after this call, so it read
 * the subscriptions and the feed clock as they are now (the pass in flight at the call may not have).
 */
export async function digestPassed(dispatcher: { digestPasses(): number }): Promise<void> {
  const from = dispatcher.digestPasses();
  await until(
    () => dispatcher.digestPasses(),
    (n) => n >= from + 2,
  );
}

export function webhookEnv(prefix: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    NODE_ENV: 'test',
    EVENT_STORE: 'memory',
    LOG_LEVEL: 'silent',
    BUS: 'nats',
    NATS_SUBJECT_PREFIX: prefix,
    WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
    WEBHOOK_ALLOWED_PORTS: '*',
    WEBHOOK_RETRY_SCHEDULE: '0,100,200',
    WEBHOOK_RETRY_JITTER: '0',
    WEBHOOK_TICK_MS: '50',
    WEBHOOK_TIMEOUT_MS: '1500',
    WEBHOOK_CONNECT_TIMEOUT_MS: '1000',
    WEBHOOK_STUCK_AFTER_MS: '3000',
    WEBHOOK_MAX_PER_KEY: '5',
    ...extra,
  };
}

let verdictCounter = 0;

/** Appends a verdict (and a regime shift when `from` is given) the way the engine records them. */
export async function appendVerdict(
  store: EventStore,
  v: {
    coin: string;
    timeframe?: string;
    call: Call;
    confidence: number;
    regime?: Regime;
    from?: Regime;
    exchange?: string;
    /** Unix ms; default one hour after the previous fixture verdict's, from 2023-11-14. */
    candleCloseTime?: number;
  },
): Promise<string> {
  const timeframe = (v.timeframe ?? '1h') as '1h';
  const exchange = (v.exchange ?? 'BINANCE') as 'BINANCE';
  const stream = `verdict-${exchange}-${v.coin}-${timeframe}`;
  const candleCloseTime = v.candleCloseTime ?? 1_700_000_000_000 + ++verdictCounter * 3_600_000;
  const id = deterministicId('test-verdict', stream, candleCloseTime, randomUUID());
  const regime = v.regime ?? 'trending-up';
  const events = [
    newEvent(
      'VerdictRecorded',
      {
        exchange,
        coin: v.coin,
        timeframe,
        call: v.call,
        confidence: v.confidence,
        score: v.call === 'SELL' ? -0.5 : 0.5,
        regime,
        price: 100 + verdictCounter,
        candleCloseTime,
        feed: 'replay',
        engineVersion: 'test',
        inputs: {},
        hash: deterministicId('h', id).replace(/-/g, '').padEnd(64, 'a').slice(0, 64),
        prevHash: null,
        trigger: 'schedule',
      },
      { id },
    ),
  ];
  if (v.from) {
    events.push(
      newEvent(
        'RegimeShifted',
        {
          exchange,
          coin: v.coin,
          timeframe,
          from: v.from,
          to: regime,
          confidence: v.confidence,
          price: 100 + verdictCounter,
          candleCloseTime,
          feed: 'replay',
          verdictEventId: id,
        },
        { id: deterministicId('regime-shift', id), causationId: id },
      ) as never,
    );
  }
  await store.append(stream, events);
  return id;
}

/**
 * The bus between relay and dispatcher: real NATS JetStream, or the in-process bus the embedded
 * service runs on (`BUS=memory`), for one process standing in for the box.
 */
export type StackBus = 'nats' | 'memory';

export interface WebhookStack {
  /** The configuration its parts were started with. */
  config: Config;
  store: EventStore;
  projections: ProjectionStore;
  bus: Bus;
  url: string;
  engine: SignalEngine;
  dispatcher: ReturnType<typeof dispatcherComponent>;
  /** Publishes the log to the bus; the webhooks bench holds it while its event source fills the log. */
  relay: Relay;
  api: ReturnType<typeof webhookApi>;
  keys: ProjectionRunner<Awaited<ReturnType<typeof keyRegistryProjection.initial>>>;
  issue(owner?: string): Promise<string>;
  /** A key and its id (the id is what `npm run keys -- revoke <keyId>` takes). */
  issueWithId(owner?: string): Promise<{ key: string; keyId: string }>;
  request(
    method: string,
    path: string,
    key: string | null,
    body?: unknown,
    // biome-ignore lint/suspicious/noExplicitAny: response bodies are asserted field by field in the tests
  ): Promise<{ status: number; body: any }>;
  stream: string;
  prefix: string;
  /** The in-process dispatcher's durable consumer names start with this (`<durable>-calls`, …). */
  durable: string;
  close(): Promise<void>;
}

/**
 * The whole webhook path on real parts: memory event store (or the one given), real NATS JetStream
 * (own stream and prefix) unless the in-process bus is asked for, the relay, the key registry, the
 * management API on a real port and the dispatcher.
 */
export async function startWebhookStack(options: {
  env?: Record<string, string>;
  settings?: Partial<WebhookSettings>;
  digestNow?: () => number;
  store?: EventStore;
  projections?: ProjectionStore;
  /** false: no in-process dispatcher (a child process runs it). */
  dispatcher?: boolean;
  /** The dispatcher folds nothing itself: it reads the api's webhook projection. */
  shareProjection?: boolean;
  /** A Prometheus registry for the dispatcher's delivery metrics. */
  registry?: Registry;
  /** Stands in for the engine's feed in the dispatcher (venue rankings, the digest clock). */
  wrapFeed?: (feed: MarketFeed) => MarketFeed;
  /** The bus between relay and dispatcher (see StackBus); NATS unless asked. */
  bus?: StackBus;
  /**
   * Subscriptions' coins checked against the replay feed, as the service checks them. Off by
   * default: most suites keep apart by coins of their own (SEQA, CRASHA…) that no feed lists.
   */
  checkCoins?: boolean;
  /** Digest venues and timeframes checked as the service checks them (digestCoverageOf); off by default. */
  checkDigests?: boolean;
}): Promise<WebhookStack> {
  // The stack stands in for a service process (the single-layout webhook bench measures it), and
  // startService keeps a tick record alive in every service process.
  keepTickShape();
  const id = randomUUID().slice(0, 8);
  const stream = `WHTEST_${id}`;
  const prefix = `wh${id}`;
  const durable = `disp${id}`;
  const busKind: StackBus = options.bus ?? 'nats';
  const config = loadConfig(webhookEnv(prefix, { BUS: busKind, ...options.env }));
  const store = options.store ?? new MemoryEventStore();
  const projections = options.projections ?? new MemoryProjectionStore();
  const bus: Bus =
    busKind === 'memory'
      ? new MemoryBus()
      : await connectNatsBus({
          url: NATS_URL,
          stream,
          subjectPrefix: prefix,
          logger,
          pullExpiresMs: 2_000,
        });
  const relay = new Relay({
    store,
    bus,
    checkpoints: projections,
    subjectPrefix: prefix,
    logger,
    types: parseEventTypes(config.RELAY_EVENT_TYPES),
  });
  const keys = new ProjectionRunner(store, projections, keyRegistryProjection, { logger });
  const resolver = new KeyResolver({ runner: keys, store });
  const engine = await createSignalEngine({ feed: await openReplayFeed({ run: false }), store });
  const adapters = { eventStore: store, projectionStore: projections, bus };
  const api = webhookApi({
    config,
    adapters,
    logger,
    ...(options.settings ? { settings: options.settings } : {}),
    feed: engine.feed.kind,
    ...(options.checkCoins ? { coins: new KnownCoins(() => engine.feed, null) } : {}),
    ...(options.checkDigests ? { digests: digestCoverageOf(config, engine.feed) } : {}),
  });
  const dispatcher = dispatcherComponent({
    config,
    adapters,
    logger,
    feed: options.wrapFeed ? options.wrapFeed(engine.feed) : engine.feed,
    durablePrefix: durable,
    ...(options.settings ? { settings: options.settings } : {}),
    ...(options.digestNow ? { digestNow: options.digestNow } : {}),
    ...(options.shareProjection ? { runner: api.runner } : {}),
    ...(options.registry ? { registry: options.registry } : {}),
  });
  await keys.start();
  await api.start();
  await relay.start();
  if (options.dispatcher !== false) await dispatcher.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [callerPlugin(resolver), api.plugin],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    config,
    store,
    projections,
    bus,
    url,
    engine,
    dispatcher,
    relay,
    api,
    keys,
    stream,
    prefix,
    durable,
    async issue(owner = 'test') {
      return (await this.issueWithId(owner)).key;
    },
    async issueWithId(owner = 'test') {
      const issued = await issueKey(store, { plan: 'free', owner, via: 'operator' });
      await keys.waitFor(issued.position);
      return { key: issued.key, keyId: issued.keyId };
    },
    request: requester(url),
    async close() {
      await app.close();
      await dispatcher.stop();
      await api.stop();
      await relay.stop();
      await keys.stop();
      await engine.close();
      await bus.close();
      if (busKind === 'nats') await deleteStream(stream);
    },
  } satisfies WebhookStack;
}

/** A request to the service at `url` with a key (or none) and a JSON body, as WebhookStack['request']. */
function requester(url: string): WebhookStack['request'] {
  return async (method, path, key, body) => {
    const res = await fetch(url + path, {
      method,
      headers: {
        ...(key ? { authorization: `Bearer ${key}` } : {}),
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : null };
  };
}

/**
 * A second api replica of a stack, as another process on the same log: its own key registry,
 * webhook projection and management API on a port of its own, with the stack's configuration, on
 * `store` (the stack's log through a store object of its own, so that its commands do not queue
 * behind the stack's as one process's do).
 */
export async function startApiReplica(
  stack: WebhookStack,
  store: EventStore,
  settings?: Partial<WebhookSettings>,
): Promise<{
  url: string;
  api: ReturnType<typeof webhookApi>;
  request: WebhookStack['request'];
  close(): Promise<void>;
}> {
  const { config } = stack;
  const projections = new MemoryProjectionStore();
  const keys = new ProjectionRunner(store, projections, keyRegistryProjection, { logger });
  const api = webhookApi({
    config,
    adapters: { eventStore: store, projectionStore: projections, bus: stack.bus },
    logger,
    ...(settings ? { settings } : {}),
    feed: stack.engine.feed.kind,
  });
  await keys.start();
  await api.start();
  const app = await buildApp({
    config,
    logger,
    readiness: new Readiness(),
    metrics: null,
    plugins: [callerPlugin(new KeyResolver({ runner: keys, store })), api.plugin],
  });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  return {
    url,
    api,
    request: requester(url),
    async close() {
      await app.close();
      await api.stop();
      await keys.stop();
    },
  };
}

/**
 * Dispatchers of their own on a stack started with `dispatcher: false`, on its store and bus and
 * the same durable consumers (`<tag><stack prefix>`): the bus hands each message to one of them
 * and redelivers to another what one gave back. `stop` stops one; `stopAll` (a suite's afterAll)
 * every one still running, once.
 */
export function dispatcherPool(
  stack: () => WebhookStack,
  options: {
    tag: string;
    env: Record<string, string>;
    settings?: Partial<WebhookSettings>;
    /** Each dispatcher's digest wait for the verdict projection (default DIGEST_CATCH_UP_MS). */
    digestCatchUpMs?: number;
  },
) {
  type Dispatcher = ReturnType<typeof dispatcherComponent>;
  const running = new Set<Dispatcher>();
  return {
    /**
     * `projections`: where its webhook projection's snapshot is (none given: it folds the log from
     * 0); `scheduler`: the engine's, as in a process running the engine role too.
     */
    async start(
      projections: ProjectionStore = new MemoryProjectionStore(),
      scheduler?: EngineProgress,
    ): Promise<Dispatcher> {
      const { prefix, store, bus, engine } = stack();
      const d = dispatcherComponent({
        config: loadConfig(webhookEnv(prefix, options.env)),
        adapters: { eventStore: store, projectionStore: projections, bus },
        logger,
        feed: engine.feed,
        durablePrefix: `${options.tag}${prefix}`,
        ...(options.settings ? { settings: options.settings } : {}),
        ...(scheduler ? { engine: scheduler } : {}),
        ...(options.digestCatchUpMs === undefined ? {} : { digestCatchUpMs: options.digestCatchUpMs }),
      });
      running.add(d);
      await d.start();
      return d;
    },
    async stop(d: Dispatcher): Promise<void> {
      running.delete(d);
      await d.stop();
    },
    async stopAll(): Promise<void> {
      for (const d of [...running]) await this.stop(d);
    },
  };
}

/**
 * A webhook stack with no dispatcher of its own, a TLS receiver (`tls` starts more), and a pool of
 * dispatchers (`tag`) on the stack's store, bus and replay feed, whose clock the test steps by hand
 * (the harness opens it stopped). `dispatcher` is one started in beforeAll; `startDispatcher: false`
 * leaves every start to the test (a process stopped and started again). Options: `bus`, the bus
 * between relay and dispatchers (NATS unless `memory`, one process standing in for the box);
 * `lmdb`, the LMDB log in a directory of its own (as `npm start` keeps it) instead of the memory
 * one; `digestCatchUpMs`, the dispatchers' digest wait for the verdict projection
 * (DIGEST_CATCH_UP_MS). `newScheduler` makes an engine scheduler (the engine role in the
 * dispatcher's process: 1h on BINANCE, HOURLY_DIGEST's top N), each stopped in the afterAll if the
 * test has not; `digests` reads the scan digests the receiver got, in order. Registers its
 * beforeAll and afterAll in the calling describe; `stack`, `receiver` and `dispatcher` are set once
 * the beforeAll has run.
 */
export function pooledDispatcherStack(
  tag: string,
  options: {
    env?: Record<string, string>;
    startDispatcher?: boolean;
    bus?: StackBus;
    lmdb?: boolean;
    digestCatchUpMs?: number;
  } = {},
) {
  const tls = selfSignedCert();
  const env = options.env ?? {};
  const settings = { tls: { ca: tls.cert } };
  const schedulers: VerdictScheduler[] = [];
  let dir: string | undefined;
  const setup = { tls } as {
    tls: { key: string; cert: string };
    stack: WebhookStack;
    receiver: Receiver;
    pool: ReturnType<typeof dispatcherPool>;
    dispatcher: ReturnType<typeof dispatcherComponent>;
    newScheduler(): VerdictScheduler;
    digests(): Extract<WebhookData, { type: 'scan_digest' }>[];
  };
  setup.pool = dispatcherPool(() => setup.stack, {
    tag,
    env,
    settings,
    ...(options.digestCatchUpMs === undefined ? {} : { digestCatchUpMs: options.digestCatchUpMs }),
  });
  setup.newScheduler = () => {
    const scheduler = new VerdictScheduler({
      engine: setup.stack.engine,
      feed: setup.stack.engine.feed,
      timeframes: ['1h'],
      exchange: 'BINANCE',
      topN: HOURLY_DIGEST.top_n,
    });
    schedulers.push(scheduler);
    return scheduler;
  };
  setup.digests = () =>
    setup.receiver.received.map((r) => {
      const envelope = WebhookEnvelope.parse(JSON.parse(r.body));
      if (envelope.data.type !== 'scan_digest') throw new Error('not a digest');
      return envelope.data;
    });
  beforeAll(async () => {
    let store: EventStore | undefined;
    if (options.lmdb) {
      dir = mkdtempSync(join(tmpdir(), `${tag}-`));
      store = await openLmdbEventStore({ path: dir });
    }
    setup.stack = await startWebhookStack({
      env,
      settings,
      dispatcher: false,
      ...(store ? { store } : {}),
      ...(options.bus ? { bus: options.bus } : {}),
    });
    setup.receiver = await startReceiver(tls);
    if (options.startDispatcher !== false) setup.dispatcher = await setup.pool.start();
  });
  afterAll(async () => {
    await setup.pool.stopAll();
    for (const scheduler of schedulers) await scheduler.stop();
    await setup.stack?.close();
    await setup.receiver?.close();
    if (options.lmdb) await setup.stack?.store.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  return setup;
}

/**
 * The engine's scheduler as the dispatcher in its process sees it (EngineProgress), telling the test
 * what its digests asked: `asked`, how many waits for a close began; `askedFor(close)` resolves once
 * a digest has asked about `close` (a digest that asks nothing leaves it pending).
 */
export function watchedEngine(scheduler: EngineProgress): EngineProgress & {
  readonly asked: number;
  askedFor(close: number): Promise<void>;
} {
  const closes: number[] = [];
  const waiters: { close: number; resolve: () => void }[] = [];
  return {
    closeEvaluated(exchange, timeframe, close, options) {
      closes.push(close);
      for (const waiter of waiters) if (waiter.close === close) waiter.resolve();
      return scheduler.closeEvaluated(exchange, timeframe, close, options);
    },
    get asked() {
      return closes.length;
    },
    askedFor(close) {
      if (closes.includes(close)) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ close, resolve }));
    },
  };
}
