import { createHash } from 'node:crypto';
import MiniSearch from 'minisearch';
import type { SearchResult } from '../../contracts/knowledge.ts';
import { WorkSlices } from '../shared/stoppable-work.ts';
import type { Passage } from './passages.ts';
import { contentTerms, termOf, words } from './text.ts';

export interface Retrieved {
  passage: Passage;
  score: number;
  /** Share of the query's content terms this passage contains (0–1). */
  coverage: number;
}

/**
 * A prior per source: curated explanations and generated facts answer questions directly, while
 * the evaluation report's long tables repeat every regime and timeframe name many times over.
 */
const SOURCE_BOOST: Record<string, number> = {
  methodology: 1.4,
  errors: 1.3,
  pricing: 1.3,
  live: 1.3,
  contract: 1.1,
  webhooks: 1.1,
  readme: 1,
  doc: 0.7,
};

/** The options both the service's index and the benchmark's bare index use. */
export function miniSearchOptions() {
  return {
    fields: ['title', 'text'],
    idField: 'id',
    storeFields: ['source_type'],
    tokenize: (text: string) => words(text),
    processTerm: (term: string) => termOf(term) ?? false,
    searchOptions: {
      boost: { title: 2 },
      combineWith: 'OR' as const,
      boostDocument: (_id: unknown, _term: string, stored?: Record<string, unknown>) =>
        SOURCE_BOOST[String(stored?.source_type)] ?? 1,
    },
  };
}

const EXCERPT_WORDS = 40;

function requireUniqueIds(passages: Passage[]): void {
  const unique = new Set(passages.map((p) => p.id));
  if (unique.size !== passages.length) throw new Error('knowledge corpus: passage ids must be unique');
}

/** Rounded so that equal-looking scores compare equal and the same query gives the same bytes. */
const round = (x: number) => Math.round(x * 1e4) / 1e4;

/**
 * BM25 index (minisearch) over the corpus: the documents are fixed for a process, the live facts
 * are swapped in when they change. `digest` names the corpus content and changes with it.
 */
export class KnowledgeIndex {
  private readonly index = new MiniSearch<Passage>(miniSearchOptions());
  private readonly passages = new Map<string, Passage>();
  private readonly spans = new Map<string, Words>();
  /** In how many passages each term stands: what a term's weight in an answer comes from. */
  private readonly df = new Map<string, number>();
  private currentDigest = '';

  constructor(passages: Passage[]) {
    requireUniqueIds(passages);
    for (const p of passages) this.hold(p);
    this.index.addAll(passages);
    this.updateDigest();
  }

  /**
   * The same index, built a passage at a time with the event loop given its turn every
   * WORK_SLICE_MS (WorkSlices): the service's corpus takes seconds of CPU on a loaded machine (2.8 s
   * beside other work), and built in one go it held off every timer, request and signal meanwhile
   * (a SIGTERM's shutdown timeout fired only once it ended). Aborted by `signal` between passages.
   */
  static async build(passages: Passage[], signal?: AbortSignal): Promise<KnowledgeIndex> {
    requireUniqueIds(passages);
    const built = new KnowledgeIndex([]);
    const slices = new WorkSlices(signal);
    for (const passage of passages) {
      if (slices.due()) await slices.turn();
      built.hold(passage);
      built.index.add(passage);
    }
    signal?.throwIfAborted();
    built.updateDigest();
    return built;
  }

  get digest(): string {
    return this.currentDigest;
  }

  get size(): number {
    return this.passages.size;
  }

  get(id: string): Passage | undefined {
    return this.passages.get(id);
  }

  /** Replaces the passages whose ids start with `prefix` by `next`; true when anything changed. */
  replaceGroup(prefix: string, next: Passage[]): boolean {
    const wanted = new Map(next.map((p) => [p.id, p]));
    let changed = false;
    for (const [id, old] of this.passages) {
      if (!id.startsWith(prefix) || wanted.get(id)?.text === old.text) continue;
      this.index.discard(id);
      this.release(id);
      changed = true;
    }
    for (const passage of next) {
      if (this.passages.has(passage.id)) continue;
      this.index.add(passage);
      this.hold(passage);
      changed = true;
    }
    if (changed) this.updateDigest();
    return changed;
  }

  /**
   * How much a term says about what a question asks: high for a term few passages use, highest
   * for one none does (BM25's idf).
   */
  weight(term: string): number {
    return Math.log(1 + this.passages.size / ((this.df.get(term) ?? 0) + 0.5));
  }

  private hold(passage: Passage): void {
    const spans = spansOf(`${passage.title}\n${passage.text}`);
    this.passages.set(passage.id, passage);
    this.spans.set(passage.id, spansOf(passage.text));
    for (const term of spans.at.keys()) this.df.set(term, (this.df.get(term) ?? 0) + 1);
  }

  private release(id: string): void {
    const passage = this.passages.get(id)!;
    for (const term of spansOf(`${passage.title}\n${passage.text}`).at.keys()) {
      const n = (this.df.get(term) ?? 1) - 1;
      if (n === 0) this.df.delete(term);
      else this.df.set(term, n);
    }
    this.passages.delete(id);
    this.spans.delete(id);
  }

  /** Every matching passage, best first, ties by id. */
  retrieve(query: string): Retrieved[] {
    const terms = contentTerms(query);
    if (terms.length === 0) return [];
    const hits = this.index.search(query);
    return hits
      .map((hit) => ({
        passage: this.passages.get(String(hit.id))!,
        score: round(hit.score),
        coverage: new Set(hit.queryTerms).size / terms.length,
      }))
      .sort((a, b) => b.score - a.score || (a.passage.id < b.passage.id ? -1 : 1));
  }

  search(query: string, limit: number): { total: number; results: SearchResult[] } {
    const hits = this.retrieve(query);
    const terms = new Set(contentTerms(query));
    return {
      total: hits.length,
      results: hits.slice(0, limit).map(({ passage, score }) => ({
        id: passage.id,
        score,
        source_type: passage.source_type,
        source_url: passage.source_url,
        title: passage.title,
        excerpt: excerpt(passage.text, terms, this.spans.get(passage.id)),
      })),
    };
  }

  private updateDigest(): void {
    const hash = createHash('sha256');
    for (const id of [...this.passages.keys()].sort()) {
      const p = this.passages.get(id)!;
      hash.update(`${id}\u0000${p.title}\u0000${p.source_url}\u0000${p.text}\u0001`);
    }
    this.currentDigest = hash.digest('hex').slice(0, 20);
  }
}

/**
 * A passage cut for the highlighter, once at index time: its words with their index terms (null
 * for a stop word), the text between consecutive words with its whitespace already collapsed,
 * and where each term occurs (ascending word positions). An excerpt then visits only the
 * matching words and joins prepared pieces: slicing and normalising the text per request was
 * the largest cost of a search.
 */
export interface Words {
  words: string[];
  terms: (string | null)[];
  /** gaps[i]: what stands between word i - 1 and word i (gaps[0] is unused). */
  gaps: string[];
  /** What follows the last word, trimmed at the end. */
  tail: string;
  at: Map<string, number[]>;
}

const collapse = (s: string) => s.replace(/\s+/g, ' ');

function spansOf(text: string): Words {
  const words: string[] = [];
  const terms: (string | null)[] = [];
  const gaps: string[] = [];
  const at = new Map<string, number[]>();
  let cursor = -1;
  for (const m of text.matchAll(/[\p{L}\p{N}_]+(?:[.'][\p{L}\p{N}_]+)*/gu)) {
    const term = termOf(m[0]);
    if (term !== null) {
      const positions = at.get(term);
      if (positions) positions.push(words.length);
      else at.set(term, [words.length]);
    }
    gaps.push(cursor === -1 ? '' : collapse(text.slice(cursor, m.index)));
    words.push(m[0]);
    terms.push(term);
    cursor = m.index + m[0].length;
  }
  return { words, terms, gaps, tail: cursor === -1 ? '' : collapse(text.slice(cursor).trimEnd()), at };
}

/**
 * The window of EXCERPT_WORDS words with the most matching words (the first such window), matches
 * wrapped in `**`, whitespace collapsed. Words are compared by their index term, so "signatures"
 * in a query highlights "signature".
 */
export function excerpt(text: string, terms: Set<string>, words: Words = spansOf(text)): string {
  const n = words.words.length;
  if (n === 0) return text.slice(0, 300);
  const hits: number[] = [];
  for (const term of terms) {
    const positions = words.at.get(term);
    if (positions) for (const i of positions) hits.push(i);
  }
  hits.sort((a, b) => a - b);
  // A window's count only grows at a matching word, so the first window holding the most matches
  // ends on one: slide over the matches alone. `lo` is the first match inside the window.
  let best = 0;
  let firstHit = -1;
  let bestCount = 0;
  let lo = 0;
  for (let k = 0; k < hits.length; k++) {
    const windowStart = hits[k]! - EXCERPT_WORDS + 1;
    while (hits[lo]! < windowStart) lo++;
    if (k - lo + 1 > bestCount) {
      bestCount = k - lo + 1;
      best = Math.max(0, windowStart);
      firstHit = hits[lo]!;
    }
  }
  // Start a few words before the first match of the window, so the match reads in context.
  const from = firstHit === -1 ? best : Math.max(0, firstHit - 5);
  const to = Math.min(n, from + EXCERPT_WORDS);
  let out = from > 0 ? '…' : '';
  for (let i = from; i < to; i++) {
    const term = words.terms[i]!;
    if (i > from) out += words.gaps[i]!;
    out += term !== null && terms.has(term) ? `**${words.words[i]!}**` : words.words[i]!;
  }
  return (out + (to < n ? '…' : words.tail)).trim();
}
