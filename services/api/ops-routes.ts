import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Metrics } from '../shared/metrics.ts';
import type { CheckResult, Readiness } from '../shared/readiness.ts';
import { publicChecks } from '../shared/readiness-public.ts';
import { openToAnyOrigin } from './cors.ts';
import { documented } from './openapi.ts';

const Health = z.object({ status: z.literal('ok'), uptime_s: z.number().int() });
const Ready = z.object({
  status: z.enum(['ready', 'not_ready']),
  checks: z.record(z.string(), z.object({ ok: z.boolean() }).loose()),
});

/** Liveness, readiness and Prometheus metrics: the endpoints an orchestrator probes. */
export function opsRoutes(deps: { readiness: Readiness; metrics: Metrics | null; startedAt: number }) {
  return async (app: FastifyInstance) => {
    // A status page elsewhere may read liveness; not /readyz (the engines' kinds, log positions, a
    // venue's failure) nor /metrics, which a deployment often keeps to its own network, where any
    // page its operator opens could read them otherwise.
    openToAnyOrigin(app, { except: ['/readyz', '/metrics'] });
    app.get(
      '/healthz',
      {
        config: documented({
          summary: 'Liveness: the process answers',
          tags: ['operations'],
          responses: { 200: { description: 'Alive', schema: Health } },
        }),
      },
      async () => ({
        status: 'ok',
        uptime_s: Math.round((Date.now() - deps.startedAt) / 1000),
      }),
    );

    const readyDoc = documented({
      summary: 'Readiness: what this role needs to serve answers',
      tags: ['operations'],
      sends: ['Cache-Control'],
      responses: {
        200: { description: 'Ready', schema: Ready },
        503: { description: 'Not ready; `checks` says which part is not', schema: Ready },
      },
    });
    // /readyz answers anyone who reaches the port: a check's error is shown as the reason its code
    // gives ('refused', 'name not resolved', 'timed out', 'TLS certificate refused', 'HTTP 503'),
    // and words that name a dependency's host, port, URL, file path or login as a generic reason;
    // the full result goes to the log once per change of the check's state or reason (not of its
    // figures: a stale chain's age changes at every probe).
    const logged = new Map<string, string>();
    app.get('/readyz', { config: readyDoc }, async (request, reply) => {
      const { ready, checks } = await deps.readiness.run();
      const shown = publicChecks(checks);
      logHidden(request.log, checks, shown, logged);
      reply.code(ready ? 200 : 503).header('cache-control', 'no-store');
      return { status: ready ? 'ready' : 'not_ready', checks: shown.checks };
    });

    if (deps.metrics) {
      const { registry } = deps.metrics;
      const metricsDoc = documented({
        summary: 'Prometheus metrics',
        tags: ['operations'],
        responses: {
          200: {
            description: 'Prometheus text exposition',
            schema: { type: 'string' },
            contentTypes: [registry.contentType],
          },
        },
      });
      app.get('/metrics', { config: metricsDoc }, async (_req, reply) => {
        reply.header('content-type', registry.contentType);
        return registry.metrics();
      });
    }
  };
}

function logHidden(
  log: FastifyBaseLogger,
  checks: Record<string, CheckResult>,
  shown: { hidden: string[]; keys: Record<string, string> },
  logged: Map<string, string>,
): void {
  for (const name of logged.keys()) if (!shown.hidden.includes(name)) logged.delete(name);
  for (const name of shown.hidden) {
    const { cause, ...result } = checks[name]!;
    const key = shown.keys[name]!;
    if (logged.get(name) === key) continue;
    logged.set(name, key);
    log[result.ok ? 'info' : 'warn'](
      { check: name, result, ...(cause === undefined ? {} : { err: cause }) },
      'readiness check: full result (shown generic on /readyz)',
    );
  }
}
