import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { EventStoreUnavailableError, WrongExpectedRevisionError } from '../../adapters/event-store/port.ts';
import {
  ERRORS,
  type ErrorBody,
  type ErrorCode,
  type ErrorParams,
  fillTemplate,
  isErrorCode,
  NO_ROUTE_DETAIL,
  type RpcErrorBody,
  ServiceError,
} from '../../contracts/errors.ts';
import { type IssueLike, issueText, isZodWording } from '../../contracts/issue-text.ts';
import { withAnswerService } from '../metering/caller.ts';
import { JSON_UTF8 } from '../shared/media-types.ts';

/**
 * One mapping from whatever a route threw to a catalog error: catalog errors as they are, zod
 * and schema failures as INVALID_FIELD naming the field, Fastify's own request errors (FST_ERR_*)
 * as the catalog's framing codes, a lost append race as CONFLICT; the rest is INTERNAL_ERROR.
 * Each plugin's handler then writes the result in its channel's shape.
 */

type Issue = IssueLike & { params?: { code?: string } };

/** What the refused input was checked against and what was sent, for the words of the refusal. */
interface Refused {
  schema?: z.ZodType;
  input?: unknown;
}

/**
 * A body that is not a JSON object (a JSON array, string or `null`): what to
 * send, rather than a field said to be missing.
 */
const NOT_AN_OBJECT = 'the body must be a JSON object, sent with Content-Type: application/json';
/** A body a route takes only as an object or not at all, sent as something else (the JSON `null`). */
export const bodyNotAnObject = () => new ServiceError('INVALID_FIELD', { detail: NOT_AN_OBJECT }, 'body');
/**
 * The most characters of a request's path a refusal echoes. A request line may be as long as
 * Node's header limit (16 KiB): echoed whole, a mistyped or hostile URL would come back in every
 * refusal of it and in whatever logs the answer; 200 show any path the service serves in full.
 */
export const ECHOED_PATH_CHARS = 200;

/**
 * A request target's path as a refusal echoes it: the query left out (it may carry a token, and
 * names no route), and a path longer than ECHOED_PATH_CHARS cut there with `…` after it, never
 * inside a character: not between the halves of a surrogate pair, nor inside a percent-escape or
 * the escapes of one UTF-8 character (a request line is ASCII, so a path's other characters come
 * percent-encoded), so the part echoed decodes as the path's first characters.
 */
export function echoedPath(url: string): string {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  if (path.length <= ECHOED_PATH_CHARS) return path;
  return `${path.slice(0, echoCut(path))}…`;
}

/** The byte a percent-escape starting at `at` stands for, or -1 when there is none there. */
function escapedByte(path: string, at: number): number {
  if (at < 0 || path[at] !== '%') return -1;
  const hex = path.slice(at + 1, at + 3);
  return /^[0-9A-Fa-f]{2}$/.test(hex) ? Number.parseInt(hex, 16) : -1;
}

/** Where echoedPath cuts a path longer than ECHOED_PATH_CHARS (see there). */
function echoCut(path: string): number {
  let end = ECHOED_PATH_CHARS;
  const last = path.charCodeAt(end - 1);
  if (last >= 0xd800 && last <= 0xdbff) return end - 1;
  // A percent-escape the cut would split: cut before its `%`.
  const percent = path.lastIndexOf('%', end - 1);
  if (percent !== -1 && percent > end - 3) end = percent;
  // The escapes of a UTF-8 character the cut would split: cut before its first byte.
  let at = end - 3;
  let continuations = 0;
  while ((escapedByte(path, at) & 0xc0) === 0x80) {
    continuations++;
    at -= 3;
  }
  const lead = escapedByte(path, at);
  const length = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return continuations + 1 < length ? at : end;
}

/** NOT_FOUND's `{detail}` for a request that matches no route: the catalog's words, its path echoed. */
export function noRouteDetail(method: string, url: string): string {
  return fillTemplate(NO_ROUTE_DETAIL, { method, path: echoedPath(url) });
}

const notAnObject = (issue: Issue, where: string) =>
  where === 'body' && issue.path.length === 0 && issue.code === 'invalid_type' && issue.expected === 'object';

/**
 * How a route names the refusal of its input, when its family has a code per field (the search
 * and history codes) rather than INVALID_FIELD naming the field. Declared beside the route's
 * schema (`declared({ codes })`) and read by the error handler.
 */
export interface FieldCodes {
  /** Per field (the first segment of the issue's path): one code, or one per zod issue kind (`*`: the rest). */
  fields?: Record<string, ErrorCode | Record<string, ErrorCode>>;
  /** A query parameter the schema does not know (an unknown body field stays INVALID_FIELD naming it). */
  unknown?: ErrorCode;
  /** The input as a whole: missing, or not an object. */
  whole?: ErrorCode;
  /**
   * A body that could not be read (not JSON, not JSON's media type), when the route words it its
   * own way. Not a body too large nor a repeated header (`tooLarge`, `repeated`), nor another
   * request HTTP refuses (400 BAD_REQUEST as on every route). Nor a body nested too deep: that is
   * JSON_TOO_DEEP on every route of the family, so a client meets one code for it.
   */
  unreadable?: ErrorCode;
  /**
   * A body over the route's limit, when the route words it its own way (search and chat: their
   * text's too-long code): answered with the transport's status (413), its message naming the limit.
   */
  tooLarge?: ErrorCode;
  /**
   * A request repeating Host, Authorization or Content-Type (RepeatedHeaderError), when the route words it its
   * own way (search and chat: their invalid-input code): 400, its message naming the header.
   */
  repeated?: ErrorCode;
  /** Values the codes' message templates name (bounds, the allowed values). */
  params?: Partial<Record<ErrorCode, ErrorParams>>;
}

function codeOf(
  issue: Issue,
  field: string | undefined,
  where: string,
  codes: FieldCodes,
): ErrorCode | undefined {
  if (issue.params?.code && isErrorCode(issue.params.code)) return issue.params.code;
  if (issue.code === 'unrecognized_keys') return where === 'querystring' ? codes.unknown : undefined;
  if (field === undefined) return codes.whole;
  const named = codes.fields?.[field];
  if (typeof named === 'string' || named === undefined) return named;
  return named[issue.code] ?? named['*'];
}

/** A failed parse: the route's own code for the field when it declares one, else INVALID_FIELD naming it. */
function fieldError(
  issue: Issue,
  where = 'body',
  codes: FieldCodes = {},
  refused: Refused = {},
): ServiceError {
  const keys = issue.code === 'unrecognized_keys' ? (issue.keys ?? []) : [];
  const at = issue.path.length > 0 ? String(issue.path[0]) : undefined;
  const field = keys.length > 0 ? keys[0]! : issue.path.length > 0 ? issue.path.map(String).join('.') : where;
  const whole = notAnObject(issue, where);
  // What the field must be and what was sent, in words of our own (contracts/issue-text.ts).
  const said = issueText(issue, field, refused.schema, refused.input);
  const detail = whole ? NOT_AN_OBJECT : keys.length > 0 ? `unknown field "${field}"` : said;
  const own = codeOf(issue, at, where, codes);
  // A family with codes of its own names a body field in the code, not in a `field` member (the
  // search and chat bodies answer `{code, message}`); a query parameter is named in both.
  if (own)
    return new ServiceError(
      own,
      {
        detail,
        // A message the schema writes is the route's own words as they are; zod's are reworded.
        issue: keys.length > 0 ? detail : isZodWording(issue.message) ? said : issue.message,
        name: field,
        ...codes.params?.[own],
      },
      where === 'querystring' ? field : undefined,
      whole ? { message: NOT_AN_OBJECT } : {},
    );
  return new ServiceError('INVALID_FIELD', { detail }, field);
}

/**
 * A request carrying Host or Authorization more than once (RFC 9112 3.2), or on /api/* Content-Type
 * (RFC 9110 8.3; the app's onRequest hook):
 * 400 BAD_REQUEST naming the header, or the route's own code for it (FieldCodes.repeated).
 */
export class RepeatedHeaderError extends ServiceError {
  constructor(readonly header: string) {
    super('BAD_REQUEST', { detail: `${header} was sent more than once; send it exactly once` });
  }
}

/**
 * A route's own code answered with the status of the transport's refusal it words (a body over
 * the limit: 413), rather than its catalog entry's.
 */
class WordedRefusal extends ServiceError {
  override readonly statusCode: number;
  constructor(code: ErrorCode, statusCode: number, message: string) {
    super(code, {}, undefined, { message });
    this.statusCode = statusCode;
  }
}

/** Fastify's request errors, by their FST_ERR code. */
const FRAMEWORK: Record<string, () => ServiceError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () => new ServiceError('BODY_TOO_LARGE'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: () => new ServiceError('UNSUPPORTED_MEDIA_TYPE'),
  FST_ERR_CTP_INVALID_JSON_BODY: () => new ServiceError('INVALID_JSON'),
  FST_ERR_CTP_EMPTY_JSON_BODY: () => new ServiceError('INVALID_JSON'),
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () =>
    new ServiceError('BAD_REQUEST', { detail: 'the body size does not match Content-Length' }),
};

type WithValidation = FastifyError & { retryable?: boolean };

/**
 * Whatever a route threw, as a catalog error; null for a bug (answered INTERNAL_ERROR). `bodyLimit`
 * is the route's, named when a body over it is worded as the route's own code.
 */
function toServiceError(
  error: unknown,
  codes: FieldCodes = {},
  bodyLimit?: number,
  request?: FastifyRequest,
): ServiceError | null {
  const known = catalogError(error, codes, request);
  // The transport's refusals in the route's own codes (search and chat, contract 7.1), with the
  // transport's status: a body over the limit, a repeated header.
  if (known?.code === 'BODY_TOO_LARGE' && codes.tooLarge) {
    const limit = bodyLimit === undefined ? 'this route’s limit' : `this route’s limit of ${bodyLimit} bytes`;
    return new WordedRefusal(codes.tooLarge, known.statusCode, `the request body is over ${limit}`);
  }
  // Every other route's 413 names its limit too, so the caller knows how far to cut the body.
  if (known?.code === 'BODY_TOO_LARGE' && bodyLimit !== undefined) {
    return new ServiceError('BODY_TOO_LARGE', {}, undefined, {
      message: `${known.message} (at most ${bodyLimit} bytes)`,
    });
  }
  if (error instanceof RepeatedHeaderError && codes.repeated) {
    return new ServiceError(codes.repeated, {}, undefined, {
      message: `the ${error.header} header was sent more than once; send it exactly once`,
    });
  }
  // A body that could not be read, in the words of the route's family when it has its own code.
  if (known && codes.unreadable && UNREADABLE.has(known.code)) {
    return new ServiceError(codes.unreadable, {}, undefined, {
      message: `the request body could not be read: ${known.message}`,
    });
  }
  return known;
}

/**
 * The catalog's codes for a body that could not be read as JSON, that a route may word its own
 * way. Not the transport's refusals: a body over the limit and a repeated header have codes of
 * their own (FieldCodes.tooLarge, .repeated) answered with the transport's status; the rest, such
 * as a Content-Length the body does not match, is 400 BAD_REQUEST as on every route.
 */
const UNREADABLE = new Set<ErrorCode>(['INVALID_JSON', 'UNSUPPORTED_MEDIA_TYPE']);

/** The route's schema of `where` (body, querystring, params, headers) and what the request sent there. */
function refusedAt(request: FastifyRequest | undefined, where: string): Refused {
  if (request === undefined) return {};
  const schemas = request.routeOptions.schema as Record<string, unknown> | undefined;
  const schema = schemas?.[where];
  const sent: Record<string, unknown> = {
    body: request.body,
    querystring: request.query,
    params: request.params,
    headers: request.headers,
  };
  return { ...(schema instanceof z.ZodType ? { schema } : {}), input: sent[where] };
}

function catalogError(error: unknown, codes: FieldCodes, request?: FastifyRequest): ServiceError | null {
  if (error instanceof ServiceError) return error;
  // A route's own parse: what it parsed is not known here, so the words name only what the field must be.
  if (error instanceof z.ZodError) return fieldError(error.issues[0]!, 'body', codes);
  // A route schema's refusal (zod, through the type provider's validator): the first issue.
  if (hasZodFastifySchemaValidationErrors(error)) {
    const first = error.validation[0]!;
    const path = first.instancePath.split('/').filter((part) => part !== '');
    const keys = (first.params as { keys?: string[] }).keys;
    const where = (error as { validationContext?: string }).validationContext ?? 'body';
    const { params } = first.params as { params?: { code?: string } };
    return fieldError(
      {
        // The issue's own members (expected, minimum, values...), as the type provider carries them.
        ...(first.params as Partial<Issue>),
        code: first.keyword,
        path,
        message: first.message ?? 'invalid',
        ...(keys ? { keys } : {}),
        ...(params ? { params } : {}),
      },
      where,
      codes,
      refusedAt(request, where),
    );
  }
  if (error instanceof WrongExpectedRevisionError) return new ServiceError('CONFLICT');
  const fastify = error as WithValidation;
  if (typeof fastify?.code === 'string') {
    const known = FRAMEWORK[fastify.code];
    if (known) return known();
    // An error that names its catalog code and status (the event store's outage, say); the
    // store's own words name its server, so the caller gets the outage's public sentence.
    if (isErrorCode(fastify.code) && fastify.statusCode === ERRORS[fastify.code].status) {
      const detail = error instanceof EventStoreUnavailableError ? error.publicMessage : fastify.message;
      return new ServiceError(fastify.code, { detail });
    }
  }
  // secure-json-parse's refusal of __proto__ / constructor keys.
  if (error instanceof SyntaxError && (error as { statusCode?: number }).statusCode === 400) {
    return new ServiceError('INVALID_JSON');
  }
  return null;
}

/** A catalog error in the /api shape. */
export function errorBody(error: ServiceError): ErrorBody {
  return {
    code: error.code,
    message: error.message,
    ...(error.field ? { field: error.field } : {}),
    ...(error.retryable ? { retryable: true } : {}),
    // What the refusal carries besides (a RATE_LIMITED's retry_after_ms).
    ...error.body,
  };
}

/**
 * A refusal in the JSON-RPC shape of /mcp, with the caller's `_service` in `error.data` beside
 * `data` once the caller hook resolved the caller (answerService), as /api's errors carry it beside
 * theirs; as it is for a request refused before that (a Host or Origin refused, the sign-in path's
 * 401: no caller to report). Neither: no `data` member.
 */
export async function rpcErrorWithService(
  request: FastifyRequest,
  code: number,
  message: string,
  id: string | number | null,
  data: Record<string, unknown> = {},
): Promise<RpcErrorBody> {
  const all = await withAnswerService(request, data);
  const error = Object.keys(all).length === 0 ? { code, message } : { code, message, data: all };
  return { jsonrpc: '2.0', error, id };
}

/**
 * A catalog error in that shape: its JSON-RPC code (else -32600), its catalog code in `data.code`,
 * and `data.retryable` when the same request may pass later, as errorBody says it over HTTP (the
 * sign-in store out of reach: 503 SERVICE_UNAVAILABLE is retryable on /oauth and /mcp/signin alike).
 */
export function rpcErrorBodyWithService(error: ServiceError, request: FastifyRequest): Promise<RpcErrorBody> {
  const spec = ERRORS[error.code as ErrorCode] as { rpc?: number };
  const data = { code: error.code, ...(error.retryable ? { retryable: true } : {}) };
  return rpcErrorWithService(request, spec.rpc ?? -32600, error.message, null, data);
}

/** Writes a catalog error in a channel's shape; it may read the request (the caller's `_service`). */
export type Render = (error: ServiceError, request: FastifyRequest) => unknown;

/**
 * A refusal is never to be reused: it carries the caller's `_service` (their key's quota) once the
 * caller is known, and a shared cache keeping it would serve one caller's figures to another.
 */
export const REFUSAL_CACHE_CONTROL = 'no-store';

/**
 * Writes `error` through `render` with its status, its headers, Cache-Control: no-store, and a
 * Retry-After when it is retryable.
 */
async function answer(
  request: FastifyRequest,
  reply: FastifyReply,
  error: ServiceError,
  render: Render,
): Promise<FastifyReply> {
  reply.header('cache-control', REFUSAL_CACHE_CONTROL);
  if (error.retryable && error.statusCode >= 500) reply.header('retry-after', '1');
  reply.headers(error.headers);
  const body = await render(error, request);
  return reply.code(error.statusCode).type(JSON_UTF8).send(body);
}

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route's own codes for its fields (see FieldCodes). */
    codes?: FieldCodes;
  }
}

/** The error handler of a plugin (or the app) answering in `render`'s shape. */
export function errorHandler(render: Render) {
  return async (error: WithValidation, request: FastifyRequest, reply: FastifyReply) => {
    const known = toServiceError(
      error,
      request.routeOptions.config?.codes,
      request.routeOptions.bodyLimit,
      request,
    );
    if (known?.statusCode === 503) {
      // No stack per request: the adapter logs the outage (a full disk, a lost server) once.
      request.log.warn(
        { code: known.code, reason: error.message || known.message },
        'request refused: a backing server is unavailable',
      );
    }
    if (known) return answer(request, reply, known, render);
    const status = error.statusCode ?? 500;
    if (status >= 400 && status < 500) {
      return answer(request, reply, new ServiceError('BAD_REQUEST', { detail: error.message }), render);
    }
    request.log.error({ err: error }, 'request failed');
    return answer(request, reply, new ServiceError('INTERNAL_ERROR'), render);
  };
}

/**
 * A catalog error in the /api shape with the caller's `_service`, where the caller hook ran
 * (answerService), and the figures the refusal adds to it (a chat's own quota: ServiceError meta).
 */
export async function apiErrorBody(error: ServiceError, request: FastifyRequest): Promise<ErrorBody> {
  const body = await withAnswerService(request, errorBody(error));
  return body._service && error.meta ? { ...body, _service: { ...body._service, ...error.meta } } : body;
}

/** Installs the /api error shape on `app` (and the plugins registered under it), `_service` included. */
export function useApiErrors(app: FastifyInstance): void {
  app.setErrorHandler(errorHandler(apiErrorBody));
}
