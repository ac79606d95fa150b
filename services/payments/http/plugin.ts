import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import { type ErrorCode, isErrorCode, ServiceError } from '../../../contracts/errors.ts';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { answeredBy } from '../../api/answer-at-turn-end.ts';
import { errorHandler } from '../../api/errors.ts';
import { repeatedMemberName, repeatedMemberWords } from '../../api/json-body.ts';
import { codesText, documented, RESPONSE_HEADERS, refusal } from '../../api/openapi.ts';
import { publicOrigin } from '../../api/public-origin.ts';
import { REMEMBERED_INPUTS, REMEMBERED_TEXT_CHARS, recall, remember } from '../../api/remembered-input.ts';
import { answerBytesWithService } from '../../api/served-answers.ts';
import { invalidInput } from '../../engine/operation-errors.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import {
  type CallerRejectedError,
  callerHook,
  credentialOf,
  decorateCaller,
  type KeyedAccess,
  undebitedService,
} from '../../metering/caller.ts';
import { QuotaUnavailableError, serveMetered } from '../../metering/metered-call.ts';
import { type PaidServiceMeta, ServiceMeta } from '../../metering/service-meta.ts';
import { quotaRetryAfter, refusingResetsAt } from '../../metering/snapshot.ts';
import { setBounded } from '../../shared/bounded-map.ts';
import { withoutCredentialParams } from '../../shared/credential-params.ts';
import { JSON_UTF8 } from '../../shared/media-types.ts';
import { routedTarget } from '../../shared/routed-path.ts';
import { type DecodedPayment, decodePaymentHeader, paymentResponseHeader, V1Requirement } from '../codecs.ts';
import {
  catalogRefusal,
  describeError,
  type PaymentFlowDeps,
  type Refusal,
  runPaidCall,
} from '../payment-flow.ts';
import { QUOTE_CACHE_SIZE, type Quote, type Quoter, quoteJson, quoteJsonWith } from '../quote.ts';
import { FACILITATOR_REASONS } from '../reasons.ts';
import type { PaidTool } from '../tools.ts';
import { contentTypeProblem } from './content-type.ts';
import { CORS_PREFLIGHT_HEADERS, CORS_RESPONSE_HEADERS } from './cors.ts';
import { type ServiceBlock, TurnPeeks } from './turn-peeks.ts';

export interface X402PluginOptions {
  ops: SignalOperations;
  tools: PaidTool[];
  quoter: Quoter;
  /** The payment flow's parts; its logger is replaced by each request's. */
  flow: PaymentFlowDeps;
  keyed: KeyedAccess;
  /** Largest accepted body on these routes; larger is 413 before any handler runs. */
  bodyLimit: number;
  /** PUBLIC_BASE_URL: the origin of the resource a quote names; unset, the one the request came to. */
  publicBaseUrl?: string | undefined;
}

/** One paid route's call: the tool, its input (null when the body is not trusted), where and which request. */
interface Call {
  tool: PaidTool;
  input: unknown;
  url: string;
  requestId: string;
}

const ANSWER_HEADERS: Record<string, string> = { ...CORS_RESPONSE_HEADERS, 'cache-control': 'no-store' };

function header(request: FastifyRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}

function hasBody(request: FastifyRequest): boolean {
  const length = Number(request.headers['content-length'] ?? 0);
  return length > 0 || request.headers['transfer-encoding'] !== undefined;
}

type BodyResult = { ok: true; input: unknown } | { ok: false; refusal: ServiceError };

/**
 * The tool's input from a raw body: `invalid_input` (with the issues) when it is not JSON, names a
 * member of an object twice, or does not validate.
 */
function readBody(tool: PaidTool, raw: unknown): BodyResult {
  let json: unknown = {};
  if (typeof raw === 'string' && raw.trim() !== '') {
    const notJson = (why?: string): BodyResult => ({
      ok: false,
      refusal: new ServiceError(
        'invalid_input',
        { detail: why ? `the body is not valid JSON: ${why}` : 'the body is not valid JSON' },
        undefined,
        { body: { issues: [] } },
      ),
    });
    try {
      json = JSON.parse(raw);
    } catch {
      return notJson();
    }
    // An object naming a member twice: refused, as on /api and /mcp (I-JSON).
    const repeated = repeatedMemberName(raw, json);
    if (repeated !== undefined) return notJson(repeatedMemberWords(repeated));
  }
  const parsed = tool.input.safeParse(json);
  if (parsed.success) return { ok: true, input: parsed.data };
  const failure = invalidInput(parsed.error, tool.input, json);
  const refusal = new ServiceError('invalid_input', { detail: failure.message }, undefined, {
    body: { issues: failure.issues ?? [] },
  });
  return { ok: false, refusal };
}

/** A refusal of the paid flow (a tool's failure, a refused content type) as the catalog error it names. */
function refusalError(refusal: Refusal): ServiceError {
  const { code, message, ...rest } = refusal.body as { code: string; message: string };
  return new ServiceError(isErrorCode(code) ? code : 'INTERNAL_ERROR', {}, undefined, {
    message,
    body: rest,
  });
}

/**
 * The price of a body for the 402 quote, which needs nothing else from it: the same body always
 * prices the same, so small bodies are read and validated once, not per quote (within the limits
 * of remembered inputs; a price is remembered for a body that does not validate too). A body that does
 * not validate is quoted at the tool's base price: discovery indexers probe a paid route with an
 * empty POST and drop it unless it answers with its quote, and the body is judged once a payment
 * comes with it (a paid or keyed call reads its body in full, readBody, before anything is charged).
 */
function bodyPricer(tool: PaidTool): (raw: unknown) => number {
  const remembered = new Map<string, number>();
  const priceOf = (raw: unknown): number => {
    const body = readBody(tool, raw);
    return tool.price(body.ok ? body.input : null);
  };
  return (raw) => {
    if (typeof raw !== 'string' || raw.length > REMEMBERED_TEXT_CHARS) return priceOf(raw);
    let result = remembered.get(raw);
    if (result === undefined) {
      result = priceOf(raw);
      setBounded(remembered, raw, result, REMEMBERED_INPUTS);
    }
    return result;
  };
}

/**
 * The body of a keyed or paid call as readBody reads it, read once per small body that validates
 * (remembered-input.ts): a customer repeats the same arguments, and JSON.parse and the schema's
 * parse of each were ~2 µs of the keyed call. A body that does not validate, or whose input is
 * not flat, is read afresh every time.
 */
function bodyReader(tool: PaidTool): (raw: unknown) => BodyResult {
  return (raw) => {
    if (typeof raw !== 'string') return readBody(tool, raw);
    const known = recall(tool.input, raw);
    if (known !== undefined) return { ok: true, input: known };
    const body = readBody(tool, raw);
    if (body.ok) remember(tool.input, raw, body.input);
    return body;
  };
}

/**
 * The pay-per-call routes' parts: the caller's auth hook, the family's error answer, and the three
 * ways a call is answered (quoted, served from a key's plan, paid). One instance per plugin.
 */
class PaidRoutes {
  private readonly quoter: Quoter;
  private readonly keyed: KeyedAccess;
  private readonly peeks: TurnPeeks;
  /** The Content-Type problem, as the answer it gets, from the hook that finds it to the route. */
  private readonly contentRefusals = new WeakMap<FastifyRequest, Refusal>();

  constructor(private readonly options: X402PluginOptions) {
    this.quoter = options.quoter;
    this.keyed = options.keyed;
    this.peeks = new TurnPeeks(options.keyed.quota);
  }

  /** Raw bodies (judged by the route, not by Fastify), the Content-Type check, the family's error answer. */
  prepare(app: FastifyInstance): void {
    app.removeAllContentTypeParsers();
    const asString = { parseAs: 'string', bodyLimit: this.options.bodyLimit } as const;
    const keepText = (
      _request: FastifyRequest,
      body: string | Buffer,
      done: (err: null, body: unknown) => void,
    ) => done(null, body);
    app.addContentTypeParser('*', asString, keepText);
    // The same parser under the media type every well-formed call sends: Fastify remembers the
    // parser found for a Content-Type value, but looks the catch-all up again on every request.
    app.addContentTypeParser('application/json', asString, keepText);
    // A callback hook, not an async one: this runs on every request and a promise per call shows.
    app.addHook('onRequest', (request, reply, done) => {
      reply.headers(ANSWER_HEADERS);
      if (request.method === 'POST') {
        const problem = contentTypeProblem(request.raw.rawHeaders, hasBody(request));
        if (problem) {
          this.contentRefusals.set(request, catalogRefusal('invalid_content_type', { detail: problem }));
          // Fastify would answer a merged media type with its own 415; the body is read raw instead.
          request.headers['content-type'] = 'application/octet-stream';
        }
      }
      done();
    });

    decorateCaller(app);
    // Every refusal of the family: {code, message, ...} and the caller's `_service`, nothing debited.
    app.setErrorHandler(
      errorHandler(async (error, request) => ({
        code: error.code,
        message: error.message,
        // Every refusal of the family says whether the same request may pass later (the catalog's
        // `retryable`), as the tool refusals and the MCP tool errors do: false tells a buyer that
        // retrying is no use (a 409 payment_already_used: sign a new authorisation).
        retryable: error.retryable,
        ...error.body,
        // None for a request refused before the caller hook ran (a repeated Host or Authorization,
        // refused by the api's onRequest hook): no caller is known, and which key it would be is
        // the question it was refused for, so no `_service` is made up from the first field, as on /api.
        ...(request.caller === null && request.callerRefused === null
          ? {}
          : { _service: await this.serviceOf(request) }),
      })),
    );
  }

  /** `_service` of an answer that debits nothing: what the request learnt, or a peek of its caller. */
  async serviceOf(request: FastifyRequest): Promise<ServiceMeta> {
    if (request.service) return request.service;
    // A refused key's caller (its outcome, tier free and detail), as the route's own 401 or 503 has it.
    const caller =
      request.caller ??
      request.callerRefused?.caller ??
      credentialOf({ headers: request.headers, clientAddress: request.ip });
    // A key the caller hook did not check is not applied either: tier free.
    if (typeof caller === 'string')
      return { auth: { outcome: 'UNKNOWN', presented: true, tier: 'free' }, quota: null };
    request.service = await undebitedService(this.keyed.quota, caller);
    return request.service;
  }

  /** The auth hook: a key that is not live is refused, 401 or 503; no key is an anonymous caller. */
  readonly identify = callerHook(() => this.keyed, {
    rejected: (err: CallerRejectedError) =>
      new ServiceError(err.reason === 'unknown' ? 'unknown_key' : 'key_unverifiable', {
        detail: err.message,
      }),
  });

  async sendQuote(
    reply: FastifyReply,
    call: Call,
    /** A catalog code, or a facilitator's own reason passed on. */
    code: string,
    message: string,
    service: ServiceMeta,
    status = 402,
    extra: Record<string, unknown> = {},
  ) {
    const resource = { url: call.url, description: call.tool.description, mimeType: 'application/json' };
    const built = this.quoter.quote(call.tool.price(call.input), resource, code, message);
    const quote = built instanceof Promise ? await built : built;
    // The quote is serialised once per process; only this answer's fields are added to it.
    return reply
      .code(status)
      .header('PAYMENT-REQUIRED', quote.header)
      .header('content-type', JSON_UTF8)
      .send(quoteJson(quote, { ...extra, _service: service }));
  }

  /** The 402 of a quote for a caller's block: the same quote and block give the same bytes. */
  sendPaymentRequired(reply: FastifyReply, quote: Quote, block: ServiceBlock) {
    // Encoded once for the quotes of this turn.
    let body = block.bodies.get(quote);
    if (body === undefined) {
      body = Buffer.from(quoteJsonWith(quote, '_service', block.json), 'utf8');
      block.bodies.set(quote, body);
    }
    return reply
      .code(402)
      .header('PAYMENT-REQUIRED', quote.header)
      .header('content-type', JSON_UTF8)
      .send(body);
  }

  /** Unpaid with a key: served from the key's plan, or 429 with the quote to pay for it instead. */
  async serveFromPlan(request: FastifyRequest, reply: FastifyReply, call: Call) {
    const caller = request.caller!;
    let metered: Awaited<ReturnType<typeof serveMetered<unknown>>>;
    try {
      metered = await serveMetered(this.keyed.quota, caller, { tool: call.tool.name }, () =>
        call.tool.run(this.options.ops, call.input, call.requestId),
      );
    } catch (err) {
      if (!(err instanceof QuotaUnavailableError)) throw err;
      request.service = err.service;
      throw new ServiceError('quota_unavailable', { detail: err.message });
    }
    request.service = metered.service;
    if (metered.ok) {
      // The bytes of `{...value, _service}` as Fastify would serialise it, the value's part of
      // them encoded once per revision and not copied per call.
      const bytes = answerBytesWithService(
        call.tool.name,
        metered.value as Record<string, unknown>,
        metered.service,
      );
      // Nothing returned, not the reply: see answeredBy.
      reply.header('content-type', JSON_UTF8).send(bytes);
      return undefined;
    }
    if (metered.reason === 'failed') throw refusalError(describeError(request.log, metered.error));
    const { window, service } = metered;
    const resets = refusingResetsAt(service.quota, window);
    // Where no facilitator settles (the embedded defaults), a paid retry is 503
    // facilitator_not_configured: say what works instead, as the MCP tool error does.
    const cannotSettle = this.options.flow.cannotSettle !== null;
    const wait =
      caller.subject.plan === 'pro'
        ? 'wait for the reset'
        : 'wait for the reset, or use a key of a larger plan';
    const message =
      `the ${window} quota of this key is used up (resets ${resets}); ` +
      (cannotSettle
        ? `${wait} (this service takes no x402 payment yet: facilitator_not_configured)`
        : 'pay for this call with x402 using the requirements in accepts / PAYMENT-REQUIRED');
    // Paying works at once; Retry-After tells a client that will not pay when its plan serves it again.
    reply.header('retry-after', quotaRetryAfter(service.quota, window));
    return this.sendQuote(reply, call, 'quota_exhausted', message, service, 429, { window });
  }

  /** With a payment: verified, reserved, run, settled (payment-flow.ts); each outcome as its answer. */
  async servePaid(
    request: FastifyRequest,
    reply: FastifyReply,
    call: Call,
    payment: DecodedPayment,
    contentRefusal: Refusal | null,
  ) {
    const service = await this.serviceOf(request);
    const outcome = await runPaidCall(
      { ...this.options.flow, logger: request.log },
      {
        payment,
        requirements: await this.quoter.requirements(call.tool.price(call.input)),
        url: call.url,
        requestId: call.requestId,
        tool: call.tool,
        input: call.input,
        refusal: contentRefusal,
      },
    );
    switch (outcome.kind) {
      case 'payment_rejected':
        return this.sendQuote(reply, call, outcome.reason, outcome.message, service);
      case 'unavailable':
      case 'conflict':
        throw new ServiceError(outcome.reason, { detail: outcome.message });
      case 'refused':
        throw refusalError(outcome.refusal);
      case 'settlement_failed':
        if (outcome.settle) reply.header(...paymentResponseHeader(payment.version, outcome.settle));
        return this.sendQuote(
          reply,
          call,
          'settlement_failed',
          `settlement failed: ${outcome.message}`,
          service,
        );
      case 'served': {
        reply.header(...paymentResponseHeader(payment.version, outcome.settle));
        if (outcome.replayed) reply.header('x-payment-replayed', 'true');
        const paid: PaidServiceMeta = { ...service, payment: outcome.receipt };
        return { ...(outcome.result as object), _service: paid };
      }
    }
  }

  /** POST /x402/<tool> and its CORS preflight. */
  register(app: FastifyInstance, tool: PaidTool): void {
    const path = `/x402/${tool.name}`;
    const pricer = bodyPricer(tool);
    const reader = bodyReader(tool);
    const paymentRequiredMessage = `payment required: ${tool.name}`;
    const quotes = routeQuotes(this.quoter, tool, paymentRequiredMessage);
    const originOf = publicOrigin(this.options.publicBaseUrl);
    // The quote's resource: this route's URL without any credential sent in its query. The route's
    // path, not the request target's: an absolute-form target (POST http://host/x402/...) carries
    // its own scheme and host.
    const resourceOf = (request: FastifyRequest) =>
      `${originOf(request)}${withoutCredentialParams(routedTarget(request))}`;

    /**
     * The common unpaid, keyless call answered without a promise, when all it needs is at hand:
     * the body's price, the caller's `_service` already read this turn, the quote already built.
     * False when any is missing; the handler below then answers it the same way, awaiting them.
     */
    const quoteAtOnce = (request: FastifyRequest, reply: FastifyReply): boolean => {
      if (request.headers['payment-signature'] !== undefined || request.headers['x-payment'] !== undefined)
        return false;
      if (this.contentRefusals.has(request)) return false;
      const caller = request.caller;
      if (caller === null || caller.keyId !== null) return false;
      const block = this.peeks.settled(caller);
      if (block === undefined) return false;
      const quote = quotes.cached(pricer(request.body), resourceOf(request));
      if (quote === undefined) return false;
      this.sendPaymentRequired(reply, quote, block);
      return true;
    };

    /** Dispatch: a keyless unpaid call is quoted whatever its body; the body is judged once a key or payment comes. */
    const handle = async (request: FastifyRequest, reply: FastifyReply) => {
      const caller = request.caller!;
      const decoded = decodePaymentHeader({
        paymentSignature: header(request, 'payment-signature'),
        xPayment: header(request, 'x-payment'),
      });
      const contentRefusal = this.contentRefusals.get(request) ?? null;
      if (contentRefusal && decoded === null) throw refusalError(contentRefusal);
      const url = resourceOf(request);
      if (decoded === null && caller.keyId === null) {
        const block = await this.peeks.of(caller);
        const built = quotes.quote(pricer(request.body), url);
        return this.sendPaymentRequired(reply, built instanceof Promise ? await built : built, block);
      }
      const body = reader(request.body);
      if (!contentRefusal && !body.ok) throw body.refusal;
      // With a bad Content-Type the body is not trusted for the call, only for pricing the quote.
      const call: Call = { tool, input: body.ok ? body.input : null, url, requestId: String(request.id) };
      if (decoded === null) return this.serveFromPlan(request, reply, call);
      if (!decoded.ok) {
        return this.sendQuote(reply, call, decoded.reason, decoded.message, await this.serviceOf(request));
      }
      return this.servePaid(request, reply, call, decoded.payment, contentRefusal);
    };

    app.options(path, async (_request, reply) => reply.code(204).headers(CORS_PREFLIGHT_HEADERS).send());
    app.post(
      path,
      { bodyLimit: this.options.bodyLimit, config: paidRouteDoc(tool), preHandler: this.identify },
      (request, reply) =>
        quoteAtOnce(request, reply) ? undefined : answeredBy(handle(request, reply), reply),
    );
  }
}

/**
 * POST /x402/<tool>. Order of checks: the presented key (401 unknown, 503 unverifiable); with
 * neither key nor payment, the 402 quote whatever the body; otherwise the body (400), then either
 * the key's plan quota (no payment attached, key applied: 200 or 429 with a quote to pay instead)
 * or payment (402, then the paid flow of payment-flow.ts). Every
 * answer carries `_service`, but a refusal given before the caller is known (a repeated Host or
 * Authorization). The plugin owns its body parsing so that a doubled or merged
 * Content-Type reaches the handler as `invalid_content_type` instead of Fastify's 415.
 */
export function x402Plugin(options: X402PluginOptions): FastifyPluginAsync {
  return async (app) => {
    const routes = new PaidRoutes(options);
    routes.prepare(app);
    for (const tool of options.tools) routes.register(app, tool);
  };
}

/**
 * The unpaid quotes of one route by resource URL and price: its code, message and description
 * are fixed, so a quote already built is found by two lookups instead of the quoter's key of
 * every field. Bounded like the quoter's own cache (the URL carries a client's Host and query).
 */
function routeQuotes(quoter: Quoter, tool: PaidTool, message: string) {
  const byUrl = new Map<string, Map<number, Quote>>();
  const remember = (url: string, price: number, quote: Quote) => {
    let byPrice = byUrl.get(url);
    if (byPrice === undefined) {
      if (byUrl.size >= QUOTE_CACHE_SIZE) byUrl.delete(byUrl.keys().next().value!);
      byPrice = new Map();
      byUrl.set(url, byPrice);
    }
    byPrice.set(price, quote);
    return quote;
  };
  return {
    cached: (price: number, url: string): Quote | undefined => byUrl.get(url)?.get(price),
    quote(price: number, url: string): Quote | Promise<Quote> {
      const built = quoter.quote(
        price,
        { url, description: tool.description, mimeType: 'application/json' },
        'payment_required',
        message,
      );
      return built instanceof Promise
        ? built.then((quote) => remember(url, price, quote))
        : remember(url, price, built);
    },
  };
}

/** Why a presented payment is refused: the 402 comes back with a fresh quote and one of these in `error`. */
const PAYMENT_REFUSALS: ErrorCode[] = [
  'invalid_payment_header',
  'invalid_payment',
  'invalid_payment_identifier',
  'unsupported_scheme',
  'network_mismatch',
  'asset_mismatch',
  'recipient_mismatch',
  'amount_mismatch',
  'terms_mismatch',
  'insufficient_funds',
  'payment_in_use',
  'payment_already_used',
  'payment_already_failed',
  'payment_state_changed',
  'settlement_failed',
  ...FACILITATOR_REASONS,
];

const PAYMENT_REQUIRED = 'Base64 JSON payment requirements (x402 v2)';

/** The route's entry in the OpenAPI document: the tool as the table has it, and what paying looks like. */
function paidRouteDoc(tool: PaidTool) {
  return documented({
    summary: `${tool.title} (${tool.name}), paid per call (x402) or from an API key's plan`,
    description: tool.description,
    tags: ['x402'],
    auth: 'x402',
    service: true,
    sends: ['Cache-Control'],
    body: tool.input,
    responses: {
      200: {
        description: 'The result; a paid call carries PAYMENT-RESPONSE (the settlement) and _service.payment',
        schema: tool.output,
        headers: {
          'PAYMENT-RESPONSE': RESPONSE_HEADERS['PAYMENT-RESPONSE'],
          'X-PAYMENT-RESPONSE': RESPONSE_HEADERS['X-PAYMENT-RESPONSE'],
          'x-payment-replayed': RESPONSE_HEADERS['x-payment-replayed'],
        },
      },
      400: refusal(['invalid_input', 'invalid_content_type'], 'Nothing is charged'),
      401: refusal(['unknown_key'], 'A Bearer key that is not live'),
      402: {
        description: `The quote: accepts[] in the body (v1) and the PAYMENT-REQUIRED header (v2), with payment_required when no payment came, or why a payment was refused: ${codesText(PAYMENT_REFUSALS)}`,
        schema: {
          type: 'object',
          required: ['x402Version', 'accepts', 'code'],
          properties: {
            x402Version: { type: 'integer', description: '1: the v1 body; v2 clients read PAYMENT-REQUIRED' },
            error: {
              type: 'string',
              description: "x402's field for why payment is asked for: the same text as message",
            },
            code: {
              type: 'string',
              description: 'payment_required, or why the presented payment was refused',
            },
            message: { type: 'string' },
            accepts: {
              type: 'array',
              items: jsonSchema(V1Requirement, 'output'),
              description: 'The payment requirements (v1)',
            },
            _service: {
              ...jsonSchema(ServiceMeta, 'output'),
              description: 'Caller and quota; nothing was debited',
            },
          },
        },
        headers: {
          'PAYMENT-REQUIRED': PAYMENT_REQUIRED,
          // settlement_failed: the facilitator's answer, when it gave one.
          'PAYMENT-RESPONSE': RESPONSE_HEADERS['PAYMENT-RESPONSE'],
          'X-PAYMENT-RESPONSE': RESPONSE_HEADERS['X-PAYMENT-RESPONSE'],
        },
      },
      404: refusal(['unknown_coin'], 'Nothing is charged'),
      409: refusal(
        ['payment_identifier_conflict', 'payment_already_used', 'payment_in_use'],
        'The payment already paid for another request (payment_already_used, payment_identifier_conflict; retryable false: sign a new authorisation, or use a new payment id); or (payment_in_use, retryable) the same payment is still being answered by another request: retry and its answer comes back, charged once',
      ),
      422: refusal(
        ['unsupported_timeframe', 'unsupported_exchange', 'insufficient_history'],
        'Nothing is charged',
      ),
      429: {
        ...refusal(
          ['quota_exhausted', 'RATE_LIMITED'],
          'quota_exhausted for a key: the 402 quote comes with it (x402Version, accepts and the PAYMENT-REQUIRED header; Retry-After: seconds until the quota window resets); RATE_LIMITED: the request-rate limit',
        ),
        headers: { 'PAYMENT-REQUIRED': PAYMENT_REQUIRED },
      },
      500: refusal(['INTERNAL_ERROR'], 'Nothing is charged'),
      503: refusal(
        [
          'key_unverifiable',
          'quota_unavailable',
          'facilitator_unavailable',
          'facilitator_not_configured',
          'venue_unavailable',
        ],
        'Nothing is charged; retry when retryable',
      ),
    },
  });
}
