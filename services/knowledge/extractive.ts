import type { Citation } from '../../contracts/knowledge.ts';
import type { Passage } from './passages.ts';
import type { Retrieved } from './search-index.ts';
import { contentTerms, termOf, words } from './text.ts';

/**
 * The extractive model: answers only with sentences quoted verbatim from retrieved passages,
 * each followed by the [n] of its citation. Numbers in those sentences come from the passages
 * (prices, quotas and facts are generated from configuration and the log), never from here.
 */

/** How many passages an answer draws on, and how many sentences it quotes. */
export const CONTEXT_PASSAGES = 4;
const MAX_SENTENCES = 3;
const MAX_ANSWER_CHARS = 900;
/** Below this share of the question's terms in the best passage, the answer is "I don't know". */
export const MIN_COVERAGE = 0.5;

/** Lines of a code sample: quoted as an answer they read as noise. */
const CODE = /^(import|export|const|let|await|return|\/\/|curl|npm|npx|KEY=|-[dH] )|[{};\\]\s*$|=>|\$\(|'\{/;

export const DONT_KNOW =
  "I don't know: nothing in the documentation or the live facts matches this question closely enough.";

export interface Grounded {
  answer: string;
  citations: Citation[];
  grounded: boolean;
}

/** Sentences of a passage, as they appear in its text (so a quote is always a substring). */
export function sentences(text: string): string[] {
  return text
    .split(/\n+|(?<=[.!?])\s+(?=[A-Z0-9"(`*_-])/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** Whether retrieval found anything worth answering from. */
export function relevant(retrieved: Retrieved[]): boolean {
  const best = retrieved[0];
  return best !== undefined && best.coverage >= MIN_COVERAGE;
}

export function extractiveAnswer(question: string, retrieved: Retrieved[]): Grounded {
  if (!relevant(retrieved)) return { answer: DONT_KNOW, citations: [], grounded: false };
  const terms = new Set(contentTerms(question));
  const context = retrieved.slice(0, CONTEXT_PASSAGES);
  const candidates: { passage: Passage; rank: number; order: number; sentence: string; score: number }[] = [];
  context.forEach(({ passage }, rank) => {
    sentences(passage.text).forEach((sentence, order) => {
      // A question restated is no answer; a 400-character line is a table row or code, not a sentence.
      if (sentence.endsWith('?') || sentence.length > 400 || sentence.length < 20 || CODE.test(sentence))
        return;
      const found = new Set<string>();
      for (const w of words(sentence)) {
        const term = termOf(w);
        if (term !== null && terms.has(term)) found.add(term);
      }
      if (found.size === 0 || found.size / terms.size < 1 / 3) return;
      // Coverage of the question first; the passage's rank breaks near-ties; long sentences lose a little.
      const digits = (sentence.match(/\d/g) ?? []).length / sentence.length;
      const score =
        found.size / terms.size - rank * 0.08 - sentence.length / 4000 - (digits > 0.15 ? 0.3 : 0);
      candidates.push({ passage, rank, order, sentence, score });
    });
  });
  candidates.sort((a, b) => b.score - a.score || a.rank - b.rank || a.order - b.order);
  const chosen: typeof candidates = [];
  let length = 0;
  for (const c of candidates) {
    if (chosen.length >= MAX_SENTENCES) break;
    if (chosen.some((x) => x.sentence === c.sentence)) continue;
    if (chosen.length > 0 && length + c.sentence.length > MAX_ANSWER_CHARS) continue;
    chosen.push(c);
    length += c.sentence.length;
  }
  if (chosen.length === 0) return { answer: DONT_KNOW, citations: [], grounded: false };
  // Read in passage order, then in the order the sentences stand in their passage.
  chosen.sort((a, b) => a.rank - b.rank || a.order - b.order);
  const numbers = new Map<string, number>();
  const quotes = new Map<string, string[]>();
  const parts: string[] = [];
  for (const c of chosen) {
    if (!numbers.has(c.passage.id)) numbers.set(c.passage.id, numbers.size + 1);
    quotes.set(c.passage.id, [...(quotes.get(c.passage.id) ?? []), c.sentence]);
    parts.push(`${c.sentence} [${numbers.get(c.passage.id)}]`);
  }
  const citations = [...numbers.keys()].map((id) => {
    const passage = chosen.find((c) => c.passage.id === id)!.passage;
    return {
      id,
      source_url: passage.source_url,
      title: passage.title,
      quote: quotes.get(id)!.join(' … '),
    };
  });
  return { answer: parts.join(' '), citations, grounded: true };
}
