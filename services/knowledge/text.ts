/**
 * Term handling shared by the index, the highlighter and the extractive answerer, so that a
 * term matched by the index is also found in the excerpt and in the quoted sentence. A light
 * suffix stripper stands in for a lemmatizer: the corpus is small and technical, and the
 * questions name the same words the documentation uses ("signatures" / "signature",
 * "computed" / "compute").
 */

import { remembered } from '../shared/bounded-map.ts';

const STOP_WORDS = new Set(
  (
    'a an and are as at be been but by can could did do does doing for from had has have how i ' +
    'if in into is it its me my of on or our so than that the their them then there these they ' +
    'this those to was we were what when where which who whom why will with would you your ' +
    'about any all also get got just should shall may might must am not no yes ok please tell ' +
    'explain us vs via per ' +
    // Determiners and reflexives ("some of my deliveries", "without handling it myself").
    'some myself yourself itself ourselves themselves mine ' +
    // Indefinite pronouns ("before paying *anything*", "without emailing *anyone*") name no topic.
    'anything anyone anybody everything everyone everybody something someone somebody whatever whoever ' +
    // Contractions: a negation or an auxiliary shapes the question ("why *didn't* my webhook get
    // …" asks about the webhook); the documentation never writes them, so kept as terms they
    // weighed as words it does not know.
    "don't doesn't didn't isn't aren't wasn't weren't can't cannot won't wouldn't shouldn't " +
    "couldn't haven't hasn't hadn't i'm i've i'd it's that's there's what's whose " +
    // The other pronouns' contractions ("We'd start on the free tier: …") shape the sentence as
    // much: kept as terms, "we'd" weighed as a word the documentation never uses.
    "i'll we'd we're we've we'll you'd you're you've you'll they'd they're they've they'll " +
    "he's she's let's here's who's where's how's"
  ).split(' '),
);

/** Words with a meaning of their own that must not lose their last letters. */
const KEEP = new Set(['status', 'bps', 'siwe', 'address', 'access', 'process', 'basis', 'always']);

/** "omitted" → "omitt" → "omit", as "omit" is written: a doubled final consonant (not l, s, z) is one. */
function undouble(stemmed: string): string {
  return /([^aeiouylsz])\1$/.test(stemmed) ? stemmed.slice(0, -1) : stemmed;
}

export function stem(word: string): string {
  if (word.length <= 3 || KEEP.has(word) || /\d/.test(word)) return word;
  // "retries" and "retried" are both of "retry".
  if ((word.endsWith('ies') || word.endsWith('ied')) && word.length > 4) return `${word.slice(0, -3)}y`;
  if (word.endsWith('ing') && word.length > 5) return undouble(word.slice(0, -3));
  if (word.endsWith('ed') && word.length > 4 && !word.endsWith('eed')) return undouble(word.slice(0, -2));
  if (word.endsWith('es') && /(ss|x|ch|sh)es$/.test(word)) return word.slice(0, -2);
  if (word.endsWith('s') && !word.endsWith('ss') && !word.endsWith('us')) return word.slice(0, -1);
  return word;
}

/** "computed" → "comput", "compute" → "comput": a final -e is dropped so both forms meet. */
function normalise(word: string): string {
  const stemmed = stem(word);
  return stemmed.length > 4 && stemmed.endsWith('e') ? stemmed.slice(0, -1) : stemmed;
}

/**
 * Words as the index sees them: codes (INVALID_MODEL, get_trade_call) and numbers (0.02) kept
 * whole, and a letter's combining marks and the joiners inside a word (a Hindi vowel sign or
 * conjunct, a Persian non-joiner) with it, as searchable() keeps them: the length rule of a query
 * counts them as characters the search reads.
 */
const WORD =
  /[\p{L}\p{N}_][\p{L}\p{M}\p{N}_\u200C\u200D]*(?:[.'’][\p{L}\p{N}_][\p{L}\p{M}\p{N}_\u200C\u200D]*)*/gu;

export function words(text: string): string[] {
  return text.match(WORD) ?? [];
}

/**
 * The index term of one word, or null for a stop word; remembered by word. The picker reads the
 * same passages' words for every question (a chat's answer looked up the terms of some 100,000
 * words, a third of its CPU); the documentation's vocabulary is a few thousand words. Bounded,
 * since questions bring words of their own.
 */
export const termOf: (word: string) => string | null = remembered(termOfWord, 50_000);

function termOfWord(word: string): string | null {
  // A typographic apostrophe ("didn’t") is the typed one. A contraction in 's ("let's",
  // "here's") is read before the possessive's 's goes, which would leave "let" and "here".
  const typed = word.toLowerCase().replace(/’/g, "'");
  if (STOP_WORDS.has(typed)) return null;
  // A possessive names its noun: "a HOLD's confidence" speaks of a HOLD.
  const lower = typed.replace(/'s$/, '');
  if (STOP_WORDS.has(lower)) return null;
  return normalise(lower);
}

/** The distinct content terms of a text, in first-seen order. */
export function contentTerms(text: string): string[] {
  const seen = new Set<string>();
  for (const w of words(text)) {
    const term = termOf(w);
    if (term !== null) seen.add(term);
  }
  return [...seen];
}
