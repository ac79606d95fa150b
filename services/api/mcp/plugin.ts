import { createHash, randomUUID } from 'node:crypto';
import { MAX_BATCH_SIZE } from '@modelcontextprotocol/sdk/server/requestBody.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest, LATEST_PROTOCOL_VERSION } from '@modelcontextprotocol/sdk/types.js';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import {
  ERRORS,
  type ErrorCode,
  errorMessage,
  RpcErrorData,
  ServiceError,
} from '../../../contracts/errors.ts';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { type Caller, decorateCaller } from '../../metering/caller.ts';
import { ServiceMeta } from '../../metering/service-meta.ts';
import { JSON_UTF8 } from '../../shared/media-types.ts';
import { sentValues } from '../../shared/raw-headers.ts';
import { onResponseClosed } from '../../shared/response-closed.ts';
import { answeredBy } from '../answer-at-turn-end.ts';
import {
  errorHandler,
  REFUSAL_CACHE_CONTROL,
  rpcErrorBodyWithService,
  rpcErrorWithService,
} from '../errors.ts';
import { codesText, documented, RESPONSE_HEADERS, type ResponseDoc, undocumented } from '../openapi.ts';
import { checkEnvelope, ENVELOPE_PASSED } from './envelope.ts';
import { MCP_INVALID_REQUEST } from './error-codes.ts';
import { answerAlso, answeredAlso, handOver } from './hand-over.ts';
import { ACCEPT_BOTH, acceptsAnswer, replaceHeader } from './http-headers.ts';
import { cancelledRequestId, InFlightIds, releaseId, requestIds } from './in-flight.ts';
import { type ParamsRefusal, paramsRefusal } from './params-check.ts';
import {
  corsHeaders,
  type GuardConfig,
  hostAllowed,
  logRefusedHost,
  originAllowed,
} from './request-guard.ts';
import { createMcpServer, SERVER_INSTRUCTIONS, SIGNIN_INSTRUCTIONS } from './server.ts';
import { answerToolCall, modernToolCall, plainToolCall } from './session-call.ts';
import { type SessionPool, SessionTable } from './sessions.ts';
import { statelessMcp } from './stateless.ts';
import { refusedKeyError, type ToolCallDeps } from './tool-call.ts';
import { PROTOCOL_VERSIONS, SESSION_VERSIONS } from './versions.ts';

export interface McpPluginOptions extends ToolCallDeps {
  guard: GuardConfig;
  idleMs: number;
  /** How often idle sessions are looked for (default: half the idle time, within 1 s–60 s). */
  sweepIntervalMs?: number;
  /** Open sessions in all, and per caller (key, or client address). */
  maxSessions?: number;
  maxSessionsPerCaller?: number;
  /** Of maxSessions, the most anonymous callers hold together, and free keys (unset: a quarter each); paid keys hold the rest. */
  maxAnonymousSessions?: number;
  maxFreeSessions?: number;
  /** Told the number of open sessions whenever it changes (a gauge). */
  onSessionCount?: (open: number) => void;
  /** The same MCP server at a second path that requires sign-in (an OAuth access token acting as a key). */
  signin?: SignInGate;
  /** Keys revoked as this process's key registry folds them: their sessions close at once. */
  keyRevocations: KeyRevocationFeed;
}

/** Tells of each key revoked as the key registry folds it (services/keys/revocations.ts). */
export interface KeyRevocationFeed {
  /** Returns the way to stop being told. */
  onRevoked(listener: (key: { keyId: string; keyHash: string }) => void): () => void;
}

/** Who a request to the sign-in path acts as, or why it is refused (401 with its challenge). */
export type SignInOutcome =
  | { caller: Caller }
  | { status: 401 | 403; challenge: string | null; message: string };

export interface SignInGate {
  path: string;
  /** Throws the catalog's SERVICE_UNAVAILABLE (503, Retry-After) when the token cannot be checked now. */
  authenticate(request: FastifyRequest): Promise<SignInOutcome>;
  /** The WWW-Authenticate challenge of a request refused as malformed (RFC 6750 invalid_request). */
  invalidRequest(request: FastifyRequest, description: string): string;
}

/** The caller a sign-in path authenticated, for the transports that identify callers again. */
const signedIn = new WeakMap<FastifyRequest, Caller>();

/** The methods a page's preflight may ask for (Access-Control-Allow-Methods). */
const MCP_METHODS = 'GET, POST, DELETE';
/**
 * What the MCP paths answer (Allow, RFC 9110 §10.2.1): the preflight's methods and OPTIONS itself,
 * which the paths answer too (204), so a client reading Allow off a 405 or an OPTIONS knows of it.
 */
const MCP_ALLOW = `${MCP_METHODS}, OPTIONS`;

/**
 * A JSON-RPC refusal's document: `data` as RpcErrorData (contracts) declares it, its `_service`
 * in ServiceMeta's shape; `required` names the data members this answer always carries.
 */
const rpcError = (description: string, required: (keyof RpcErrorData)[] = []): ResponseDoc => {
  const data = jsonSchema(RpcErrorData, 'output') as { properties: Record<string, unknown> };
  return {
    description,
    schema: {
      type: 'object',
      properties: {
        jsonrpc: { const: '2.0' },
        error: {
          type: 'object',
          properties: {
            code: { type: 'integer' },
            message: { type: 'string' },
            data: {
              type: 'object',
              properties: {
                ...data.properties,
                _service: {
                  ...jsonSchema(ServiceMeta, 'output'),
                  description:
                    "The caller's auth and live quota, as on every answer, once the caller is known (not on a refused Host or Origin, nor on the sign-in path's 401)",
                },
              },
              ...(required.length > 0 ? { required } : {}),
            },
          },
        },
        id: {},
      },
    },
  };
};

/** The rate limit's refusal: -32000 with data {code RATE_LIMITED, retryable, retry_after_ms, _service}. */
const rpcRateLimited = (description: string): ResponseDoc =>
  rpcError(
    `${description}; data.code RATE_LIMITED, data.retryable true, data.retry_after_ms the wait in milliseconds (Retry-After gives it in whole seconds)`,
    ['code', 'retryable', 'retry_after_ms'],
  );

/** The codes a tool result carries in `structuredContent.code` when `isError` is set (contract 7.3). */
const TOOL_RESULT_CODES: ErrorCode[] = [
  'unknown_tool',
  'invalid_arguments',
  'invalid_input',
  'internal_error',
  'quota_exhausted',
  'payment_not_accepted',
  'unknown_coin',
  'unsupported_timeframe',
  'unsupported_exchange',
  'insufficient_history',
  'venue_unavailable',
];

const MCP_BODY = {
  description:
    'A JSON-RPC 2.0 request, notification or response, or (revision 2025-03-26 and earlier) a batch of them',
  oneOf: [{ type: 'object' }, { type: 'array', items: { type: 'object' }, minItems: 1 }],
};

const REFUSED_HOST = rpcError('-32000: Host or Origin not allowed (DNS-rebinding guard)');
const NO_SESSION = rpcError(
  '-32001, data.code SESSION_NOT_FOUND: session not found (closed, expired, or opened by another caller: then the message says it was opened with another credential, or, opened and asked for without a key, from another client address); send initialize without Mcp-Session-Id',
  ['code'],
);
const VERSION_400 =
  '-32000: MCP-Protocol-Version names a revision not served here (the message lists those that are), disagrees with the one the session negotiated at initialize, or is sent more than once';

/** A refused key's JSON-RPC error as the POST's 200 names it: its number, code and `retryable`. */
function refusedKeyText(code: 'unknown_key' | 'key_unverifiable'): string {
  const { rpc, retryable } = ERRORS[code];
  return `${rpc} (data.code ${code}, retryable ${retryable}, data._service)`;
}

/**
 * A GET's or DELETE's refusal of a key presented and not served: the POST's JSON-RPC error with the
 * catalog's status (no JSON-RPC request to answer with a 200).
 */
const REFUSED_KEY_STATUS: Record<number, ResponseDoc> = {
  401: rpcError(
    `${refusedKeyText('unknown_key')}, id null: the Bearer key is unknown or revoked; a key's revocation closes the sessions it opened, ending their event streams, as soon as the api has folded it, and a session id of theirs is answered this refusal`,
    ['code', 'retryable'],
  ),
  503: {
    ...rpcError(
      `${refusedKeyText('key_unverifiable')}, id null: the Bearer key cannot be checked right now`,
      ['code', 'retryable'],
    ),
    headers: { 'Retry-After': 'seconds to wait before retrying' },
  },
};

/** POST: every JSON-RPC message; answered as JSON (never a stream). */
const POST_RESPONSES: Record<number, ResponseDoc> = {
  200: {
    description: `JSON-RPC response (a batch's: an array, whatever its length, where a message of the batch that is not JSON-RPC 2.0 or has malformed params is answered on its own with -32600 and the others are served). A Bearer key that is unknown or revoked is answered on every request, initialize included (server/discover aside), with the JSON-RPC error ${refusedKeyText('unknown_key')}, or ${refusedKeyText('key_unverifiable')} when it cannot be checked right now; a key not applied (another header, no Bearer) is served as anonymous. A tool that fails answers result.isError with structuredContent.code, one of: ${codesText(TOOL_RESULT_CODES)}`,
    schema: { oneOf: [{ type: 'object' }, { type: 'array', items: { type: 'object' } }] },
    headers: { 'Mcp-Session-Id': RESPONSE_HEADERS['Mcp-Session-Id'] },
  },
  202: { description: 'Notifications or responses only: accepted, no body' },
  400: rpcError(
    `-32700: the body is empty or is not JSON, or an object in it names a member twice (data.code INVALID_JSON, id null), or nests deeper than 64 levels (JSON_TOO_DEEP); ${VERSION_400}; -32000: bad request (no session for a method other than initialize on a transport that needs one); -32600: invalid request, with the request's id when it has one (a message that is not JSON-RPC 2.0, sent alone: no jsonrpc "2.0", a request id that is not a string or an integer, a member JSON-RPC does not define, a method beside a result or an error, a response's result or error of the wrong shape; an empty batch, a batch on protocol revision 2025-06-18 or later, initialize in a batch, initialize on a session already open (send it without Mcp-Session-Id to start a new one); on a method other than tools/call, params present but not an object, an array included, or a params._meta MCP does not define (not an object; progressToken neither a string nor an integer); data.code BATCH_TOO_LARGE: a batch of more than ${MAX_BATCH_SIZE} messages, or with more messages than the rate limit of its caller, or more calls of one tool than its share, which no window could take: not retryable, counted as one request, send smaller batches); -32602: invalid params, with the request's id, naming them: initialize without protocolVersion, capabilities or clientInfo with name and version. A tools/call with malformed params (its _meta included) is not a 400: it is the -32602 tool error (200, result.isError)`,
  ),
  403: REFUSED_HOST,
  404: NO_SESSION,
  406: rpcError(
    '-32000: Accept must take application/json and text/event-stream (media ranges: case aside, parameters ignored, q=0 refuses, */*, application/* and text/* cover them)',
  ),
  409: rpcError('-32600: a request id already in flight on this session'),
  413: rpcError('-32600: the body is larger than the limit'),
  415: {
    ...rpcError(
      '-32600, data.code UNSUPPORTED_MEDIA_TYPE: the body is not application/json, Content-Type is sent more than once, or the body has a Content-Encoding (send it uncompressed)',
    ),
    headers: { 'Accept-Encoding': 'identity: the content coding accepted (on a refused Content-Encoding)' },
  },
  429: rpcRateLimited(
    '-32000: rate limited, with Retry-After (a batch: it does not fit what the window has left)',
  ),
};

/** GET: the session's server-to-client event stream; no body. */
const GET_RESPONSES: Record<number, ResponseDoc> = {
  200: {
    description:
      "The session's event stream (server-to-client messages), open until the session or the client ends it",
    contentTypes: ['text/event-stream'],
    schema: { type: 'string', description: 'Server-sent events, each a JSON-RPC message' },
    headers: {
      'Mcp-Session-Id': RESPONSE_HEADERS['Mcp-Session-Id'],
      'Cache-Control': 'no-cache, no-transform: the stream is never stored or transformed',
      'X-Accel-Buffering': 'no: a proxy passes each event on as it comes',
    },
  },
  400: rpcError(`-32000: no Mcp-Session-Id (a stream belongs to a session); ${VERSION_400}`),
  403: REFUSED_HOST,
  404: NO_SESSION,
  406: rpcError('-32000: Accept must take text/event-stream'),
  409: rpcError(
    '-32000: the session already has its stream open (one a session; it opens again once that one ends)',
  ),
  429: rpcRateLimited('-32000: rate limited, with Retry-After'),
  ...REFUSED_KEY_STATUS,
};

/** DELETE: ends the session; an empty answer. */
const DELETE_RESPONSES: Record<number, ResponseDoc> = {
  200: { description: 'The session is ended: no body, no Content-Type' },
  400: rpcError(`-32000: no Mcp-Session-Id; ${VERSION_400}`),
  403: REFUSED_HOST,
  404: NO_SESSION,
  429: rpcRateLimited('-32000: rate limited, with Retry-After'),
  ...REFUSED_KEY_STATUS,
};

const AUTH_TEXT =
  'Keys go in Authorization: Bearer; without one, calls run on the free anonymous limits; a paid call carries _meta["x402/payment"].';

/** The operations of one MCP path, one per method as it answers (PUT and PATCH answer 405 alone: not listed). */
interface McpDocs {
  POST: ReturnType<typeof documented>;
  GET: ReturnType<typeof documented>;
  DELETE: ReturnType<typeof documented>;
}

function mcpDocs(
  base: { summary: string; description: string; tags: string[]; auth: 'bearer' | 'bearer-optional' },
  extra: Record<number, ResponseDoc> = {},
  /** Headers a 400 of every method may carry besides its own. */
  badRequestHeaders: Record<string, string> = {},
): McpDocs {
  const doc = (what: string, responses: Record<number, ResponseDoc>, body?: typeof MCP_BODY) => {
    const badRequest = responses[400];
    const withHeaders =
      badRequest === undefined || Object.keys(badRequestHeaders).length === 0
        ? responses
        : { ...responses, 400: { ...badRequest, headers: { ...badRequest.headers, ...badRequestHeaders } } };
    return documented({
      ...base,
      summary: `${base.summary}: ${what}`,
      ...(body ? { body } : {}),
      responses: { ...withHeaders, ...extra },
    });
  };
  return {
    POST: doc('send JSON-RPC messages', POST_RESPONSES, MCP_BODY),
    GET: doc("open the session's event stream", GET_RESPONSES),
    DELETE: doc('end the session', DELETE_RESPONSES),
  };
}

const MCP_DOCS = mcpDocs({
  summary: 'MCP over Streamable HTTP (JSON-RPC 2.0)',
  description: `POST initialize opens a session (Mcp-Session-Id); POST without a session answers one-shot calls and the 2026-07-28 stateless revision. GET opens the session's event stream, DELETE ends the session; other methods answer 405. ${AUTH_TEXT}`,
  tags: ['mcp'],
  auth: 'bearer-optional',
});

const SIGNIN_DOCS = mcpDocs(
  {
    summary: 'MCP over Streamable HTTP for hosts that sign in with OAuth (Claude, ChatGPT, Cursor)',
    description:
      'The same server as /mcp, for a caller holding an OAuth access token issued for this resource: the token acts as the API key the person chose when signing in (its plan, quota and rate limits). Without a valid token: 401 with WWW-Authenticate: Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp/signin".',
    tags: ['mcp', 'oauth'],
    auth: 'bearer',
  },
  {
    401: {
      ...rpcError(
        '-32000: sign-in required, or the access token is invalid, expired, revoked or for another resource',
      ),
      headers: {
        'www-authenticate':
          'Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp/signin", scope="mcp", and with a token that was refused, error="invalid_token" and error_description',
      },
    },
    403: rpcError(
      '-32000: Host or Origin not allowed (DNS-rebinding guard); or the token lacks the mcp scope (WWW-Authenticate: Bearer error="insufficient_scope")',
    ),
    503: {
      ...rpcError(
        '-32600, data.code SERVICE_UNAVAILABLE and data.retryable true: the token could not be checked right now (the sign-in store out of reach, at start too); retry shortly',
      ),
      headers: { 'Retry-After': 'seconds to wait before retrying' },
    },
  },
  {
    'www-authenticate':
      'With Authorization sent more than once (data.code BAD_REQUEST): Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp/signin", scope="mcp", error="invalid_request" and error_description (RFC 6750 §3.1)',
  },
);

/** PUT and PATCH: routed (answered 405 with Allow), never listed in the document. */
const MCP_METHODS_ROUTED = ['POST', 'GET', 'DELETE', 'PUT', 'PATCH'] as const;
const docOf = (docs: McpDocs, method: (typeof MCP_METHODS_ROUTED)[number]) =>
  method === 'PUT' || method === 'PATCH' ? undocumented : docs[method];

/**
 * The SDK's zod check, only for a body that names the method: on every one-shot call it failed,
 * and a failed zod parse (its issues, its error) showed in the keyed call's profile.
 */
function isInitialize(body: unknown): boolean {
  return (body as { method?: unknown } | null)?.method === 'initialize' && isInitializeRequest(body);
}

/** What a second event stream of a session is told (the SDK transport's words). */
const ONE_STREAM = 'Conflict: Only one SSE stream is allowed per session';

/** What a second initialize on an open session is told: the session stays as it is; a new one starts without its id. */
const SESSION_ALREADY_INITIALISED =
  'Invalid Request: this session is already initialised; to start a new one, send initialize without Mcp-Session-Id';

/** The id of a parsed body that is one JSON-RPC request with a string or number id; else null. */
function bodyId(body: unknown): string | number | null {
  const id = (body as { id?: unknown } | null | undefined)?.id;
  return Array.isArray(body) || (typeof id !== 'string' && typeof id !== 'number') ? null : id;
}

/**
 * A refusal of the route in JSON-RPC's shape (rpcErrorWithService: with the caller's `_service`
 * once the caller is known, so never to be reused), with the request's id when its body parsed
 * and carries one.
 */
async function rpcRefusal(
  reply: FastifyReply,
  status: number,
  code: number,
  message: string,
  id: string | number | null = bodyId(reply.request.body),
  data: Record<string, unknown> = {},
): Promise<FastifyReply> {
  const body = await rpcErrorWithService(reply.request, code, message, id, data);
  return reply.code(status).header('cache-control', REFUSAL_CACHE_CONTROL).type(JSON_UTF8).send(body);
}

/**
 * What is wrong with the request's MCP-Protocol-Version header, in words; null when it is absent
 * or names a revision served here that agrees with the one its session negotiated (the header
 * cannot speak another revision than the session's: batches, say, are allowed by that one).
 */
function protocolVersionFault(request: FastifyRequest, sessionId: string | undefined): string | null {
  const header = request.headers['mcp-protocol-version'];
  if (header === undefined) return null;
  const times = sentValues(request.raw.rawHeaders, 'mcp-protocol-version').length;
  if (times > 1) return `Bad Request: MCP-Protocol-Version was sent ${times} times; send it once`;
  const version = Array.isArray(header) ? header.join(', ') : header;
  if (!PROTOCOL_VERSIONS.includes(version)) {
    return `Bad Request: Unsupported protocol version: ${version} (supported versions: ${PROTOCOL_VERSIONS.join(', ')})`;
  }
  const settled = sessionId === undefined ? undefined : negotiated.get(sessionId);
  if (settled !== undefined && settled !== version) {
    return `Bad Request: MCP-Protocol-Version ${version} disagrees with ${settled}, the revision this session negotiated at initialize`;
  }
  return null;
}

/**
 * A POST body the route does not read, refused in the catalog's 415 shape (-32600, data.code
 * UNSUPPORTED_MEDIA_TYPE) before it is parsed: Content-Type sent more than once (Node keeps the
 * first, the SDK transport joined them and answered its own 415), or a content coding (gzip…) of
 * the body, which was read as JSON and called not UTF-8 (RFC 9110: 415, with Accept-Encoding).
 */
function unreadableBody(request: FastifyRequest): ServiceError | null {
  if (request.method !== 'POST') return null;
  const types = sentValues(request.raw.rawHeaders, 'content-type').length;
  if (types > 1) {
    return new ServiceError('UNSUPPORTED_MEDIA_TYPE', {}, undefined, {
      message: `Content-Type was sent ${types} times: send it once, as application/json`,
    });
  }
  const coding = request.headers['content-encoding'];
  if (coding !== undefined && String(coding).trim().toLowerCase() !== 'identity') {
    return new ServiceError('UNSUPPORTED_MEDIA_TYPE', {}, undefined, {
      message: `the body is sent with Content-Encoding ${String(coding)}: send it uncompressed, as application/json`,
      headers: { 'accept-encoding': 'identity' },
    });
  }
  return null;
}

/**
 * POST/GET/DELETE /mcp: MCP over Streamable HTTP with sessions and JSON responses. The route
 * owns the session table; the SDK transport of each session does the protocol work.
 */
export function mcpPlugin(options: McpPluginOptions): FastifyPluginAsync {
  return async (app) => {
    const sessions = new SessionTable({
      idleMs: options.idleMs,
      ...(options.sweepIntervalMs === undefined ? {} : { sweepIntervalMs: options.sweepIntervalMs }),
      ...(options.maxSessions === undefined ? {} : { maxSessions: options.maxSessions }),
      ...(options.maxSessionsPerCaller === undefined ? {} : { maxPerOwner: options.maxSessionsPerCaller }),
      ...(options.maxAnonymousSessions === undefined ? {} : { maxAnonymous: options.maxAnonymousSessions }),
      ...(options.maxFreeSessions === undefined ? {} : { maxFree: options.maxFreeSessions }),
      ...(options.onSessionCount ? { onCount: options.onSessionCount } : {}),
      logger: options.logger,
    });
    const inFlight = new InFlightIds();
    // The sign-in gate names the caller its token acts as (with the rate limit off too).
    decorateCaller(app);
    // Refusals before the transport sees the request (a body that is not JSON, or too deep) in JSON-RPC's shape.
    app.setErrorHandler(errorHandler(rpcErrorBodyWithService));
    // Only JSON is read (registerJsonParser): a text/plain body is the catalog's
    // UNSUPPORTED_MEDIA_TYPE (415, -32600), as every other media type is, never handed to the SDK
    // transport (whose own 415 says -32000).
    // A repeated Content-Type or a compressed body: the same 415, before the body is read.
    app.addHook('preParsing', async (request, _reply, payload) => {
      const refused = unreadableBody(request);
      if (refused !== null) throw refused;
      return payload;
    });
    // The Host and Origin guard (DNS rebinding) first, on every route here: a refused request is
    // answered before the body is read and before the rate limit (preValidation), so it takes
    // nothing from any budget and is 403 whatever is left of it. Then CORS headers from the start
    // for a listed origin: an answer sent before the route's handler (the rate limit's 429 with
    // Retry-After, a body that cannot be read) is readable by the page too.
    const guard = requestGuard(options.guard);
    app.addHook('onRequest', (request, reply, done) => {
      // Refused: answered here, and the rest of the request's hooks never run.
      if (!guard(request, reply)) return;
      const { origin } = request.headers;
      if (origin !== undefined) reply.headers(corsHeaders(origin, MCP_METHODS));
      done();
    });
    // Shutting down: each session's GET event stream ends as the listener closes, so its client
    // sees the stream end and the stop is not held by it. The sessions themselves close after the
    // in-flight calls finish (onClose, once the server has closed).
    app.addHook('preClose', async () => sessions.endStreams());
    // A revoked key loses what it holds here as soon as this process's key registry folds the
    // revocation, whoever recorded it (this api, another, the keys CLI): the sessions it opened
    // close, each event stream with them, without waiting for a request of the key's. A request
    // on one of them afterwards is refused as the key is (-32003, 401 on a GET or DELETE).
    const stopRevocations = options.keyRevocations.onRevoked(({ keyId, keyHash }) => {
      sessions.closeOwnedBy(ownerOf({ kind: 'key', id: keyHash })).then(
        (closed) => {
          if (closed > 0) options.logger.info({ keyId, closed }, 'mcp sessions of a revoked key closed');
        },
        (err: unknown) => options.logger.warn({ err, keyId }, 'mcp sessions of a revoked key not closed'),
      );
    });
    app.addHook('onClose', async () => stopRevocations());
    app.addHook('onClose', async () => sessions.closeAll());
    const stateless = statelessMcp(options);
    app.addHook('onClose', async () => stateless.close());

    const handle = mcpHandler({ options, sessions, inFlight, stateless });
    // One route handler for both paths: the answer is sent by the handler, never returned (answeredBy).
    const route: RouteHandler = (request, reply) => answeredBy(handle(request, reply), reply);
    app.options('/mcp', preflight);
    for (const method of MCP_METHODS_ROUTED) {
      app.route({ method, url: '/mcp', handler: route, config: docOf(MCP_DOCS, method) });
    }
    if (options.signin) signInRoutes(app, options.signin, route);
  };
}

type Guard = (request: FastifyRequest, reply: FastifyReply) => boolean;
/** Sends (or hands over) every answer itself; a plain call's resolves to nothing (see answeredBy). */
type Handler = (request: FastifyRequest, reply: FastifyReply) => Promise<FastifyReply | undefined>;
type RouteHandler = (request: FastifyRequest, reply: FastifyReply) => undefined;

/** Host and Origin checks (DNS rebinding); false once the refusal is sent (no caller yet: no `_service` in it). */
function requestGuard(config: GuardConfig): Guard {
  // The Host last allowed: a client sends the same one on every call, and taking it apart (trim,
  // lower case, the port cut off) made two strings per call.
  let allowedHost: string | undefined;
  return (request, reply) => {
    const headers = request.headers;
    const host = headers.host;
    if (host === undefined || host !== allowedHost) {
      if (!hostAllowed(config, host)) {
        logRefusedHost(request.log, host);
        void rpcRefusal(reply, 403, -32000, 'Forbidden: Host not allowed');
        return false;
      }
      allowedHost = host;
    }
    const origin = headers.origin;
    // Without an Origin (not a browser) there is nothing to check and no CORS header to send.
    if (origin === undefined) return true;
    if (!originAllowed(config, origin)) {
      void rpcRefusal(reply, 403, -32000, 'Forbidden: Origin not allowed');
      return false;
    }
    // Its CORS headers are on the reply already (the plugin's onRequest hook).
    return true;
  };
}

/**
 * Its Host and Origin passed the plugin's guard (onRequest). With Allow, as RFC 9110 §9.3.7 asks of
 * a successful OPTIONS.
 */
async function preflight(_request: FastifyRequest, reply: FastifyReply) {
  return reply.code(204).header('allow', MCP_ALLOW).send();
}

interface HandlerDeps {
  options: McpPluginOptions;
  sessions: SessionTable;
  inFlight: InFlightIds;
  stateless: ReturnType<typeof statelessMcp>;
}

/** Every method at the MCP path: to a session's transport, a one-shot or modern call, or the stateless SDKs. */
function mcpHandler(deps: HandlerDeps): Handler {
  const { options, sessions, stateless } = deps;
  /** Sessions whose event stream (GET) is open. */
  const streaming = new WeakSet<StreamableHTTPServerTransport>();
  // Host and Origin were checked by the plugin's guard (onRequest), before the rate limit.
  return async (request, reply) => {
    const method = request.method;
    if (method !== 'GET' && method !== 'POST' && method !== 'DELETE') {
      reply.header('allow', MCP_ALLOW);
      return rpcRefusal(reply, 405, -32000, 'Method not allowed.');
    }
    const header = request.headers['mcp-session-id'];
    const sessionId = Array.isArray(header) ? header[0] : header;
    let transport: StreamableHTTPServerTransport | undefined;
    if (sessionId !== undefined) {
      transport = sessions.touch(sessionId, {
        owner: sessionOwner(request),
        credential: () => credentialOf(request),
      });
      if (transport === undefined) {
        const openedWith = sessions.openedWith(sessionId);
        // No such session open, asked for with a refused key (a revoked key's sessions closed at
        // its revocation): the key is refused, as on every request of it, not told the session is gone.
        if (openedWith === undefined && request.callerRefused !== null) {
          if (method !== 'POST') return refusedKeyStatus(request, reply);
          const refused = await refusedKeyAnswer(options, request, reply, undefined);
          if (refused !== null) return refused;
        }
        return sessionNotFound(reply, openedWith, request);
      }
    }
    // The revision the request speaks and the answers it takes, read as HTTP defines them, before
    // any transport (whose checks compared substrings and trusted the header over the session).
    const versionFault = protocolVersionFault(request, sessionId);
    if (versionFault !== null) return rpcRefusal(reply, 400, -32000, versionFault);
    const accept = request.headers.accept;
    if (!acceptsAnswer(accept, method)) {
      return rpcRefusal(
        reply,
        406,
        -32000,
        method === 'GET'
          ? 'Not Acceptable: Client must accept text/event-stream'
          : 'Not Acceptable: Client must accept both application/json and text/event-stream',
      );
    }
    // Accepted in a spelling the transports' substring check would refuse: handed to them as theirs.
    if (method !== 'DELETE' && accept !== ACCEPT_BOTH) {
      replaceHeader(request.raw, 'accept', method === 'GET' ? 'text/event-stream' : ACCEPT_BOTH);
    }
    // The envelope (envelope.ts), then params, refused alike with or without a session, before any
    // transport; a tools/call's params, whatever their shape, are refused by callTool as a tool error.
    const envelope =
      method === 'POST' ? checkEnvelope(request.body, protocolVersion(request)) : ENVELOPE_PASSED;
    const refusal =
      method === 'POST'
        ? (envelope.refusal ?? batchSizeRefusal(request.body) ?? paramsRefusal(request.body))
        : null;
    if (refusal !== null) {
      const data = 'data' in refusal ? (refusal.data as Record<string, unknown>) : {};
      return rpcRefusal(reply, refusal.status, refusal.code, refusal.message, refusal.id, data);
    }
    // A batch served (its revision has batches) with messages at fault: each of those is answered
    // with its own -32600 and the others are served (JSON-RPC 2.0 §6), not the batch refused whole.
    const { faults } = envelope;
    if (faults.length > 0) {
      const answers = faults.map((fault) => ({
        jsonrpc: '2.0',
        id: fault.id,
        error: { code: MCP_INVALID_REQUEST, message: fault.message },
      }));
      const taken = new Set(faults.map((fault) => fault.index));
      const rest = (request.body as unknown[]).filter((_, index) => !taken.has(index));
      if (rest.length === 0) return batchAnswer(reply, answers, sessionId);
      request.body = rest;
      answerAlso(request, answers);
    }
    // A key presented but not served (unknown, revoked, or not checkable right now): every request
    // is refused with the JSON-RPC error a tools/call gets, initialize and tools/list included, and
    // a GET or DELETE of its session as well (refusedKeyStatus).
    if (request.callerRefused !== null) {
      // A refused key's session keeps no event stream: its revocation closed the key's sessions
      // (keyRevocations); one the key still reaches here has its stream ended by this request.
      if (transport !== undefined && request.callerRefused.reason === 'unknown') {
        transport.closeStandaloneSSEStream();
      }
      if (method !== 'POST') return refusedKeyStatus(request, reply);
      const refused = await refusedKeyAnswer(options, request, reply, sessionId);
      if (refused !== null) return refused;
    }
    // initialize on an open session: refused here with the request's id (the transport's own
    // refusal carried id null, which JSON-RPC keeps for an id that could not be read).
    if (sessionId !== undefined && method === 'POST' && isInitialize(request.body)) {
      return rpcRefusal(reply, 400, MCP_INVALID_REQUEST, SESSION_ALREADY_INITIALISED);
    }
    if (sessionId === undefined && method === 'POST' && isInitialize(request.body)) {
      const owner = sessionOwner(request);
      const pool = sessionPool(request);
      await sessions.makeRoom(owner, pool);
      const instructions = signedIn.has(request) ? SIGNIN_INSTRUCTIONS : SERVER_INSTRUCTIONS;
      const version = negotiatedVersion(request.body);
      transport = await openSession(deps, owner, credentialOf(request), pool, instructions, version);
    } else if (sessionId === undefined && method === 'POST') {
      // No session and not initialize: a one-shot call, or the 2026-07-28 revision. Their plain
      // tools/call is answered here as on a session (see session-call.ts); the rest by the SDKs
      // (stateless.ts).
      const oneShot = plainToolCall(request);
      if (oneShot !== null) {
        await answerToolCall(options, oneShot, request, reply, { kind: 'one-shot' });
        return undefined;
      }
      const modern = modernToolCall(request);
      if (modern !== null) {
        await answerToolCall(options, modern, request, reply, { kind: 'modern' });
        return undefined;
      }
      return stateless.serve(request, reply, signedIn.get(request));
    } else if (transport === undefined) {
      return rpcRefusal(reply, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
    }
    if (sessionId !== undefined && method === 'POST') {
      // A client cancelling a call in flight here: the call is not counted if it has not been
      // debited yet (callTool). The transport still takes the notification (202).
      const cancelled = cancelledRequestId(request.body);
      if (cancelled !== undefined) deps.inFlight.cancel(sessionId, cancelled);
      // A plain tools/call is answered here, error or not, its one id claimed without a claim
      // object and free again once the answer is handed over. No per-request close listener:
      // the call always ends, and one showed in the profile.
      const call = plainToolCall(request);
      if (call !== null) {
        const held = deps.inFlight.claimOne(sessionId, call.id);
        if (held === null) return inFlightConflict(reply, call.id);
        try {
          await answerToolCall(options, call, request, reply, {
            kind: 'session',
            sessionId,
            cancelled: () => deps.inFlight.isCancelled(sessionId, call.id),
          });
        } finally {
          releaseId(held, call.id);
          deps.inFlight.settle(sessionId, call.id);
        }
        return undefined;
      }
      const claim = deps.inFlight.claim(sessionId, requestIds(request.body));
      if ('conflict' in claim) return inFlightConflict(reply, claim.conflict);
      // Answered, failed or dropped by the client: the ids are free again.
      onResponseClosed(reply.raw, () => claim.release());
    }
    if (method === 'GET') {
      // One event stream a session (the transport's rule), refused here in the route's shape: the
      // transport's own 409 carried neither `_service` nor Cache-Control. Free once the stream
      // closes, whoever ends it.
      if (streaming.has(transport)) return rpcRefusal(reply, 409, -32000, ONE_STREAM);
      const held = transport;
      streaming.add(held);
      onResponseClosed(reply.raw, () => streaming.delete(held));
    }
    return handOver(transport, request, reply, signedIn.get(request), 'mcp request failed');
  };
}

/**
 * The 2026-07-28 revision's discovery (the server's card, the same for every caller): answered
 * whatever the key. The 2.x SDK client reads any error to it as a server of an earlier revision
 * (and, pinned to 2026-07-28, fails with "did not offer" rather than the key's -32003); its next
 * request (tools/list) is refused for the key instead.
 */
const DISCOVER_METHOD = 'server/discover';

/**
 * The answer to a POST whose Bearer key was presented and refused (request.callerRefused): each
 * request in it (initialize, tools/list, ping… as tools/call; server/discover aside) gets the JSON-RPC error -32003
 * unknown_key (-32004 key_unverifiable when the key cannot be checked right now), HTTP 200 as a
 * refused tools/call is; a batch an array of them. Null for a body of notifications and responses
 * only, which the transport takes as ever (202): they ask for nothing. A key not applied (no
 * Bearer, another header) is no refused key: served as anonymous (contract 5.3).
 */
async function refusedKeyAnswer(
  options: McpPluginOptions,
  request: FastifyRequest,
  reply: FastifyReply,
  sessionId: string | undefined,
): Promise<FastifyReply | null> {
  const refused = request.callerRefused;
  if (refused === null) return null;
  const body = request.body;
  const ids = (Array.isArray(body) ? body : [body]).flatMap((message) => {
    const { method, id } = message as { method?: unknown; id?: unknown };
    return typeof method === 'string' &&
      method !== DISCOVER_METHOD &&
      (typeof id === 'string' || typeof id === 'number')
      ? [id]
      : [];
  });
  if (ids.length === 0) return null;
  const { code, message, data } = await refusedKeyError(options, refused);
  const answers = ids.map((id) => ({ jsonrpc: '2.0', id, error: { code, message, data } }));
  if (!Array.isArray(body)) return batchAnswer(reply, answers[0]!, sessionId);
  return batchAnswer(reply, [...answers, ...answeredAlso(request)], sessionId);
}

/**
 * A GET or DELETE whose Bearer key was presented and refused: the JSON-RPC error a POST gets
 * (-32003 unknown_key, -32004 key_unverifiable, data.code, retryable and `_service`), id null, with
 * the catalog's status: 401 with the key's challenge (app.ts), or 503 with Retry-After. Not a 200 as
 * on a POST, where the error answers a JSON-RPC request: these carry none, and a 200 to a GET reads
 * as the event stream opened, a 200 to a DELETE as the session ended.
 */
function refusedKeyStatus(request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
  const refused = request.callerRefused!;
  const code = refused.reason === 'unknown' ? 'unknown_key' : 'key_unverifiable';
  const { status, rpc, retryable } = ERRORS[code];
  if (retryable) reply.header('retry-after', '1');
  return rpcRefusal(reply, status, rpc, refused.message, null, { code, retryable });
}

/** A 200 JSON answer the route gives itself: one JSON-RPC answer, or a batch's array of them. */
function batchAnswer(
  reply: FastifyReply,
  answers: object | readonly object[],
  sessionId: string | undefined,
): FastifyReply {
  if (sessionId !== undefined) reply.header('mcp-session-id', sessionId);
  return reply
    .code(200)
    .header('cache-control', REFUSAL_CACHE_CONTROL)
    .type(JSON_UTF8)
    .send(JSON.stringify(answers));
}

/**
 * 404 -32001 (data.code SESSION_NOT_FOUND) for an Mcp-Session-Id this caller cannot use: none open
 * (closed, expired, or the api restarted), or one another caller opened, which the message says:
 * another credential (another key, an unknown one, or none where it was opened with one), or, for
 * a session opened and asked for with none, another client address (an anonymous session is its
 * address's). A host that changed its key or its network learns why its session is gone. Either
 * way the remedy is the same (initialize without the id), as MCP asks of a client on a 404;
 * nothing of the session is shown or usable by the caller. `openedWith`: SessionTable.openedWith.
 */
function sessionNotFound(
  reply: FastifyReply,
  openedWith: string | null | undefined,
  request: FastifyRequest,
): Promise<FastifyReply> {
  const code = 'SESSION_NOT_FOUND';
  const message =
    openedWith === undefined
      ? ERRORS[code].message
      : openedWith === null && credentialOf(request) === null
        ? "Session not found for this caller: it was opened without a key from another client address (an anonymous session is its address's); send initialize without Mcp-Session-Id to open a session from this one"
        : 'Session not found for this caller: it was opened with another credential (another API key, or none); send initialize without Mcp-Session-Id to open a session with this one, or send the credential that opened it';
  return rpcRefusal(reply, ERRORS[code].status, ERRORS[code].rpc, message, undefined, { code });
}

/**
 * The revision a request speaks: the one its session negotiated, else its MCP-Protocol-Version
 * header (a header that disagrees with the session is refused: protocolVersionFault).
 */
function protocolVersion(request: FastifyRequest): string | undefined {
  const session = request.headers['mcp-session-id'];
  const settled = typeof session === 'string' ? negotiated.get(session) : undefined;
  if (settled !== undefined) return settled;
  const header = request.headers['mcp-protocol-version'];
  return typeof header === 'string' ? header : undefined;
}

/**
 * The revision each open session's initialize settled on (the SDK server keeps it to itself), by
 * session id: the rate limit asks before the route has looked the session up (refusesBatch).
 */
const negotiated = new Map<string, string>();

/**
 * Whether the route refuses this request's JSON-RPC batch whole (envelope.ts: an empty batch, one
 * on revision 2025-06-18 or later, one holding initialize; or one longer than MCP_MAX_BATCH). The
 * rate limit, which runs first, counts such a batch as one request instead of one per message; a
 * batch whose members at fault are answered on their own is served, and counted per message.
 */
export function refusesBatch(request: FastifyRequest): boolean {
  return (
    request.method === 'POST' &&
    Array.isArray(request.body) &&
    (checkEnvelope(request.body, protocolVersion(request)).refusal !== null ||
      batchSizeRefusal(request.body) !== null)
  );
}

/**
 * Messages a JSON-RPC batch may hold: the SDK's transports answer a longer one 400 -32600 without
 * a code of ours, after the rate limit would have counted every message of it.
 */
export const MCP_MAX_BATCH = MAX_BATCH_SIZE;

/** A batch longer than MCP_MAX_BATCH: 400 -32600 BATCH_TOO_LARGE, refused before any transport. */
function batchSizeRefusal(body: unknown): (ParamsRefusal & { data: { code: ErrorCode } }) | null {
  if (!Array.isArray(body) || body.length <= MCP_MAX_BATCH) return null;
  const code = 'BATCH_TOO_LARGE';
  const bound = `is more than a batch may hold (${MCP_MAX_BATCH} messages)`;
  return {
    status: ERRORS[code].status,
    code: ERRORS[code].rpc,
    message: errorMessage(code, { size: body.length, what: 'messages', bound, limit: MCP_MAX_BATCH }),
    id: null,
    data: { code },
  };
}

/** What the SDK server answers an initialize asking for `asked`: that revision if supported, else the latest. */
function negotiatedVersion(body: unknown): string {
  const asked = (body as { params?: { protocolVersion?: unknown } } | null)?.params?.protocolVersion;
  return typeof asked === 'string' && SESSION_VERSIONS.includes(asked) ? asked : LATEST_PROTOCOL_VERSION;
}

/** 409 for a request whose id (or one of whose ids) is already in flight on its session. */
function inFlightConflict(reply: FastifyReply, id: string | number): Promise<FastifyReply> {
  return rpcRefusal(
    reply,
    409,
    -32600,
    `Invalid Request: a request with id ${JSON.stringify(id)} is already in flight on this session`,
    id,
  );
}

/** The caller a new session counts against: its key when one applies, else its address. */
function sessionOwner(request: FastifyRequest): string {
  const caller = signedIn.get(request) ?? request.caller;
  if (caller) return ownerOf(caller.subject);
  if (request.callerRefused) return `anonymous:${request.callerRefused.caller.subject.id}`;
  throw new Error('an MCP session without a caller: the caller hook (callerPlugin) runs before every route');
}

/** The owner of the sessions a quota subject opens (a key's: its hash). */
function ownerOf(subject: { kind: string; id: string }): string {
  return `${subject.kind}:${subject.id}`;
}

/** The share of the session cap a caller's sessions take: anonymous, a free key, or a paid one. */
function sessionPool(request: FastifyRequest): SessionPool {
  const caller = signedIn.get(request) ?? request.caller;
  if (!caller || caller.subject.kind === 'anonymous') return 'anonymous';
  return caller.subject.plan === 'free' ? 'free' : 'paid';
}

/** A digest of the credential a request presents (its Authorization header), null without one. */
function credentialOf(request: FastifyRequest): string | null {
  const header = request.headers.authorization;
  return header === undefined ? null : createHash('sha256').update(header).digest('base64url');
}

async function openSession(
  deps: HandlerDeps,
  owner: string,
  credential: string | null,
  pool: SessionPool,
  instructions: string,
  version: string,
): Promise<StreamableHTTPServerTransport> {
  const { sessions, inFlight } = deps;
  const server = createMcpServer(deps.options, instructions);
  const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: true,
    onsessioninitialized: (id): void => {
      negotiated.set(id, version);
      sessions.add(id, server, transport, owner, credential, pool);
    },
    onsessionclosed: (id): void => {
      sessions.forget(id);
      inFlight.forget(id);
      negotiated.delete(id);
    },
  });
  transport.onclose = () => {
    if (transport.sessionId) {
      sessions.forget(transport.sessionId);
      inFlight.forget(transport.sessionId);
      negotiated.delete(transport.sessionId);
    }
  };
  await server.connect(transport);
  return transport;
}

/** The same handler at the sign-in path, behind the gate that turns an access token into its key. */
function signInRoutes(app: FastifyInstance, gate: SignInGate, route: RouteHandler): void {
  app.options(gate.path, preflight);
  for (const method of MCP_METHODS_ROUTED) {
    app.route({
      method,
      url: gate.path,
      handler: route,
      // Authorization sent twice (refused 400 by the app's hook before the gate runs) is a Bearer
      // request sending its token more than one way: RFC 6750 §3.1 invalid_request, in this
      // resource's challenge (the app's hook reads it here).
      config: { ...docOf(SIGNIN_DOCS, method), invalidRequestChallenge: gate.invalidRequest },
      onRequest: signInGate(gate),
    });
  }
}

/**
 * Before the rate limit (a preValidation hook): the limit then counts the key the token acts as.
 */
function signInGate(gate: SignInGate) {
  return async (request: FastifyRequest, reply: FastifyReply) => {
    // Host and Origin were checked first (the plugin's guard, an onRequest hook before this
    // route's): a refused Origin gets 403 and no Access-Control-Allow-Origin, never a 401 that
    // lets its page read the challenge.
    const outcome = await gate.authenticate(request);
    if ('caller' in outcome) {
      signedIn.set(request, outcome.caller);
      request.caller = outcome.caller;
      return;
    }
    if (outcome.challenge !== null) reply.header('www-authenticate', outcome.challenge);
    return rpcRefusal(reply, outcome.status, -32000, outcome.message);
  };
}
