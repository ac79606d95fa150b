import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import { parseEventTypes } from '../../contracts/setting-lists.ts';
import { eventStatsProjection } from '../../projections/event-stats.ts';
import { behindHead } from '../../projections/lag.ts';
import { latestVerdictsProjection } from '../../projections/latest-verdicts.ts';
import {
  type PaymentStates,
  paymentCounts,
  paymentStatesProjection,
} from '../../projections/payment-states.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { Adapters } from '../adapters.ts';
import type { Slice } from '../component.ts';
import { Relay } from '../relay/relay.ts';
import type { Metrics } from '../shared/metrics.ts';
import { projectionCheck } from '../shared/projection-check.ts';
import type { Check } from '../shared/readiness.ts';

/** Every projection the service keeps. Later features register theirs here. */
export const PROJECTIONS: Projection<unknown>[] = [
  eventStatsProjection as Projection<unknown>,
  latestVerdictsProjection as Projection<unknown>,
  paymentStatesProjection as Projection<unknown>,
];

/**
 * The followers of the log: the projection runners and the relay that feeds the bus. They run
 * in the `projections` role; each keeps its own checkpoint, so they restart independently.
 */
export function projectionsComponent(deps: {
  config: Config;
  adapters: Adapters;
  logger: Logger;
  metrics: Metrics | null;
}): Slice & { runners: Map<string, ProjectionRunner<unknown>>; relay: Relay } {
  const { adapters, logger, config, metrics } = deps;
  const runners = new Map(
    PROJECTIONS.map((p) => [
      p.name,
      new ProjectionRunner(adapters.eventStore, adapters.projectionStore, p, {
        snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY,
        logger,
      }),
    ]),
  );
  const relay = new Relay({
    store: adapters.eventStore,
    bus: adapters.bus,
    checkpoints: adapters.projectionStore,
    subjectPrefix: config.NATS_SUBJECT_PREFIX,
    logger,
    // The parser the configuration's check calls: a value loadConfig passed parses here.
    types: parseEventTypes(config.RELAY_EVENT_TYPES),
  });
  let lagTimer: NodeJS.Timeout | null = null;
  let stopPaymentGauge: (() => void) | null = null;

  async function updateLag(): Promise<void> {
    if (!metrics) return;
    const head = await adapters.eventStore.headPosition();
    // Counted up to the readiness bound where positions are byte offsets (see eventsBehind).
    const behind = behindHead(adapters.eventStore, head, config.PROJECTION_READY_MAX_LAG);
    for (const [name, runner] of runners)
      metrics.followerLag.set({ follower: name }, await behind(runner.checkpoint));
    metrics.followerLag.set({ follower: 'relay' }, await behind(relay.checkpoint));
  }

  return {
    name: 'projections',
    roles: ['projections'],
    projections: PROJECTIONS,
    processors: [{ name: 'relay' }],
    runners,
    relay,
    async start() {
      for (const runner of runners.values()) await runner.start();
      await relay.start();
      const payments = runners.get(paymentStatesProjection.name) as ProjectionRunner<PaymentStates>;
      stopPaymentGauge =
        metrics?.payments.from((set) => {
          for (const [state, count] of Object.entries(paymentCounts(payments.state))) set({ state }, count);
        }) ?? null;
      lagTimer = setInterval(() => {
        updateLag().catch((err) => logger.warn({ err }, 'lag metric update failed'));
      }, 5_000);
      lagTimer.unref();
    },
    async stop() {
      if (lagTimer) clearInterval(lagTimer);
      stopPaymentGauge?.();
      await relay.stop();
      for (const runner of runners.values()) await runner.stop({ drainMs: 2_000 });
    },
    checks() {
      const checks: Record<string, Check> = {};
      for (const [name, runner] of runners) {
        checks[`projection:${name}`] = projectionCheck(runner, {
          head: () => adapters.eventStore.headPosition(),
          // Where positions are byte offsets the projectionLag check counts the events; a second
          // count per runner here would only repeat its reads.
          lag: adapters.eventStore.densePositions,
        });
      }
      checks.relay = async () => ({
        ok: true,
        ...relay.stats,
        lag: await relay.lag(config.PROJECTION_READY_MAX_LAG),
      });
      return checks;
    },
  };
}
