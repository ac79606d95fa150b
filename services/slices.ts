import type { Logger } from 'pino';
import type { Config } from '../contracts/config.ts';
import { type LatestVerdicts, latestVerdictsProjection } from '../projections/latest-verdicts.ts';
import type { ProjectionRunner } from '../projections/runner.ts';
import type { Adapters } from './adapters.ts';
import { type ChannelsSlice, channelsSlice } from './api/slice.ts';
import type { Role, Slice } from './component.ts';
import { engineComponent } from './engine/component.ts';
import type { SignalEngine } from './engine/engine.ts';
import type { SignalOperations } from './engine/operations.ts';
import { HISTORY_ROLES, historySlice } from './history/slice.ts';
import { knowledgeModule } from './knowledge/module.ts';
import { setupX402, type X402Setup } from './payments/setup.ts';
import { paymentsSlice } from './payments/slice.ts';
import { projectionsComponent } from './projections/component.ts';
import { type Metrics, serveMcpSessions } from './shared/metrics.ts';
import { webhooksSlice } from './webhooks/component.ts';

export interface SliceContext {
  config: Config;
  adapters: Adapters;
  logger: Logger;
  metrics: Metrics | null;
  roles: readonly Role[];
  /** The signal engine, in processes that serve (api) or schedule (engine) verdicts. */
  engine: SignalEngine | null;
  /** A stop asked for while the process starts: a wait on a remote service while building ends at once. */
  signal?: AbortSignal;
}

export interface ComposedSlices {
  /** In start order (stopped in reverse); on the api role their plugins register in this order too. */
  slices: Slice[];
  /** Pay-per-call, when the api role sells it (for the start-up log and tests). */
  payments: X402Setup | null;
  /** The sold operations, where the api role sells them. */
  ops: SignalOperations | null;
}

const wants = (ctx: SliceContext, roles: readonly Role[]) => roles.some((role) => ctx.roles.includes(role));

/**
 * Builds the slices the process's roles ask for. Built in the order their dependencies need
 * (history decorates the operations the channels sell; the channels need the knowledge tools
 * and the payment hooks), listed in the order they start and register: the channels' rate limit
 * before every product route.
 */
export async function composeSlices(ctx: SliceContext): Promise<ComposedSlices> {
  const { config, adapters, logger, metrics, engine } = ctx;
  const api = ctx.roles.includes('api') && engine !== null;

  const projections = wants(ctx, ['projections'])
    ? projectionsComponent({ config, adapters, logger, metrics })
    : null;
  const scheduler = wants(ctx, ['engine']) && engine ? engineComponent({ config, engine, logger }) : null;
  // The channel's keys and quota exist once it is built below; slices registered before it
  // reach them through this.
  let channels: ChannelsSlice | null = null;
  const channel = () => {
    if (channels === null) throw new Error('the channels slice is not built');
    return channels;
  };
  const history = wants(ctx, HISTORY_ROLES)
    ? historySlice({ config, adapters, logger, roles: ctx.roles, feed: engine?.feed ?? null, channel })
    : null;

  let knowledge: ReturnType<typeof knowledgeModule> | null = null;
  let payments: X402Setup | null = null;
  let ops: SignalOperations | null = null;
  // The api role is a history role: the history slice is built there, and sells the track record.
  if (api && engine && history) {
    ops = history.withTrackRecord(engine);
    payments = await setupX402(config, {
      ops,
      store: adapters.eventStore,
      logger,
      cache: adapters.cache,
      projections: adapters.projectionStore,
      signal: ctx.signal,
    });
    knowledge = knowledgeModule({ config, adapters, logger, channel });
    channels = channelsSlice({
      config,
      adapters,
      logger,
      ops,
      ...(payments ? payments.mcp : {}),
      extraTools: knowledge.tools,
      ...(metrics
        ? {
            onRateLimited: (tier: string, via: 'http' | 'mcp') =>
              metrics.rateLimitRefusals.inc({ tier, channel: via }),
            onMcpSessionCount: serveMcpSessions(metrics),
          }
        : {}),
      feed: engine.feed,
      discovery: {
        paid: payments?.tools ?? [],
        rails: payments?.rails ?? [],
        paidResponseTtlMs: config.X402_PAID_RESPONSE_TTL_MS,
        publicBaseUrl: config.PUBLIC_BASE_URL,
      },
    });
    const heads = payments?.chainHeads;
    if (metrics && heads) {
      // x402_chain_head_age_seconds: what an alert on a stopped settlement chain reads.
      metrics.x402ChainHeadAge.from((set) => {
        for (const head of heads.report()) set({ network: head.network }, head.ageS);
      });
    }
    if (metrics) {
      channels.quota.observer = {
        debited: (plan) => metrics.quotaDebits.inc({ plan }),
        refused: (plan, reason) => metrics.quotaRefusals.inc({ plan, reason }),
      };
    }
  }
  // The dispatcher reads the latest verdicts from the projections slice's runner when both run here.
  const sharedVerdicts = projections?.runners.get(latestVerdictsProjection.name) as
    | ProjectionRunner<LatestVerdicts>
    | undefined;
  const webhooks =
    wants(ctx, ['dispatcher']) || api
      ? webhooksSlice({
          config,
          adapters,
          logger,
          roles: ctx.roles,
          feed: engine?.feed ?? null,
          ...(metrics ? { registry: metrics.registry } : {}),
          ...(history ? { trackRecord: history.brief } : {}),
          ...(sharedVerdicts ? { verdicts: sharedVerdicts } : {}),
          // A digest waits for the engine in this process to evaluate its close (a restart's catch-up).
          ...(scheduler ? { engine: scheduler.scheduler } : {}),
        })
      : null;

  // Stopped in reverse: the scheduler, the log's writer, last here so that it stops first. Stopped
  // after the readers, its start-up backfill would go on appending while history drains to the
  // head (a SIGTERM took 14.6 s that way, 0.4 s short of SHUTDOWN_TIMEOUT_MS's SIGKILL).
  const built: (Slice | null)[] = [
    projections,
    channels,
    knowledge,
    history,
    webhooks,
    payments ? paymentsSlice({ setup: payments, channel }) : null,
    scheduler,
  ];
  const slices = built.filter((slice): slice is Slice => slice !== null);
  return { slices, payments, ops };
}
