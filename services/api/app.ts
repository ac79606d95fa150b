import { randomUUID } from 'node:crypto';
import { maxHeaderSize, type ServerResponse, STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import { validatorCompiler } from 'fastify-type-provider-zod';
import FindMyWay from 'find-my-way';
import type { Logger } from 'pino';
import { type Config, parseTrustProxy } from '../../contracts/config.ts';
import { ERRORS, type ErrorCode, errorMessage } from '../../contracts/errors.ts';
import { SERVICE_VERSION } from '../../contracts/service-version.ts';
import { decorateCaller, withAnswerService } from '../metering/caller.ts';
import type { Metrics } from '../shared/metrics.ts';
import { sentValues } from '../shared/raw-headers.ts';
import type { Readiness } from '../shared/readiness.ts';
import type { HistogramSeries } from '../shared/series-histogram.ts';
import { answerAtTurnEnd } from './answer-at-turn-end.ts';
import { capConnections, defaultMaxConnections } from './connection-caps.ts';
import {
  echoedPath,
  noRouteDetail,
  REFUSAL_CACHE_CONTROL,
  RepeatedHeaderError,
  useApiErrors,
} from './errors.ts';
import { indexRoute } from './index-route.ts';
import { registerJsonParser } from './json-body.ts';
import { EVERY_ANSWER_HEADERS, keyChallenge, keyInvalidRequest, registerOpenApi } from './openapi.ts';
import { opsRoutes } from './ops-routes.ts';
import { OneLinePerRequest, requestLoggers } from './request-log.ts';

/** A year, the floor of the HSTS preload list's requirement. */
export const HSTS = 'max-age=31536000';

export interface AppDeps {
  config: Pick<Config, 'BODY_LIMIT_BYTES'> &
    Partial<
      Pick<
        Config,
        | 'REQUEST_TIMEOUT_MS'
        | 'TRUST_PROXY'
        | 'PUBLIC_BASE_URL'
        | 'HTTP_MAX_CONNECTIONS'
        | 'HTTP_MAX_CONNECTIONS_PER_ADDRESS'
      >
    >;
  logger: Logger;
  readiness: Readiness;
  metrics: Metrics | null;
  /** Feature plugins (x402 routes, keys, MCP, webhooks) registered by the roles that serve them. */
  plugins?: FastifyPluginAsync[];
}

/**
 * The HTTP app: every error leaves as JSON `{code, message}` from the error catalog with its
 * status, never a stack trace; unknown routes are 404 in the same shape.
 */
export async function buildApp(deps: AppDeps): Promise<FastifyInstance> {
  const requestTimeout = deps.config.REQUEST_TIMEOUT_MS ?? 30_000;
  const trust = parseTrustProxy(deps.config.TRUST_PROXY ?? '');
  // Served on https (the public origin is, or a proxy TRUST_PROXY believes says the request came
  // over it): browsers are told to use https only for a year, so a person typing the address or
  // following an http:// link to the sign-in page (where an API key is typed) is not downgraded
  // on the way. Browsers ignore the field on http answers; no includeSubDomains, as the service
  // does not own its origin's sibling hosts.
  // In any case, as config accepts the scheme (`HTTPS://…`).
  const publicHttps = /^https:/i.test(deps.config.PUBLIC_BASE_URL ?? '');
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    logController: new OneLinePerRequest(),
    // request.log builds its pino child only when something logs through it (request-log.ts).
    childLoggerFactory: requestLoggers,
    // Request ids end up in events (a paid call's requestId and correlation id): Fastify's
    // per-process counter (req-1, req-2…) repeats across replicas and restarts.
    genReqId: () => randomUUID(),
    bodyLimit: deps.config.BODY_LIMIT_BYTES,
    requestTimeout,
    // One reading of TRUST_PROXY (the configuration's) for the request's address and the
    // per-address connection cap below: the client one counts is the client the other meters.
    trustProxy: trust.any ? trust.trusts : false,
    // Node reads requestTimeout when the server is constructed (setting it afterwards, as
    // Fastify does, is ignored) and checks deadlines every connectionsCheckingInterval (30 s by
    // default): both go to the constructor so a trickling body is cut off on time.
    http: {
      requestTimeout,
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, Math.floor(requestTimeout / 4))),
    },
    // Errors the router raises before any route runs: same {code, message} shape as the rest,
    // and the offending URL is not echoed back (it may be 100 KB long).
    frameworkErrors: (error, _request, reply) => {
      const code = error.code === 'FST_ERR_MAX_PARAM_LENGTH' ? 'URI_TOO_LONG' : 'BAD_URL';
      (reply as FastifyReply)
        .code(ERRORS[code].status)
        .send({ code, message: errorMessage(code, { detail: 'a path segment is too long' }) });
    },
    clientErrorHandler: (error: NodeJS.ErrnoException, socket: Socket) => {
      writeClientError(error as ParserError, socket);
    },
    // In-flight requests finish on close; new connections are refused at once.
    return503OnClosing: true,
    forceCloseConnections: 'idle',
  });

  // Unset: derived from the fd limit; 0: no total cap. Per address as configured (loadConfig: 1,024; 0 or unset here: off).
  const maxConnections = deps.config.HTTP_MAX_CONNECTIONS ?? defaultMaxConnections();
  capConnections(app.server, {
    total: maxConnections === 0 ? null : maxConnections,
    perAddress: deps.config.HTTP_MAX_CONNECTIONS_PER_ADDRESS ?? 0,
    exempt: trust.peer,
    onRefused: (scope, held) =>
      app.log.warn(
        { address: scope, held, cap: deps.config.HTTP_MAX_CONNECTIONS_PER_ADDRESS },
        'connection closed: this address holds HTTP_MAX_CONNECTIONS_PER_ADDRESS already (a shared egress or a balancer without TRUST_PROXY may need more)',
      ),
  });
  askInFlightToClose(app);
  // Every 401 of a route taking an API key says how to authenticate (RFC 9110 §15.5.2). Before
  // answerAtTurnEnd, which must be the last: the answer is written from its done().
  app.addHook('onSend', (request, reply, payload, done) => {
    if (
      reply.statusCode === 401 &&
      !reply.hasHeader('www-authenticate') &&
      request.routeOptions.config?.keyChallenge
    )
      reply.header('www-authenticate', keyChallenge(request.headers.authorization));
    done(null, payload);
  });
  app.addHook('onSend', answerAtTurnEnd);

  if (deps.metrics) observeDurations(app, deps.metrics.httpDuration);
  const allowedFor = routeMethods(app);

  useApiErrors(app);
  registerJsonParser(app);
  // RFC 9112 §3.2: a request with more than one Host is refused, as a proxy in front and this
  // process could each take another one; so is one with two Authorization fields (or one field a
  // proxy joined from two), whose keys a proxy and this process could each read differently (Node
  // keeps the first and drops the rest).
  // On /api/*, so is one with two Content-Type fields, a singleton field whose repetition RFC 9110
  // §8.3 calls an error that recipients resolve differently (Node reads the first, others the
  // last); /mcp (415) and /x402 (400 invalid_content_type, contract §7.2) refuse it in words of
  // their own. A callback hook: it runs on every request.
  app.addHook('onRequest', (request, reply, done) => {
    // On every answer, refusals and answers written by the MCP transport included (on the socket's
    // response, so a route's own headers keep theirs): no type sniffing, no Referer to follow a link.
    for (const [name, value] of EVERY_ANSWER_HEADERS) reply.raw.setHeader(name, value);
    if (publicHttps || request.protocol === 'https') reply.raw.setHeader('strict-transport-security', HSTS);
    // The route's path, not the request target's: an absolute-form target (POST http://host/api/...,
    // RFC 9112 §3.2.2, which the router serves) does not start with /api/.
    const onApi = request.routeOptions.url?.startsWith('/api/') ?? false;
    const repeated = repeatedField(request.raw.rawHeaders, onApi);
    if (repeated !== null) {
      const refusal = new RepeatedHeaderError(repeated);
      // On a route taking a Bearer credential, a request sending it more than one way is RFC 6750
      // §3.1's invalid_request, and the 400 says so in the route's challenge (whatever its body).
      const challenge =
        repeated === 'Authorization' ? invalidRequestChallenge(request, refusal.message) : null;
      if (challenge !== null) reply.header('www-authenticate', challenge);
      done(refusal);
      return;
    }
    done();
  });
  // Route schemas are zod contracts (declared() in openapi.ts); routes without one are not validated.
  app.setValidatorCompiler(validatorCompiler);

  // Before any plugin context exists: a context takes the request decorations its parent has when
  // it is made, so the reference page's (registered next) would lack `caller` and its requests
  // would reach the rate limit unresolved (500 on /docs whenever rate limiting is on).
  decorateCaller(app);
  // Before any route: the document generator collects routes as they are added.
  await registerOpenApi(app, {
    title: 'Signal service',
    version: SERVICE_VERSION,
    server: deps.config.PUBLIC_BASE_URL ?? '/',
    ...(deps.config.PUBLIC_BASE_URL ? { publicBaseUrl: deps.config.PUBLIC_BASE_URL } : {}),
    description:
      'Composite BUY/SELL/HOLD crypto verdicts, market regimes, ranked scans and funding-arbitrage scans over HTTP (API keys or keyless x402 pay-per-call), MCP (POST /mcp) and signed webhooks.',
  });
  await app.register(opsRoutes({ readiness: deps.readiness, metrics: deps.metrics, startedAt: Date.now() }));
  for (const plugin of deps.plugins ?? []) await app.register(plugin);
  // After the others: it lists the entry points among them.
  await app.register(indexRoute);
  // Last, so that the not-found context has every hook the routes have (the rate limit's too),
  // plus its own: requests that match no route are timed by a hook of that context alone, not
  // by a global onResponse hook that every request would run to pass them over.
  await app.register(async (unmatched) => {
    if (deps.metrics)
      unmatched.addHook('onResponse', durationObserver(deps.metrics.httpDuration, 'unmatched'));
    // With the caller's `_service`, as the /api errors (the caller hook runs here too), and so
    // no-store: 404 and 405 are cacheable by default (RFC 9110 §15.1), and a shared cache would
    // serve one caller's quota to the next.
    unmatched.setNotFoundHandler(async (request, reply) => {
      // A path the service serves, asked with another method: 405 with the methods it takes.
      const path = request.url.split('?', 1)[0]!;
      const allowed = allowedFor(path);
      if (allowed.length > 0) {
        const body = {
          code: 'METHOD_NOT_ALLOWED' satisfies ErrorCode,
          message: errorMessage('METHOD_NOT_ALLOWED', {
            method: request.method,
            path: echoedPath(path),
            allowed: allowed.join(', '),
          }),
        };
        return reply
          .code(ERRORS.METHOD_NOT_ALLOWED.status)
          .header('allow', allowed.join(', '))
          .header('cache-control', REFUSAL_CACHE_CONTROL)
          .send(await withAnswerService(request, body));
      }
      const body = {
        code: 'NOT_FOUND' satisfies ErrorCode,
        message: errorMessage('NOT_FOUND', { detail: noRouteDetail(request.method, request.url) }),
      };
      return reply
        .code(ERRORS.NOT_FOUND.status)
        .header('cache-control', REFUSAL_CACHE_CONTROL)
        .send(await withAnswerService(request, body));
    });
  });
  return app;
}

/**
 * The methods a path is served with, from a router fed every route as it is added (Fastify's own
 * router, find-my-way, so a path matches exactly as it would): asked only for requests that match
 * no route, to tell a wrong method (405) from a path the service does not have (404).
 */
function routeMethods(app: FastifyInstance): (path: string) => string[] {
  const router = FindMyWay({ ignoreTrailingSlash: app.initialConfig.ignoreTrailingSlash ?? false });
  const methods = new Set<string>();
  app.addHook('onRoute', (route) => {
    for (const method of Array.isArray(route.method) ? route.method : [route.method]) {
      // Fastify answers HEAD for every GET route on its own.
      for (const m of method === 'GET' ? ['GET', 'HEAD'] : [method]) {
        if (router.hasRoute(m as never, route.url)) continue;
        router.on(m as never, route.url, () => undefined);
        methods.add(m);
      }
    }
  });
  return (path) =>
    [...methods]
      .filter((m) => {
        const found = router.find(m as never, path);
        // A parameter matched as empty (/api/webhooks/ against /api/webhooks/:id) names no
        // resource: that path is one the service does not have (404), not one asked with another method.
        return (
          found !== null &&
          Object.entries(found.params).every(([name, value]) => name === '*' || value !== '')
        );
      })
      .sort();
}

/**
 * The request-duration histogram, by method, route and status. Each route observes through its
 * own hook, which knows its URL and keeps the labelled series it has used: the one global hook it
 * replaces built `request.routeOptions` (a dozen fields) and hashed the label set on every call.
 * Requests that match no route are observed as `unmatched` by a hook of the not-found handler's
 * context (see buildApp).
 */
function observeDurations(app: FastifyInstance, histogram: Metrics['httpDuration']): void {
  app.addHook('onRoute', (route) => {
    const hook = durationObserver(histogram, route.url);
    const own = route.onResponse;
    route.onResponse = own === undefined ? [hook] : [...(Array.isArray(own) ? own : [own]), hook];
  });
}

/** An onResponse hook observing the duration of `route`'s requests, by method and status. */
function durationObserver(histogram: Metrics['httpDuration'], route: string) {
  // By method, then by status: looked up with the method string Node's parser hands out and the
  // status number, not with a "<method> <status>" key spelt and hashed anew on every request.
  const series = new Map<string, Map<number, HistogramSeries>>();
  // A callback hook, not an async one: it runs on every request and a promise per call shows.
  return (request: FastifyRequest, reply: FastifyReply, done: () => void) => {
    const status = reply.statusCode;
    const method = request.method;
    let byStatus = series.get(method);
    if (byStatus === undefined) {
      byStatus = new Map();
      series.set(method, byStatus);
    }
    let one = byStatus.get(status);
    if (one === undefined) {
      one = histogram.labels(method, route, String(status));
      byStatus.set(status, one);
    }
    one.observe(reply.elapsedTime / 1000);
    done();
  };
}

/**
 * Keep-alive sockets would hold close() open until their idle timeout, so once closing starts
 * every response asks its client to close the connection. Requests routed after that get the
 * header from Fastify itself (its closing check); the ones already in flight are found through
 * their connections, which are tracked per connection rather than per request: an onSend hook
 * did this before, and ran on every request for the few that meet a close. A socket's response
 * in progress is its `_httpMessage` (Node's own field, as stable as the http module); one whose
 * headers are out already cannot be changed, and its socket is Fastify's idle close to reap. A
 * pipelined request whose response waits behind the socket's current one is not reached (the
 * onSend hook did reach it): its answer says keep-alive, and its client learns of the close when
 * the idle connection is closed. Over TLS the response lives on the TLS socket
 * ('secureConnection'), not on the TCP one.
 */
function askInFlightToClose(app: FastifyInstance): void {
  const sockets = new Set<Socket>();
  const track = (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  app.server.on('connection', track);
  app.server.on('secureConnection', track);
  app.addHook('preClose', async () => {
    for (const socket of sockets) {
      const response = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
      if (response && !response.headersSent) response.setHeader('connection', 'close');
    }
    // A connection that has not sent a byte (a browser's preconnect, opened for a request it may
    // never make) carries no work, yet Node counts it active, not idle, from its accept: neither
    // closeIdleConnections nor close() ends it, and it held every stop with a Chromium page open
    // until the grace's closeAllConnections (5 s), or close() alone until its headers timed out.
    // Looked at after one turn of the loop: a request already received but not yet read is read
    // first and answered (503, Connection: close), not cut off with a reset.
    await new Promise((resolve) => setImmediate(resolve));
    for (const socket of sockets) {
      const response = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
      if (!response && socket.bytesRead === 0) socket.destroy();
    }
  });
}

/**
 * Errors Node's HTTP parser raises before Fastify sees a request (malformed request line, headers
 * too large, a request not received in time): answered on the raw socket, in the same shape.
 */
function writeClientError(error: ParserError, socket: Socket): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const code: ErrorCode =
    error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
      ? 'REQUEST_TIMEOUT'
      : error.code === 'HPE_HEADER_OVERFLOW'
        ? overflowInRequestLine(error)
          ? 'URI_TOO_LONG'
          : 'HEADERS_TOO_LARGE'
        : 'BAD_REQUEST';
  const status = ERRORS[code].status;
  if (socket.writable) {
    const body = JSON.stringify({
      code,
      message: errorMessage(code, {
        detail:
          code === 'URI_TOO_LONG'
            ? `the request line is longer than the ${maxHeaderSize / 1024} KiB the server reads; send a shorter URL`
            : 'the request is not valid HTTP',
      }),
    });
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(error);
}

/** A parser error as Node hands it over: the bytes it was reading and how far into them it got. */
type ParserError = NodeJS.ErrnoException & { rawPacket?: unknown; bytesParsed?: number };

/**
 * A request line's start (RFC 9112 §3): a method token (in capitals, as every registered method
 * is) and its space. A field line never matches: its name is followed by the colon.
 */
const REQUEST_LINE_START = /^[A-Z][!#$%&'*+.^_`|~0-9A-Za-z-]* \S/;

/**
 * True when Node's header limit (which counts the request target with the fields) was passed while
 * the request line was still being read: the line the parser stopped in, in the read in hand, is
 * a request line. RFC 9112 §3 answers a target longer than the server reads with 414, not 431. A
 * line that passed the limit in a later read of a request sent in pieces shows no start there and
 * stays 431: the reads before it are gone by then.
 */
function overflowInRequestLine(error: ParserError): boolean {
  const packet = error.rawPacket;
  if (!Buffer.isBuffer(packet) || error.bytesParsed === undefined) return false;
  const head = packet.subarray(0, Math.min(error.bytesParsed, packet.length)).toString('latin1');
  return REQUEST_LINE_START.test(head.slice(head.lastIndexOf('\n') + 1));
}

/**
 * The first of Host, Authorization and (when `contentType`) Content-Type that a request carries
 * more than once, or null. Authorization counts twice too when one field holds two credentials
 * (`Bearer a, Bearer b`: a proxy joining two fields with a comma, RFC 9110 §5.3).
 */
function repeatedField(
  rawHeaders: string[],
  contentType: boolean,
): 'Host' | 'Authorization' | 'Content-Type' | null {
  if (sentValues(rawHeaders, 'host').length > 1) return 'Host';
  const authorization = sentValues(rawHeaders, 'authorization');
  if (authorization.length > 1 || (authorization.length === 1 && joinsCredentials(authorization[0]!)))
    return 'Authorization';
  return contentType && sentValues(rawHeaders, 'content-type').length > 1 ? 'Content-Type' : null;
}

/** A comma, then what starts a credential: an auth scheme, spaces, and a value that is not `=` (an auth-param's). */
const SECOND_CREDENTIAL = /,[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+[ \t]+[^\s=,]/;

/**
 * Whether one Authorization value holds two credentials. A credential holds no comma outside its
 * auth-params (RFC 9110 §11.4), and those are `name=value`, a quoted value read as a whole.
 */
function joinsCredentials(value: string): boolean {
  if (!value.includes(',')) return false;
  return SECOND_CREDENTIAL.test(value.replace(/"(?:[^"\\]|\\.)*"/g, '""'));
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route takes an API key (documented()): its 401 and invalid_request 400 challenge for one. */
    keyChallenge?: boolean;
    /** The route's own invalid_request challenge, where its Bearer credential is not an API key. */
    invalidRequestChallenge?: (request: FastifyRequest, description: string) => string;
  }
}

/**
 * The `WWW-Authenticate` of a 400 refusing Authorization sent twice (RFC 6750 §3.1 invalid_request)
 * on a route taking a Bearer credential; null on a route that takes none.
 */
function invalidRequestChallenge(request: FastifyRequest, description: string): string | null {
  const config = request.routeOptions.config;
  if (config?.invalidRequestChallenge) return config.invalidRequestChallenge(request, description);
  return config?.keyChallenge ? keyInvalidRequest(description) : null;
}
