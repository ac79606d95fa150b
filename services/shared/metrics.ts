import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import { SeriesHistogram } from './series-histogram.ts';

/** Sets one sample of a gauge read at scrape time. */
export type SampleSetter<L extends string> = (labels: Partial<Record<L, string>>, value: number) => void;
/** Reads current values into a gauge when /metrics is scraped. */
export type SampleSource<L extends string> = (set: SampleSetter<L>) => Promise<void> | void;

/** How long a scrape waits for one gauge source. */
export const SOURCE_TIMEOUT_MS = 1_000;

/**
 * A gauge whose value lives elsewhere (a runner's checkpoint, a projection's state) and is read
 * when scraped rather than pushed on every change: nothing has to remember to update it, and a
 * source that is gone (a stopped component) leaves no stale series behind.
 */
function scrapedGauge<L extends string>(registry: Registry, name: string, help: string, labelNames: L[]) {
  const sources = new Set<SampleSource<L>>();
  const gauge = new Gauge<L>({
    name,
    help,
    labelNames,
    registers: [registry],
    async collect() {
      this.reset();
      await Promise.all(
        [...sources].map(async (source) => {
          // A source that does not answer in time (a store query on a host cut off from its
          // server) is left out of this scrape, as one that fails is: waiting for it hung the
          // whole of /metrics, every series with it, for as long as the cut lasted.
          let open = true;
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([
            Promise.resolve(
              source((labels, value) => {
                if (open) this.set(labels as Partial<Record<L, string | number>>, value);
              }),
            ).catch(() => undefined),
            new Promise<void>((resolve) => {
              timer = setTimeout(resolve, SOURCE_TIMEOUT_MS);
            }),
          ]);
          open = false;
          clearTimeout(timer);
        }),
      );
    },
  });
  return {
    gauge,
    /** Adds a source; the returned function removes it. */
    from(source: SampleSource<L>): () => void {
      sources.add(source);
      return () => sources.delete(source);
    },
  };
}

/** One registry per process, so tests can build several apps side by side. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    // Observed on every request: series handles instead of prom-client's per-call label lookup.
    httpDuration: new SeriesHistogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration by route and status',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    followerLag: new Gauge({
      name: 'follower_lag_events',
      help: 'Events between the store head and a follower (projection or relay) checkpoint; on KurrentDB counted up to PROJECTION_READY_MAX_LAG + 1',
      labelNames: ['follower'] as const,
      registers: [registry],
    }),
    /** Every projection runner of this process, whatever role started it. */
    projectionLag: scrapedGauge(
      registry,
      'projection_lag_events',
      'Events between the store head and each projection runner of this process; on KurrentDB counted up to PROJECTION_READY_MAX_LAG + 1',
      ['projection'],
    ),
    /** Where appends may be answered once committed (PostgreSQL): what is not yet flushed. */
    eventStoreFlush: scrapedGauge(
      registry,
      'event_store_unflushed',
      "PostgreSQL WAL written and not yet flushed to disk, the whole server's, committed or not (unit=bytes), and the server's bound on how long it may stay so, 3 × wal_writer_delay (unit=seconds)",
      ['unit'],
    ),
    quotaDebits: new Counter({
      name: 'quota_debits_total',
      help: 'Calls debited from a quota (served), by plan',
      labelNames: ['plan'] as const,
      registers: [registry],
    }),
    quotaRefusals: new Counter({
      name: 'quota_refusals_total',
      help: 'Calls refused by the quota, by plan and reason (daily, monthly, unavailable)',
      labelNames: ['plan', 'reason'] as const,
      registers: [registry],
    }),
    rateLimitRefusals: new Counter({
      name: 'rate_limit_refusals_total',
      help: 'Requests refused with 429 by the rate limiter, by tier and channel',
      labelNames: ['tier', 'channel'] as const,
      registers: [registry],
    }),
    /**
     * Registered by the process that serves MCP (the api role: serveMcpSessions), not here: a role
     * serving no MCP exports no series of it, rather than a 0 that reads as "no sessions open".
     */
    mcpSessionsOpen: new Gauge({
      name: 'mcp_sessions_open',
      help: 'MCP sessions open in this process',
      registers: [],
    }),
    appendsPending: scrapedGauge(
      registry,
      'event_store_appends_pending',
      'Appends of this process started and not yet finished by the event store',
      [],
    ),
    oldestPendingAppend: scrapedGauge(
      registry,
      'event_store_oldest_pending_append_seconds',
      'Age of the oldest write (append or snapshot save) of this process still waiting for the store (0 when none); /readyz fails past APPEND_STALL_MS',
      [],
    ),
    /** Read from the bus at scrape time: a stream running on fewer copies than asked for shows here. */
    busStreamReplicas: scrapedGauge(
      registry,
      'bus_stream_replicas',
      'Copies of the bus stream: wanted (its configuration) and current (up to date, leader included); absent while the stream has no leader',
      ['state'],
    ),
    busStreamDrift: scrapedGauge(
      registry,
      'bus_stream_config_drift',
      'Settings of the bus stream found at start that differ from this process configuration (1 each; updated=true when start brought it in line)',
      ['setting', 'updated'],
    ),
    /** From the log, so every process that folds it reports the whole deployment's payments. */
    payments: scrapedGauge(
      registry,
      'payments',
      'Payment authorisations by state, folded from the log (the same on every process that folds it)',
      ['state'],
    ),
    /** services/payments/chain-readiness.ts: what an alert on a stopped settlement chain reads. */
    x402ChainHeadAge: scrapedGauge(
      registry,
      'x402_chain_head_age_seconds',
      "Seconds since this api last saw the head block number of a settling rail's chain go up (read every 2 s)",
      ['network'],
    ),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/** Exports `mcp_sessions_open` on this process's /metrics (once it serves MCP); the setter of its count. */
export function serveMcpSessions(metrics: Metrics): (open: number) => void {
  const gauge = metrics.mcpSessionsOpen;
  if (metrics.registry.getSingleMetric('mcp_sessions_open') === undefined)
    metrics.registry.registerMetric(gauge);
  return (open) => gauge.set(open);
}
