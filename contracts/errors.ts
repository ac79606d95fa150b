import { z } from 'zod';

/**
 * Every code the service sends on the wire, one entry per code, spelled here exactly as it is
 * sent: searching the code for a code a client saw finds this line. Each channel family keeps the
 * casing its contract gives it: the /api and operations routes (the contract's search and chat
 * codes) SCREAMING_CASE; the pay-per-call routes, tool results over MCP and the verify link
 * snake_case, as x402 and its facilitators spell payment reasons; the event store's outage codes
 * are named by its adapters. `status` is the HTTP status the code is answered with (a payment
 * reason rides in a 402 quote whatever its entry's status when the payment is re-asked for);
 * `rpc` is the JSON-RPC code the same refusal takes on /mcp; `message` is a template whose
 * `{name}`s are filled at the throw.
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
  URI_TOO_LONG: { status: 414, retryable: false, message: '{detail}' },
  REQUEST_TIMEOUT: { status: 408, retryable: true, message: 'the request did not arrive in time' },
  HEADERS_TOO_LARGE: { status: 431, retryable: false, message: 'the request headers are too large' },
  NOT_FOUND: { status: 404, retryable: false, message: '{detail}' },
  METHOD_NOT_ALLOWED: {
    status: 405,
    retryable: false,
    message: '{path} does not take {method}; it takes {allowed}',
  },
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
  // An Mcp-Session-Id on /mcp that is not open, or not this caller's (JSON-RPC -32001): initialize anew.
  SESSION_NOT_FOUND: { status: 404, rpc: -32001, retryable: false, message: 'Session not found' },
  // State: what the request asks for collides with what is.
  CONFLICT: {
    status: 409,
    retryable: true,
    message: 'another change to the same record won the race; retry',
  },
  // Of two rotate-secret calls on one subscription at once, the one recorded second: nothing
  // changed, and its caller holds no new secret (the other's caller holds the current one).
  // Not retryable: a client that retries on its own would end the other caller's secret; a
  // rotation of its own is the caller's decision.
  SECRET_ROTATION_CONFLICT: {
    status: 409,
    retryable: false,
    message:
      "another rotate-secret of this subscription was recorded first: nothing changed and this request holds no new secret (the other request's caller holds the current one); rotate again for a secret of your own, which ends the secret before it at once",
  },
  // A rotate-secret that lost its append to other changes of the key's subscriptions (an edit, a
  // disable, another subscription's create) on each of its tries: nothing changed. Retryable: no
  // other rotation holds a secret it would end.
  SECRET_ROTATION_RACED: {
    status: 409,
    retryable: true,
    message:
      "other changes to this key's webhook subscriptions were recorded while this rotate-secret was being recorded: nothing changed, the current secret still signs and this request holds no new secret; send rotate-secret again",
  },
  SUBSCRIPTION_LIMIT: {
    status: 409,
    retryable: false,
    message:
      'this key already has {max} webhook subscriptions (the limit; disabled ones count: GET /api/webhooks?status=disabled lists them)',
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
  // The free-key budget of a client network (FREE_KEYS_PER_ADDRESS_PER_DAY): Retry-After says
  // when the UTC day, and the budget with it, starts afresh.
  FREE_KEY_LIMIT_REACHED: {
    status: 429,
    retryable: true,
    message:
      'this network has been issued its {limit} free keys for today (UTC); try again in {seconds} s, or use a paid plan',
  },
  SERVICE_UNAVAILABLE: {
    status: 503,
    retryable: true,
    message: '{detail}',
  },
  // Search and chat (/api/search, /api/chat; contract 7.1). Bounds are in contracts/knowledge.ts.
  INVALID_QUERY: {
    status: 400,
    retryable: false,
    message: 'query is missing, not a string, or all whitespace or invisible',
  },
  QUERY_TOO_SHORT: {
    status: 400,
    retryable: false,
    message: 'query is shorter than {min} readable characters',
  },
  QUERY_TOO_LONG: {
    status: 400,
    retryable: false,
    message: 'query is longer than {max} characters after trimming',
  },
  INVALID_QUESTION: {
    status: 400,
    retryable: false,
    message: 'question is missing, not a string, or all whitespace or invisible',
  },
  QUESTION_TOO_SHORT: {
    status: 400,
    retryable: false,
    message: 'question is shorter than {min} readable characters',
  },
  QUESTION_TOO_LONG: {
    status: 400,
    retryable: false,
    message: 'question is longer than {max} characters after trimming',
  },
  INVALID_MODEL: { status: 400, retryable: false, message: 'model must be one of {allowed}' },
  // A day or month of calls (or of chats) used up: not retryable, as quota_exhausted is over MCP;
  // Retry-After (over MCP resets_at and retry_after_ms) says when the window serves again.
  QUOTA_EXHAUSTED: {
    status: 429,
    retryable: false,
    message: 'the {window} call quota of this key is used up (resets {resets})',
  },
  CHAT_QUOTA_EXHAUSTED: { status: 429, retryable: false, message: '{detail}' },
  // A live key whose call (or chat) quota cannot be counted right now (the quota store out of
  // reach): nothing served, nothing counted. The key was verified; KEY_UNVERIFIABLE is the key's.
  QUOTA_UNAVAILABLE: { status: 503, retryable: true, message: '{detail}' },
  // The labelled history (/api/verdicts, /api/track-record).
  INVALID_LIMIT: { status: 400, retryable: false, message: 'limit must be an integer from 1 to {max}' },
  INVALID_EXCHANGE: { status: 400, retryable: false, message: '{issue}' },
  INVALID_COIN: { status: 400, retryable: false, message: '{issue}' },
  INVALID_TIMEFRAME: { status: 400, retryable: false, message: '{issue}' },
  INVALID_CALL: { status: 400, retryable: false, message: '{issue}' },
  INVALID_TIME: { status: 400, retryable: false, message: '{issue}' },
  INVALID_CURSOR: {
    status: 400,
    retryable: false,
    message:
      "after is not a cursor this service issued: pass a row's cursor (its last column) or the X-History-Cursor trailer as served, unchanged",
  },
  FOREIGN_CURSOR: {
    status: 400,
    retryable: false,
    message:
      "after names a position this store does not hold: a cursor from another store? Resume with a cursor this service served (a row's cursor or the X-History-Cursor trailer), or export again without after",
  },
  INVALID_WAIT: { status: 400, retryable: false, message: 'wait must be seconds from 0 to {max}' },
  UNSUPPORTED_FORMAT: { status: 400, retryable: false, message: '{issue}' },
  INVALID_PARAMETER: { status: 400, retryable: false, message: '{name} may be given once' },
  UNKNOWN_FILTER: { status: 400, retryable: false, message: 'unknown parameter "{name}"; known: {known}' },
  INVALID_WINDOW: { status: 400, retryable: false, message: 'window must be one of {allowed}' },
  // One key's exports streaming at once (GET /api/verdicts, long polls aside): one more is refused,
  // with Retry-After, rather than share the process among more of them.
  TOO_MANY_EXPORTS: {
    status: 429,
    retryable: true,
    message: 'this key already has {max} exports streaming, the most it may at once; retry when one ends',
  },
  // Request rates, on every product route and /mcp (JSON-RPC -32000 there).
  RATE_LIMITED: {
    status: 429,
    rpc: -32000,
    retryable: true,
    message: 'rate limit of {limit} requests per window reached; retry in {seconds} s',
  },
  // A JSON-RPC batch on /mcp longer than its caller's rate limit, with more calls of one tool than
  // the tool's share, or with more messages than a batch may hold (MCP_MAX_BATCH): it could never
  // be served, so it is refused as it stands, not 429.
  BATCH_TOO_LARGE: {
    status: 400,
    rpc: -32600,
    retryable: false,
    message: 'Invalid Request: a batch of {size} {what} {bound}; send at most {limit} at a time',
  },
  // The same refusal on the OAuth sign-in paths and their discovery documents, in RFC 6749's
  // error shape ({error, error_description}): the closest code the OAuth error registry has.
  temporarily_unavailable: {
    status: 429,
    retryable: true,
    message: 'too many sign-in requests from this address: at most {limit} per window; retry in {seconds} s',
  },
  // The public verify link (/verify/:stream/:revision), snake_case like the links it serves.
  invalid_verdict_ref: { status: 400, retryable: false, message: '{issue}' },
  verdict_not_found: { status: 404, retryable: false, message: 'no verdict at {ref}' },
  // Pay-per-call (/x402/*) and paid tool calls: the caller and the body.
  unknown_key: { status: 401, rpc: -32003, retryable: false, message: '{detail}' },
  key_unverifiable: { status: 503, rpc: -32004, retryable: true, message: '{detail}' },
  invalid_input: { status: 400, rpc: -32602, retryable: false, message: '{detail}' },
  invalid_content_type: { status: 400, retryable: false, message: '{detail}' },
  quota_unavailable: { status: 503, rpc: -32004, retryable: true, message: '{detail}' },
  // A plan's (or an anonymous caller's) day or month of calls used up: not retryable, as a client
  // retrying on its own would retry for hours or days; it serves again at the window's reset
  // (Retry-After over HTTP, retry_after_ms and resets_at in an MCP tool error), or at once paid for.
  quota_exhausted: { status: 429, retryable: false, message: '{detail}' },
  // Payment: asked for, refused (402 with a fresh quote), or unsettled.
  payment_required: { status: 402, retryable: false, message: 'payment required: {tool}' },
  payment_not_accepted: { status: 402, retryable: false, message: '{detail}' },
  invalid_payment_header: { status: 402, retryable: false, message: '{detail}' },
  invalid_payment: { status: 402, retryable: false, message: 'the payment is not valid' },
  invalid_payment_identifier: { status: 402, retryable: false, message: '{detail}' },
  unsupported_scheme: { status: 402, retryable: false, message: '{detail}' },
  network_mismatch: { status: 402, retryable: false, message: '{detail}' },
  asset_mismatch: { status: 402, retryable: false, message: '{detail}' },
  recipient_mismatch: { status: 402, retryable: false, message: '{detail}' },
  amount_mismatch: {
    status: 402,
    retryable: false,
    message:
      "the authorisation's value {value} does not match the price {price} of this request; sign an authorisation for exactly the quoted amount",
  },
  terms_mismatch: {
    status: 402,
    retryable: false,
    message: 'the accepted payment terms differ from the quote of this request',
  },
  insufficient_funds: { status: 402, retryable: false, message: '{detail}' },
  payment_in_use: {
    status: 409,
    retryable: true,
    message:
      'this payment is being answered by another request; retry in a moment and the same answer comes back (nothing is charged twice). Held by a request that never finished, it is released once the authorisation expires (its validBefore): then sign a new one',
  },
  payment_already_failed: {
    status: 402,
    retryable: false,
    message: 'this payment authorisation already failed to settle; sign a new one',
  },
  payment_already_used: { status: 409, retryable: false, message: '{detail}' },
  payment_identifier_conflict: { status: 409, retryable: false, message: '{detail}' },
  payment_state_changed: { status: 402, retryable: true, message: '{detail}' },
  settlement_failed: { status: 402, retryable: false, message: 'settlement failed: {detail}' },
  facilitator_unavailable: { status: 503, rpc: -32004, retryable: true, message: '{detail}' },
  facilitator_not_configured: { status: 503, retryable: false, message: '{detail}' },
  // The facilitators' own reasons (x402 "exact" EVM scheme), passed on in words a caller can act on.
  invalid_exact_evm_signature: {
    status: 402,
    retryable: false,
    message: 'the signature does not match the authorisation (wrong key, asset domain or tampered field)',
  },
  invalid_exact_evm_recipient_mismatch: {
    status: 402,
    retryable: false,
    message: 'the authorisation pays a different recipient than the quote',
  },
  invalid_exact_evm_payload_authorization_valid_before: {
    status: 402,
    retryable: false,
    message: 'the authorisation has expired (validBefore is past or too close)',
  },
  invalid_exact_evm_payload_authorization_valid_after: {
    status: 402,
    retryable: false,
    message:
      "the authorisation is not valid yet (validAfter must be before the chain's latest block); sign it with validAfter in the past",
  },
  invalid_exact_evm_payload_authorization_value_mismatch: {
    status: 402,
    retryable: false,
    message: 'the authorised amount differs from the price of this request',
  },
  invalid_exact_evm_authorization_value: {
    status: 402,
    retryable: false,
    message: 'the authorised amount differs from the price of this request',
  },
  invalid_exact_evm_network_mismatch: {
    status: 402,
    retryable: false,
    message: 'the payment is for a different network than the quote',
  },
  invalid_exact_evm_nonce_already_used: {
    status: 402,
    retryable: false,
    message: 'this authorisation was already used on chain; sign a new one',
  },
  invalid_exact_evm_insufficient_balance: {
    status: 402,
    retryable: false,
    message: 'the payer does not hold enough of the asset',
  },
  invalid_exact_evm_transaction_simulation_failed: {
    status: 402,
    retryable: false,
    message: 'the transfer would fail on chain',
  },
  invalid_exact_evm_transaction_failed: {
    status: 402,
    retryable: false,
    message: 'the settlement transaction failed on chain',
  },
  asset_not_deployed_contract: {
    status: 402,
    retryable: false,
    message: 'the asset is not a contract on this network',
  },
  // A tool's own refusal (market data), on /x402/* and in MCP tool results.
  unknown_coin: { status: 404, retryable: false, message: '{detail}' },
  unsupported_timeframe: { status: 422, retryable: false, message: '{detail}' },
  unsupported_exchange: { status: 422, retryable: false, message: '{detail}' },
  insufficient_history: { status: 422, retryable: false, message: '{detail}' },
  venue_unavailable: { status: 503, retryable: true, message: '{detail}' },
  // MCP tool results (result.isError; contract 7.3): -32602 is named inside the text.
  unknown_tool: { status: 200, rpc: -32602, retryable: false, message: 'unknown tool {name}' },
  invalid_arguments: { status: 200, rpc: -32602, retryable: false, message: '{detail}' },
  // The MCP name of INTERNAL_ERROR (a fault of unknown cause): not retryable, as INTERNAL_ERROR is
  // not on HTTP; an outage that passes has its own retryable code (event_store_unavailable...).
  internal_error: {
    status: 200,
    rpc: -32603,
    retryable: false,
    message: 'the call failed on our side; it was not counted',
  },
  // A backing server is down: nothing was done. The adapters name these (EventStoreUnavailableError).
  event_store_unavailable: { status: 503, rpc: -32603, retryable: true, message: '{detail}' },
  storage_full: { status: 503, rpc: -32603, retryable: true, message: '{detail}' },
  INTERNAL_ERROR: { status: 500, rpc: -32603, retryable: false, message: 'internal error' },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

export type ErrorParams = Record<string, string | number>;

/**
 * NOT_FOUND's `{detail}` for a request that matches no route: its method and its path, as far as
 * a refusal echoes it (the query left out, a long path cut: services/api/errors.ts, noRouteDetail).
 */
export const NO_ROUTE_DETAIL = 'no route {method} {path}';

/** `template` with its `{name}`s filled from `params`; a name `params` lacks stays as written. */
export function fillTemplate(template: string, params: ErrorParams): string {
  return template.replace(/\{(\w+)\}/g, (whole, name: string) =>
    name in params ? String(params[name]) : whole,
  );
}

/** The catalog message of `code` with its `{name}`s filled from `params`. */
export function errorMessage(code: ErrorCode, params: ErrorParams = {}): string {
  return fillTemplate(ERRORS[code].message, params);
}

/** What a throw may add to its catalog entry. */
export interface ErrorExtras {
  /** The words for this answer when the family words the code its own way (a corpus meaning). */
  message?: string;
  /** Headers the answer carries (Retry-After of a quota). */
  headers?: Record<string, string>;
  /** Figures the answer's `_service` block carries besides the caller and quota (the chat quota). */
  meta?: Record<string, unknown>;
  /** Fields the answer's body carries besides code and message (a tool's `issues`). */
  body?: Record<string, unknown>;
}

/** A refusal from the catalog, thrown anywhere under a route and answered by the plugin's handler. */
export class ServiceError extends Error {
  override readonly name: string = 'ServiceError';
  /** Fastify's name for it: a route's own error handler reads it like any framework error's. */
  readonly statusCode: number;
  readonly retryable: boolean;
  readonly headers: Record<string, string>;
  readonly meta: Record<string, unknown> | undefined;
  readonly body: Record<string, unknown>;

  constructor(
    readonly code: ErrorCode,
    params: ErrorParams = {},
    /** The request field at fault (a body field or query parameter), when there is one. */
    readonly field?: string,
    extras: ErrorExtras = {},
  ) {
    super(extras.message ?? errorMessage(code, params));
    this.statusCode = ERRORS[code].status;
    this.retryable = ERRORS[code].retryable;
    this.headers = extras.headers ?? {};
    this.meta = extras.meta;
    this.body = extras.body ?? {};
  }
}

/** True when `code` names an entry of the catalog. */
export const isErrorCode = (code: string): code is ErrorCode => Object.hasOwn(ERRORS, code);

/**
 * The body of every /api, /x402 and operations refusal (code casing per route family, see the
 * README); keyed refusals add the `_service` block.
 */
export const ErrorBody = z
  .object({
    code: z.string().describe('A code of the error catalog'),
    message: z.string().describe('What went wrong, for a person'),
    field: z.string().optional().describe('The request field at fault'),
    retryable: z
      .boolean()
      .optional()
      .describe(
        'Whether the same request may succeed later (the catalog entry of its code): on every pay-per-call (/x402) refusal but those answered with a quote (402, 429); elsewhere present only when true',
      ),
    retry_after_ms: z
      .number()
      .int()
      .nonnegative()
      .optional()
      .describe(
        'RATE_LIMITED: milliseconds until a call may be served (the window resets); Retry-After gives the same wait in whole seconds',
      ),
    _service: z
      .record(z.string(), z.unknown())
      .optional()
      .describe('Caller and quota, when the caller is known'),
  })
  .loose();
export type ErrorBody = z.infer<typeof ErrorBody>;

/**
 * The `data` of a refusal on /mcp: the members of ErrorBody an HTTP refusal carries besides its
 * code and message, as the same words say them (the rate limit's 429 sends all four).
 */
export const RpcErrorData = z.looseObject({
  code: z.string().optional().describe('The code of the error catalog'),
  retryable: z
    .boolean()
    .optional()
    .describe(
      'Whether the same request may succeed later (the catalog entry of its code); present when true',
    ),
  retry_after_ms: ErrorBody.shape.retry_after_ms,
  _service: z.unknown().optional().describe("The caller's auth and quota, where the caller was resolved"),
});
export type RpcErrorData = z.infer<typeof RpcErrorData>;

/** The body of a refusal on /mcp (JSON-RPC 2.0). */
export const RpcErrorBody = z.object({
  jsonrpc: z.literal('2.0'),
  error: z.object({
    code: z.number().int(),
    message: z.string(),
    data: RpcErrorData.optional(),
  }),
  id: z.union([z.string(), z.number(), z.null()]),
});
export type RpcErrorBody = z.infer<typeof RpcErrorBody>;
