import type { FastifyRequest } from 'fastify';

/**
 * The path the router answers for a request target's path `raw`: /m%63p is /mcp, and so is the
 * absolute form http://host/mcp (RFC 9112 §3.2.2), which Fastify routes alike. Whatever reads the
 * path (a budget, a quote's resource) reads the route's, so no other spelling of it counts apart.
 */
export function routedPath(request: Pick<FastifyRequest, 'routeOptions'>, raw: string): string {
  return /[%#]/.test(raw) || raw[0] !== '/' ? (request.routeOptions.url ?? raw) : raw;
}

/** The request's target as the route's path and the query sent with it: `/x402/t?coin=BTC`. */
export function routedTarget(request: Pick<FastifyRequest, 'routeOptions' | 'url'>): string {
  const query = request.url.indexOf('?');
  if (query < 0) return routedPath(request, request.url);
  return `${routedPath(request, request.url.slice(0, query))}${request.url.slice(query)}`;
}
