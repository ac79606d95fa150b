import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { Config } from '../../contracts/config.ts';
import {
  type ChatAnswer,
  type ChatQuotaSnapshot,
  type SearchAnswer,
  searchable,
} from '../../contracts/knowledge.ts';
import type { ProjectionRunner } from '../../projections/runner.ts';
import { OperationError } from '../engine/operation-errors.ts';
import type { Caller } from '../metering/caller.ts';
import { answerQuestion } from './chat.ts';
import type { ChatQuota } from './chat-quota.ts';
import { type KnowledgeFacts, LIVE_DOCUMENT, liveDocument, livePassages } from './facts.ts';
import type { ChatProvider } from './providers.ts';
import type { KnowledgeIndex } from './search-index.ts';

/** The chat budget of this month is spent: 429 with Retry-After until the UTC month ends. */
export class ChatQuotaExhaustedError extends OperationError {
  constructor(
    readonly chatQuota: ChatQuotaSnapshot,
    readonly retryAfterSeconds: number,
  ) {
    super({
      code: 'CHAT_QUOTA_EXHAUSTED',
      message: `the chat quota of this month is used up (${chatQuota.total} chats); it resets at ${chatQuota.resets_at}`,
      service: { chat_quota: chatQuota },
      resetsAt: chatQuota.resets_at,
    });
  }
}

export const internalError = () =>
  new OperationError({
    code: 'INTERNAL_ERROR',
    message: 'the request failed on our side; nothing was counted',
  });

/** Distinct (query, limit) answers kept per corpus version; the oldest goes first. */
const ANSWER_CACHE_SIZE = 1_000;

export interface ChatServed extends ChatAnswer {
  _service: { chat_quota: ChatQuotaSnapshot };
}

/**
 * Search and chat over the index; the live facts are folded in lazily, when a request finds
 * the facts runner ahead of what the index holds.
 */
export class Knowledge {
  private indexedAt = -1;
  /** LIVE_DOCUMENT as of the facts indexed (refresh). */
  private live = liveDocument([]);
  private readonly answers = new Map<string, SearchAnswer>();
  private answersOf = '';

  constructor(
    private readonly deps: {
      config: Pick<Config, 'CHAT_TIMEOUT_MS' | 'LIVE_EXCHANGES' | 'PUBLIC_BASE_URL'>;
      index: KnowledgeIndex;
      /** The markdown documents citations open (GET /knowledge/{file}), by served name. */
      documents: ReadonlyMap<string, string>;
      facts: Pick<ProjectionRunner<KnowledgeFacts>, 'state' | 'checkpoint'>;
      chatQuota: ChatQuota;
      provider: ChatProvider | null;
      logger: Logger;
    },
  ) {
    this.base = deps.config.PUBLIC_BASE_URL?.replace(/\/+$/, '');
  }

  /** PUBLIC_BASE_URL without its trailing slashes, read once (located). */
  private readonly base: string | undefined;

  /**
   * A passage's source_url as answered: a path on the service (/knowledge/README.md#…, /readyz)
   * under PUBLIC_BASE_URL when it is set, else under `origin`, the origin the request came to
   * (publicOrigin: its scheme and Host), so that it opens where the answer is read: an MCP client
   * has no base to resolve a path against. A path only when neither is known (a caller in process).
   */
  private located(url: string, origin: string | undefined): string {
    const base = this.base ?? origin;
    return base !== undefined && url.startsWith('/') ? `${base}${url}` : url;
  }

  get index(): KnowledgeIndex {
    return this.deps.index;
  }

  /** A document of the corpus by its served name (a citation's source_url), as indexed; undefined if none. */
  document(name: string): string | undefined {
    if (name !== LIVE_DOCUMENT) return this.deps.documents.get(name);
    this.refresh();
    return this.live;
  }

  refresh(): void {
    const { facts, index, config } = this.deps;
    if (facts.checkpoint === this.indexedAt) return;
    this.indexedAt = facts.checkpoint;
    const passages = livePassages(facts.state, { configured: config.LIVE_EXCHANGES });
    index.replaceGroup('live#', passages);
    this.live = liveDocument(passages);
  }

  /**
   * A weak validator: the body also carries the caller's `_service`, the passages are what it
   * names, at the origin its source_urls name (`origin`, without PUBLIC_BASE_URL).
   */
  etag(query: string, limit: number, origin?: string): string {
    this.refresh();
    const request = createHash('sha256')
      .update(`${limit}\u0000${query}\u0000${this.base ?? origin ?? ''}`)
      .digest('hex')
      .slice(0, 16);
    return `W/"${this.deps.index.digest}-${request}"`;
  }

  /**
   * Answers are cached per corpus digest: the same query gives the same bytes until the corpus
   * changes (the contract lets any cache keep them 300 s), and agents repeat their questions.
   */
  search(query: string, limit: number, origin?: string): SearchAnswer {
    this.refresh();
    const { index } = this.deps;
    if (this.answersOf !== index.digest) {
      this.answers.clear();
      this.answersOf = index.digest;
    }
    const key = `${limit}\u0000${query}`;
    let answer = this.answers.get(key);
    if (answer === undefined) {
      // Looked up as searchable() folds it (full-width letters, escape sequences); echoed as sent.
      const { total, results } = index.search(searchable(query), limit);
      answer = { query, total_results: total, results };
      if (this.answers.size >= ANSWER_CACHE_SIZE) this.answers.delete(this.answers.keys().next().value!);
      this.answers.set(key, answer);
    }
    // Kept as paths, located per answer: the origin may be the request's.
    return {
      ...answer,
      results: answer.results.map((r) => ({ ...r, source_url: this.located(r.source_url, origin) })),
    };
  }

  /**
   * One chat: a unit of the month's chat quota is taken first, atomically, so concurrent chats
   * never overspend; it is given back when the chat fails or the provider is unavailable.
   */
  async chat(
    caller: Caller,
    input: { question: string; model: string },
    requestId: string,
    origin?: string,
  ): Promise<{ body: ChatServed; month: string }> {
    this.refresh();
    const { chatQuota, logger } = this.deps;
    const taken = await chatQuota.consume(caller.subject, input.model, requestId);
    if (!taken.ok) throw new ChatQuotaExhaustedError(taken.snapshot, taken.retryAfterSeconds);
    const giveBack = async (reason: string): Promise<ChatQuotaSnapshot> => {
      try {
        return await chatQuota.refund(caller.subject, taken.month, requestId, reason);
      } catch (err) {
        logger.error({ err, requestId }, 'chat quota refund failed');
        return taken.snapshot;
      }
    };
    try {
      const outcome = await answerQuestion(
        {
          retrieve: (q) => this.deps.index.retrieve(q),
          weight: (term) => this.deps.index.weight(term),
          provider: this.deps.provider,
          timeoutMs: this.deps.config.CHAT_TIMEOUT_MS,
          logger,
        },
        // Answered as searchable() folds it (full-width letters, escape sequences); echoed as sent.
        searchable(input.question),
        input.model,
      );
      const quota = outcome.providerFailed ? await giveBack('provider_unavailable') : taken.snapshot;
      const answer = {
        ...outcome.answer,
        question: input.question,
        citations: outcome.answer.citations.map((c) => ({
          ...c,
          source_url: this.located(c.source_url, origin),
        })),
      };
      return { body: { ...answer, _service: { chat_quota: quota } }, month: taken.month };
    } catch (err) {
      logger.error({ err, requestId }, 'chat failed');
      await giveBack('internal_error');
      throw internalError();
    }
  }

  /** Gives back the unit of a chat whose answer was discarded (its call lost the quota race). */
  async release(caller: Caller, month: string, requestId: string): Promise<void> {
    await this.deps.chatQuota
      .refund(caller.subject, month, requestId, 'call_quota_exhausted')
      .catch((err: unknown) => this.deps.logger.error({ err, requestId }, 'chat quota refund failed'));
  }
}
