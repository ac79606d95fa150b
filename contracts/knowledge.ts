import { z } from 'zod';
import { ERRORS, type ErrorCode, errorMessage } from './errors.ts';
import { strictInput } from './strict-input.ts';

/**
 * The knowledge tools (`search_knowledge`, `chat_knowledge`) and their routes (`POST /api/search`,
 * `POST /api/chat`). Bounds follow the public peer: query 3–500 characters after trimming, limit
 * 1–50 (default 10), question 5–500 characters.
 */
export const SEARCH_QUERY_MIN = 3;
export const SEARCH_QUERY_MAX = 500;
export const SEARCH_LIMIT_MAX = 50;
export const SEARCH_LIMIT_DEFAULT = 10;
export const CHAT_QUESTION_MIN = 5;
export const CHAT_QUESTION_MAX = 500;
export const EXTRACTIVE_MODEL = 'extractive';

/**
 * Every code the two routes answer with, its HTTP status and what it means. The same table is
 * indexed as part of the knowledge corpus, so the service can answer "what does INVALID_MODEL mean".
 */
export const KNOWLEDGE_ERRORS = {
  INVALID_QUERY: { status: ERRORS.INVALID_QUERY.status, meaning: ERRORS.INVALID_QUERY.message },
  QUERY_TOO_SHORT: {
    status: ERRORS.QUERY_TOO_SHORT.status,
    meaning: `query is shorter than ${SEARCH_QUERY_MIN} readable characters`,
  },
  QUERY_TOO_LONG: {
    status: ERRORS.QUERY_TOO_LONG.status,
    meaning: `query is longer than ${SEARCH_QUERY_MAX} characters after trimming`,
  },
  INVALID_LIMIT: {
    status: ERRORS.INVALID_LIMIT.status,
    meaning: `limit is not an integer from 1 to ${SEARCH_LIMIT_MAX}`,
  },
  INVALID_QUESTION: { status: ERRORS.INVALID_QUESTION.status, meaning: ERRORS.INVALID_QUESTION.message },
  QUESTION_TOO_SHORT: {
    status: ERRORS.QUESTION_TOO_SHORT.status,
    meaning: `question is shorter than ${CHAT_QUESTION_MIN} readable characters`,
  },
  QUESTION_TOO_LONG: {
    status: ERRORS.QUESTION_TOO_LONG.status,
    meaning: `question is longer than ${CHAT_QUESTION_MAX} characters after trimming`,
  },
  INVALID_MODEL: {
    status: ERRORS.INVALID_MODEL.status,
    meaning: 'model is not a string, or is neither "extractive" nor a model name this server allows',
  },
  UNAUTHORIZED: {
    status: ERRORS.UNAUTHORIZED.status,
    meaning: 'no live API key: the routes need the header "Authorization: Bearer <API_KEY>"',
  },
  QUOTA_EXHAUSTED: {
    status: ERRORS.QUOTA_EXHAUSTED.status,
    meaning: "the key's monthly (or free daily) call quota is used up; Retry-After says when it resets",
  },
  CHAT_QUOTA_EXHAUSTED: {
    status: ERRORS.CHAT_QUOTA_EXHAUSTED.status,
    meaning:
      "the key's chat quota for this UTC month is used up; Retry-After counts the seconds to the month's end",
  },
  KEY_UNVERIFIABLE: {
    status: ERRORS.KEY_UNVERIFIABLE.status,
    meaning: 'the API key could not be verified right now; retry shortly',
  },
  QUOTA_UNAVAILABLE: {
    status: ERRORS.QUOTA_UNAVAILABLE.status,
    meaning: 'the API key was verified but its quota could not be counted; retry shortly',
  },
  INTERNAL_ERROR: {
    status: ERRORS.INTERNAL_ERROR.status,
    meaning: 'the request failed on our side; nothing was counted',
  },
} as const satisfies Partial<Record<ErrorCode, { status: number; meaning: string }>>;
export type KnowledgeErrorCode = keyof typeof KNOWLEDGE_ERRORS;

/**
 * A text's length in characters (Unicode code points), as zod counts it for the HTTP bodies and
 * JSON Schema's minLength/maxLength for the tools' advertised input: String.length counts UTF-16
 * units, two for a character outside the Basic Multilingual Plane (most emoji). Counted alike,
 * the tools take every text their schema allows and /api/search takes.
 */
const characters = (text: string): number => {
  let n = 0;
  for (const _ of text) n++;
  return n;
};

/**
 * Control and format characters other than whitespace (U+0000, U+001B, U+200B, U+2060, a stray
 * U+FEFF inside the text, soft hyphens, direction marks): they show nothing and carry no word.
 * U+FEFF is named apart: JavaScript's \s holds it, so sparing whitespace would spare it too.
 * The zero-width non-joiner and joiner (U+200C, U+200D) between two letters are spared: there
 * they are part of the word's spelling (Persian "می‌شه", Hindi conjuncts), as a letter is.
 */
const INVISIBLE =
  /\uFEFF|(?<![\p{L}\p{M}])[\u200C\u200D]|[\u200C\u200D](?![\p{L}\p{M}])|(?![\s\u200C\u200D])[\p{Cc}\p{Cf}]/gu;

/**
 * Terminal escape sequences (ECMA-48: CSI `ESC [ … final` or its one-character form U+009B, OSC
 * `ESC ] … BEL|ST`, and two-character escapes): text a terminal paste or a colouring log leaves,
 * never words.
 */
const ESCAPES =
  // biome-ignore lint/suspicious/noControlCharactersInRegex: escape sequences are made of control characters
  /(?:\u001B\[|\u009B)[0-?]*[ -/]*[@-~]|\u001B\][^\u0007\u001B]*(?:\u0007|\u001B\\)?|\u001B[ -/]*[0-~]?/gu;

/**
 * What a text shows: without its terminal escape sequences (ESCAPES, whole: the `[31m` of
 * `ESC [31m` is no more a word than its ESC) and invisible characters (INVISIBLE), trimmed.
 */
export const visible = (text: string): string => text.replace(ESCAPES, '').replace(INVISIBLE, '').trim();

/**
 * Variation selectors (U+FE00–U+FE0F, U+E0100–U+E01EF, Mongolian U+180B–U+180D and U+180F): they
 * choose how the character before them is drawn (❤ or ❤️) and spell nothing.
 */
const VARIATION_SELECTORS = /[\uFE00-\uFE0F\u180B-\u180D\u180F\u{E0100}-\u{E01EF}]/gu;

/**
 * Combining marks on no letter or digit: at the start of the text or after a space or a sign.
 * A mark on a letter is part of it (a Hindi vowel sign, an accent NFKC could not compose) and is
 * kept, as the words the search reads keep it (services/knowledge/text.ts).
 */
const STRAY_MARKS = /(?<![\p{L}\p{N}\p{M}])\p{M}+/gu;

/**
 * A query or question as it is looked up (search) and answered (chat): escape sequences and
 * control characters are spaces, invisible characters and variation selectors dropped (a
 * zero-width space is a space), compatibility forms folded to their plain letters (NFKC:
 * full-width "ｒｉｓｋ" is "risk", "ﬁ" is "fi"), combining marks on no letter dropped, and
 * whitespace runs one space. The answer echoes the text as sent, trimmed.
 */
export const searchable = (text: string): string =>
  text
    .replace(ESCAPES, ' ')
    .replace(/[\p{Cc}\u200B\u2028\u2029]/gu, ' ')
    .replace(INVISIBLE, '')
    .replace(VARIATION_SELECTORS, '')
    .normalize('NFKC')
    .replace(STRAY_MARKS, '')
    .replace(/\s+/g, ' ')
    .trim();

/**
 * Whether a text (trimmed) is under a field's minimum of readable characters: what the search
 * reads (searchable()) of what the text shows (visible()), so escape sequences, control and format
 * characters, variation selectors and combining marks on no letter count for nothing and a run of
 * whitespace for one; and the text as sent is held to the schema's minLength too (NFKC may spell
 * one character as several: "ﷺ" is 18).
 */
const underMinimum = (text: string, min: number): boolean =>
  characters(searchable(visible(text))) < min || characters(text) < min;

/**
 * A text field's rule, as its description says: whitespace, control and format characters and
 * terminal escape sequences alone are no text (the field's INVALID_ code, before its length is
 * judged); the minimum counts readable characters (underMinimum: what the search reads); the
 * maximum counts every character after trimming. Worded with the BM25 floors of
 * answers.e2e.test.ts in mind: the field descriptions are indexed (tools.md).
 */
const textRule = (what: string, invalid: ErrorCode, min: number, max: number) =>
  `${what}, ${min}–${max} characters after trimming; control and format characters (U+0000, U+200B, U+FEFF…; not U+200C or U+200D between two letters), terminal escape sequences (ESC[31m…), variation selectors and marks on no letter do not count toward the ${min} readable ones, and a text of only control and format characters, escape sequences and whitespace is ${invalid}`;

const SEARCH_QUERY_RULE = textRule('What to look for', 'INVALID_QUERY', SEARCH_QUERY_MIN, SEARCH_QUERY_MAX);
const CHAT_QUESTION_RULE = textRule('The question', 'INVALID_QUESTION', CHAT_QUESTION_MIN, CHAT_QUESTION_MAX);

/** Refused with the field's INVALID_ code when nothing shows, before its length is judged. */
const text = ([invalid, short]: [ErrorCode, ErrorCode], min: number, max: number) =>
  z
    .string()
    .trim()
    .refine((value) => visible(value) !== '', { abort: true, params: { code: invalid } })
    .min(min)
    .refine((value) => !underMinimum(value, min), { abort: true, params: { code: short } })
    .max(max);

/**
 * POST /api/search: the MCP input with its bounds. A field it does not name is refused (400
 * INVALID_FIELD naming it), as the tool refuses it (-32602).
 */
export const SearchRequest = strictInput({
  query: text(['INVALID_QUERY', 'QUERY_TOO_SHORT'], SEARCH_QUERY_MIN, SEARCH_QUERY_MAX).describe(
    SEARCH_QUERY_RULE,
  ),
  limit: z
    .number()
    .int()
    .min(1)
    .max(SEARCH_LIMIT_MAX)
    .default(SEARCH_LIMIT_DEFAULT)
    .describe(`How many passages, 1–${SEARCH_LIMIT_MAX}`),
});

/**
 * POST /api/chat, for a server allowing the generative `models` beside the extractive one. A field
 * it does not name is refused (400 INVALID_FIELD naming it), as the tool refuses it (-32602).
 */
export function chatRequest(models: readonly string[]) {
  return strictInput({
    question: text(['INVALID_QUESTION', 'QUESTION_TOO_SHORT'], CHAT_QUESTION_MIN, CHAT_QUESTION_MAX).describe(
      CHAT_QUESTION_RULE,
    ),
    model: z
      .enum([EXTRACTIVE_MODEL, ...models])
      .default(EXTRACTIVE_MODEL)
      .describe('The extractive answerer (quotes the documentation) or a configured generative model'),
  });
}

/**
 * MCP inputs: only the structure is checked by the schema (a wrong type stays -32602, as for
 * every tool); the bounds are checked by the tool so that they answer with the codes above.
 * The bounds are still advertised in the tools' JSON Schema (`meta`, which the parse does not
 * enforce), so that a client sees the same ranges as the OpenAPI document's.
 */
export const SearchKnowledgeInput = strictInput({
  query: z
    .string()
    .meta({ minLength: SEARCH_QUERY_MIN, maxLength: SEARCH_QUERY_MAX })
    .describe(SEARCH_QUERY_RULE),
  limit: z
    .number()
    .int()
    .optional()
    .meta({ minimum: 1, maximum: SEARCH_LIMIT_MAX, default: SEARCH_LIMIT_DEFAULT })
    .describe(`How many passages, 1–${SEARCH_LIMIT_MAX} (default ${SEARCH_LIMIT_DEFAULT})`),
});
/**
 * chat_knowledge's input; on a server allowing the generative `models`, its `model` advertises the
 * names POST /api/chat's enum lists (ChatKnowledgeInput, without them, is any server's).
 */
export function chatKnowledgeInput(models?: readonly string[]) {
  const model = z.string().optional();
  return strictInput({
    question: z
      .string()
      .meta({ minLength: CHAT_QUESTION_MIN, maxLength: CHAT_QUESTION_MAX })
      .describe(CHAT_QUESTION_RULE),
    model: (models === undefined
      ? model
      : model.meta({ enum: [EXTRACTIVE_MODEL, ...models], default: EXTRACTIVE_MODEL })
    ).describe(`"${EXTRACTIVE_MODEL}" (default: quotes the documentation) or a configured generative model`),
  });
}
export const ChatKnowledgeInput = chatKnowledgeInput();

export const SourceType = z.enum([
  'readme',
  'doc',
  'contract',
  'webhooks',
  'errors',
  'pricing',
  'methodology',
  'live',
]);
export type SourceType = z.infer<typeof SourceType>;

/** What a result's or citation's source_url is, as README says it. */
const SOURCE_URL =
  'Where the passage opens: a document section (/knowledge/<file>#<heading>, live.md for a live regime) or a route (/readyz, /openapi.json), absolute: under the server’s public URL (PUBLIC_BASE_URL), else under the origin the request came to';

export const SearchResult = z.object({
  id: z.string(),
  score: z.number(),
  source_type: SourceType,
  source_url: z.string().describe(SOURCE_URL),
  title: z.string(),
  /** The passage around the best match, matching terms wrapped in `**`. */
  excerpt: z.string(),
});
export type SearchResult = z.infer<typeof SearchResult>;

export const SearchAnswer = z.object({
  query: z.string(),
  total_results: z.number().int().nonnegative(),
  results: z.array(SearchResult),
});
export type SearchAnswer = z.infer<typeof SearchAnswer>;

export const Citation = z.object({
  id: z.string(),
  source_url: z.string().describe(SOURCE_URL),
  title: z.string(),
  /** Verbatim text of the cited passage. */
  quote: z.string(),
});
export type Citation = z.infer<typeof Citation>;

export const ChatAnswer = z.object({
  question: z.string(),
  answer: z.string(),
  citations: z.array(Citation),
  model: z.string(),
  /** True when the answer is made of (or checked against) retrieved passages it cites. */
  grounded: z.boolean(),
  /** Why the answer is not what was asked for (a generative model unavailable or off-source). */
  note: z.string().optional(),
});
export type ChatAnswer = z.infer<typeof ChatAnswer>;

/** `_service.chat_quota`: chats left this UTC month for the caller. */
export const ChatQuotaSnapshot = z.object({
  used: z.number().int().nonnegative(),
  total: z.number().int().nonnegative(),
  remaining: z.number().int().nonnegative(),
  resets_at: z.iso.datetime(),
});
export type ChatQuotaSnapshot = z.infer<typeof ChatQuotaSnapshot>;

export type Checked<T> = { ok: true; value: T } | { ok: false; code: KnowledgeErrorCode; message: string };

function fail(
  code: KnowledgeErrorCode,
  detail?: string,
): { ok: false; code: KnowledgeErrorCode; message: string } {
  return { ok: false, code, message: detail ?? KNOWLEDGE_ERRORS[code].meaning };
}

/** Checks a search request body (HTTP) or tool arguments (MCP) against the bounds. */
export function checkSearch(body: unknown): Checked<{ query: string; limit: number }> {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const raw = fields.query;
  if (typeof raw !== 'string' || visible(raw) === '') return fail('INVALID_QUERY');
  const query = raw.trim();
  if (underMinimum(query, SEARCH_QUERY_MIN)) return fail('QUERY_TOO_SHORT');
  if (characters(query) > SEARCH_QUERY_MAX) return fail('QUERY_TOO_LONG');
  const limit = fields.limit ?? SEARCH_LIMIT_DEFAULT;
  if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1 || limit > SEARCH_LIMIT_MAX) {
    // In the words POST /api/search answers it with (the catalog's), over MCP too.
    return fail('INVALID_LIMIT', errorMessage('INVALID_LIMIT', { max: SEARCH_LIMIT_MAX }));
  }
  return { ok: true, value: { query, limit } };
}

/** Checks a chat request; `models` are the generative model names this server allows. */
export function checkChat(
  body: unknown,
  models: readonly string[],
): Checked<{ question: string; model: string }> {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const raw = fields.question;
  if (typeof raw !== 'string' || visible(raw) === '') return fail('INVALID_QUESTION');
  const question = raw.trim();
  if (underMinimum(question, CHAT_QUESTION_MIN)) return fail('QUESTION_TOO_SHORT');
  if (characters(question) > CHAT_QUESTION_MAX) return fail('QUESTION_TOO_LONG');
  const model = fields.model ?? EXTRACTIVE_MODEL;
  if (typeof model !== 'string' || (model !== EXTRACTIVE_MODEL && !models.includes(model))) {
    const allowed = [EXTRACTIVE_MODEL, ...models].map((m) => JSON.stringify(m)).join(', ');
    return fail('INVALID_MODEL', `model must be one of ${allowed}`);
  }
  return { ok: true, value: { question, model } };
}
