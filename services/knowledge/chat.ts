import type { Logger } from 'pino';
import { type ChatAnswer, type Citation, EXTRACTIVE_MODEL } from '../../contracts/knowledge.ts';
import { CONTEXT_PASSAGES, DONT_KNOW, expandQuestion, extractiveAnswer, sentences } from './extractive.ts';
import type { ChatProvider } from './providers.ts';
import type { Retrieved } from './search-index.ts';
import { contentTerms, termOf, words } from './text.ts';

const SYSTEM = [
  'You answer questions about a crypto signal service using only the numbered passages given.',
  'Cite every statement with the number of its passage in square brackets, like [1] or [2].',
  'Never cite a number that is not one of the passages. Copy prices, quotas and other numbers exactly as written.',
  'If the passages do not answer the question, say you do not know.',
].join(' ');

function promptFor(question: string, context: Retrieved[]): string {
  const blocks = context.map(
    ({ passage }, i) => `[${i + 1}] id=${passage.id} title=${passage.title}\n${passage.text}`,
  );
  return `Passages:\n\n${blocks.join('\n\n')}\n\nQuestion: ${question}`;
}

/**
 * Whether an answer says anything besides its [n] markers: a letter or a digit. "[1]" alone (or
 * "[1][2].") states nothing, so it cites nothing for anything.
 */
function saysSomething(answer: string): boolean {
  return /[\p{L}\p{N}]/u.test(answer.replace(/\[\d+\]/g, ' '));
}

/**
 * Checks a generated answer against what the model was given: it must say something besides its
 * markers (saysSomething), cite at least one passage, only passages it was given, and no number
 * that none of them holds. Returns the answer renumbered so that [n] is the n-th citation, or null
 * when the check fails.
 */
export function checkGenerated(
  answer: string,
  context: Retrieved[],
): { text: string; citations: Citation[] } | null {
  if (!saysSomething(answer)) return null;
  const cited = [...answer.matchAll(/\[(\d+)\]/g)].map((m) => Number(m[1]));
  if (cited.length === 0 || cited.some((n) => n < 1 || n > context.length)) return null;
  // A bracketed id or number-like token that is not [n] (e.g. "[doc-7]") is also off-source.
  if (/\[(?!\d+\])[^\]\s]{1,80}\]/.test(answer)) return null;
  // Numbers are never generated: each one in the answer must stand in a passage it was given.
  const given = context.map(({ passage }) => passage.text).join('\n');
  const numbers = answer.replace(/\[\d+\]/g, ' ').match(/\d+(?:[.,]\d+)*/g) ?? [];
  if (numbers.some((n) => !given.includes(n))) return null;
  const order = [...new Set(cited)];
  const text = answer.replace(/\[(\d+)\]/g, (_, n: string) => `[${order.indexOf(Number(n)) + 1}]`).trim();
  const terms = new Set(contentTerms(answer));
  const citations = order.map((n) => {
    const { passage } = context[n - 1]!;
    // The passage's sentence closest to the answer is the quote shown; it is verbatim.
    const all = sentences(passage.text);
    let best = all[0] ?? passage.text;
    let bestScore = -1;
    for (const s of all) {
      const score = words(s).filter((w) => {
        const t = termOf(w);
        return t !== null && terms.has(t);
      }).length;
      if (score > bestScore) {
        best = s;
        bestScore = score;
      }
    }
    return { id: passage.id, source_url: passage.source_url, title: passage.title, quote: best };
  });
  return { text, citations };
}

export interface ChatOutcome {
  answer: ChatAnswer;
  /** The provider failed (error or timeout): the chat's unit is given back. */
  providerFailed: boolean;
}

/** Answers one question: extractively, or with a provider checked against the retrieved passages. */
export async function answerQuestion(
  deps: {
    retrieve: (q: string) => Retrieved[];
    /** A term's weight in the corpus (its rarity); every term weighs the same without it. */
    weight?: (term: string) => number;
    provider: ChatProvider | null;
    timeoutMs: number;
    logger: Logger;
  },
  question: string,
  model: string,
): Promise<ChatOutcome> {
  // Retrieval also looks for the documentation's words for what the question names.
  const retrieved = deps.retrieve(expandQuestion(question));
  const quoted = extractiveAnswer(question, retrieved, deps.weight);
  const extractive = (note?: string): ChatAnswer => ({
    question,
    ...quoted,
    model: EXTRACTIVE_MODEL,
    ...(note ? { note } : {}),
  });
  if (model === EXTRACTIVE_MODEL || deps.provider === null) {
    return { answer: extractive(), providerFailed: false };
  }
  if (!quoted.grounded) {
    // Nothing to ground an answer in: the model is not asked to make one up.
    return {
      answer: { question, answer: DONT_KNOW, citations: [], model, grounded: false },
      providerFailed: false,
    };
  }
  const context = retrieved.slice(0, CONTEXT_PASSAGES);
  let text: string;
  try {
    text = await deps.provider.complete({
      model,
      system: SYSTEM,
      user: promptFor(question, context),
      signal: AbortSignal.timeout(deps.timeoutMs),
    });
  } catch (err) {
    deps.logger.warn(
      { err, model, provider: deps.provider.kind },
      'chat provider unavailable; answering extractively',
    );
    return {
      answer: extractive(
        `the model ${model} was unavailable (${(err as Error).message}); this answer is extractive`,
      ),
      providerFailed: true,
    };
  }
  const checked = checkGenerated(text, context);
  if (checked === null) {
    // An answer citing nothing (a model saying it does not know), or bare markers that state
    // nothing to cite, made nothing up: it is told apart.
    const uncited = !/\[\d+\]/.test(text) || !saysSomething(text);
    const why = uncited
      ? 'cited none of the passages it was given'
      : 'cited sources or numbers it was not given';
    deps.logger.warn({ model }, `chat provider ${why}; answering extractively`);
    return {
      answer: extractive(`the model ${model} ${why}; this answer is extractive`),
      providerFailed: false,
    };
  }
  return {
    answer: { question, answer: checked.text, citations: checked.citations, model, grounded: true },
    providerFailed: false,
  };
}
