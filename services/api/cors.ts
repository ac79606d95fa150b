/**
 * CORS for the routes any web page may call: the public reads (track record, /verify, the
 * webhook schemas, the OpenAPI document, discovery, liveness; not readiness) and the keyed /api routes, and the
 * headers the x402 routes build from the same parts. /api/keys and /mcp answer listed origins
 * only (mcp/request-guard.ts: a sign-in and MCP's DNS-rebinding rule), the OAuth endpoints their
 * own way (oauth/routes.ts).
 *
 * Any origin, never credentials, keyed routes included: the key travels in the Authorization
 * header, which a browser never adds by itself (no cookie is read), so a page of another site
 * cannot spend a visitor's key (no CSRF); an origin list would only turn away honest pages, which
 * hold the key anyway. A key written into a page is visible to every user of that page: such a
 * page calls through its own server, or uses a key it is willing to share.
 */

import type { FastifyInstance, FastifyReply, FastifyRequest, RouteOptions } from 'fastify';
import { RATE_LIMIT_EXPOSED_HEADERS } from '../metering/rate-limit.ts';

/**
 * The answer headers a page reads beyond the CORS-safelisted ones (Cache-Control, Content-Type…
 * need no exposing): the rate limit and when to retry, the answer's version for If-None-Match, a
 * verdict export's `_service` and file name. Not the export's `X-History-Cursor`: an HTTP trailer,
 * which fetch() never shows a page (it resumes from a row's `cursor` or the trailer line).
 */
export const OPEN_EXPOSED_HEADERS = [
  RATE_LIMIT_EXPOSED_HEADERS,
  'ETag',
  'X-Service-Meta',
  'Content-Disposition',
].join(', ');

/**
 * The request headers the open routes read that are not CORS-safelisted: the key, a JSON body's
 * type, a history export's Accept with its profile (a quote is not safelisted), a conditional GET.
 */
const OPEN_REQUEST_HEADERS = 'Authorization, Content-Type, Accept, If-None-Match';

/** How long a browser may reuse a preflight's answer, in seconds. */
const PREFLIGHT_MAX_AGE = '600';

/** The headers of an answer any origin may read, with the answer headers it may read besides. */
export function anyOriginHeaders(exposed: string = OPEN_EXPOSED_HEADERS): Record<string, string> {
  return { 'access-control-allow-origin': '*', 'access-control-expose-headers': exposed };
}

/** The headers of a preflight's answer: any origin may send `methods` with `requestHeaders`. */
export function anyOriginPreflight(
  methods: string,
  requestHeaders: string = OPEN_REQUEST_HEADERS,
  exposed: string = OPEN_EXPOSED_HEADERS,
): Record<string, string> {
  return {
    ...anyOriginHeaders(exposed),
    'access-control-allow-methods': methods,
    'access-control-allow-headers': requestHeaders,
    'access-control-max-age': PREFLIGHT_MAX_AGE,
  };
}

/** Marks the preflight routes openToAnyOrigin adds, which its own hook must pass over. */
const PREFLIGHT = Symbol('cors-preflight');

/**
 * Opens the routes registered after this call in `app`'s context (its child contexts too) to any
 * origin, but those in `except` (HTML pages, /metrics): every answer carries the CORS headers,
 * refusals included (set on the request's arrival, before the key, the rate limit or the schema
 * can refuse it), and each path answers its preflight (OPTIONS, 204) with the methods it serves.
 */
export function openToAnyOrigin(app: FastifyInstance, options: { except?: string[] } = {}): void {
  const except = new Set(options.except ?? []);
  const answer = anyOriginHeaders();
  const methodsOf = new Map<string, Set<string>>();
  // A callback hook: it runs on every request of these routes.
  const onRequest = (_request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    reply.headers(answer);
    done();
  };
  app.addHook('onRoute', function (this: FastifyInstance, route: RouteOptions & { [PREFLIGHT]?: true }) {
    if (route[PREFLIGHT] === true || except.has(route.url)) return;
    const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter(
      (m) => m !== 'OPTIONS',
    );
    if (methods.length === 0) return;
    const own = route.onRequest;
    route.onRequest = own === undefined ? [onRequest] : [...(Array.isArray(own) ? own : [own]), onRequest];
    // The HEAD twin Fastify adds to a GET (after it, from its options as they were before this
    // hook): its answers carry the headers too; HEAD needs no preflight, so the GET's answers it.
    if (methods.every((m) => m === 'HEAD')) return;
    let served = methodsOf.get(route.url);
    if (served === undefined) {
      const known = new Set<string>();
      served = known;
      methodsOf.set(route.url, known);
      this.route({
        method: 'OPTIONS',
        url: route.url,
        [PREFLIGHT]: true,
        handler: async (_request, reply) =>
          reply
            .code(204)
            .headers(anyOriginPreflight([...known].join(', ')))
            .send(),
      } as RouteOptions);
    }
    for (const method of methods) if (method !== 'HEAD') served.add(method);
  });
}
