import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { SIGNIN_MCP_PATH } from '../../../contracts/oauth.ts';
import { openToAnyOrigin } from '../cors.ts';
import { documented } from '../openapi.ts';
import { originCacheControl, publicOrigin } from '../public-origin.ts';
import {
  AI_CATALOG_TYPE,
  aiCatalog,
  type CatalogTool,
  catalogTools,
  llmsTxt,
  mcpCatalog,
  mcpServerCard,
  paymentPolicy,
  type QuotedRail,
  SERVER_CARD_TYPE,
  type SoldTool,
  serverCard,
  signInServerCard,
  type TableTool,
  x402Manifest,
} from './catalog.ts';

export interface DiscoveryOptions {
  /** The tools /mcp serves (the registry's definitions). */
  tools: TableTool[];
  /** The tools sold per call on /x402/*, with their prices; empty when pay-per-call is off. */
  paid: SoldTool[];
  rails: QuotedRail[];
  /** How long paid answers are kept (the published idempotency window). */
  paidResponseTtlMs: number;
  /** Whether /mcp/signin (OAuth sign-in for MCP hosts) is served: the cards and catalog then name it. */
  signin?: boolean;
  /** PUBLIC_BASE_URL: the origin every document names; unset, the origin each request came to. */
  publicBaseUrl?: string | undefined;
}

const json = (summary: string, description: string) =>
  documented({
    summary,
    tags: ['discovery'],
    sends: ['Cache-Control'],
    responses: { 200: { description, schema: { type: 'object' } } },
  });
const manifestDoc = json(
  'x402 origin manifest',
  'Every paid route, its price, the payment rails, the refund and fulfilment policy',
);
const cardDoc = json('MCP server card', 'The MCP endpoint, its transports and tools with their schemas');
const serverCardDoc = documented({
  summary: 'MCP Server Card (server-card extension)',
  tags: ['discovery'],
  sends: ['Cache-Control'],
  responses: {
    200: {
      description: 'Who the server is and where to connect',
      schema: { type: 'object' },
      contentTypes: [SERVER_CARD_TYPE],
    },
  },
});
const signInCardDoc = documented({
  summary: 'MCP Server Card of the sign-in URL (/mcp/signin, OAuth)',
  tags: ['discovery', 'oauth'],
  sends: ['Cache-Control'],
  responses: {
    200: {
      description: 'Where hosts that sign in with OAuth connect',
      schema: { type: 'object' },
      contentTypes: [SERVER_CARD_TYPE],
    },
  },
});
const catalogDoc = json(
  'MCP Catalog (earlier draft form; see /.well-known/ai-catalog.json)',
  "The origin's MCP servers, each with the URL of its server card",
);
const aiCatalogDoc = documented({
  summary: 'AI Catalog (specVersion 1.0): the MCP server cards of this origin',
  tags: ['discovery'],
  sends: ['Cache-Control'],
  responses: {
    200: {
      description: "The origin's MCP servers, each with the URL of its server card",
      schema: { type: 'object' },
      contentTypes: [AI_CATALOG_TYPE],
    },
  },
});
const llmsDoc = documented({
  summary: 'llms.txt: the service explained to a language model',
  tags: ['discovery'],
  sends: ['Cache-Control'],
  responses: {
    200: { description: 'Markdown text', schema: { type: 'string' }, contentTypes: ['text/plain'] },
  },
});

/**
 * GET /.well-known/x402, /.well-known/mcp.json, /mcp/server-card, /.well-known/ai-catalog.json,
 * /.well-known/mcp/catalog.json and /llms.txt: what an agent with only the origin needs to find
 * the tools, their prices and how to call them. Built for the public origin (PUBLIC_BASE_URL, else
 * the one the request came to), from the same table the routes and the MCP server use.
 */
export function discoveryPlugin(options: DiscoveryOptions): FastifyPluginAsync {
  const tools: CatalogTool[] = catalogTools(options.tools, options.paid);
  const policy = paymentPolicy(options.paidResponseTtlMs);
  const origin = publicOrigin(options.publicBaseUrl);
  // Private while the origin is the request's: see originCacheControl.
  const cacheControl = originCacheControl(options.publicBaseUrl, 300);
  const hostOf = (request: FastifyRequest) => new URL(origin(request)).hostname;
  const signin = options.signin === true;
  return async (app) => {
    // Public read-only metadata: any browser-based client may read every document (the MCP
    // server card and catalog extensions ask for this; the x402 manifest and llms.txt alike).
    openToAnyOrigin(app);
    if (options.paid.length > 0) {
      app.get('/.well-known/x402', { config: manifestDoc }, async (request, reply) =>
        reply
          .header('cache-control', cacheControl)
          .send(x402Manifest(origin(request), tools, options.rails, policy)),
      );
    }
    app.get('/.well-known/mcp.json', { config: cardDoc }, async (request, reply) =>
      reply.header('cache-control', cacheControl).send(mcpServerCard(origin(request), tools, signin)),
    );
    app.get('/mcp/server-card', { config: serverCardDoc }, async (request, reply) =>
      reply
        .header('cache-control', cacheControl)
        .type(SERVER_CARD_TYPE)
        .send(JSON.stringify(serverCard(origin(request), signin))),
    );
    if (signin) {
      app.get(`${SIGNIN_MCP_PATH}/server-card`, { config: signInCardDoc }, async (request, reply) =>
        reply
          .header('cache-control', cacheControl)
          .type(SERVER_CARD_TYPE)
          .send(JSON.stringify(signInServerCard(origin(request)))),
      );
    }
    app.get('/.well-known/ai-catalog.json', { config: aiCatalogDoc }, async (request, reply) =>
      reply
        .header('cache-control', cacheControl)
        .type(AI_CATALOG_TYPE)
        .send(JSON.stringify(aiCatalog(origin(request), hostOf(request), signin))),
    );
    app.get('/.well-known/mcp/catalog.json', { config: catalogDoc }, async (request, reply) =>
      reply.header('cache-control', cacheControl).send(mcpCatalog(origin(request), hostOf(request), signin)),
    );
    app.get('/llms.txt', { config: llmsDoc }, async (request, reply) =>
      reply
        .header('cache-control', cacheControl)
        .type('text/plain; charset=utf-8')
        .send(llmsTxt(origin(request), tools, options.paid.length > 0 ? options.rails : [], signin)),
    );
  };
}
