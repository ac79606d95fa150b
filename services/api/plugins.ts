import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { logIdentity } from '../../adapters/event-store/log-identity.ts';
import type { Config } from '../../contracts/config.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { Adapters } from '../adapters.ts';
import type { Component } from '../component.ts';
import type { SignalOperations } from '../engine/operations.ts';
import type { KeyRegistry } from '../keys/key-registry.ts';
import { KeyResolver } from '../keys/key-resolver.ts';
import { KeyRevocations } from '../keys/revocations.ts';
import { callerPlugin } from '../metering/caller.ts';
import { planTable } from '../metering/plans.ts';
import { QuotaMeter } from '../metering/quota-meter.ts';
import { QuotaCounters } from '../metering/quota-rebuild.ts';
import { RateLimiter, rateLimitPlugin } from '../metering/rate-limit.ts';
import { projectionCheck } from '../shared/projection-check.ts';
import { keyRoutes } from './keys/routes.ts';
import { mcpPlugin, refusesBatch } from './mcp/plugin.ts';
import { guardConfig, hostAllowed } from './mcp/request-guard.ts';
import type { PaymentRequirementsFor, PayPerCall } from './mcp/tool-call.ts';
import { signalTools, type ToolDefinition, type ToolRegistry, toolRegistry } from './mcp/tool-registry.ts';
import { oauthSignIn } from './oauth/signin.ts';

export interface KeyedChannelDeps {
  config: Config;
  adapters: Pick<Adapters, 'eventStore' | 'projectionStore' | 'cache'>;
  logger: Logger;
  ops: SignalOperations;
  /** x402 requirements offered when a caller's quota is exhausted (from the x402 feature). */
  paymentRequirements?: PaymentRequirementsFor;
  /** Pay-per-call over MCP (`_meta["x402/payment"]`), from the x402 feature. */
  payPerCall?: PayPerCall;
  /** Extra MCP tools (the knowledge tools) beside the four signal tools. */
  extraTools?: ToolDefinition[];
  /** Told of every request refused by the rate limiter (a metric). */
  onRateLimited?: (tier: string, channel: 'http' | 'mcp') => void;
  /** Told the number of open MCP sessions whenever it changes (a metric). */
  onMcpSessionCount?: (open: number) => void;
  /** How often idle MCP sessions are looked for (default derived from MCP_SESSION_IDLE_MS). */
  mcpSweepIntervalMs?: number;
}

/**
 * The keyed channel of the api role: the key registry it resolves keys from, the quota meter,
 * and the HTTP plugins (free sign-in under /api/keys, MCP on /mcp). Start it before the app
 * listens: the registry must have caught up before a key can be resolved.
 */
export function keyedChannel(deps: KeyedChannelDeps): Component & {
  plugins: FastifyPluginAsync[];
  /** The caller hook (callerPlugin) for every route: register before any of them, and before the rate limit. */
  callers: FastifyPluginAsync;
  /** Request-rate limits for every product route: register before any of them. */
  rateLimit: FastifyPluginAsync | null;
  keys: KeyResolver;
  quota: QuotaMeter;
  registry: ProjectionRunner<KeyRegistry>;
  /** The tools /mcp serves, for discovery documents. */
  tools: ToolRegistry;
  /** OAuth sign-in for MCP hosts (/mcp/signin and the authorization server); null when OAUTH_ENABLED=false. */
  oauth: ReturnType<typeof oauthSignIn> | null;
} {
  const { config, adapters, logger } = deps;
  const plans = planTable(config);
  // The key registry's fold, telling /mcp of each key it revokes (what the key holds there ends).
  const revocations = new KeyRevocations(logger);
  const registry = new ProjectionRunner(
    adapters.eventStore,
    adapters.projectionStore,
    revocations.projection,
    {
      snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY,
      logger,
    },
  );
  const keys = new KeyResolver({ runner: registry, store: adapters.eventStore });
  const quota = new QuotaMeter({
    cache: adapters.cache,
    store: adapters.eventStore,
    plans,
    lease: { ms: config.QUOTA_LEASE_MS, maxUnits: config.QUOTA_LEASE_MAX_UNITS },
    logger,
    counters: new QuotaCounters({
      store: adapters.eventStore,
      cache: adapters.cache,
      logger,
      checkpoints: adapters.projectionStore,
    }),
  });
  const guard = guardConfig(config);
  const limiter = config.RATE_LIMIT_ENABLED
    ? new RateLimiter(config, adapters.cache, quota, logger.child({ component: 'rate-limit' }))
    : null;
  const rateLimit = limiter
    ? rateLimitPlugin({
        limiter,
        quota,
        refusesBatch,
        ...(deps.onRateLimited ? { onRefused: deps.onRateLimited } : {}),
      })
    : null;
  const tools = toolRegistry([...signalTools(deps.ops), ...(deps.extraTools ?? [])]);
  const oauth = config.OAUTH_ENABLED
    ? oauthSignIn({
        config,
        store: adapters.eventStore,
        cache: adapters.cache,
        keys,
        registry,
        registryCaughtUp: (position) => registry.waitFor(position),
        hostAllowed: (host) => hostAllowed(guard, host),
        logger,
      })
    : null;
  const plugins: FastifyPluginAsync[] = [
    keyRoutes({
      store: adapters.eventStore,
      cache: adapters.cache,
      plans,
      guard,
      siweDomain: config.SIWE_DOMAIN,
      publicBaseUrl: config.PUBLIC_BASE_URL,
      nonceTtlMs: config.SIWE_NONCE_TTL_MS,
      freeKeysPerDay: config.FREE_KEYS_PER_ADDRESS_PER_DAY,
      registryCaughtUp: (position) => registry.waitFor(position),
      logger,
    }),
    mcpPlugin({
      registry: tools,
      quota,
      logger,
      guard,
      idleMs: config.MCP_SESSION_IDLE_MS,
      maxSessions: config.MCP_MAX_SESSIONS,
      maxSessionsPerCaller: config.MCP_MAX_SESSIONS_PER_CALLER,
      ...(config.MCP_MAX_SESSIONS_ANONYMOUS === undefined
        ? {}
        : { maxAnonymousSessions: config.MCP_MAX_SESSIONS_ANONYMOUS }),
      ...(config.MCP_MAX_SESSIONS_FREE === undefined
        ? {}
        : { maxFreeSessions: config.MCP_MAX_SESSIONS_FREE }),
      ...(deps.mcpSweepIntervalMs === undefined ? {} : { sweepIntervalMs: deps.mcpSweepIntervalMs }),
      ...(deps.onMcpSessionCount ? { onSessionCount: deps.onMcpSessionCount } : {}),
      ...(deps.paymentRequirements ? { paymentRequirements: deps.paymentRequirements } : {}),
      ...(deps.payPerCall ? { payPerCall: deps.payPerCall } : {}),
      ...(oauth ? { signin: oauth.gate } : {}),
      keyRevocations: revocations,
    }),
    ...(oauth ? [oauth.plugin] : []),
  ];
  return {
    name: 'keyed-channel',
    plugins,
    callers: callerPlugin(keys, quota),
    rateLimit,
    keys,
    quota,
    registry,
    tools,
    oauth,
    async start() {
      await registry.start();
      // The quota counters are a projection of the log: the in-process cache starts without them,
      // and Redis may have lost them (restart without persistence, flush). Keyed calls wait for
      // them, then answer 503 until they are back.
      await quota.counters.ensure().catch((err: unknown) => {
        // Redis down at start: the api still starts; the counters are checked on reconnection.
        if (!(err instanceof CacheUnavailableError)) throw err;
        logger.warn({ err }, 'quota counters not checked at start: the cache is unreachable');
      });
      adapters.cache.onReconnect(() => {
        quota.counters
          .ensure()
          .catch((err: unknown) => logger.error({ err }, 'quota counters not rebuilt after a reconnection'));
      });
    },
    async stop() {
      // Before the store closes: the leases' unused units are given back on the log.
      await quota.stop();
      await quota.counters.stop();
      await registry.stop();
    },
    checks() {
      // `log` names the log the checkpoint counts in (its first event's id): a key CLI on another
      // DATA_DIR or store compares it, not positions of different logs (operator-commands.ts).
      const log = logIdentity(adapters.eventStore);
      return {
        'projection:key-registry': projectionCheck(registry, {
          // A log that cannot be read now is left unnamed (the CLI then compares positions).
          fields: async () => {
            const of = await log().catch(() => undefined);
            return of === undefined ? {} : { log: of };
          },
        }),
      };
    },
  };
}
