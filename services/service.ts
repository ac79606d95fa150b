import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import { DependencyRefusedError } from '../adapters/dependency-refused.ts';
import { appendReadiness } from '../adapters/event-store/append-watch.ts';
import { anchorInLog } from '../adapters/market/replay-anchor.ts';
import { feedOptionsFromConfig, selectFeed } from '../adapters/market/select.ts';
import { type Config, publicBaseUrl } from '../contracts/config.ts';
import { projectionLag, runnerLags } from '../projections/lag.ts';
import { stopRunnersBy } from '../projections/runner.ts';
import { type Adapters, openAdapters } from './adapters.ts';
import { buildApp } from './api/app.ts';
import type { Role, Slice } from './component.ts';
import { createSignalEngine, type SignalEngine } from './engine/engine.ts';
import type { SignalOperations } from './engine/operations.ts';
import { scheduledMarkets } from './engine/scheduler.ts';
import type { X402Setup } from './payments/setup.ts';
import { createMetrics } from './shared/metrics.ts';
import { Readiness } from './shared/readiness.ts';
import { settleMemory } from './shared/settle-memory.ts';
import { keepTickShape } from './shared/tick-shape.ts';
import { composeSlices } from './slices.ts';

export interface RunningService {
  app: FastifyInstance;
  adapters: Adapters;
  /** The signal engine, in processes that serve (api) or schedule (engine) verdicts. */
  engine: SignalEngine | null;
  /** The sold operations (the engine's and the history's track record), where the api role sells them. */
  ops: SignalOperations | null;
  /** The feature slices this process runs, in start order. */
  components: Slice[];
  /** Base URL the HTTP server listens on. */
  url: string;
  /** Graceful stop: in-flight requests finish, followers checkpoint, adapters close. */
  stop(): Promise<void>;
  /** Where the stop is (null before it starts): what a shutdown timeout's line names. */
  stopping(): StopProgress | null;
}

/** The step a stop is waiting on, for how long, and the steps it has done (in order). */
export interface StopProgress {
  /** drain, http, slice:<name>, engine, adapters, or done. */
  step: string;
  forMs: number;
  done: string[];
}

/**
 * Starts the given roles in one process: opens the adapters, builds the slices the roles ask for
 * (services/slices.ts), starts them in order, adds their checks to /readyz and their routes to the
 * app, and stops them in reverse. Every role serves the ops endpoints (/healthz, /readyz,
 * /metrics) on PORT so an orchestrator can probe it. `signal`: a stop asked for while it starts
 * (SIGTERM before `service started`); the start ends at its next step (an adapter opened, the
 * engine made, a slice started, the listen) with the signal's reason, having closed in reverse
 * what it opened.
 */
export async function startService(
  config: Config,
  roles: Role[],
  logger: Logger,
  { signal }: { signal?: AbortSignal } = {},
): Promise<RunningService> {
  keepTickShape();
  // The roles that carry events on the bus: the relay (projections) and the deliveries (dispatcher).
  const carriesBus = roles.includes('projections') || roles.includes('dispatcher');
  const adapters = await openAdapters(config, logger, { bus: carriesBus, signal });
  const nextStep = () => signal?.throwIfAborted();
  const metrics = config.METRICS_ENABLED ? createMetrics() : null;
  // Whichever slice started them (key registry, webhooks, payments, history...), each runner's lag.
  metrics?.projectionLag.from(async (set) => {
    // The store away (PostgreSQL down) must not fail the whole scrape: the lag is left out.
    const measured = await runnerLags(adapters.eventStore, config.PROJECTION_READY_MAX_LAG).catch(() => null);
    for (const [projection, events] of measured?.lags ?? []) set({ projection }, events);
  });
  const flushLag = adapters.eventStore.flushLag?.bind(adapters.eventStore);
  if (flushLag) {
    metrics?.eventStoreFlush.from(async (set) => {
      const lag = await flushLag().catch(() => null);
      if (!lag) return;
      set({ unit: 'bytes' }, lag.unflushedBytes);
      set({ unit: 'seconds' }, lag.boundMs / 1000);
    });
  }
  const readiness = new Readiness();
  readiness.add('eventStore', async () => ({
    kind: adapters.eventStore.kind,
    ...(await adapters.eventStore.health()),
  }));
  // Reads and the store's own health can keep answering while writes hang (an LMDB write lock
  // held by a stopped process): only the age of this process's oldest pending append shows it.
  const appends = appendReadiness(adapters.appends, config.APPEND_STALL_MS);
  readiness.add('appends', async () => appends());
  metrics?.appendsPending.from((set) => set({}, adapters.appends.pending));
  metrics?.oldestPendingAppend.from((set) => set({}, adapters.appends.oldestPendingMs() / 1000));
  // Whichever slice started them: a projection far behind the head answers from the past.
  readiness.add('projectionLag', async () => ({
    ...(await projectionLag(adapters.eventStore, config.PROJECTION_READY_MAX_LAG)),
  }));
  // Each role is judged only on what it needs to serve, so a load balancer does not drop api
  // replicas during a NATS outage they do not feel: the bus carries the relay (projections) and the
  // deliveries (dispatcher); the cache holds the api's quota counters.
  if (carriesBus) {
    readiness.add('bus', async () => ({ kind: adapters.bus.kind, ...(await adapters.bus.health()) }));
    metrics?.busStreamReplicas.from(async (set) => {
      const { replicas } = await adapters.bus.health();
      if (!replicas) return;
      set({ state: 'wanted' }, replicas.wanted);
      set({ state: 'current' }, replicas.current);
    });
    metrics?.busStreamDrift.from(async (set) => {
      for (const drift of (await adapters.bus.health()).drift ?? []) {
        set({ setting: drift.setting, updated: String(drift.updated) }, 1);
      }
    });
  }
  if (roles.includes('api')) {
    readiness.add('cache', async () => ({ kind: adapters.cache.kind, ...(await adapters.cache.health()) }));
  }

  const started: Slice[] = [];
  let engine: SignalEngine | null = null;
  let payments: X402Setup | null = null;
  let app: FastifyInstance | null = null;
  try {
    nextStep();
    if (roles.includes('api') || roles.includes('engine')) {
      const { feed, reason } = await selectFeed({
        ...feedOptionsFromConfig(config),
        logger,
        anchorStore: (proposal) => anchorInLog(adapters.eventStore, proposal),
        signal,
      });
      engine = await createSignalEngine({
        feed,
        store: adapters.eventStore,
        publicBaseUrl: publicBaseUrl(config),
        logger,
        // What the engine role schedules (in this process or another): a request on one of
        // those markets backfills the closes its chain misses before it records its own.
        schedule: { ...scheduledMarkets(config, feed), topN: config.SCHEDULE_TOP_N },
        // The band scales the engine role saves, read back by every role's rebuilt states.
        bandScales: adapters.projectionStore,
      });
      nextStep();
      readiness.add('feed', async () => {
        const venues = feed.venues();
        return { ok: venues.some((v) => v.ok), kind: feed.kind, reason, venues };
      });
    }
    const composed = await composeSlices({ config, adapters, logger, metrics, roles, engine, signal });
    payments = composed.payments;
    const { slices } = composed;
    for (const slice of slices) {
      nextStep();
      await slice.start();
      started.push(slice);
      for (const [name, check] of Object.entries(slice.checks())) readiness.add(name, check);
    }
    const plugins: FastifyPluginAsync[] = roles.includes('api')
      ? slices.flatMap((slice) => (slice.plugin ? [slice.plugin] : []))
      : [];
    nextStep();
    app = await buildApp({ config, logger, readiness, metrics, plugins });
    const url = await app.listen({ host: config.HOST, port: config.PORT }).catch((err: unknown) => {
      throw listenRefused(err, config) ?? err;
    });
    nextStep();
    // The roles are in the logger's bindings (main's), on every line of the process.
    logger.info(
      {
        url,
        slices: slices.map((slice) => slice.name),
        eventStore: config.EVENT_STORE,
        bus: config.BUS,
        cache: config.CACHE,
        feed: engine?.feed.kind,
        payPerCall: payments ? { rail: payments.rail, settles: payments.settles } : false,
      },
      'service started',
    );
    const httpApp = app;
    const signalEngine = engine;
    let stopping: Promise<void> | null = null;
    let progress: { step: string; since: number; done: string[] } | null = null;
    // Each step's milliseconds, in the order done: the 'service stopped' line says what a stop waited on.
    const stepsMs: Record<string, number> = {};
    const step = (name: string) => {
      const now = performance.now();
      if (progress) {
        progress.done.push(progress.step);
        stepsMs[progress.step] = Math.round(now - progress.since);
      }
      progress = { step: name, since: now, done: progress?.done ?? [] };
    };
    void settleMemory({
      ready: async () => (await readiness.run()).ready,
      work: slices.flatMap((slice) => (slice.startUpWork ? [slice.startUpWork()] : [])),
      stopping: () => stopping !== null,
      logger,
    }).catch((err: unknown) => logger.warn({ err }, "start-up's garbage not collected"));
    return {
      app: httpApp,
      adapters,
      engine: signalEngine,
      ops: composed.ops,
      components: slices,
      url,
      stop() {
        stopping ??= (async () => {
          // Only a process serving calls has a balancer to leave: the other roles stop at once,
          // so one settings file can carry the drain for every role.
          if (config.SHUTDOWN_DRAIN_MS > 0 && roles.includes('api')) {
            step('drain');
            await drain(readiness, config.SHUTDOWN_DRAIN_MS, logger);
          }
          // Deadlines within SHUTDOWN_TIMEOUT_MS for what waits on the stores: a silent one (a
          // partition, a hung server) answers none of the waits. The runners' head reads, drains
          // and final saves share the first (see stopRunnersBy); the adapters' close ends by the
          // second, a fifth of the bound before it, which the exit (its lines flushed) takes on a
          // loaded machine.
          const stopStart = performance.now();
          stopRunnersBy(adapters.eventStore, stopStart + (config.SHUTDOWN_TIMEOUT_MS * 3) / 5);
          const adaptersBy = stopStart + (config.SHUTDOWN_TIMEOUT_MS * 4) / 5;
          step('http');
          await closeHttp(httpApp, Math.floor(config.SHUTDOWN_TIMEOUT_MS / 3), logger);
          for (const slice of [...started].reverse()) {
            step(`slice:${slice.name}`);
            await slice
              .stop()
              .catch((err: unknown) => logger.error({ err, slice: slice.name }, 'stop failed'));
          }
          step('engine');
          await signalEngine?.close();
          step('adapters');
          await adapters.close({ by: adaptersBy });
          step('done');
          logger.info({ stepsMs }, 'service stopped');
        })();
        return stopping;
      },
      stopping() {
        if (progress === null) return null;
        const { step: now, since, done } = progress;
        return { step: now, forMs: Math.round(performance.now() - since), done: [...done] };
      },
    };
  } catch (err) {
    await app?.close().catch(() => undefined);
    for (const slice of started.reverse()) await slice.stop().catch(() => undefined);
    await engine?.close().catch(() => undefined);
    await adapters.close();
    throw err;
  }
}

/**
 * A listen the system refused, told with the setting to correct: Node's own words
 * (`listen EADDRINUSE: address already in use 0.0.0.0:8080`) name neither PORT nor HOST. Null for
 * any other error.
 */
function listenRefused(err: unknown, config: Pick<Config, 'HOST' | 'PORT'>): DependencyRefusedError | null {
  const code = (err as NodeJS.ErrnoException).code;
  const where = `port ${config.PORT} on ${config.HOST}`;
  const why =
    code === 'EADDRINUSE'
      ? `${where} is in use by another process: stop it, or set PORT (and HOST) to a port that is free`
      : code === 'EACCES'
        ? `${where} may not be listened on by this user (ports below 1024 need privileges): set PORT to 1024 or above`
        : code === 'EADDRNOTAVAIL'
          ? `HOST ${config.HOST} is not an address of this machine: set HOST to one of its addresses, or 0.0.0.0 for all`
          : null;
  return why === null ? null : new DependencyRefusedError(`cannot listen (${code}): ${why}`, { cause: err });
}

/**
 * Goes on serving for `drainMs` with /readyz not ready (check `shutdown`), so a load balancer that
 * health-checks /readyz takes this process out of its pool before its listener closes: closed at
 * once, the calls the balancer sends it until its checks fail are refused.
 */
async function drain(readiness: Readiness, drainMs: number, logger: Logger): Promise<void> {
  const closesAt = Date.now() + drainMs;
  readiness.add('shutdown', async () => ({
    ok: false,
    detail: `stopping: still serving, the listener closes in ${Math.max(0, closesAt - Date.now())} ms (SHUTDOWN_DRAIN_MS)`,
  }));
  logger.info(
    { drainMs },
    'draining: /readyz answers 503 while requests are still served, then the listener closes',
  );
  await new Promise((resolve) => setTimeout(resolve, drainMs));
}

/**
 * Stops taking connections and lets the requests in flight finish for `graceMs`; the connections
 * still open then (a client that sent half a body and went quiet, a stream left open) are
 * destroyed, so the projections still drain and checkpoint within SHUTDOWN_TIMEOUT_MS. Left to
 * itself, close() waits on such a client until REQUEST_TIMEOUT_MS, past the shutdown timeout.
 */
async function closeHttp(app: FastifyInstance, graceMs: number, logger: Logger): Promise<void> {
  const grace = setTimeout(() => {
    // Counted before they are closed, so the line says how many the grace did not see finish.
    app.server.getConnections((_err, open) => {
      logger.warn(
        { connections: open, graceMs },
        'requests still open after the grace: closing their connections',
      );
      app.server.closeAllConnections();
    });
  }, graceMs);
  try {
    await app.close();
  } finally {
    clearTimeout(grace);
  }
}
