import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import type { Logger } from 'pino';
import { z } from 'zod';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import { type ErrorCode, ServiceError } from '../../contracts/errors.ts';
import {
  CHAT_QUESTION_MAX,
  CHAT_QUESTION_MIN,
  ChatAnswer,
  chatRequest,
  EXTRACTIVE_MODEL,
  KNOWLEDGE_ERRORS,
  SEARCH_LIMIT_MAX,
  SEARCH_QUERY_MAX,
  SEARCH_QUERY_MIN,
  SearchAnswer,
  SearchRequest,
} from '../../contracts/knowledge.ts';
import { openToAnyOrigin } from '../api/cors.ts';
import { apiErrorBody, errorHandler, type FieldCodes } from '../api/errors.ts';
import { declared, refusal } from '../api/openapi.ts';
import { publicOrigin } from '../api/public-origin.ts';
import { OperationError } from '../engine/operation-errors.ts';
import { callerHook, decorateCaller, type KeyedAccess } from '../metering/caller.ts';
import { QuotaUnavailableError, serveMetered } from '../metering/metered-call.ts';
import type { ServiceMeta } from '../metering/service-meta.ts';
import { quotaRetryAfter, refusingResetsAt } from '../metering/snapshot.ts';
import { ChatQuotaExhaustedError, type Knowledge } from './knowledge.ts';

/** The documents' Cache-Control: they name no origin. */
const SOURCE_CACHE = 'public, max-age=300';

/** The MCP tools the routes are by another name: metered as them, and rate-limited in their share. */
const SEARCH_TOOL = 'search_knowledge';
const CHAT_TOOL = 'chat_knowledge';

/** `route` as the MCP tool `tool`: its config names it, for the rate limit's tool share (rate-limit.ts). */
function asTool<R extends { config: object }>(route: R, tool: string) {
  return { ...route, config: { ...route.config, tool } };
}

function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  const strip = (tag: string) => tag.trim().replace(/^W\//, '');
  return ifNoneMatch.split(',').some((tag) => tag.trim() === '*' || strip(tag) === strip(etag));
}

/** A knowledge code in the words the corpus gives it (the chat answers "what does X mean" with them). */
const refused = (code: keyof typeof KNOWLEDGE_ERRORS & ErrorCode, message?: string, headers = {}) =>
  new ServiceError(code, {}, undefined, { message: message ?? KNOWLEDGE_ERRORS[code].meaning, headers });

/** The plan's call quota refused the call: 429 until the window that refused resets. */
function callQuotaExhausted(window: 'monthly' | 'daily', service: ServiceMeta): ServiceError {
  const resets = refusingResetsAt(service.quota, window);
  return new ServiceError('QUOTA_EXHAUSTED', { window, resets: String(resets) }, undefined, {
    headers: { 'retry-after': quotaRetryAfter(service.quota, window) },
  });
}

const shared = {
  401: refusal(['UNAUTHORIZED'], 'A live API key is required'),
  429: refusal(['QUOTA_EXHAUSTED'], 'The plan’s call quota, with Retry-After'),
  500: refusal(['INTERNAL_ERROR'], 'Nothing is charged'),
  503: refusal(
    ['KEY_UNVERIFIABLE', 'QUOTA_UNAVAILABLE'],
    'With Retry-After; nothing is counted. KEY_UNVERIFIABLE: the key could not be verified; QUOTA_UNAVAILABLE: the key is live but its quota could not be counted',
  ),
};

/**
 * The codes of a body whose text field has its own invalid, too-short and too-long codes, beside
 * `others`. The transport's refusals are worded in them too (contract 7.1), with the transport's
 * status: a body over the route's limit is 413 with the too-long code, a repeated Authorization,
 * Host or Content-Type 400 with the invalid one.
 */
function textCodes(
  field: string,
  [invalid, short, long]: [ErrorCode, ErrorCode, ErrorCode],
  bounds: { min: number; max: number },
  others: { fields: Record<string, ErrorCode>; params: FieldCodes['params'] },
): FieldCodes {
  return {
    fields: { [field]: { too_small: short, too_big: long, '*': invalid }, ...others.fields },
    whole: invalid,
    unreadable: invalid,
    tooLarge: long,
    repeated: invalid,
    params: { [short]: { min: bounds.min }, [long]: { max: bounds.max }, ...others.params },
  };
}

/** The 400's note: a body that is not JSON and a repeated header are the route's invalid-input code. */
const inputNote = (invalid: ErrorCode) =>
  `The input; a body that is not JSON, and a request repeating Authorization, Host or Content-Type (its message names the header), are ${invalid}; a field the body does not take is INVALID_FIELD naming it`;
const TOO_LARGE =
  'The body is over the route’s limit (BODY_LIMIT_BYTES): the text’s too-long code, its message naming the limit';

function searchRoute() {
  const route = declared({
    summary: 'Search the documentation and live facts (the MCP tool search_knowledge)',
    tags: ['knowledge'],
    sends: ['Cache-Control', 'ETag'],
    auth: 'bearer',
    service: true,
    body: SearchRequest,
    codes: textCodes(
      'query',
      ['INVALID_QUERY', 'QUERY_TOO_SHORT', 'QUERY_TOO_LONG'],
      { min: SEARCH_QUERY_MIN, max: SEARCH_QUERY_MAX },
      { fields: { limit: 'INVALID_LIMIT' }, params: { INVALID_LIMIT: { max: SEARCH_LIMIT_MAX } } },
    ),
    responses: {
      200: {
        description: 'Passages, best first',
        schema: SearchAnswer,
        headers: {
          ETag: 'Changes with the corpus',
          Vary: 'Authorization: the answer carries the caller’s _service',
        },
      },
      304: {
        description: 'If-None-Match matched: not counted',
        headers: { Vary: 'Authorization, as the answer it stands for' },
      },
      400: refusal(
        [
          'INVALID_QUERY',
          'QUERY_TOO_SHORT',
          'QUERY_TOO_LONG',
          'INVALID_LIMIT',
          'INVALID_FIELD',
          'JSON_TOO_DEEP',
        ],
        inputNote('INVALID_QUERY'),
      ),
      413: refusal(['QUERY_TOO_LONG'], TOO_LARGE),
      ...shared,
    },
  });
  return asTool(route, SEARCH_TOOL);
}

function chatRoute(models: readonly string[]) {
  const allowed = [EXTRACTIVE_MODEL, ...models].map((m) => JSON.stringify(m)).join(', ');
  const route = declared({
    summary: 'Ask a question; the answer quotes the sources with [n] citations (the MCP tool chat_knowledge)',
    tags: ['knowledge'],
    sends: ['Cache-Control'],
    auth: 'bearer',
    service: true,
    body: chatRequest(models),
    codes: textCodes(
      'question',
      ['INVALID_QUESTION', 'QUESTION_TOO_SHORT', 'QUESTION_TOO_LONG'],
      { min: CHAT_QUESTION_MIN, max: CHAT_QUESTION_MAX },
      { fields: { model: 'INVALID_MODEL' }, params: { INVALID_MODEL: { allowed } } },
    ),
    responses: {
      200: { description: 'A grounded answer with citations', schema: ChatAnswer },
      400: refusal(
        [
          'INVALID_QUESTION',
          'QUESTION_TOO_SHORT',
          'QUESTION_TOO_LONG',
          'INVALID_MODEL',
          'INVALID_FIELD',
          'JSON_TOO_DEEP',
        ],
        inputNote('INVALID_QUESTION'),
      ),
      413: refusal(['QUESTION_TOO_LONG'], TOO_LARGE),
      ...shared,
      429: refusal(['CHAT_QUOTA_EXHAUSTED', 'QUOTA_EXHAUSTED'], 'With Retry-After'),
    },
  });
  return asTool(route, CHAT_TOOL);
}

const SOURCE_ROUTE = declared({
  summary: 'A document the knowledge index is built from, as markdown: where a citation’s source_url opens',
  description:
    'The same text the index holds: README.md, the documents of docs/ by their file name (methodology.md…), the webhook guide as webhooks.md, the generated tools.md, errors.md and pricing.md, and live.md, the live regimes as indexed. A source_url’s fragment names a heading of the document as GitHub anchors it: lower case, punctuation but _ and - dropped, a hyphen for each space (-1, -2 for a repeated heading).',
  tags: ['knowledge'],
  sends: ['Cache-Control'],
  params: z.object({ file: z.string().describe('README.md, methodology.md, webhooks.md, errors.md…') }),
  responses: {
    200: { description: 'The document', schema: { type: 'string' }, contentTypes: ['text/markdown'] },
    404: refusal(['NOT_FOUND'], 'No document of the index by that name'),
  },
});

/**
 * GET /knowledge/{file}: the documents of the index, read-only, public as the repository is. A
 * name is looked up among the served ones, never joined to a path, so `..%2f` finds nothing.
 */
export function sourceRoutes(knowledge: () => Promise<Knowledge>): FastifyPluginAsync {
  return async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    plain.setErrorHandler(errorHandler(apiErrorBody));
    app.get('/knowledge/:file', SOURCE_ROUTE, async (request, reply) => {
      const text = (await knowledge()).document(request.params.file);
      if (text === undefined)
        throw new ServiceError('NOT_FOUND', { detail: 'no document of the index by that name' });
      return reply
        .header('content-type', 'text/markdown; charset=utf-8')
        .header('cache-control', SOURCE_CACHE)
        .send(text);
    });
  };
}

/** What a metered run threw or failed with, as the family's refusal (nothing counted). */
function failure(err: unknown, logger: Logger): ServiceError {
  if (err instanceof ServiceError) return err;
  if (err instanceof ChatQuotaExhaustedError) {
    return new ServiceError('CHAT_QUOTA_EXHAUSTED', { detail: err.message }, undefined, {
      headers: { 'retry-after': String(err.retryAfterSeconds) },
      ...(err.failure.service ? { meta: err.failure.service } : {}),
    });
  }
  // The key was verified (the auth hook): only its call or chat quota cannot be counted.
  if (err instanceof CacheUnavailableError || err instanceof QuotaUnavailableError) {
    return refused('QUOTA_UNAVAILABLE', undefined, { 'retry-after': '1' });
  }
  if (!(err instanceof OperationError && err.failure.code === 'INTERNAL_ERROR')) {
    logger.error({ err }, 'knowledge request failed');
  }
  return refused('INTERNAL_ERROR');
}

interface KnowledgeDeps {
  knowledge: () => Promise<Knowledge>;
  channel: () => KeyedAccess;
  models: readonly string[];
  logger: Logger;
  /** PUBLIC_BASE_URL: the origin source_urls name; without it, the request's (publicOrigin). */
  publicBaseUrl: string | undefined;
}

/** `_service` of a refusal answered before the caller was known (a header sent twice). */
const ABSENT: ServiceMeta = { auth: { outcome: 'ABSENT', presented: false, tier: 'free' }, quota: null };

/** The /api refusal (apiErrorBody), with `_service` on every one: ABSENT where no caller was known. */
async function knowledgeErrorBody(error: ServiceError, request: FastifyRequest) {
  const body = await apiErrorBody(error, request);
  return body._service ? body : { ...body, _service: { ...ABSENT, ...error.meta } };
}

/** The caller's side of the knowledge routes: its key (the auth hook), its `_service`, its metered calls. */
function knowledgeAccess(deps: KnowledgeDeps) {
  const quota = () => deps.channel().quota;

  /**
   * The auth hook, before the body is judged: the caller resolved once, and it must hold a live
   * key. A presented key that is not live: 503 while it cannot be checked, else 401.
   */
  const requireKey = callerHook(deps.channel, {
    rejected: (err) =>
      err.reason === 'indeterminate'
        ? refused('KEY_UNVERIFIABLE', err.message, { 'retry-after': '1' })
        : refused('UNAUTHORIZED', `${err.message}; ${KNOWLEDGE_ERRORS.UNAUTHORIZED.meaning}`),
    keyless: (caller) => {
      const detail = caller.auth.detail ? ` (${caller.auth.detail})` : '';
      return refused('UNAUTHORIZED', `${KNOWLEDGE_ERRORS.UNAUTHORIZED.meaning}${detail}`);
    },
  });

  /** Runs `work` against the caller's plan quota; a refusal is thrown with the `_service` it learnt. */
  async function metered<T>(
    request: FastifyRequest,
    call: { tool: string; requestId: string },
    work: () => Promise<T>,
    undo?: () => Promise<void>,
  ) {
    let outcome: Awaited<ReturnType<typeof serveMetered<T>>>;
    try {
      outcome = await serveMetered(quota(), request.caller!, call, work);
    } catch (err) {
      if (!(err instanceof QuotaUnavailableError)) throw err;
      await undo?.();
      request.service = err.service;
      throw failure(err, deps.logger);
    }
    request.service = outcome.service;
    if (outcome.ok) return { value: outcome.value, service: outcome.service };
    if (outcome.reason === 'failed') throw failure(outcome.error, deps.logger);
    await undo?.();
    throw callQuotaExhausted(outcome.window, outcome.service);
  }

  return { requireKey, metered };
}

/**
 * POST /api/search and POST /api/chat. Both need a live key (401 UNAUTHORIZED otherwise, before
 * the body is judged); both count one call against the key's plan quota like any tool; chat also
 * takes one unit of the month's chat quota. Every answer, errors included, carries `_service`.
 */
export function knowledgeRoutes(deps: KnowledgeDeps): FastifyPluginAsync {
  const { requireKey, metered } = knowledgeAccess(deps);
  const originOf = publicOrigin(deps.publicBaseUrl);
  // Public as the contract says (interface.md 4.2), though without PUBLIC_BASE_URL the answer names
  // the request's Host: unlike the keyless documents of originCacheControl, it varies by
  // Authorization, so a shared cache keeps one answer per key and a forged Host reaches only the
  // key that sent it.
  const searchCache = 'public, max-age=300';
  return async (plain) => {
    const app = plain.withTypeProvider<ZodTypeProvider>();
    // Any page may search and chat with a key.
    openToAnyOrigin(plain);
    decorateCaller(plain);
    // Errors are per caller; `_service` comes with every one, and the handler sends them no-store (on /api/search too).
    plain.setErrorHandler(errorHandler(knowledgeErrorBody));

    app.post('/api/search', { ...searchRoute(), preValidation: requireKey }, async (request, reply) => {
      const { query, limit } = request.body;
      const knowledge = await deps.knowledge();
      const origin = originOf(request);
      const etag = knowledge.etag(query, limit, origin);
      // A 304 carries the Vary of the 200 it stands for (RFC 9110 15.4.5), or a cache could reuse it across keys.
      const cacheable = { etag, 'cache-control': searchCache, vary: 'authorization' };
      // Nothing is served: no call is counted.
      if (matches(request.headers['if-none-match'], etag)) return reply.code(304).headers(cacheable).send();
      const answer = knowledge.search(query, limit, origin);
      const call = { tool: SEARCH_TOOL, requestId: randomUUID() };
      const { value, service } = await metered(request, call, async () => answer);
      reply.headers(cacheable);
      return { ...value, _service: service };
    });

    app.post(
      '/api/chat',
      { ...chatRoute(deps.models), preValidation: requireKey },
      async (request, reply) => {
        const caller = request.caller!;
        const knowledge = await deps.knowledge();
        const requestId = randomUUID();
        let taken: string | null = null;
        // The chat ran but its answer is discarded (the quota lost the race): its chat unit goes back.
        const giveBack = async () => {
          if (taken !== null) await knowledge.release(caller, taken, requestId);
        };
        reply.header('cache-control', 'no-store');
        const { value, service } = await metered(
          request,
          { tool: CHAT_TOOL, requestId },
          async () => {
            const served = await knowledge.chat(caller, request.body, requestId, originOf(request));
            taken = served.month;
            return served;
          },
          giveBack,
        );
        return { ...value.body, _service: { ...service, ...value.body._service } };
      },
    );
  };
}
