import type { FastifyRequest } from 'fastify';

/**
 * The origin what answers a request names (discovery documents, quotes' resource URLs):
 * PUBLIC_BASE_URL when it is set, so every document names the one origin webhooks, verify links
 * and OAuth name too; else the origin the request came to.
 */
export function publicOrigin(configured: string | undefined): (request: FastifyRequest) => string {
  const fixed = configured?.replace(/\/+$/, '');
  return fixed === undefined ? requestOrigin : () => fixed;
}

/** The origin the request came to: its scheme and Host (X-Forwarded-Proto and -Host behind a trusted proxy). */
export const requestOrigin = (request: FastifyRequest): string => `${request.protocol}://${request.host}`;

/**
 * The Cache-Control of an answer that names publicOrigin's origin, reusable for `maxAgeS`:
 * `public` when PUBLIC_BASE_URL fixes the origin; else `private`. Without it the origin is the
 * request's Host (X-Forwarded-Host and -Proto behind a trusted proxy), which any client names:
 * a shared cache keys an answer by its URL, not by the Host the answer was built from, so a
 * `public` answer to one forged `Host: evil.example` would be served to every client of that URL,
 * naming evil.example. `private` leaves the reuse to each client's own cache.
 */
export function originCacheControl(configured: string | undefined, maxAgeS: number): string {
  return `${configured === undefined ? 'private' : 'public'}, max-age=${maxAgeS}`;
}
