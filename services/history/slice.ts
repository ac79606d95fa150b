import type { FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { LmdbEventStore } from '../../adapters/event-store/lmdb.ts';
import { KnownCoins } from '../../adapters/market/known-coins.ts';
import type { MarketFeed } from '../../adapters/market/port.ts';
import { feedOptionsFromConfig, selectFeed } from '../../adapters/market/select.ts';
import type { Config } from '../../contracts/config.ts';
import type { TrackRecordBrief } from '../../contracts/history.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';
import { GetTrackRecordInput, type TradeCall } from '../../contracts/tools.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { Adapters } from '../adapters.ts';
import type { Role } from '../component.ts';
import type { EngineOperations, SignalOperations } from '../engine/operations.ts';
import { parseVerdictStream } from '../engine/verdict-recorder.ts';
import type { QuotaMeter } from '../metering/quota-meter.ts';
import { projectionCheck } from '../shared/projection-check.ts';
import type { Check } from '../shared/readiness.ts';
import { revealClock } from '../shared/reveal-clock.ts';
import { failureFields } from '../shared/run-failure.ts';
import { type AnchorState, anchorHeadsProjection, HistoryAnchorer } from './anchor.ts';
import { ExportRowStore } from './export-row-store.ts';
import {
  hasRevision,
  type LabelledVerdicts,
  labelledVerdictsProjection,
  type PendingOutcomes,
  pendingOutcomesProjection,
  trackRecordProjection,
} from './projections.ts';
import { BriefCache, RecordCache } from './record-cache.ts';
import { OutcomeResolver, outcomesCheck } from './resolver.ts';
import { historyRoutes } from './routes.ts';
import type { OutcomeIndex, StoredRows } from './scan.ts';
import { holdsCoin, ServedVenues } from './served-venues.ts';
import type { TrackRecordState } from './track-record.ts';

/** Roles this slice does something in: routes (api), outcomes (projections), webhook lines (dispatcher). */
export const HISTORY_ROLES: readonly Role[] = ['api', 'projections', 'dispatcher'];

export interface HistorySliceDeps {
  config: Config;
  adapters: Pick<Adapters, 'eventStore' | 'projectionStore'>;
  logger: Logger;
  roles: readonly Role[];
  /** The process's market feed when it has one; the projections role opens its own otherwise. */
  feed: MarketFeed | null;
  resolverIntervalMs?: number;
  /** The api role's quota, once the channel that owns it is built (routes peek at it). */
  channel?: () => HistoryAccess;
}

interface HistoryAccess {
  quota?: Pick<QuotaMeter, 'peek'>;
}

/**
 * The history slice: outcome labels for revealed verdicts (a pending-outcomes projection and the
 * resolver processor, on the projections role), the track-record projection, and the analysts'
 * routes with the index of labelled verdicts their export reads (api role). Reaches the engine
 * only through the log and the SignalOperations it decorates.
 */
export function historySlice(deps: HistorySliceDeps) {
  const { config, adapters, logger, roles } = deps;
  const log = logger.child({ slice: 'history' });
  const runnerOptions = { snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY, logger: log };
  const trackRecord = new ProjectionRunner<TrackRecordState>(
    adapters.eventStore,
    adapters.projectionStore,
    trackRecordProjection,
    runnerOptions,
  );
  const pending = new ProjectionRunner<PendingOutcomes>(
    adapters.eventStore,
    adapters.projectionStore,
    pendingOutcomesProjection,
    runnerOptions,
  );
  const labelled = new ProjectionRunner<LabelledVerdicts>(
    adapters.eventStore,
    adapters.projectionStore,
    labelledVerdictsProjection,
    runnerOptions,
  );
  const exports = roles.includes('api');
  // Rows kept as bytes on disk beside the log: only where the log is an LMDB environment of this
  // host (the other stores export from the log alone).
  const exportRows =
    exports && adapters.eventStore.kind === 'lmdb'
      ? new ExportRowStore(adapters.eventStore, (adapters.eventStore as LmdbEventStore).root, { logger: log })
      : null;
  const serves = exports || roles.includes('dispatcher');
  const resolves = roles.includes('projections');
  let feed = deps.feed;
  let ownFeed: MarketFeed | null = null;
  let resolver: OutcomeResolver | null = null;
  // The anchor (projections role): off without its wallet key or with a zero interval. A wallet of
  // its own: the settlements' wallet sends from the api role's processes, and two processes
  // sending from one wallet race for its nonces.
  const anchorKey = config.HISTORY_ANCHOR_PRIVATE_KEY;
  const anchorOff =
    config.HISTORY_ANCHOR_INTERVAL_MS === 0
      ? 'off: HISTORY_ANCHOR_INTERVAL_MS=0'
      : anchorKey
        ? null
        : 'off: no HISTORY_ANCHOR_PRIVATE_KEY (the wallet that publishes the anchors)';
  const anchorHeads =
    resolves && !anchorOff
      ? new ProjectionRunner<AnchorState>(
          adapters.eventStore,
          adapters.projectionStore,
          anchorHeadsProjection,
          runnerOptions,
        )
      : null;
  const anchorer =
    anchorHeads && anchorKey
      ? new HistoryAnchorer({
          store: adapters.eventStore,
          heads: anchorHeads,
          chain: {
            privateKey: anchorKey as `0x${string}`,
            rpcUrl: config.HISTORY_ANCHOR_RPC_URL ?? config.X402_RPC_URL,
          },
          intervalMs: config.HISTORY_ANCHOR_INTERVAL_MS,
          logger: log,
        })
      : null;

  /** The reveal clock: wall time, and never ahead of the feed (a replay reveals in feed time). */
  const now = () => revealClock(feed)();

  const briefs = new BriefCache(trackRecord);
  /** GET /api/track-record's answers and get_track_record's, made once per record (record-cache.ts). */
  const records = new RecordCache(trackRecord);
  /**
   * The engine hands out one call object per verdict revision and the cache one line per
   * bucket: their join is made once per pair rather than a ~30-field copy on every call. Neither
   * is changed after it is made, nor is the join.
   */
  const joined = new WeakMap<TradeCall, { line: TrackRecordBrief; call: TradeCall }>();
  function withLine(call: TradeCall, line: TrackRecordBrief): TradeCall {
    const known = joined.get(call);
    if (known?.line === line) return known.call;
    const made = { ...call, trackRecord: line };
    joined.set(call, { line, call: made });
    return made;
  }
  function brief(call: {
    exchange: Exchange;
    timeframe: Timeframe;
    confidence: number;
  }): TrackRecordBrief | null {
    return trackRecord.running ? briefs.brief(call, now()) : null;
  }

  /** Not running or failed: checkpoint -1, so the export reads every candidate's outcome stream. */
  const outcomeIndex: OutcomeIndex = {
    get checkpoint() {
      return labelled.running && !labelled.error ? labelled.checkpoint : -1;
    },
    has: (stream, revision) => hasRevision(labelled.state.runs[stream], revision),
  };

  const stored: StoredRows | null = exportRows;

  /** A coin filter is checked against the feed, or the verdict streams (`verdicts-<exchange>-<coin>-<tf>`) the history holds. */
  const coins = new KnownCoins(() => feed, {
    has: (coin, exchange) => holdsCoin(Object.keys(labelled.state.runs), coin, exchange),
    missing: (coin, exchange) =>
      `the history holds no verdict of ${coin}${exchange ? ` on ${exchange}` : ''}`,
  });

  /**
   * A venue or timeframe filter is checked as the tools check it (unsupported_exchange /
   * unsupported_timeframe), but for what the history holds: the track record's cells
   * (`<exchange>|<timeframe>|<day>`) and the verdict streams (`verdicts-<exchange>-<coin>-<tf>`).
   */
  const venues = new ServedVenues(
    () => feed,
    {
      has: ({ exchange, timeframe }) => {
        const holds = (ex: string | undefined, tf: string | undefined) =>
          (exchange === undefined || ex === exchange) && (timeframe === undefined || tf === timeframe);
        return (
          Object.keys(trackRecord.state).some((key) => {
            const [ex, tf] = key.split('|');
            return holds(ex, tf);
          }) ||
          Object.keys(labelled.state.runs).some((stream) => {
            const market = parseVerdictStream(stream);
            return market !== undefined && holds(market.exchange, market.timeframe);
          })
        );
      },
    },
    Date.now,
    // The venues' answers are waited for as long as the feed's probe at selection.
    config.FEED_PROBE_TIMEOUT_MS,
  );

  // The channel is built after this slice (it sells the operations this slice decorates), so the
  // routes take its quota when they are registered.
  const lazyRoutes =
    (channel: () => HistoryAccess): FastifyPluginAsync =>
    (app, options) =>
      historyRoutes({
        store: adapters.eventStore,
        records,
        outcomes: outcomeIndex,
        ...(stored ? { stored } : {}),
        now,
        coins,
        venues,
        ...(channel().quota ? { quota: channel().quota } : {}),
        logger: log,
        maxLongPolls: config.HISTORY_MAX_LONG_POLLS_PER_KEY,
      })(app, options);

  return {
    name: 'history',
    roles: HISTORY_ROLES,
    projections: [
      trackRecordProjection,
      pendingOutcomesProjection,
      labelledVerdictsProjection,
      anchorHeadsProjection,
    ] as Projection<unknown>[],
    /** The outcome resolver first (tests drive it as `processors[0]`), then the anchor's publisher. */
    get processors(): [OutcomeResolver, ...HistoryAnchorer[]] | [] {
      return resolver ? [resolver, ...(anchorer ? [anchorer] : [])] : [];
    },
    /** The anchor's publisher (projections role, with a wallet key); null when off. */
    anchorer,
    trackRecord,
    pending,
    labelled,
    /** The export-rows projection (null where the log is not LMDB or the role exports nothing). */
    exportRows,
    now,
    brief,

    /** The api role's routes, as registered by the service (the quota from the channel). */
    ...(exports && deps.channel ? { plugin: lazyRoutes(deps.channel) } : {}),

    /** The analysts' routes over the given quota (the caller hook before them resolves the key). */
    routes(keyed: HistoryAccess): FastifyPluginAsync {
      return historyRoutes({
        store: adapters.eventStore,
        records,
        outcomes: outcomeIndex,
        ...(stored ? { stored } : {}),
        now,
        coins,
        venues,
        ...(keyed.quota ? { quota: keyed.quota } : {}),
        logger: log,
        maxLongPolls: config.HISTORY_MAX_LONG_POLLS_PER_KEY,
      });
    },

    /**
     * The sold operations: the engine's, trade calls carrying the track-record line of their own
     * exchange, timeframe and confidence bucket, and the track record itself (get_track_record),
     * what GET /api/track-record answers.
     */
    withTrackRecord(ops: EngineOperations): SignalOperations {
      return {
        getTradeCall: async (input, ctx) => {
          const call = await ops.getTradeCall(input, ctx);
          const line = brief(call);
          return line ? withLine(call, line) : call;
        },
        getMarketRegime: (input, ctx) => ops.getMarketRegime(input, ctx),
        getRiskForecast: (input, ctx) => ops.getRiskForecast(input, ctx),
        scanTradeCalls: (input, ctx) => ops.scanTradeCalls(input, ctx),
        scanFundingArb: (input, ctx) => ops.scanFundingArb(input, ctx),
        getTrackRecord: async (input, ctx) => {
          const ask = ctx?.parsed
            ? (input as z.output<typeof GetTrackRecordInput>)
            : GetTrackRecordInput.parse(input);
          await venues.check(ask);
          return records.forAgents(ask.window, now(), ask);
        },
      };
    },

    async start() {
      if (serves || resolves) await trackRecord.start();
      if (exports) await labelled.start();
      await exportRows?.start();
      if (!resolves) return;
      if (!feed) {
        ownFeed = (await selectFeed({ ...feedOptionsFromConfig(config), logger: log })).feed;
        feed = ownFeed;
      }
      await pending.start();
      resolver = new OutcomeResolver({
        store: adapters.eventStore,
        feed,
        pending,
        logger: log,
        maxLag: config.PROJECTION_READY_MAX_LAG,
        ...(adapters.eventStore.lease ? { lease: adapters.eventStore.lease('outcome-resolver') } : {}),
        ...(deps.resolverIntervalMs ? { intervalMs: deps.resolverIntervalMs } : {}),
      });
      resolver.start();
      if (anchorer) {
        await anchorHeads!.start();
        anchorer.start();
        log.info(
          { address: anchorer.address, intervalMs: config.HISTORY_ANCHOR_INTERVAL_MS },
          'history anchor on',
        );
      } else log.info(`history anchor ${anchorOff}`);
    },

    async stop() {
      await resolver?.stop();
      await anchorer?.stop();
      if (anchorHeads?.running) await anchorHeads.stop({ drainMs: 2_000 });
      if (pending.running) await pending.stop({ drainMs: 2_000 });
      if (trackRecord.running) await trackRecord.stop({ drainMs: 2_000 });
      if (labelled.running) await labelled.stop({ drainMs: 2_000 });
      await exportRows?.stop();
      await ownFeed?.close();
    },

    checks(): Record<string, Check> {
      const checks: Record<string, Check> = {
        'projection:history-track-record': projectionCheck(trackRecord),
      };
      if (exports) checks['projection:history-labelled-verdicts'] = projectionCheck(labelled);
      if (exportRows) checks['projection:history-export-rows'] = projectionCheck(exportRows);
      if (resolves) {
        checks['projection:history-pending-outcomes'] = projectionCheck(pending);
        checks['processor:history-outcomes'] = outcomesCheck(() => resolver, pending);
        // Informational: a failed anchor is retried at the next check and never makes the role unready.
        checks['processor:history-anchor'] = async () =>
          anchorer
            ? {
                ok: true,
                anchoring: 'on',
                address: anchorer.address,
                intervalMs: config.HISTORY_ANCHOR_INTERVAL_MS,
                lastAnchor: anchorHeads!.state.last,
                ...failureFields(anchorer.lastFailure),
              }
            : { ok: true, anchoring: anchorOff };
      }
      return checks;
    },
  };
}
