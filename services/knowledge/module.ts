import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import type { Projection } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import type { Adapters } from '../adapters.ts';
import type { ToolDefinition } from '../api/mcp/tool-registry.ts';
import type { Role, Slice } from '../component.ts';
import type { KeyedAccess } from '../metering/caller.ts';
import { projectionCheck } from '../shared/projection-check.ts';
import { ChatQuota, chatLimits, chatQuotaProjection } from './chat-quota.ts';
import { knowledgeCorpus, REPO_ROOT } from './corpus.ts';
import { type KnowledgeFacts, knowledgeFactsProjection } from './facts.ts';
import { type OpenApiDocument, routePassages } from './generated.ts';
import { Knowledge } from './knowledge.ts';
import type { Passage } from './passages.ts';
import { chatProvider } from './providers.ts';
import { knowledgeRoutes, sourceRoutes } from './routes.ts';
import { KnowledgeIndex } from './search-index.ts';
import { knowledgeTools } from './tools.ts';

export interface KnowledgeModule extends Slice {
  readonly roles: Role[];
  /** POST /api/search, POST /api/chat and GET /knowledge/{file} (the documents citations open). */
  readonly plugin: FastifyPluginAsync;
  readonly projections: Projection<unknown>[];
  /** search_knowledge and chat_knowledge, for the MCP tool registry. */
  readonly tools: ToolDefinition[];
  /** The running service, once the index is built (throws before). */
  readonly knowledge: Knowledge;
  /** Resolves when the index is built. */
  readonly ready: Promise<Knowledge>;
  readonly facts: ProjectionRunner<KnowledgeFacts>;
}

/**
 * The knowledge feature slice (api role): a BM25 index over the documents, the generated
 * contract, errors, prices, and the live facts projected from the log; the two MCP tools and
 * their two HTTP routes; the monthly chat quota. `channel` gives the api role's key resolver and
 * call quota meter, which exist once the keyed channel is built.
 */
export function knowledgeModule(deps: {
  config: Config;
  adapters: Pick<Adapters, 'eventStore' | 'projectionStore' | 'cache'>;
  logger: Logger;
  channel: () => KeyedAccess;
  /** Where README.md and docs/ are read from (default: this checkout). */
  root?: string;
}): KnowledgeModule {
  const { config, adapters } = deps;
  const logger = deps.logger.child({ component: 'knowledge' });
  const facts = new ProjectionRunner(
    adapters.eventStore,
    adapters.projectionStore,
    knowledgeFactsProjection,
    {
      snapshotEvery: config.PROJECTION_SNAPSHOT_EVERY,
      logger,
    },
  );
  const chatQuota = new ChatQuota({
    cache: adapters.cache,
    store: adapters.eventStore,
    limits: chatLimits(config),
    // The chat counters live in the call quota's generations: its rebuild brings both back.
    ensureCounters: () => deps.channel().quota.counters.ensure(),
  });
  let service: Knowledge | null = null;
  let building: Promise<Knowledge> | null = null;
  let failure: Error | null = null;
  /** Ends a build still under way at stop: nothing of it is kept, and it is seconds of CPU. */
  let stopBuild: AbortController | null = null;
  const knowledge = async () => {
    if (building === null) throw new Error('the knowledge module is not started');
    return building;
  };
  // The route list comes from the app's own OpenAPI document, known once every plugin has
  // registered its routes; the index may be built before or after that.
  let routes: Passage[] | null = null;
  const indexRoutes = () => {
    if (service === null || routes === null) return;
    if (service.index.replaceGroup('contract#routes', routes))
      logger.info({ passages: routes.length }, 'route list indexed from the OpenAPI document');
  };
  const httpRoutes = knowledgeRoutes({
    knowledge,
    channel: deps.channel,
    models: config.CHAT_MODELS,
    logger,
    publicBaseUrl: config.PUBLIC_BASE_URL,
  });
  const plugin: FastifyPluginAsync = async (app, options) => {
    await httpRoutes(app, options);
    await app.register(sourceRoutes(knowledge));
    app.addHook('onReady', async () => {
      const openapi = (app as FastifyInstance & { swagger?: () => OpenApiDocument }).swagger;
      if (typeof openapi !== 'function') return;
      const reference = ['/docs', '/docs/'].find((url) => app.hasRoute({ method: 'GET', url })) ?? null;
      routes = routePassages(openapi.call(app), reference);
      indexRoutes();
    });
  };
  return {
    name: 'knowledge',
    roles: ['api'],
    projections: [
      knowledgeFactsProjection as Projection<unknown>,
      chatQuotaProjection as Projection<unknown>,
    ],
    tools: knowledgeTools(knowledge, config.CHAT_MODELS),
    plugin,
    facts,
    get knowledge() {
      if (service === null) throw new Error('the knowledge index is not built yet');
      return service;
    },
    get ready() {
      return knowledge();
    },
    async start() {
      await facts.start();
      // The index is built behind the start (seconds of CPU on a loaded machine, in slices that
      // leave the event loop its turn): requests that arrive first wait for it; /readyz shows
      // whether it is built and fails if it cannot be.
      const started = performance.now();
      stopBuild = new AbortController();
      const { signal } = stopBuild;
      building = knowledgeCorpus(config, deps.root ?? REPO_ROOT).then(async ({ passages, documents }) => {
        const index = await KnowledgeIndex.build(passages, signal);
        const provider = chatProvider(config);
        service = new Knowledge({ config, index, documents, facts, chatQuota, provider, logger });
        service.refresh();
        indexRoutes();
        logger.info(
          {
            passages: index.size,
            ms: Math.round(performance.now() - started),
            provider: config.CHAT_PROVIDER,
          },
          'knowledge index built',
        );
        return service;
      });
      building.catch((err: Error) => {
        // Stopped before it was built: no failure of the index.
        if (signal.aborted) return;
        failure = err;
        logger.error({ err }, 'knowledge index could not be built');
      });
    },
    async stop() {
      // A stop during the build (a SIGTERM soon after the start) waited for all of it: on a
      // loaded machine longer than SHUTDOWN_TIMEOUT_MS, and the process was killed.
      stopBuild?.abort();
      await building?.catch(() => undefined);
      await facts.stop();
    },
    checks() {
      return {
        // Requests wait for the index while it is built, so only a failed build makes us unready.
        // The build's error (a file's path) is the cause: /readyz shows its reason, the log its words.
        'knowledge-index': async () =>
          failure
            ? { ok: false, cause: failure }
            : { ok: true, built: service !== null, passages: service?.index.size ?? 0 },
        'projection:knowledge-facts': projectionCheck(facts),
      };
    },
  };
}
