import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import {
  ChatAnswer,
  ChatKnowledgeInput,
  checkChat,
  checkSearch,
  KNOWLEDGE_ERRORS,
  type KnowledgeErrorCode,
  SearchAnswer,
  SearchKnowledgeInput,
} from '../../contracts/knowledge.ts';
import { type Caller, CallerRejectedError, identifyCaller, rejectedService } from '../api/caller.ts';
import { QuotaUnavailableError, serveMetered } from '../api/metered-call.ts';
import { documented, error } from '../api/openapi.ts';
import type { ServiceMeta } from '../api/service-meta.ts';
import { OperationError } from '../engine/operation-errors.ts';
import type { KeyResolver } from '../keys/key-resolver.ts';
import type { QuotaMeter } from '../quota/quota-meter.ts';
import { quotaRetryAfter } from '../quota/snapshot.ts';
import { ChatQuotaExhaustedError, type Knowledge } from './knowledge.ts';

export interface KeyedAccess {
  keys: KeyResolver;
  quota: QuotaMeter;
}

const SEARCH_CACHE = 'public, max-age=300';

type Service = ServiceMeta | { auth: ServiceMeta['auth']; quota: null };

function sendError(
  reply: FastifyReply,
  code: KnowledgeErrorCode,
  message: string,
  service: Service & Record<string, unknown>,
  headers: Record<string, string> = {},
): FastifyReply {
  // Errors are per caller and never cached, on /api/search too.
  reply.header('cache-control', 'no-store');
  for (const [name, value] of Object.entries(headers)) reply.header(name, value);
  return reply.code(KNOWLEDGE_ERRORS[code].status).send({ code, message, _service: service });
}

function matches(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  const strip = (tag: string) => tag.trim().replace(/^W\//, '');
  return ifNoneMatch.split(',').some((tag) => tag.trim() === '*' || strip(tag) === strip(etag));
}

/**
 * POST /api/search and POST /api/chat. Both need a live key (401 UNAUTHORIZED otherwise); both
 * count one call against the key's plan quota like any tool; chat also takes one unit of the
 * month's chat quota. Every answer, errors included, carries `_service`.
 */
export function knowledgeRoutes(deps: {
  knowledge: () => Promise<Knowledge>;
  channel: () => KeyedAccess;
  models: readonly string[];
  logger: Logger;
}): FastifyPluginAsync {
  async function callerOf(request: FastifyRequest, reply: FastifyReply): Promise<Caller | null> {
    let caller: Caller;
    try {
      caller = await identifyCaller(deps.channel().keys, {
        headers: request.headers,
        clientAddress: request.ip,
      });
    } catch (err) {
      if (!(err instanceof CallerRejectedError)) throw err;
      // Like every answer, the refusal carries the live figures of what the request counts
      // against without the key: its client address's anonymous quota.
      const service = await rejectedService(deps.channel().quota, err);
      if (err.reason === 'indeterminate') {
        sendError(reply, 'KEY_UNVERIFIABLE', err.message, service, { 'retry-after': '1' });
      } else
        sendError(reply, 'UNAUTHORIZED', `${err.message}; ${KNOWLEDGE_ERRORS.UNAUTHORIZED.meaning}`, service);
      return null;
    }
    if (caller.keyId === null) {
      const detail = caller.auth.detail ? ` (${caller.auth.detail})` : '';
      sendError(
        reply,
        'UNAUTHORIZED',
        `${KNOWLEDGE_ERRORS.UNAUTHORIZED.meaning}${detail}`,
        await peek(caller),
      );
      return null;
    }
    return caller;
  }

  async function peek(caller: Caller): Promise<Service> {
    return {
      auth: caller.auth,
      quota: await deps
        .channel()
        .quota.peek(caller.subject)
        .catch(() => null),
    };
  }

  /** A refusal of the plan's call quota: 429 until the window that refused resets. */
  function callQuotaExhausted(reply: FastifyReply, window: 'monthly' | 'daily', service: ServiceMeta) {
    const resets = window === 'daily' ? service.quota?.daily?.resets_at : service.quota?.resets_at;
    return sendError(
      reply,
      'QUOTA_EXHAUSTED',
      `the ${window} call quota of this key is used up (resets ${resets})`,
      service,
      { 'retry-after': quotaRetryAfter(service.quota, window) },
    );
  }

  function failure(reply: FastifyReply, err: unknown, service: Service & Record<string, unknown>) {
    if (err instanceof ChatQuotaExhaustedError) {
      return sendError(
        reply,
        'CHAT_QUOTA_EXHAUSTED',
        err.message,
        { ...service, chat_quota: err.chatQuota },
        { 'retry-after': String(err.retryAfterSeconds) },
      );
    }
    if (err instanceof CacheUnavailableError) {
      return sendError(
        reply,
        'KEY_UNVERIFIABLE',
        'the quota could not be checked right now; retry shortly',
        service,
        {
          'retry-after': '1',
        },
      );
    }
    if (!(err instanceof OperationError && err.failure.code === 'INTERNAL_ERROR')) {
      deps.logger.error({ err }, 'knowledge request failed');
    }
    return sendError(reply, 'INTERNAL_ERROR', KNOWLEDGE_ERRORS.INTERNAL_ERROR.meaning, service);
  }

  const shared = {
    401: error('UNAUTHORIZED: a live API key is required'),
    429: error('QUOTA_EXHAUSTED (the plan’s call quota), with Retry-After'),
    500: error('INTERNAL_ERROR: nothing is charged'),
  };
  const searchDoc = documented({
    summary: 'Search the documentation and live facts (the MCP tool search_knowledge)',
    tags: ['knowledge'],
    auth: 'bearer',
    service: true,
    body: SearchKnowledgeInput,
    responses: {
      200: {
        description: 'Passages, best first',
        schema: SearchAnswer,
        headers: { ETag: 'Changes with the corpus' },
      },
      304: { description: 'If-None-Match matched: not counted' },
      400: error('INVALID_QUERY, QUERY_TOO_SHORT, QUERY_TOO_LONG, INVALID_LIMIT'),
      ...shared,
    },
  });
  const chatDoc = documented({
    summary: 'Ask a question; the answer quotes the sources with [n] citations (the MCP tool chat_knowledge)',
    tags: ['knowledge'],
    auth: 'bearer',
    service: true,
    body: ChatKnowledgeInput,
    responses: {
      200: { description: 'A grounded answer with citations', schema: ChatAnswer },
      400: error('INVALID_QUESTION, QUESTION_TOO_SHORT, QUESTION_TOO_LONG, INVALID_MODEL'),
      ...shared,
      429: error('CHAT_QUOTA_EXHAUSTED (until the UTC month resets) or QUOTA_EXHAUSTED, with Retry-After'),
    },
  });

  return async (app) => {
    // A body that is not JSON (or too large) answers in the same shape as a bad field.
    const bodyError =
      (code: KnowledgeErrorCode) => async (error: Error, request: FastifyRequest, reply: FastifyReply) => {
        const status = (error as { statusCode?: number }).statusCode ?? 500;
        const service: Service = await identifyCaller(deps.channel().keys, {
          headers: request.headers,
          clientAddress: request.ip,
        }).then(
          (caller) => peek(caller),
          (err: unknown) =>
            err instanceof CallerRejectedError
              ? rejectedService(deps.channel().quota, err)
              : { auth: { outcome: 'ABSENT', presented: false, tier: 'free' }, quota: null },
        );
        if (status >= 500) return failure(reply, error, service);
        return sendError(reply, code, `the request body could not be read: ${error.message}`, service);
      };

    const searchOptions = { errorHandler: bodyError('INVALID_QUERY'), config: searchDoc };
    app.post('/api/search', searchOptions, async (request, reply) => {
      const caller = await callerOf(request, reply);
      if (caller === null) return reply;
      const checked = checkSearch(request.body);
      if (!checked.ok) return sendError(reply, checked.code, checked.message, await peek(caller));
      const { query, limit } = checked.value;
      const knowledge = await deps.knowledge();
      const etag = knowledge.etag(query, limit);
      if (matches(request.headers['if-none-match'], etag)) {
        // Nothing is served: no call is counted.
        return reply.code(304).header('etag', etag).header('cache-control', SEARCH_CACHE).send();
      }
      const answer = knowledge.search(query, limit);
      const requestId = randomUUID();
      let metered: Awaited<ReturnType<typeof serveMetered<typeof answer>>>;
      try {
        metered = await serveMetered(
          deps.channel().quota,
          caller,
          { tool: 'search_knowledge', requestId },
          async () => answer,
        );
      } catch (err) {
        if (!(err instanceof QuotaUnavailableError)) throw err;
        return failure(reply, new CacheUnavailableError(err.message), err.service);
      }
      if (!metered.ok) {
        if (metered.reason === 'quota_exhausted')
          return callQuotaExhausted(reply, metered.window, metered.service);
        return failure(reply, metered.error, metered.service);
      }
      return reply
        .header('etag', etag)
        .header('cache-control', SEARCH_CACHE)
        .header('vary', 'authorization')
        .send({ ...metered.value, _service: metered.service });
    });

    const chatOptions = { errorHandler: bodyError('INVALID_QUESTION'), config: chatDoc };
    app.post('/api/chat', chatOptions, async (request, reply) => {
      const caller = await callerOf(request, reply);
      if (caller === null) return reply;
      const checked = checkChat(request.body, deps.models);
      if (!checked.ok) return sendError(reply, checked.code, checked.message, await peek(caller));
      const knowledge = await deps.knowledge();
      const requestId = randomUUID();
      let taken: string | null = null;
      let metered: Awaited<ReturnType<typeof serveMetered<Awaited<ReturnType<Knowledge['chat']>>>>>;
      try {
        metered = await serveMetered(
          deps.channel().quota,
          caller,
          { tool: 'chat_knowledge', requestId },
          async () => {
            const served = await knowledge.chat(caller, checked.value, requestId);
            taken = served.month;
            return served;
          },
        );
      } catch (err) {
        if (!(err instanceof QuotaUnavailableError)) throw err;
        if (taken !== null) await knowledge.release(caller, taken, requestId);
        return failure(reply, new CacheUnavailableError(err.message), err.service);
      }
      reply.header('cache-control', 'no-store');
      if (!metered.ok) {
        if (metered.reason === 'failed') return failure(reply, metered.error, metered.service);
        // The chat ran but lost the race for the last call of the plan: its answer is discarded.
        if (taken !== null) await knowledge.release(caller, taken, requestId);
        return callQuotaExhausted(reply, metered.window, metered.service);
      }
      const { body } = metered.value;
      return reply.send({ ...body, _service: { ...metered.service, ...body._service } });
    });
  };
}
