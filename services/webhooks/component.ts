import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { Agent } from 'undici';
import { KnownCoins } from '../../adapters/market/known-coins.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { anchorInLog } from '../../adapters/market/replay-anchor.ts';
import { feedOptionsFromConfig, selectFeed } from '../../adapters/market/select.ts';
import type { Config } from '../../contracts/config.ts';
import type { FeedKind } from '../../contracts/market.ts';
import { type LatestVerdicts, latestVerdictsProjection } from '../../projections/latest-verdicts.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { Adapters } from '../adapters.ts';
import type { Component, Role, Slice } from '../component.ts';
import { rankMarkets, unservedVenue } from '../engine/engine.ts';
import { scheduledMarkets } from '../engine/scheduler.ts';
import { projectionCheck } from '../shared/projection-check.ts';
import { guardedAgent } from '../shared/ssrf/guarded-agent.ts';
import { DeliveryWorker } from './delivery-worker.ts';
import { type DigestCoverage, digestCoverage } from './digest-coverage.ts';
import { type EngineProgress, rankedDigestScan } from './digest-scan.ts';
import { type DispatcherOptions, WebhookDispatcher } from './dispatcher.ts';
import { webhookMetrics } from './metrics.ts';
import { MarketRanking } from './ranking.ts';
import { webhookRoutes } from './routes.ts';
import { secretBoxFromConfig } from './secret-box.ts';
import { type WebhookSettings, webhookSettings } from './settings.ts';
import { type WebhookState, webhookProjectionWith } from './webhook-projection.ts';

type WebhookAdapters = Pick<Adapters, 'eventStore' | 'projectionStore' | 'bus'>;

/**
 * A part's stop steps, in order, each run even when one before it throws: a projection snapshot
 * that cannot be written must not leave the latest-verdicts runner folding, the delivery agent's
 * sockets open or an own feed's clock ticking. The first failure is thrown once every step ran (the
 * slice logs it); a later one is logged here, naming its step.
 */
async function stopSteps(
  logger: Logger,
  steps: [name: string, step: () => Promise<unknown>][],
): Promise<void> {
  let first: { err: unknown } | null = null;
  for (const [name, step] of steps) {
    try {
      await step();
    } catch (err) {
      if (first === null) first = { err };
      else logger.error({ err, step: name }, 'webhooks: a stop step failed after another');
    }
  }
  if (first !== null) throw first.err;
}

function parts(
  config: Config,
  adapters: WebhookAdapters,
  logger: Logger,
  overrides?: Partial<WebhookSettings>,
  shared?: ProjectionRunner<WebhookState>,
  registry?: Registry,
) {
  const settings = { ...webhookSettings(config), ...overrides };
  const secrets = secretBoxFromConfig(config);
  const runner =
    shared ??
    new ProjectionRunner<WebhookState>(
      adapters.eventStore,
      adapters.projectionStore,
      webhookProjectionWith(settings.deliveryLogRetention),
      {
        snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY,
        logger,
      },
    );
  const agent: Agent = guardedAgent({
    addresses: settings.urlPolicy.addresses,
    connectTimeoutMs: settings.connectTimeoutMs,
    // Connections to a host are bounded by the worker's slots, in either role (deliveries; the api
    // role's resends and test sends): WEBHOOK_ENDPOINT_CONCURRENCY per API key there
    // (EndpointQueues.keyOf), and WEBHOOK_ORIGIN_CONCURRENCY over every key there, shared out per
    // key so one key's hung requests never hold another's. The pool's own bound is that cap, a
    // backstop the slots never reach: a pool of WEBHOOK_ENDPOINT_CONCURRENCY per origin would be
    // shared by every key on the host, one key's hung requests holding the others'.
    connectionsPerOrigin: settings.originConcurrency,
    ...(settings.urlPolicy.resolve ? { resolve: settings.urlPolicy.resolve } : {}),
    ...(settings.tls ? { tls: settings.tls } : {}),
  });
  let worker: DeliveryWorker | null = null;
  const observer = registry
    ? webhookMetrics(registry, () =>
        worker
          ? {
              queueDepth: () => worker!.queueDepth(),
              keptBytes: () => worker!.keptBytes,
              endpoints: () => worker!.breakers.counts(),
              state: () => runner.state,
            }
          : null,
      )
    : undefined;
  worker = new DeliveryWorker({
    store: adapters.eventStore,
    runner,
    secrets,
    agent,
    settings,
    logger,
    ...(observer ? { observer } : {}),
  });
  return { settings, secrets, runner, agent, worker };
}

/**
 * The dispatcher role: the webhook projection, the bus consumers, retries and digests. Digests
 * read the projected latest verdicts; the venue ranking behind top:N and digests comes from the
 * process's market feed, or (a dispatcher-only process) one it opens itself.
 */
export function dispatcherComponent(deps: {
  config: Config;
  adapters: WebhookAdapters;
  logger: Logger;
  /** The process's market feed, for venue rankings and the digest clock. */
  feed?: MarketFeed | null;
  /** Overrides for tests (e.g. a compressed retry schedule or a custom resolver). */
  settings?: Partial<WebhookSettings>;
  durablePrefix?: string;
  /** Stands in for the feed's clock for digests and venue rankings (tests). */
  digestNow?: () => number;
  /**
   * The webhook projection of the api role in the same process (`webhookApi(…).runner`), so the
   * process folds it once. Its owner stops it, after this component.
   */
  runner?: ProjectionRunner<WebhookState>;
  /** The process's Prometheus registry: delivery metrics are registered on it. */
  registry?: Registry;
  /** The track-record line a trade_call carries (from the history slice). */
  trackRecord?: DispatcherOptions['trackRecord'];
  /**
   * The latest-verdicts runner of the projections slice when it runs in this process: a second
   * runner would fold the same log again into the same snapshot key.
   */
  verdicts?: ProjectionRunner<LatestVerdicts>;
  /**
   * The engine's scheduler when the engine role runs in this process: a digest waits for it to have
   * evaluated its period's close (rankedDigestScan).
   */
  engine?: EngineProgress;
  /**
   * How long a digest scan waits for the verdict projection (rankedDigestScan's `catchUpMs`;
   * default DIGEST_CATCH_UP_MS): a test that holds the engine past twice this wait need not hold
   * it past twice the product's.
   */
  digestCatchUpMs?: number;
}): Component & {
  runner: ProjectionRunner<WebhookState>;
  /** The running dispatcher's digest bookkeeping (see WebhookDispatcher.digestsTracked). */
  digestsTracked(): { seen: number; fired: number };
  /** Digest passes the running dispatcher has run to their end (see WebhookDispatcher.digestPasses). */
  digestPasses(): number;
  /** Digest periods the running dispatcher found passed unsent (see WebhookDispatcher.digestPeriodsSkipped). */
  digestPeriodsSkipped(): number;
} {
  const { config, adapters, logger } = deps;
  const { settings, runner, agent, worker } = parts(
    config,
    adapters,
    logger,
    deps.settings,
    deps.runner,
    deps.registry,
  );
  const ownVerdicts = deps.verdicts
    ? null
    : new ProjectionRunner<LatestVerdicts>(
        adapters.eventStore,
        adapters.projectionStore,
        latestVerdictsProjection,
        { snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY, logger },
      );
  const verdicts = deps.verdicts ?? ownVerdicts!;
  let feed = deps.feed ?? null;
  let ownFeed: MarketFeed | null = null;
  let dispatcher: WebhookDispatcher | null = null;
  return {
    name: 'dispatcher',
    runner,
    digestsTracked: () => dispatcher?.digestsTracked ?? { seen: 0, fired: 0 },
    digestPasses: () => dispatcher?.digestPasses ?? 0,
    digestPeriodsSkipped: () => dispatcher?.digestPeriodsSkipped ?? 0,
    async start() {
      if (settings.urlPolicy.addresses.allow.length > 0) {
        logger.warn(
          { allow: config.WEBHOOK_TEST_ALLOW_CIDRS },
          'WEBHOOK_TEST_ALLOW_CIDRS is set: the SSRF guard has exemptions (tests only)',
        );
      }
      if (!feed) {
        ({ feed } = await selectFeed({
          ...feedOptionsFromConfig(config),
          logger,
          anchorStore: (proposal) => anchorInLog(adapters.eventStore, proposal),
        }));
        ownFeed = feed;
      }
      const markets = feed;
      // Digests and venue rankings follow the feed's clock (replay time on the replay feed).
      const now = deps.digestNow ?? (() => markets.now());
      const ranking = new MarketRanking(
        async (exchange) =>
          rankMarkets(await markets.markets(exchange as never)).map((m) => ({
            coin: m.coin,
            quoteVolume24h: m.quoteVolume24h,
          })),
        logger,
        now,
      );
      await runner.start();
      await ownVerdicts?.start();
      // Said at start, not only at the first delivery: a key other than the api role's.
      const secrets = worker.secretsCheck();
      if (!secrets.ok) logger.error({ check: 'webhookSecrets' }, secrets.detail);
      dispatcher = new WebhookDispatcher({
        store: adapters.eventStore,
        bus: adapters.bus,
        runner,
        worker,
        ranking,
        logger,
        verifyBaseUrl: settings.verifyBaseUrl,
        stuckAfterMs: settings.stuckAfterMs,
        tickMs: settings.tickMs,
        subjectPrefix: config.NATS_SUBJECT_PREFIX,
        ...(deps.durablePrefix ? { durablePrefix: deps.durablePrefix } : {}),
        scan: rankedDigestScan({
          ranking,
          verdicts,
          headPosition: () => adapters.eventStore.headPosition(),
          feed: markets,
          scheduledTopN: config.SCHEDULE_TOP_N,
          ...(deps.engine ? { engine: deps.engine } : {}),
          ...(deps.digestCatchUpMs === undefined ? {} : { catchUpMs: deps.digestCatchUpMs }),
        }),
        recoverPerSecond: settings.recoverPerSecond,
        now,
        feedClock: !deps.digestNow && markets.kind === 'replay',
        ...(deps.trackRecord ? { trackRecord: deps.trackRecord } : {}),
      });
      await dispatcher.start();
    },
    async stop() {
      await stopSteps(logger, [
        ['dispatcher', async () => dispatcher?.stop(settings.timeoutMs + 1_000)],
        ['projection:webhooks', async () => (deps.runner ? undefined : runner.stop({ drainMs: 2_000 }))],
        ['projection:latest-verdicts', async () => ownVerdicts?.stop({ drainMs: 2_000 })],
        ['agent', () => agent.close()],
        ['feed', async () => ownFeed?.close()],
      ]);
    },
    checks() {
      // Not `projection:latest-verdicts`: a shared runner is the projections slice's to report.
      return {
        'projection:webhooks': projectionCheck(runner),
        // A WEBHOOK_MASTER_KEY other than the api role's: deliveries are held until it is fixed.
        webhookSecrets: async () => worker.secretsCheck(),
        ...(ownVerdicts ? { 'projection:dispatcher-latest-verdicts': projectionCheck(ownVerdicts) } : {}),
      };
    },
  };
}

/**
 * The management routes for the api role, with their own view of the webhook projection (and a
 * worker for resends). Start the component before the app listens.
 */
export function webhookApi(deps: {
  config: Config;
  adapters: WebhookAdapters;
  logger: Logger;
  settings?: Partial<WebhookSettings>;
  /** The feed this deployment's market content comes from (test deliveries are labelled with it). */
  feed: FeedKind;
  /** Checks a subscription's coins against the feed (KnownCoins); none: not checked. */
  coins?: Pick<KnownCoins, 'check'>;
  /** Checks a digest's venue and timeframe (digestCoverage, digestCoverageOf); none: not checked. */
  digests?: Pick<DigestCoverage, 'check'>;
}): Component & { plugin: FastifyPluginAsync; runner: ProjectionRunner<WebhookState> } {
  const { config, adapters, logger } = deps;
  const { settings, secrets, runner, agent, worker } = parts(config, adapters, logger, deps.settings);
  return {
    name: 'webhook-api',
    runner,
    plugin: webhookRoutes({
      store: adapters.eventStore,
      runner,
      worker,
      agent,
      secrets,
      settings,
      feed: deps.feed,
      ...(deps.coins ? { coins: deps.coins } : {}),
      ...(deps.digests ? { digests: deps.digests } : {}),
    }),
    async start() {
      await runner.start();
    },
    async stop() {
      await stopSteps(logger, [
        ['deliveries', () => worker.drained()],
        ['projection:webhooks', () => runner.stop({ drainMs: 2_000 })],
        ['agent', () => agent.close()],
      ]);
    },
    checks() {
      return { 'projection:webhooks-api': projectionCheck(runner) };
    },
  };
}

/**
 * A digest's venue and timeframe checked as scan_trade_calls checks them (the engine's
 * unservedVenue) and against what the engine records: the venues and timeframes of its schedule,
 * as the engine role reads them from the same configuration.
 */
export function digestCoverageOf(config: Config, feed: MarketFeed): DigestCoverage {
  return digestCoverage({
    unserved: (input) => unservedVenue(feed, input),
    recorded: () => scheduledMarkets(config, feed),
  });
}

/**
 * The webhooks slice in the module shape: the management routes on the api role, the signed
 * delivery on the dispatcher role; in one process both fold one webhook projection.
 */
export function webhooksSlice(deps: {
  config: Config;
  adapters: WebhookAdapters;
  logger: Logger;
  roles: readonly Role[];
  feed: MarketFeed | null;
  registry?: Registry;
  trackRecord?: DispatcherOptions['trackRecord'];
  /** The engine's scheduler when the engine role runs in this process (dispatcherComponent). */
  engine?: EngineProgress;
}): Slice {
  const { config, adapters, logger, roles } = deps;
  const api = roles.includes('api')
    ? webhookApi({
        config,
        adapters,
        logger,
        // The api role always runs the engine's feed; its kind is known once it is open.
        feed: deps.feed?.kind ?? (config.FEED === 'live' ? 'live' : 'replay'),
        ...(deps.feed
          ? { coins: new KnownCoins(() => deps.feed, null), digests: digestCoverageOf(config, deps.feed) }
          : {}),
      })
    : null;
  const dispatcher = roles.includes('dispatcher')
    ? dispatcherComponent({
        config,
        adapters,
        logger,
        feed: deps.feed,
        ...(api ? { runner: api.runner } : {}),
        ...(deps.registry ? { registry: deps.registry } : {}),
        ...(deps.trackRecord ? { trackRecord: deps.trackRecord } : {}),
        ...(deps.engine ? { engine: deps.engine } : {}),
      })
    : null;
  // The api part owns the shared projection, so it starts first and stops last.
  const parts: Component[] = [...(api ? [api] : []), ...(dispatcher ? [dispatcher] : [])];
  return {
    name: 'webhooks',
    roles: ['api', 'dispatcher'],
    ...(api ? { plugin: api.plugin } : {}),
    projections: [],
    processors: dispatcher ? [{ name: 'webhook-dispatcher' }] : [],
    async start() {
      const started: Component[] = [];
      try {
        for (const part of parts) {
          await part.start();
          started.push(part);
        }
      } catch (err) {
        // Unwind the parts that did start, newest first.
        for (const part of started.reverse()) {
          await part
            .stop()
            .catch((stopErr: unknown) =>
              logger.error(
                { err: stopErr, part: part.name },
                'webhooks: stopping after a failed start failed',
              ),
            );
        }
        throw err;
      }
    },
    async stop() {
      let first: unknown = null;
      for (const part of [...parts].reverse()) {
        try {
          await part.stop();
        } catch (err) {
          logger.error({ err, part: part.name }, 'webhooks: stopping a part failed');
          first ??= err;
        }
      }
      if (first !== null) throw first;
    },
    checks() {
      return Object.assign({}, ...parts.map((part) => part.checks?.() ?? {}));
    },
  };
}
