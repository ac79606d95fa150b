import { readFileSync } from 'node:fs';
import swagger from '@fastify/swagger';
import scalar from '@scalar/fastify-api-reference';
import type { FastifyInstance, FastifySchema } from 'fastify';
import { z } from 'zod';
import { ERRORS, ErrorBody, type ErrorCode, isErrorCode } from '../../contracts/errors.ts';
import { jsonSchema } from '../../contracts/json-schema.ts';
import { OAuthErrorBody } from '../../contracts/oauth.ts';
import { webhookOpenApi } from '../../contracts/webhook-schemas.ts';
import { isSignInPage, isSignInPath, UNLIMITED_PATHS } from '../metering/caller.ts';
import { ServiceBlock } from '../metering/service-meta.ts';
import { setBounded } from '../shared/bounded-map.ts';
import { openToAnyOrigin } from './cors.ts';
import type { FieldCodes } from './errors.ts';
import { originCacheControl, publicOrigin } from './public-origin.ts';
import { servedAt } from './recorded-origin.ts';

/**
 * The OpenAPI 3.1 document, generated from the zod contracts each route declares with
 * `declared()` (validated by the type provider's compiler and documented from the same schema) or,
 * for answers the handler writes itself (files, pages, the x402 routes that judge their body only
 * once a payment comes), with `documented()`. Responses keep their bytes: the document describes
 * them and the conformance test checks every real answer against it, rather than a response
 * serializer that would drop fields.
 */

type Json = Record<string, unknown>;

/**
 * Response headers a client may read, each described once: a route names those it sends in
 * `sends` (on every answer) or a response's `headers`; the rate limit's are added to every
 * operation it limits. The conformance test fails on a header sent and not declared.
 */
export const RESPONSE_HEADERS = {
  'Cache-Control': 'How long the answer may be reused (no-store: never)',
  Vary: 'Request headers the answer depends on',
  ETag: 'The version of the answer, for If-None-Match',
  Allow: 'The methods the path answers',
  'Retry-After': 'Whole seconds to wait before calling again (a rate limit, a quota, a retryable outage)',
  'RateLimit-Limit':
    'Requests this caller may make in the current window (on every answer of a limited operation, refusals included; not on those answered before routing, see `default`)',
  'RateLimit-Remaining': 'Requests left to this caller in the current window',
  'RateLimit-Reset': 'Whole seconds until the current window starts afresh',
  'Mcp-Session-Id': 'The MCP session an initialize opened; send it on the session’s next requests',
  'PAYMENT-RESPONSE': 'Base64 JSON settlement response of a paid call (x402 v2)',
  'X-PAYMENT-RESPONSE': 'Base64 JSON settlement response of a paid call (x402 v1)',
  'x-payment-replayed':
    'true: this payment was settled before; the answer is the one it bought, not a second charge',
  'X-Frame-Options': 'DENY: the page is never shown in a frame',
  'Content-Security-Policy':
    "What the page may load and run: its own scripts, styles and API only, and frame-ancestors 'none' (never shown in a frame)",
  'X-Content-Type-Options': 'nosniff: the body is read only as its Content-Type says (on every answer)',
  'Referrer-Policy':
    'no-referrer: a link followed from an answer tells nobody where it came from (on every answer)',
  'X-History-Cursor':
    'Sent as an HTTP trailer (announced by Trailer): the cursor after the last row sent; after=<cursor> resumes there',
  Trailer: 'The fields sent as HTTP trailers after the body (X-History-Cursor)',
  'WWW-Authenticate':
    'The challenge of a 401 (RFC 9110 §11.6.1, RFC 6750 §3): Bearer realm="signal-service", with error="invalid_token" when the Bearer key sent is not a live one; on a 400 refusing Authorization sent more than once, error="invalid_request" (RFC 6750 §3.1)',
} as const;
export type ResponseHeader = keyof typeof RESPONSE_HEADERS;

/**
 * Retry-After: on a 429 (the rate limit, a quota) and a 5xx (errors.ts sends it with every
 * retryable one).
 */
const RETRY: readonly ResponseHeader[] = ['Retry-After'];
const retryable = (status: string) => status === '429' || /^5\d\d$/.test(status);

/** On every answer of every path (app.ts sends them before routing). */
export const EVERY_ANSWER_HEADERS: readonly (readonly [ResponseHeader, string])[] = [
  ['X-Content-Type-Options', 'nosniff'],
  ['Referrer-Policy', 'no-referrer'],
];
const EVERY_ANSWER: readonly ResponseHeader[] = EVERY_ANSWER_HEADERS.map(([name]) => name);

/** The rate limit's headers: on every answer of a limited operation. */
const RATE_LIMIT_HEADERS: readonly ResponseHeader[] = [
  'RateLimit-Limit',
  'RateLimit-Remaining',
  'RateLimit-Reset',
];

function headerDescriptions(names: readonly ResponseHeader[]): Record<string, string> {
  return Object.fromEntries(names.map((name) => [name, RESPONSE_HEADERS[name]]));
}

/** OpenAPI header objects for these names, for the document as generated. */
function headerObjects(names: readonly ResponseHeader[]): Record<string, Json> {
  return Object.fromEntries(
    names.map((name) => [name, { schema: { type: 'string' }, description: RESPONSE_HEADERS[name] }]),
  );
}

export interface ResponseDoc {
  description: string;
  /** A zod schema, or a JSON Schema for bodies that have no zod contract (text, files). */
  schema?: z.ZodType | Json;
  /** Media types of the body; default application/json. */
  contentTypes?: string[];
  /** A schema per media type, for answers whose formats differ (NDJSON lines, CSV, Parquet). */
  content?: Record<string, z.ZodType | Json>;
  headers?: Record<string, string>;
}

export interface RouteDoc {
  summary: string;
  description?: string;
  tags: string[];
  /**
   * `bearer`: an API key is required; `bearer-optional`: used when sent; `x402`: paid per call, or
   * served from an API key's plan when one is sent (the key is an alternative, never required).
   */
  auth?: 'bearer' | 'bearer-optional' | 'x402' | 'none';
  body?: z.ZodType | Json;
  bodyContentTypes?: string[];
  query?: z.ZodObject;
  params?: z.ZodObject;
  responses: Record<number, ResponseDoc>;
  /** Every JSON answer carries the `_service` block (caller, quota, receipt). */
  service?: boolean;
  /** Headers any answer of the operation may carry (see RESPONSE_HEADERS). */
  sends?: readonly ResponseHeader[];
}

/** A refusal of the catalog as the document gives it: `_service` typed, when the caller is known. */
const RefusalBody = ErrorBody.extend({ _service: ServiceBlock.optional() });

/**
 * The schema of an answer that also carries `_service`: required on a success (every one carries
 * it), optional on a refusal (one answered before the caller is known has none).
 */
function withService(schema: z.ZodType | Json, success: boolean): z.ZodType | Json {
  if (schema instanceof z.ZodObject)
    return schema.extend({ _service: success ? ServiceBlock : ServiceBlock.optional() });
  return schema;
}

/** A contract as JSON Schema; bodies without a zod contract give their JSON Schema as is. */
function schemaOf(schema: z.ZodType | Json, io: 'input' | 'output'): Json {
  return schema instanceof z.ZodType ? jsonSchema(schema, io) : schema;
}

export const error = (description: string): ResponseDoc => ({ description, schema: RefusalBody });

/**
 * A refusal answering with one of `codes`: the document lists them as the `code` enum (a
 * generated client switches on them), each with its catalog message.
 */
export function refusal(codes: readonly [ErrorCode, ...ErrorCode[]], note?: string): ResponseDoc {
  const described = codes.map((code) => `${code}: ${ERRORS[code].message}`).join('; ');
  return {
    description: note ? `${note} (${described})` : described,
    schema: RefusalBody.extend({ code: z.enum(codes).describe('A code of the error catalog') }),
  };
}

const SECURITY: Record<NonNullable<RouteDoc['auth']>, Json[]> = {
  bearer: [{ apiKey: [] }],
  'bearer-optional': [{}, { apiKey: [] }],
  // A Bearer key is served too (from its plan): a generated client sending one must send it here.
  x402: [{}, { x402: [] }, { apiKey: [] }],
  // Said outright: a public operation, not one whose security was forgotten.
  none: [],
};

/** Marks an operation whose request body may be left out (an `x-` key @fastify/swagger copies as is). */
const OPTIONAL_BODY = 'x-body-optional';

/** A zod body that accepts no body at all (optionalBody): the request may leave it out. */
function bodyIsOptional(body: RouteDoc['body']): boolean {
  return body instanceof z.ZodType && body.safeParse(undefined).success;
}

function toFastifySchema(doc: RouteDoc): FastifySchema {
  const response: Json = {};
  for (const [status, r] of Object.entries(doc.responses)) {
    const types = r.contentTypes ?? ['application/json'];
    const schema = r.schema && doc.service ? withService(r.schema, /^2\d\d$/.test(status)) : r.schema;
    const content = r.content ?? (schema ? Object.fromEntries(types.map((t) => [t, schema])) : undefined);
    response[status] = {
      description: r.description,
      // No body: said with `type: 'null'`, else @fastify/swagger lists an application/json body.
      ...(content ? {} : { type: 'null' }),
      ...(content
        ? {
            content: Object.fromEntries(
              Object.entries(content).map(([t, s]) => [t, { schema: schemaOf(s, 'output') }]),
            ),
          }
        : {}),
      ...(r.headers || doc.sends
        ? {
            // @fastify/swagger wraps each in a header object's `schema`.
            headers: Object.fromEntries(
              Object.entries({ ...headerDescriptions(doc.sends ?? []), ...r.headers }).map(
                ([name, description]) => [name, { type: 'string', description }],
              ),
            ),
          }
        : {}),
    };
  }
  const security = SECURITY[doc.auth ?? 'none'];
  return {
    // A body the contract accepts as absent (optionalBody) is optional; @fastify/swagger says
    // `required: true` of every body, so the mark is read back in withOperationIds.
    ...(bodyIsOptional(doc.body) ? { [OPTIONAL_BODY]: true } : {}),
    summary: doc.summary,
    ...(doc.description ? { description: doc.description } : {}),
    tags: doc.tags,
    security,
    ...(doc.body
      ? {
          body: {
            content: Object.fromEntries(
              (doc.bodyContentTypes ?? ['application/json']).map((t) => [
                t,
                { schema: schemaOf(doc.body!, 'input') },
              ]),
            ),
          },
        }
      : {}),
    ...(doc.query ? { querystring: schemaOf(doc.query, 'input') } : {}),
    ...(doc.params ? { params: schemaOf(doc.params, 'input') } : {}),
    response,
  } as FastifySchema;
}

/** The realm of the API key's Bearer challenge. */
const KEY_REALM = 'signal-service';

/** Whether an operation takes an API key (`Authorization: Bearer`): its 401 challenges for one. */
const takesKey = (auth: RouteDoc['auth']) =>
  auth === 'bearer' || auth === 'bearer-optional' || auth === 'x402';

/**
 * The `WWW-Authenticate` of a 401 refusing an API key (RFC 9110 requires a challenge on every
 * 401): `Bearer realm`, and RFC 6750's invalid_token when the request sent a Bearer key.
 */
export function keyChallenge(authorization: string | string[] | undefined): string {
  const sent = (Array.isArray(authorization) ? authorization[0] : authorization) ?? '';
  return /^Bearer\s+\S/i.test(sent)
    ? `Bearer realm="${KEY_REALM}", error="invalid_token", error_description="the API key is not a live key of this service"`
    : `Bearer realm="${KEY_REALM}"`;
}

/**
 * The `WWW-Authenticate` of a 400 refusing a request that sends its API key more than one way
 * (Authorization twice): RFC 6750 §3.1's invalid_request.
 */
export function keyInvalidRequest(description: string): string {
  return `Bearer realm="${KEY_REALM}", error="invalid_request", error_description="${description.replace(/["\\]/g, '')}"`;
}

/** Route config that puts the route in the OpenAPI document: `app.get(url, { config: documented(...) }, ...)`. */
export function documented(doc: RouteDoc) {
  const schema = toFastifySchema(doc);
  return {
    swaggerTransform: ({ url }: { url: string }) => ({ schema, url }),
    // Read by app.ts: a 401 of this route carries keyChallenge.
    ...(takesKey(doc.auth) ? { keyChallenge: true } : {}),
  };
}

/**
 * One declaration per route: its zod body, params and query validate the request (the app's
 * validator compiler is zod's) and type the handler through the zod type provider, and the same
 * declaration writes the route's OpenAPI entry.
 */
export function declared<
  B extends z.ZodType | undefined = undefined,
  P extends z.ZodObject | undefined = undefined,
  Q extends z.ZodObject | undefined = undefined,
>(
  doc: Omit<RouteDoc, 'body' | 'params' | 'query'> & {
    body?: B;
    params?: P;
    query?: Q;
    /** The route's own codes for its fields, when its family has them (see FieldCodes). */
    codes?: FieldCodes;
  },
) {
  const { codes, ...rest } = doc;
  // The code for a query parameter the schema does not know names the ones it does ({known}).
  const fields = doc.query;
  const ownCodes =
    codes?.unknown && fields
      ? {
          ...codes,
          params: {
            ...codes.params,
            [codes.unknown]: {
              known: Object.keys(fields.shape).join(', ') || 'none',
              ...codes.params?.[codes.unknown],
            },
          },
        }
      : codes;
  return {
    schema: {
      ...(doc.body ? { body: doc.body } : {}),
      ...(doc.params ? { params: doc.params } : {}),
      ...(doc.query ? { querystring: doc.query } : {}),
    } as { body: B; params: P; querystring: Q },
    config: { ...documented(rest as RouteDoc), ...(ownCodes ? { codes: ownCodes } : {}) },
  };
}

/**
 * An operationId for every operation, from its method and path: stable, unique
 * (one per method and path), and readable as a generated client's method name
 * (`POST /api/webhooks/{id}/rotate-secret` → `postApiWebhooksByIdRotateSecret`).
 */
function operationIdOf(method: string, path: string): string {
  const words = path
    .split('/')
    .filter((part) => part !== '')
    .map((part) => (part.startsWith('{') ? `by-${part.slice(1, -1)}` : part))
    .join('-')
    .split(/[^A-Za-z0-9]+/)
    .filter((word) => word !== '');
  return [method.toLowerCase(), ...words.map((w) => w[0]!.toUpperCase() + w.slice(1))].join('');
}

/**
 * Refusals any operation may answer before or beside its own: framing and transport errors of
 * the app (raised before a route runs, or on the raw socket) and the outages of a backing server.
 */
const ANY_ROUTE: readonly ErrorCode[] = [
  'BAD_REQUEST',
  'BAD_URL',
  'URI_TOO_LONG',
  'REQUEST_TIMEOUT',
  'HEADERS_TOO_LARGE',
  'BODY_TOO_LARGE',
  'UNSUPPORTED_MEDIA_TYPE',
  'RATE_LIMITED',
  'event_store_unavailable',
  'storage_full',
  'INTERNAL_ERROR',
];

/** Codes of the catalog with their status and words, for a description. */
export function codesText(codes: readonly ErrorCode[]): string {
  return codes.map((code) => `${code} (${ERRORS[code].status}): ${ERRORS[code].message}`).join('; ');
}

/** The refusals above answered before the request reaches a route or its caller is known: no RateLimit-*. */
const BEFORE_ROUTING: readonly ErrorCode[] = [
  'BAD_URL',
  'URI_TOO_LONG',
  'REQUEST_TIMEOUT',
  'HEADERS_TOO_LARGE',
];

/**
 * The default answer of every operation. `signin`: whether the service serves /mcp/signin
 * (OAUTH_ENABLED), whose PUT and PATCH are answered as /mcp's, after its 401.
 */
const anyRouteResponse = (signin: boolean) => ({
  description: `Refusals any operation may answer, each with its status: ${codesText(ANY_ROUTE)}. The RateLimit-* headers come with every answer of a limited operation, refusals included (the request is counted before its key and input are judged), but ${BEFORE_ROUTING.join(', ')} and a BAD_REQUEST for a request that is not valid HTTP, repeats Host or Authorization, or (on /api/*) repeats Content-Type: those are answered before the request reaches a route. An operation declaring its own words for one of these (POST /api/search and /api/chat: a body over the limit, a repeated header) answers them as its 400 and 413 say. A method the path does not take is answered METHOD_NOT_ALLOWED (${ERRORS.METHOD_NOT_ALLOWED.status}) with Allow listing the methods it takes, except PUT and PATCH on /mcp${signin ? ' and /mcp/signin' : ''}: 405 with a JSON-RPC error body (-32000 'Method not allowed.') and Allow: GET, POST, DELETE, OPTIONS${signin ? ", after /mcp/signin's 401 for a missing or refused token" : ''}; a path the service does not have, NOT_FOUND (404). Two methods no operation lists are answered where Allow lists them: HEAD, on a path that takes GET, as GET is (its status and headers, no body); OPTIONS, the CORS preflight, 204 with no body (and the Access-Control-Allow-* headers for an Origin the path serves pages of; one it does not is answered as the operation's own 403 says).`,
  content: { 'application/json': { schema: jsonSchema(RefusalBody, 'output') } },
});
const ANY_ROUTE_RESPONSE = anyRouteResponse(true);

/**
 * The default answer of a sign-in path (isSignInPath): its own rate budget, refused in RFC 6749's
 * shape rather than with RATE_LIMITED.
 */
const SIGNIN_ROUTE_RESPONSE = {
  ...ANY_ROUTE_RESPONSE,
  description: `${ANY_ROUTE_RESPONSE.description} This is a sign-in path: its rate limit is a budget of its own per caller (RATE_LIMIT_SIGNIN a window, apart from the product's), and past it the answer is not RATE_LIMITED but temporarily_unavailable (${ERRORS.temporarily_unavailable.status}, with Retry-After) in RFC 6749's shape, {error: "temporarily_unavailable", error_description}; /oauth/authorize and the consent pages answer it as an HTML page.`,
};

/**
 * The rate limit's refusal, declared on every operation it limits that declares no 429 of its own
 * (one that does gets RATE_LIMITED in its code enum, withAnyRouteCodes): a generated client
 * switches on the 429 of the operation, which takes precedence over `default`.
 */
const RATE_LIMITED_RESPONSE = {
  description: `The rate limit: RATE_LIMITED (${ERRORS.RATE_LIMITED.status}): ${ERRORS.RATE_LIMITED.message}. Retry-After (whole seconds) and retry_after_ms say when to call again; nothing was served or counted against a quota`,
  content: {
    'application/json': {
      schema: jsonSchema(
        RefusalBody.extend({
          code: z.enum(['RATE_LIMITED']),
          // Always on the rate limit's refusal (optional on the other refusals ErrorBody shapes).
          retry_after_ms: RefusalBody.shape.retry_after_ms.unwrap(),
        }),
        'output',
      ),
    },
  },
};

/** A sign-in path's rate limit (its own budget): RFC 6749's temporarily_unavailable, or a page. */
function signInLimitedResponse(path: string) {
  const description = `The sign-in rate limit (RATE_LIMIT_SIGNIN, its own budget): temporarily_unavailable (${ERRORS.temporarily_unavailable.status}): ${ERRORS.temporarily_unavailable.message}. Retry-After says when to call again`;
  if (isSignInPage(path))
    return {
      description: `${description}; a page for the person’s browser`,
      content: { 'text/html': { schema: { type: 'string' } } },
    };
  const body = OAuthErrorBody.extend({ error: z.enum(['temporarily_unavailable']) });
  return {
    description: `${description}; RFC 6749’s shape {error, error_description}`,
    content: { 'application/json': { schema: jsonSchema(body, 'output') } },
  };
}

/** Real answers recorded by the conformance test (`RECORD_OPENAPI_EXAMPLES=1`): operationId → status → answer. */
type Examples = Record<string, Record<string, { type: string; body: unknown }>>;
const EXAMPLES_FILE = new URL('./openapi-examples.json', import.meta.url);

function loadExamples(): Examples {
  try {
    return JSON.parse(readFileSync(EXAMPLES_FILE, 'utf8')) as Examples;
  } catch {
    return {};
  }
}

/** What names OAuth sign-in in a recorded answer: its MCP endpoint, the OAuth paths. */
const SIGN_IN = /\/mcp\/signin\b|\/oauth\/|\/\.well-known\/oauth-/;

/**
 * A recorded answer as a service serving no sign-in (OAUTH_ENABLED=false) gives it: the answers
 * are recorded from one that does, and list sign-in beside the rest (a catalog's entry, a server
 * card's remote, a line of llms.txt). An element of a list or a line of a text naming it is left
 * out; an answer naming it otherwise has no example (undefined), rather than one it never gives.
 */
function withoutSignIn(body: unknown): unknown {
  const drop = (node: unknown): unknown => {
    if (typeof node === 'string')
      return node
        .split('\n')
        .filter((line) => !SIGN_IN.test(line))
        .join('\n');
    if (Array.isArray(node)) return node.filter((item) => !SIGN_IN.test(JSON.stringify(item))).map(drop);
    if (node !== null && typeof node === 'object')
      return Object.fromEntries(Object.entries(node).map(([name, value]) => [name, drop(value)]));
    return node;
  };
  const kept = drop(body);
  return SIGN_IN.test(typeof kept === 'string' ? kept : JSON.stringify(kept)) ? undefined : kept;
}

/**
 * Puts each recorded answer beside the schema of its operation, status and media type; without
 * sign-in (`signin` false), as withoutSignIn gives it.
 */
function withExamples(
  paths: Record<string, Record<string, unknown>>,
  examples: Examples,
  signin: boolean,
): void {
  for (const item of Object.values(paths)) {
    for (const operation of Object.values(item) as {
      operationId?: string;
      responses?: Record<string, { content?: Record<string, Record<string, unknown>> }>;
    }[]) {
      const recorded = examples[operation.operationId ?? ''] ?? {};
      for (const [status, { type, body }] of Object.entries(recorded)) {
        const content = operation.responses?.[status]?.content ?? {};
        // Matched by the bare media type: `text/plain; version=0.0.4` is recorded as text/plain.
        const media = Object.entries(content).find(([t]) => t.split(';')[0]!.trim() === type)?.[1];
        const example = signin ? body : withoutSignIn(body);
        if (media && example !== undefined) media.example = example;
      }
    }
  }
}

/**
 * A declared refusal's `code` enum with the codes any operation may answer with the same status
 * (RATE_LIMITED on a limited operation's 429, INTERNAL_ERROR on its 500…): a client validates an
 * answer against the response of its status, which takes precedence over `default`. Not where the
 * route words that status's refusal in a code of its own, which its enum then lists away from the
 * code's catalog status (search and chat: a body over the limit is 413 QUERY_TOO_LONG /
 * QUESTION_TOO_LONG, never BODY_TOO_LARGE).
 */
function withAnyRouteCodes<R extends { content?: Json }>(response: R, status: string, limited: boolean): R {
  const extra = ANY_ROUTE.filter(
    (code) => String(ERRORS[code].status) === status && (limited || code !== 'RATE_LIMITED'),
  );
  if (extra.length === 0 || response.content === undefined) return response;
  const content = Object.fromEntries(
    Object.entries(response.content).map(([type, media]) => {
      const schema = (media as { schema?: { properties?: Record<string, { enum?: string[] }> } }).schema;
      const code = schema?.properties?.code;
      if (!schema || !code?.enum) return [type, media];
      const worded = code.enum.some((own) => isErrorCode(own) && String(ERRORS[own].status) !== status);
      if (worded) return [type, media];
      const codes = [...new Set([...code.enum, ...extra])];
      return [
        type,
        {
          ...(media as Json),
          schema: { ...schema, properties: { ...schema.properties, code: { ...code, enum: codes } } },
        },
      ];
    }),
  );
  return { ...response, content };
}

/**
 * A declared response whose own shape is not the catalog's (an HTML page, RFC 6749's {error,
 * error_description}) at a status an ANY_ROUTE refusal takes: the app answers those refusals (a
 * URL not validly percent-encoded, Host or Authorization sent twice) before the route runs, in the
 * catalog's {code, message}, and a client reads an answer by the response of its status, which
 * takes precedence over `default`. So that response lists the catalog's shape beside its own: as
 * application/json where it has none, as one of two shapes where its JSON is another.
 */
function withFramingRefusals<R extends { description?: string; content?: Json }>(
  response: R,
  status: string,
  limited: boolean,
): R {
  const codes = ANY_ROUTE.filter(
    (code) => String(ERRORS[code].status) === status && (limited || code !== 'RATE_LIMITED'),
  );
  if (codes.length === 0 || response.content === undefined) return response;
  const hasCode = (schema: unknown): boolean => {
    const s = schema as { properties?: Json; anyOf?: unknown[] } | undefined;
    return s?.properties?.code !== undefined || (s?.anyOf ?? []).some(hasCode);
  };
  const media = Object.values(response.content) as { schema?: unknown }[];
  if (media.some((m) => hasCode(m.schema))) return response;
  const catalog = jsonSchema(
    RefusalBody.extend({
      code: z.enum(codes as [ErrorCode, ...ErrorCode[]]).describe('A code of the error catalog'),
    }),
    'output',
  );
  const own = (response.content as Record<string, { schema?: Json }>)['application/json'];
  return {
    ...response,
    description: `${response.description ?? ''}; or, answered before the route runs, the catalog's {code, message}: ${codesText(codes)}`,
    content: {
      ...response.content,
      'application/json': own?.schema
        ? { ...own, schema: { anyOf: [own.schema, catalog] } }
        : { schema: catalog },
    },
  };
}

function withOperationIds<D extends object>(document: D): D {
  const paths = (document as { paths?: Record<string, Record<string, unknown>> }).paths ?? {};
  // With OAUTH_ENABLED=false there is no /mcp/signin: the words every operation carries name none.
  const anyRoute = '/mcp/signin' in paths ? ANY_ROUTE_RESPONSE : anyRouteResponse(false);
  for (const [path, item] of Object.entries(paths)) {
    // One route serving several methods shares one operation object among them: each gets its own.
    for (const [method, operation] of Object.entries(item)) {
      const { [OPTIONAL_BODY]: optionalBody, ...op } = operation as {
        responses?: Record<string, { headers?: Json; content?: Json }>;
        requestBody?: Json;
        security?: Json[];
        [OPTIONAL_BODY]?: boolean;
      };
      if (optionalBody && op.requestBody) op.requestBody = { ...op.requestBody, required: false };
      const limited = !UNLIMITED_PATHS.has(path);
      const signin = isSignInPath(path);
      // Every limited operation declares the 429 its limit answers, with Retry-After.
      const own = op.responses ?? {};
      const declaredResponses =
        limited && own['429'] === undefined
          ? { ...own, 429: signin ? signInLimitedResponse(path) : RATE_LIMITED_RESPONSE }
          : own;
      const responses = Object.fromEntries(
        Object.entries(declaredResponses).map(([status, declared]) => {
          const response = withFramingRefusals(
            withAnyRouteCodes(declared, status, limited && !signin),
            status,
            limited && !signin,
          );
          const added = [
            ...EVERY_ANSWER,
            ...(limited ? RATE_LIMIT_HEADERS : []),
            ...(retryable(status) ? RETRY : []),
            // A refusal is never to be reused (no-store): it carries the caller's `_service`.
            ...(Number(status) >= 400 ? (['Cache-Control'] as const) : []),
            // A 401 of an operation taking an API key challenges for one (app.ts sends keyChallenge),
            // and so does its 400 refusing Authorization sent twice (keyInvalidRequest).
            ...((status === '401' || status === '400') &&
            JSON.stringify(op.security ?? []).includes('apiKey') &&
            !Object.keys(declared.headers ?? {}).some((name) => name.toLowerCase() === 'www-authenticate')
              ? (['WWW-Authenticate'] as const)
              : []),
          ];
          return [status, { ...response, headers: { ...headerObjects(added), ...response.headers } }];
        }),
      );
      item[method] = {
        ...op,
        operationId: operationIdOf(method, path),
        responses: {
          ...responses,
          default: {
            ...(signin ? SIGNIN_ROUTE_RESPONSE : anyRoute),
            // RATE_LIMITED and the retryable outages say when to call again; a refusal is not
            // to be reused (every refusal says no-store).
            headers: headerObjects([
              ...EVERY_ANSWER,
              ...(limited ? [...RATE_LIMIT_HEADERS, 'Retry-After' as const] : ['Retry-After' as const]),
              'Cache-Control',
              // A METHOD_NOT_ALLOWED's: the methods the path takes.
              'Allow',
            ]),
          },
        },
      };
    }
  }
  withExamples(paths, examples, '/mcp/signin' in paths);
  return document;
}

const examples = loadExamples();

/** The recorded answer of one operation with one status (the document's example), if one was recorded. */
export function recordedAnswer(method: string, path: string, status: number): unknown {
  return examples[operationIdOf(method, path)]?.[String(status)]?.body;
}

/** Routes of the documentation itself: registered, not listed. */
export const undocumented = {
  swaggerTransform: ({ url }: { url: string }) => ({ schema: { hide: true }, url }),
};

/**
 * Registers the document generator first (it collects routes as they are added), then serves
 * `GET /openapi.json` and the reference page at `/docs` (Scalar, its script served from the
 * package: no CDN).
 */
export async function registerOpenApi(
  app: FastifyInstance,
  info: { title: string; version: string; description: string; server?: string; publicBaseUrl?: string },
): Promise<void> {
  const { webhooks } = webhookOpenApi() as { webhooks: Record<string, Record<string, unknown>> };
  // A delivery is signed (X-Service-Signature), not authenticated by a scheme of ours.
  for (const [name, item] of Object.entries(webhooks)) {
    for (const [method, operation] of Object.entries(item)) {
      item[method] = { security: [], ...(operation as object), operationId: operationIdOf('deliver', name) };
    }
  }
  // The recorded examples name the origin the document is served from (see recorded-origin.ts).
  const origin = publicOrigin(info.publicBaseUrl);
  // Private while the origin is the request's: see originCacheControl.
  const cacheControl = originCacheControl(info.publicBaseUrl, 300);
  const served = new Map<string, unknown>();
  const documentAt = (at: string) => {
    let document = served.get(at);
    if (document === undefined) {
      document = servedAt(app.swagger(), at);
      // Without PUBLIC_BASE_URL the origin is the request's Host, which any client names: the
      // oldest is dropped, so a client cycling hosts costs one rewrite a host, never the whole
      // document rewritten on every request once the map is full.
      setBounded(served, at, document, 16);
    }
    return document;
  };
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: info.title, version: info.version, description: info.description },
      components: {
        securitySchemes: {
          apiKey: {
            type: 'http',
            scheme: 'bearer',
            description: 'An API key: Authorization: Bearer sk_live_…',
          },
          x402: {
            type: 'apiKey',
            in: 'header',
            name: 'PAYMENT-SIGNATURE',
            description:
              'x402 pay-per-call: a signed ERC-3009 authorisation for the quote of the 402 answer (v2 header; X-PAYMENT for v1).',
          },
        },
      },
    },
    // Only routes that declare their contract are listed; the test checks that is every route.
    hideUntagged: true,
    transformObject: (document) =>
      withOperationIds({
        ...('openapiObject' in document ? document.openapiObject : {}),
        servers: [{ url: info.server ?? '/', description: 'This service' }],
        webhooks,
      }) as never,
  });
  // Any page may read the document (a client generator, another site's reference viewer); the
  // reference page below stays the service's own.
  await app.register(async (open) => {
    openToAnyOrigin(open);
    open.get(
      '/openapi.json',
      {
        config: documented({
          summary: 'This OpenAPI document',
          tags: ['discovery'],
          sends: ['Cache-Control'],
          responses: { 200: { description: 'OpenAPI 3.1 document', schema: { type: 'object' } } },
        }),
      },
      async (request, reply) => reply.header('cache-control', cacheControl).send(documentAt(origin(request))),
    );
  });
  await app.register(async (docs) => {
    // Never in a frame. No CSP beyond frame-ancestors: Scalar's page runs an inline script and
    // styles its components inline, which a policy without 'unsafe-inline' would block.
    docs.addHook('onRequest', async (_request, reply) => {
      reply.header('x-frame-options', 'DENY').header('content-security-policy', "frame-ancestors 'none'");
    });
    // Scalar's page names no language: a screen reader would guess one. The page is English.
    docs.addHook('onSend', async (_request, reply, payload) =>
      typeof payload === 'string' && String(reply.getHeader('content-type')).startsWith('text/html')
        ? payload.replace(/^<!doctype html>\s*<html>/i, '<!doctype html>\n<html lang="en">')
        : payload,
    );
    await docs.register(scalar, {
      routePrefix: '/docs',
      logLevel: 'silent',
      configuration: {
        url: '/openapi.json',
        title: `${info.title} API reference`,
        // The browser tab's title (Scalar's own, "Scalar API Reference", otherwise).
        pageTitle: `${info.title} API reference`,
        // Scalar's default fonts come from its font host: the page would not be self-contained.
        withDefaultFonts: false,
        // On a localhost origin Scalar would show its developer toolbar and an "Ask AI" agent
        // that calls api.scalar.com: neither belongs on a page served from the package alone.
        showDeveloperTools: 'never',
        agent: { disabled: true },
        // Scalar's muted text greys read at 4.5:1 or more (WCAG AA) on its page and panel
        // backgrounds (its own light #8e8e8e is 3.3:1 on white, its dark #797979 4.4:1), darkest
        // text first as in its theme; so does its light green, the POST label of every webhook
        // and POST route (its display-p3 green, #00935d in sRGB, is 3.6:1 on the sidebar's #f6f6f6; #007a4d is 5.0:1).
        customCss: [
          '.light-mode { --scalar-color-2: #5c5c5c; --scalar-color-3: #6b6b6b; --scalar-color-green: #007a4d; }',
          '.dark-mode { --scalar-color-3: #919191; }',
        ].join('\n'),
      },
    });
  });
}
