import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../shared/metrics.ts';
import type { Readiness } from '../shared/readiness.ts';

/** Liveness, readiness and Prometheus metrics: the endpoints an orchestrator probes. */
export function opsRoutes(deps: { readiness: Readiness; metrics: Metrics | null; startedAt: number }) {
  return async (app: FastifyInstance) => {
    app.get('/healthz', async () => ({
      status: 'ok',
      uptime_s: Math.round((Date.now() - deps.startedAt) / 1000),
    }));

    app.get('/readyz', async (_req, reply) => {
      const { ready, checks } = await deps.readiness.run();
      reply.code(ready ? 200 : 503).header('cache-control', 'no-store');
      return { status: ready ? 'ready' : 'not_ready', checks };
    });

    if (deps.metrics) {
      const { registry } = deps.metrics;
      app.get('/metrics', async (_req, reply) => {
        reply.header('content-type', registry.contentType);
        return registry.metrics();
      });
    }
  };
}
