import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import type { Metrics } from '../shared/metrics.ts';
import type { Readiness } from '../shared/readiness.ts';
import { opsRoutes } from './ops-routes.ts';

export interface AppDeps {
  config: Pick<Config, 'BODY_LIMIT_BYTES'>;
  logger: Logger;
  readiness: Readiness;
  metrics: Metrics | null;
  /** Feature plugins (x402 routes, keys, MCP, webhooks) registered by the roles that serve them. */
  plugins?: FastifyPluginAsync[];
}

/**
 * The HTTP app: every error leaves as JSON `{code, message}` with a fitting status, never a
 * stack trace; unknown routes are 404 in the same shape.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: deps.config.BODY_LIMIT_BYTES,
    // In-flight requests finish on close; new connections are refused at once.
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  });

  // Keep-alive sockets would hold close() open until their idle timeout: once closing starts,
  // every response (in-flight ones included) asks the client to close its connection.
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (closing) reply.header('connection', 'close');
    done(null, payload);
  });

  if (deps.metrics) {
    const { httpDuration } = deps.metrics;
    app.addHook('onResponse', async (request, reply) => {
      httpDuration.observe(
        {
          method: request.method,
          route: request.routeOptions.url ?? 'unmatched',
          status: String(reply.statusCode),
        },
        reply.elapsedTime / 1000,
      );
    });
  }

  app.setErrorHandler((error: { statusCode?: number; code?: string; message: string }, request, reply) => {
    const status =
      error.statusCode && error.statusCode >= 400 && error.statusCode < 600 ? error.statusCode : 500;
    if (status >= 500) request.log.error({ err: error }, 'request failed');
    reply.code(status).send({
      code: status >= 500 ? 'INTERNAL_ERROR' : (error.code ?? 'BAD_REQUEST'),
      message: status >= 500 ? 'internal error' : error.message,
    });
  });
  app.setNotFoundHandler((request, reply) => {
    reply.code(404).send({ code: 'NOT_FOUND', message: `no route ${request.method} ${request.url}` });
  });

  await app.register(opsRoutes({ readiness: deps.readiness, metrics: deps.metrics, startedAt: Date.now() }));
  for (const plugin of deps.plugins ?? []) await app.register(plugin);
  return app;
}
