import { collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';

/** One registry per process, so tests can build several apps side by side. */
export function createMetrics() {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  return {
    registry,
    httpDuration: new Histogram({
      name: 'http_request_duration_seconds',
      help: 'HTTP request duration by route and status',
      labelNames: ['method', 'route', 'status'] as const,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    followerLag: new Gauge({
      name: 'follower_lag_events',
      help: 'Events between the store head and a follower (projection or relay) checkpoint',
      labelNames: ['follower'] as const,
      registers: [registry],
    }),
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
