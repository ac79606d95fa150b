import { CacheUnavailableError } from '../../adapters/cache/port.ts';
import {
  ChatAnswer,
  type ChatKnowledgeInput,
  chatKnowledgeInput,
  checkChat,
  checkSearch,
  type KNOWLEDGE_ERRORS,
  SearchAnswer,
  SearchKnowledgeInput,
} from '../../contracts/knowledge.ts';
import { releaseIfDiscarded } from '../api/mcp/tool-call.ts';
import type { ToolDefinition } from '../api/mcp/tool-registry.ts';
import { OperationError } from '../engine/operation-errors.ts';
import { internalError, type Knowledge } from './knowledge.ts';

function refuse(code: keyof typeof KNOWLEDGE_ERRORS, message: string): never {
  throw new OperationError({ code, message });
}

/** Anything but a described failure leaves as INTERNAL_ERROR, without detail. */
async function guarded<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof OperationError || err instanceof CacheUnavailableError) throw err;
    throw internalError();
  }
}

/**
 * The knowledge tools over MCP. Structural problems (a number for `query`, an unknown field)
 * are -32602 like every tool; the bounds answer with the same codes as the HTTP routes.
 */
export function knowledgeTools(
  knowledge: () => Promise<Knowledge>,
  models: readonly string[],
): ToolDefinition[] {
  const search: ToolDefinition<typeof SearchKnowledgeInput> = {
    name: 'search_knowledge',
    title: 'Search the documentation',
    description:
      'BM25 search over the service documentation (methodology, tool contract, prices and plans, error codes, webhooks, evaluation) and live facts (latest regime per market, venues served). Returns ranked passages with highlighted excerpts.',
    input: SearchKnowledgeInput,
    output: SearchAnswer,
    example: { query: 'how is confidence computed', limit: 5 },
    run: (args, ctx) =>
      guarded(async () => {
        const checked = checkSearch(args);
        if (!checked.ok) refuse(checked.code, checked.message);
        return { ...(await knowledge()).search(checked.value.query, checked.value.limit, ctx.origin) };
      }),
  };
  const chat: ToolDefinition<typeof ChatKnowledgeInput> = {
    name: 'chat_knowledge',
    title: 'Ask the documentation',
    description:
      'Answers a question about the service with sentences quoted from its documentation and live facts, each with a [n] citation; says it does not know when nothing relevant is found. Uses the monthly chat quota (_service.chat_quota).',
    input: chatKnowledgeInput(models),
    output: ChatAnswer,
    example: { question: 'What does the squeeze regime mean?' },
    run: (args, ctx) =>
      guarded(async () => {
        const checked = checkChat(args, models);
        if (!checked.ok) refuse(checked.code, checked.message);
        const { caller, requestId } = ctx;
        if (caller === undefined) throw new Error('chat_knowledge needs the caller');
        const served = await knowledge();
        const { body, month } = await served.chat(caller, checked.value, requestId, ctx.origin);
        // The answer may still be thrown away (the call quota's debit refuses it): the unit comes back then.
        return releaseIfDiscarded({ ...body }, () => served.release(caller, month, requestId));
      }),
  };
  return [search as unknown as ToolDefinition, chat as unknown as ToolDefinition];
}
