import type { FastifyRequest } from 'fastify';

/** Characters the router reads other than as themselves in a path: %xx, and '#' ending it. */
const ROUTER_REWRITES = /[%#]/;

/**
 * The path a decision about the request must read: the route that answers it. The router decodes
 * %xx and ends a path at '#', so `/m%63p` is `/mcp` and `/api/%6beys` is `/api/keys`; a
 * check on the raw text let such spellings past it (a tool budget of their own, no origin guard).
 * Only such paths pay for the route's options (a getter that builds an object); an unmatched one
 * keeps its raw path.
 */
export function routedPath(request: FastifyRequest, raw: string): string {
  return ROUTER_REWRITES.test(raw) ? (request.routeOptions.url ?? raw) : raw;
}
