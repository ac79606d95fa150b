import { describe, expect, it } from 'vitest';
import { expandQuestion, extractiveAnswer } from './extractive.ts';
import type { Passage } from './passages.ts';
import { KnowledgeIndex } from './search-index.ts';
import { cosine, DIMENSIONS, encodeWordVectors, WordVectors, wordVectors } from './word-vectors.ts';

/** A vector pointing along the given axes (each with its weight), the rest 0. */
function along(axes: Record<number, number>): number[] {
  const v = new Array<number>(DIMENSIONS).fill(0);
  for (const [axis, x] of Object.entries(axes)) v[Number(axis)] = x;
  return v;
}

const passage = (id: string, text: string): Passage => ({
  id,
  source_type: 'doc',
  source_url: `docs/${id}`,
  title: id,
  text,
});

describe('word vectors', () => {
  it('reads back what encodeWordVectors wrote: unit vectors, cosine by direction only', () => {
    const vectors = WordVectors.parse(
      encodeWordVectors([
        ['revoke', along({ 0: 1, 1: 0.2 })],
        ['kill', along({ 0: 5, 1: 1 })],
        ['weather', along({ 2: -3 })],
      ]),
    );
    const kill = vectors.unit('Kill')!;
    expect(cosine(kill, kill)).toBeCloseTo(1, 5);
    // The same direction at another length: alike, within int8 rounding.
    expect(cosine(kill, vectors.unit('revoke')!)).toBeGreaterThan(0.999);
    expect(cosine(kill, vectors.unit('weather')!)).toBeCloseTo(0, 5);
    expect(vectors.unit('unheard')).toBeNull();
  });

  it('finds the corpus terms used like a word, most alike first, above the floor, never the word itself', () => {
    const vectors = WordVectors.parse(
      encodeWordVectors([
        ['kill', along({ 0: 1 })],
        ['killed', along({ 0: 1 })],
        ['revoke', along({ 0: 0.9, 1: 0.3 })],
        ['revoked', along({ 0: 0.9, 1: 0.35 })],
        ['rotate', along({ 0: 0.5, 1: 0.9 })],
        ['weather', along({ 3: 1 })],
      ]),
    );
    const index = new KnowledgeIndex([
      passage('keys', 'An operator can revoke a key; a revoked key answers 401.'),
      passage('secrets', 'Rotate the secret with no downtime.'),
      passage('process', 'A process killed with kill -9 loses its lease.'),
      passage('other', 'The weather is not covered.'),
    ]);
    const related = index.related('kill', 0.8, 5, vectors);
    // "revoke" and "revoked" are one term; "kill" itself is left out, "rotate" is below the floor.
    expect(related.map((r) => r.term)).toEqual(['revok']);
    expect(related[0]!.word).toMatch(/^revoke/);
    expect(related[0]!.similarity).toBeGreaterThan(0.9);
    expect(index.related('unheard', 0, 5, vectors)).toEqual([]);
  });

  it('ships vectors for everyday words and the corpus words', () => {
    const shipped = wordVectors();
    for (const word of ['price', 'revoke', 'signature', 'largest', 'biggest'])
      expect(shipped.has(word), word).toBe(true);
    expect(cosine(shipped.unit('biggest')!, shipped.unit('largest')!)).toBeGreaterThan(0.8);
  });

  it('retrieves with the corpus word used like a question word, and ranks the unit holding it first', () => {
    const vectors = WordVectors.parse(
      encodeWordVectors([
        ['tonight', along({ 0: 1 })],
        ['today', along({ 0: 0.95, 1: 0.2 })],
        ['cells', along({ 5: 1 })],
        ['emit', along({ 6: 1 })],
      ]),
    );
    const index = new KnowledgeIndex([
      passage('cells-now', 'Cells that emit BUY or SELL today: 0 of 15.'),
      passage('cells-then', 'Cells that emit BUY or SELL: 3 of 15.'),
      passage('quiet', 'Nothing is sent tonight.'),
    ]);
    const related = (word: string, min: number, limit: number) => index.related(word, min, limit, vectors);
    const question = 'How many cells emit BUY or SELL tonight?';
    expect(expandQuestion(question, related).split(' ')).toContain('today');
    expect(expandQuestion(question).split(' ')).not.toContain('today');
    const answer = extractiveAnswer(
      question,
      index.retrieve(expandQuestion(question, related)),
      (t) => index.weight(t),
      related,
    );
    expect(answer.citations[0]?.id).toBe('cells-now');
    // Without the likeness the shorter passage ranks first: the vectors decide.
    const plain = extractiveAnswer(question, index.retrieve(expandQuestion(question)), (t) =>
      index.weight(t),
    );
    expect(plain.citations[0]?.id).toBe('cells-then');
  });
});
