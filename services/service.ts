import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from '../contracts/config.ts';
import { type Adapters, openAdapters } from './adapters.ts';
import { buildApp } from './api/app.ts';
import type { Component, Role } from './component.ts';
import { projectionsComponent } from './projections/component.ts';
import { createMetrics } from './shared/metrics.ts';
import { Readiness } from './shared/readiness.ts';

export interface RunningService {
  app: FastifyInstance;
  adapters: Adapters;
  components: Component[];
  /** Base URL the HTTP server listens on. */
  url: string;
  /** Graceful stop: in-flight requests finish, followers checkpoint, adapters close. */
  stop(): Promise<void>;
}

/**
 * Starts the given roles in one process. Every role serves the ops endpoints (/healthz, /readyz,
 * /metrics) on PORT so an orchestrator can probe it; the `api` role adds the product routes.
 */
export async function startService(config: Config, roles: Role[], logger: Logger): Promise<RunningService> {
  const adapters = await openAdapters(config, logger);
  const metrics = config.METRICS_ENABLED ? createMetrics() : null;
  const readiness = new Readiness();
  readiness.add('eventStore', async () => ({
    kind: adapters.eventStore.kind,
    ...(await adapters.eventStore.health()),
  }));
  readiness.add('bus', async () => ({ kind: adapters.bus.kind, ...(await adapters.bus.health()) }));
  readiness.add('cache', async () => ({ kind: adapters.cache.kind, ...(await adapters.cache.health()) }));

  const components: Component[] = [];
  if (roles.includes('projections'))
    components.push(projectionsComponent({ config, adapters, logger, metrics }));

  const started: Component[] = [];
  let app: FastifyInstance | null = null;
  try {
    for (const component of components) {
      await component.start();
      started.push(component);
      for (const [name, check] of Object.entries(component.checks?.() ?? {})) readiness.add(name, check);
    }
    app = await buildApp({ config, logger, readiness, metrics, plugins: [] });
    const url = await app.listen({ host: config.HOST, port: config.PORT });
    logger.info(
      { url, roles, eventStore: config.EVENT_STORE, bus: config.BUS, cache: config.CACHE },
      'service started',
    );
    const httpApp = app;
    let stopping: Promise<void> | null = null;
    return {
      app: httpApp,
      adapters,
      components,
      url,
      stop() {
        stopping ??= (async () => {
          await httpApp.close();
          for (const component of [...started].reverse()) {
            await component
              .stop()
              .catch((err: unknown) => logger.error({ err, component: component.name }, 'stop failed'));
          }
          await adapters.close();
          logger.info('service stopped');
        })();
        return stopping;
      },
    };
  } catch (err) {
    await app?.close().catch(() => undefined);
    for (const component of started.reverse()) await component.stop().catch(() => undefined);
    await adapters.close();
    throw err;
  }
}
