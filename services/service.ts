import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import { anchorInLog } from '../adapters/market/replay-anchor.ts';
import { feedOptionsFromConfig, selectFeed } from '../adapters/market/select.ts';
import type { Config } from '../contracts/config.ts';
import { runnersOn } from '../projections/runner.ts';
import { type Adapters, openAdapters } from './adapters.ts';
import { buildApp } from './api/app.ts';
import { discoveryPlugin } from './api/discovery/plugin.ts';
import { observeQuota } from './api/metered-call.ts';
import { keyedChannel } from './api/plugins.ts';
import { verifyRoutes } from './api/verify/plugin.ts';
import type { Component, Role } from './component.ts';
import { engineComponent } from './engine/component.ts';
import { createSignalEngine, type SignalEngine } from './engine/engine.ts';
import { HISTORY_ROLES, type HistorySlice, historySlice } from './history/slice.ts';
import { knowledgeModule } from './knowledge/module.ts';
import { setupX402, type X402Setup } from './payments/setup.ts';
import { projectionsComponent } from './projections/component.ts';
import { createMetrics } from './shared/metrics.ts';
import { Readiness } from './shared/readiness.ts';
import { dispatcherComponent, webhookApi } from './webhooks/component.ts';

export interface RunningService {
  app: FastifyInstance;
  adapters: Adapters;
  /** The signal engine, in processes that serve (api) or schedule (engine) verdicts. */
  engine: SignalEngine | null;
  components: Component[];
  /** Base URL the HTTP server listens on. */
  url: string;
  /** Graceful stop: in-flight requests finish, followers checkpoint, adapters close. */
  stop(): Promise<void>;
}

/**
 * Starts the given roles in one process. Every role serves the ops endpoints (/healthz, /readyz,
 * /metrics) on PORT so an orchestrator can probe it; the `api` role adds the product routes.
 */
export async function startService(config: Config, roles: Role[], logger: Logger): Promise<RunningService> {
  const adapters = await openAdapters(config, logger);
  const metrics = config.METRICS_ENABLED ? createMetrics() : null;
  // Whichever role started them (key registry, webhooks, payments, history...), each runner's lag.
  metrics?.projectionLag.from(async (set) => {
    const runners = runnersOn(adapters.eventStore);
    if (runners.length === 0) return;
    const head = await adapters.eventStore.headPosition();
    const lag = new Map<string, number>();
    // Two runners of one projection (rare, one per role in a combined process): the one behind counts.
    for (const runner of runners)
      lag.set(runner.name, Math.max(lag.get(runner.name) ?? 0, head - runner.checkpoint));
    for (const [projection, events] of lag) set({ projection }, events);
  });
  const readiness = new Readiness();
  readiness.add('eventStore', async () => ({
    kind: adapters.eventStore.kind,
    ...(await adapters.eventStore.health()),
  }));
  // Each role is judged only on what it needs to serve, so a load balancer does not drop api
  // replicas during a NATS outage they do not feel: the bus carries the relay (projections) and the
  // deliveries (dispatcher); the cache holds the api's quota counters.
  if (roles.includes('projections') || roles.includes('dispatcher')) {
    readiness.add('bus', async () => ({ kind: adapters.bus.kind, ...(await adapters.bus.health()) }));
  }
  if (roles.includes('api')) {
    readiness.add('cache', async () => ({ kind: adapters.cache.kind, ...(await adapters.cache.health()) }));
  }

  const started: Component[] = [];
  const components: Component[] = [];
  const plugins: FastifyPluginAsync[] = [];
  let engine: SignalEngine | null = null;
  let x402: X402Setup | null = null;
  let webhooks: ReturnType<typeof webhookApi> | null = null;
  let app: FastifyInstance | null = null;
  try {
    if (roles.includes('api') || roles.includes('engine')) {
      const { feed, reason } = await selectFeed({
        ...feedOptionsFromConfig(config),
        logger,
        anchorStore: (proposal) => anchorInLog(adapters.eventStore, proposal),
      });
      engine = await createSignalEngine({
        feed,
        store: adapters.eventStore,
        publicBaseUrl: config.PUBLIC_BASE_URL,
        logger,
      });
      readiness.add('feed', async () => {
        const venues = feed.venues();
        return { ok: venues.some((v) => v.ok), kind: feed.kind, reason, venues };
      });
    }
    if (roles.includes('projections')) {
      components.push(projectionsComponent({ config, adapters, logger, metrics }));
    }
    // Verdict history: outcomes on the projections role, routes on api, track-record lines on both.
    let history: HistorySlice | null = null;
    if (roles.some((role) => HISTORY_ROLES.includes(role))) {
      history = historySlice({ config, adapters, logger, roles, feed: engine?.feed ?? null });
      components.push(history);
    }
    if (roles.includes('engine') && engine) components.push(engineComponent({ config, engine, logger }));
    if (roles.includes('api') && engine) {
      const ops = history ? history.withTrackRecord(engine) : engine;
      x402 = await setupX402(config, {
        ops,
        store: adapters.eventStore,
        logger,
        cache: adapters.cache,
        projections: adapters.projectionStore,
      });
      // Knowledge tools join the MCP registry; their /api routes use the keyed channel's keys and quota.
      let channel: ReturnType<typeof keyedChannel> | null = null;
      const knowledge = knowledgeModule({ config, adapters, logger, channel: () => channel! });
      // One channel each way: MCP callers can pay per call, keys apply on the /x402/* routes.
      const keyed = keyedChannel({
        config,
        adapters,
        logger,
        ops,
        ...(x402 ? x402.mcp : {}),
        extraTools: knowledge.tools,
        ...(metrics
          ? {
              onRateLimited: (tier: string, channel: 'http' | 'mcp') =>
                metrics.rateLimitRefusals.inc({ tier, channel }),
              onMcpSessionCount: (open: number) => metrics.mcpSessionsOpen.set(open),
            }
          : {}),
      });
      if (metrics) {
        observeQuota(keyed.quota, {
          debited: (plan) => metrics.quotaDebits.inc({ plan }),
          refused: (plan, reason) => metrics.quotaRefusals.inc({ plan, reason }),
        });
      }
      channel = keyed;
      components.push(keyed, knowledge);
      plugins.push(
        // First, so its hook runs before every product route registered after it.
        ...(keyed.rateLimit ? [keyed.rateLimit] : []),
        knowledge.plugin,
        verifyRoutes({ store: adapters.eventStore, baseUrl: config.PUBLIC_BASE_URL }),
        ...keyed.plugins,
        ...(x402 ? [x402.plugin({ keys: keyed.keys, quota: keyed.quota })] : []),
        discoveryPlugin({
          tools: keyed.tools.all(),
          paid: x402?.tools ?? [],
          rails: x402?.rails ?? [],
          paidResponseTtlMs: config.X402_PAID_RESPONSE_TTL_MS,
        }),
        ...(history ? [history.plugin({ keys: keyed.keys, quota: keyed.quota })] : []),
      );
      // Webhooks: management routes here (keys resolved by the keyed channel's registry),
      // signed delivery on the dispatcher role.
      webhooks = webhookApi({ config, adapters, logger, keys: keyed.keys });
      components.push(webhooks);
      plugins.push(webhooks.plugin);
    }
    if (roles.includes('dispatcher')) {
      // In one process the dispatcher folds the api role's webhook projection instead of its own.
      const shared = webhooks ? { runner: webhooks.runner } : {};
      const registry = metrics ? { registry: metrics.registry } : {};
      const lines = history ? { trackRecord: history.brief } : {};
      components.push(
        dispatcherComponent({
          config,
          adapters,
          logger,
          feed: engine?.feed ?? null,
          ...shared,
          ...registry,
          ...lines,
        }),
      );
    }

    for (const component of components) {
      await component.start();
      started.push(component);
      for (const [name, check] of Object.entries(component.checks?.() ?? {})) readiness.add(name, check);
    }
    app = await buildApp({ config, logger, readiness, metrics, plugins });
    const url = await app.listen({ host: config.HOST, port: config.PORT });
    x402?.start();
    logger.info(
      {
        url,
        roles,
        eventStore: config.EVENT_STORE,
        bus: config.BUS,
        cache: config.CACHE,
        feed: engine?.feed.kind,
        payPerCall: x402 ? { rail: x402.rail, settles: x402.settles } : false,
      },
      'service started',
    );
    const httpApp = app;
    const signalEngine = engine;
    const payments = x402;
    let stopping: Promise<void> | null = null;
    return {
      app: httpApp,
      adapters,
      engine: signalEngine,
      components,
      url,
      stop() {
        stopping ??= (async () => {
          await httpApp.close();
          await payments?.stop();
          for (const component of [...started].reverse()) {
            await component
              .stop()
              .catch((err: unknown) => logger.error({ err, component: component.name }, 'stop failed'));
          }
          await signalEngine?.close();
          await adapters.close();
          logger.info('service stopped');
        })();
        return stopping;
      },
    };
  } catch (err) {
    await app?.close().catch(() => undefined);
    await x402?.stop().catch(() => undefined);
    for (const component of started.reverse()) await component.stop().catch(() => undefined);
    await engine?.close().catch(() => undefined);
    await adapters.close();
    throw err;
  }
}
