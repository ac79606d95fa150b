import type { FastifyRequest } from 'fastify';

/**
 * The origin what answers a request names (discovery documents, quotes' resource URLs):
 * PUBLIC_BASE_URL when it is set, so every document names the one origin webhooks, verify links
 * and OAuth name too; else the origin the request came to.
 */
export function publicOrigin(configured: string | undefined): (request: FastifyRequest) => string {
  const fixed = configured?.replace(/\/+$/, '');
  return fixed === undefined ? (request) => `${request.protocol}://${request.host}` : () => fixed;
}
