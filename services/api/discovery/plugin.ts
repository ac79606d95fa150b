import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import { documented } from '../openapi.ts';
import {
  type CatalogTool,
  catalogTools,
  llmsTxt,
  mcpServerCard,
  paymentPolicy,
  type QuotedRail,
  type SoldTool,
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
}

const CACHE = 'public, max-age=300';

const json = (summary: string, description: string) =>
  documented({
    summary,
    tags: ['discovery'],
    responses: { 200: { description, schema: { type: 'object' } } },
  });
const manifestDoc = json(
  'x402 origin manifest',
  'Every paid route, its price, the payment rails, the refund and fulfilment policy',
);
const cardDoc = json('MCP server card', 'The MCP endpoint, its transports and tools with their schemas');
const llmsDoc = documented({
  summary: 'llms.txt: the service explained to a language model',
  tags: ['discovery'],
  responses: {
    200: { description: 'Markdown text', schema: { type: 'string' }, contentTypes: ['text/plain'] },
  },
});

/**
 * GET /.well-known/x402, /.well-known/mcp.json and /llms.txt: what an agent with only the
 * origin needs to find the tools, their prices and how to call them. Built per origin asked
 * (the Host the request came to), from the same table the routes and the MCP server use.
 */
export function discoveryPlugin(options: DiscoveryOptions): FastifyPluginAsync {
  const tools: CatalogTool[] = catalogTools(options.tools, options.paid);
  const policy = paymentPolicy(options.paidResponseTtlMs);
  const origin = (request: FastifyRequest) => `${request.protocol}://${request.host}`;
  return async (app) => {
    if (options.paid.length > 0) {
      app.get('/.well-known/x402', { config: manifestDoc }, async (request, reply) =>
        reply
          .header('cache-control', CACHE)
          .send(x402Manifest(origin(request), tools, options.rails, policy)),
      );
    }
    app.get('/.well-known/mcp.json', { config: cardDoc }, async (request, reply) =>
      reply.header('cache-control', CACHE).send(mcpServerCard(origin(request), tools)),
    );
    app.get('/llms.txt', { config: llmsDoc }, async (request, reply) =>
      reply
        .header('cache-control', CACHE)
        .type('text/plain; charset=utf-8')
        .send(llmsTxt(origin(request), tools, options.paid.length > 0 ? options.rails : [])),
    );
  };
}
