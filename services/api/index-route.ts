import type { FastifyInstance, HTTPMethods } from 'fastify';
import { z } from 'zod';
import { SERVICE_VERSION } from '../../contracts/service-version.ts';
import { SERVICE_DESCRIPTION, SERVICE_NAME } from './discovery/catalog.ts';
import { documented } from './openapi.ts';

/**
 * The entry points `GET /` may name, each listed only where this process serves it (a role
 * without the api serves the operations routes alone): `path`, or the `route` it is one of.
 */
const ENTRY_POINTS: { name: string; method: HTTPMethods; path: string; route?: string; what: string }[] = [
  { name: 'docs', method: 'GET', path: '/docs', what: 'API reference page (from the OpenAPI document)' },
  { name: 'openapi', method: 'GET', path: '/openapi.json', what: 'OpenAPI document of every route' },
  { name: 'mcp', method: 'POST', path: '/mcp', what: 'MCP endpoint (Streamable HTTP, JSON-RPC)' },
  { name: 'trackRecord', method: 'GET', path: '/track-record', what: "the verdicts' track record page" },
  { name: 'llmsTxt', method: 'GET', path: '/llms.txt', what: 'the service described for agents' },
  {
    name: 'knowledge',
    method: 'GET',
    path: '/knowledge/README.md',
    route: '/knowledge/:file',
    what: 'the documents the knowledge tools cite, as markdown (/knowledge/{file}: README.md, errors.md…)',
  },
  { name: 'x402', method: 'GET', path: '/.well-known/x402', what: 'pay-per-call (x402) discovery' },
  { name: 'health', method: 'GET', path: '/healthz', what: 'liveness' },
  { name: 'readiness', method: 'GET', path: '/readyz', what: 'readiness' },
];

const Index = z.object({
  service: z.string(),
  version: z.string(),
  description: z.string(),
  links: z.record(z.string(), z.object({ href: z.string(), method: z.string(), description: z.string() })),
});

/**
 * `GET /`: what the service is and where to go next (README sends a newcomer to the root after
 * `npm start`). Registered after every other route, so that it lists the ones this process serves.
 */
export async function indexRoute(app: FastifyInstance): Promise<void> {
  const links = Object.fromEntries(
    ENTRY_POINTS.filter(({ method, path, route }) => app.hasRoute({ method, url: route ?? path })).map(
      ({ name, method, path, what }) => [name, { href: path, method, description: what }],
    ),
  );
  const body = { service: SERVICE_NAME, version: SERVICE_VERSION, description: SERVICE_DESCRIPTION, links };
  app.get(
    '/',
    {
      config: documented({
        summary: 'Index: what the service is and its entry points',
        tags: ['discovery'],
        responses: { 200: { description: 'The entry points this process serves', schema: Index } },
      }),
    },
    async () => body,
  );
}
