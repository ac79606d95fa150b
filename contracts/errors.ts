import { z } from 'zod';

/**
 * The errors the HTTP edge answers with, one entry per wire code, spelled here exactly as it is
 * sent: searching the code for a code a client saw finds this line. The /api and operations
 * routes speak SCREAMING_CASE (the contract's search and chat codes), except the event store's
 * outage codes, named by its adapters; the pay-per-call routes and tool results keep their
 * snake_case codes in their own feature. `rpc` is the JSON-RPC code
 * the same refusal takes on /mcp; `message` is a template whose `{name}`s are filled at the throw.
 */
export interface ErrorSpec {
  status: number;
  rpc?: number;
  retryable: boolean;
  message: string;
}

export const ERRORS = {
  // The request itself: framing, body, media type, URL.
  BAD_REQUEST: { status: 400, rpc: -32600, retryable: false, message: '{detail}' },
  BAD_URL: { status: 400, retryable: false, message: 'the URL is not validly percent-encoded' },
  INVALID_JSON: { status: 400, rpc: -32700, retryable: false, message: 'the body is not valid JSON' },
  JSON_TOO_DEEP: {
    status: 400,
    rpc: -32700,
    retryable: false,
    message: 'the JSON body nests deeper than {max} levels',
  },
  BODY_TOO_LARGE: {
    status: 413,
    rpc: -32600,
    retryable: false,
    message: 'the body is larger than this route accepts',
  },
  UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    rpc: -32600,
    retryable: false,
    message: 'send the body as application/json',
  },
  INVALID_FIELD: { status: 400, rpc: -32602, retryable: false, message: '{detail}' },
  INVALID_URL: { status: 400, retryable: false, message: '{detail}' },
  URI_TOO_LONG: { status: 414, retryable: false, message: 'a path segment is too long' },
  REQUEST_TIMEOUT: { status: 408, retryable: true, message: 'the request did not arrive in time' },
  HEADERS_TOO_LARGE: { status: 431, retryable: false, message: 'the request headers are too large' },
  NOT_FOUND: { status: 404, retryable: false, message: '{detail}' },
  // Who is calling.
  UNAUTHORIZED: {
    status: 401,
    retryable: false,
    message: 'a live API key is required: Authorization: Bearer <API_KEY>',
  },
  KEY_UNVERIFIABLE: {
    status: 503,
    retryable: true,
    message: 'the API key could not be verified right now; retry shortly ({detail})',
  },
  FORBIDDEN_HOST: { status: 403, retryable: false, message: 'Host not allowed' },
  FORBIDDEN_ORIGIN: { status: 403, retryable: false, message: 'Origin not allowed' },
  // State: what the request asks for collides with what is.
  CONFLICT: {
    status: 409,
    retryable: true,
    message: 'another change to the same record won the race; retry',
  },
  SUBSCRIPTION_LIMIT: {
    status: 409,
    retryable: false,
    message: 'this key already has {max} webhook subscriptions (the limit)',
  },
  SUBSCRIPTION_DISABLED: {
    status: 409,
    retryable: false,
    message: 're-enable the subscription before resending',
  },
  DELIVERY_BUSY: {
    status: 409,
    retryable: true,
    message: 'an attempt of this delivery is being recorded; retry shortly',
  },
  // Free sign-in (/api/keys).
  INVALID_REQUEST: { status: 400, retryable: false, message: '{detail}' },
  INVALID_SIWE_MESSAGE: { status: 400, retryable: false, message: '{detail}' },
  SIWE_DOMAIN_MISMATCH: { status: 401, retryable: false, message: '{detail}' },
  SIWE_EXPIRED: { status: 401, retryable: false, message: '{detail}' },
  SIWE_NOT_YET_VALID: { status: 401, retryable: false, message: '{detail}' },
  SIWE_SIGNATURE_INVALID: { status: 401, retryable: false, message: '{detail}' },
  SIWE_NONCE_INVALID: {
    status: 401,
    retryable: false,
    message: 'unknown, expired or already used nonce; get a new one from GET /api/keys/nonce',
  },
  KEY_ALREADY_ISSUED: {
    status: 409,
    retryable: false,
    message: 'address {address} already has its free key',
  },
  SERVICE_UNAVAILABLE: {
    status: 503,
    retryable: true,
    message: '{detail}',
  },
  // A backing server is down: nothing was done. The adapters name these (EventStoreUnavailableError).
  event_store_unavailable: { status: 503, rpc: -32603, retryable: true, message: '{detail}' },
  storage_full: { status: 503, rpc: -32603, retryable: true, message: '{detail}' },
  INTERNAL_ERROR: { status: 500, rpc: -32603, retryable: false, message: 'internal error' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

export type ErrorParams = Record<string, string | number>;

/** The catalog message of `code` with its `{name}`s filled from `params`. */
export function errorMessage(code: ErrorCode, params: ErrorParams = {}): string {
  return ERRORS[code].message.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in params ? String(params[name]) : whole,
  );
}

/** A refusal from the catalog, thrown anywhere under a route and answered by the plugin's handler. */
export class ServiceError extends Error {
  override readonly name: string = 'ServiceError';
  /** Fastify's name for it: a route's own error handler reads it like any framework error's. */
  readonly statusCode: number;
  readonly retryable: boolean;

  constructor(
    readonly code: ErrorCode,
    params: ErrorParams = {},
    /** The request field at fault (a body field or query parameter), when there is one. */
    readonly field?: string,
  ) {
    super(errorMessage(code, params));
    this.statusCode = ERRORS[code].status;
    this.retryable = ERRORS[code].retryable;
  }
}

/** The body of every /api and operations refusal. */
export const ErrorBody = z.object({
  code: z.string().describe('A code of the error catalog, SCREAMING_CASE'),
  message: z.string(),
  field: z.string().optional().describe('The request field at fault'),
  retryable: z.boolean().optional().describe('Present and true when the same request may succeed later'),
});
export type ErrorBody = z.infer<typeof ErrorBody>;

/** The body of a refusal on /mcp (JSON-RPC 2.0). */
export const RpcErrorBody = z.object({
  jsonrpc: z.literal('2.0'),
  error: z.object({
    code: z.number().int(),
    message: z.string(),
    data: z.object({ code: z.string() }).optional(),
  }),
  id: z.union([z.string(), z.number(), z.null()]),
});
export type RpcErrorBody = z.infer<typeof RpcErrorBody>;
