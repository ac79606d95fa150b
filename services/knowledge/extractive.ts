import type { Citation } from '../../contracts/knowledge.ts';
import { remembered } from '../shared/bounded-map.ts';
import type { Passage } from './passages.ts';
import type { Retrieved } from './search-index.ts';
import { contentTerms, termOf, words } from './text.ts';

/**
 * The extractive model: answers only with sentences (or clauses of long ones) quoted verbatim
 * from retrieved passages, each followed by the [n] of its citation. Numbers in those sentences
 * come from the passages (prices, quotas and facts are generated from configuration and the
 * log), never from here.
 *
 * The answer is built around the one sentence that best states what was asked: it must carry
 * most of the question's weight (rare words weigh more than common ones, so "which timeframes"
 * is about timeframes, not about "which"), and it must be the kind of sentence the question asks
 * for (a number for "how much", a list for "which", a route or a step for "how do I"). Headings
 * restated as sentences state nothing and are never chosen. When no sentence carries enough of
 * the question, the answer is "I don't know", ungrounded: a quote that does not address the
 * question is not an answer.
 */

/** How many passages the generative path is given; the extractive one reads further down. */
export const CONTEXT_PASSAGES = 4;
const READ_PASSAGES = 40;
const MAX_SENTENCES = 5;
const MAX_ANSWER_CHARS = 975;
/** Characters a quote's citation mark adds to the answer (" [1]" and the space after it). */
const CITATION_MARK = 5;
/** Leading passages whose units may state what the best passage does not. */
const SLOT_PASSAGES = 2;
/** Sentences longer than this are read clause by clause (contract passages, table rows). */
const LONG_SENTENCE = 450;
/**
 * Below this weighted share of the question in the best sentence (with its passage's title),
 * the answer is "I don't know". Words the corpus never uses weigh the most, so a question about
 * something else ("the capital of France") stays below it however many common words it shares.
 */
const MIN_COVERAGE = 0.5;
/** What a unit stating the narrow shape a question asks for (a path) must carry of it. */
const NARROW_COVERAGE = 0.3;
/** … in a passage that carries this much of the question as a whole. */
const NARROW_PASSAGE = 0.6;
/** …and a unit enumerating what a "which" question asks for, in a passage carrying this share. */
const LIST_PASSAGE = 0.4;
/** The share of such a question's weight that may be words the corpus never uses. */
const LIST_UNKNOWN_SHARE = 0.35;
/** What part of an unknown word's weight an answer still has to make up for. */
const UNKNOWN_PENALTY = 0.5;
/** Above this weighted share of the question in words the corpus never uses: "I don't know". */
const MAX_UNKNOWN_SHARE = 0.5;
/**
 * A question naming, in a trailing "in Python" or "with Express", a tool the documentation never
 * names is answered only by a unit carrying this share of the rest of the question's weight.
 */
const TOOL_REST = 0.75;
/**
 * Where no unit carries MIN_COVERAGE, one of the first FALLBACK_PASSAGES passages that carries
 * FALLBACK_COVERAGE of the question as a whole still answers, with its unit that carries most
 * (at least FALLBACK_UNIT): the passage covers the question though no one sentence repeats it
 * ("resume a download that was cut off" against "a stream cut mid-way resumes from its last
 * complete line"), and "I don't know" is for questions no passage covers.
 */
const FALLBACK_PASSAGES = 3;
/**
 * A little under half: 0.7 left "I don't know" where the first passage held the fact in other
 * words; 0.5, 0.45 and 0.4 were measured (0.45 and 0.4 alike, the higher kept).
 */
const FALLBACK_COVERAGE = 0.45;
const FALLBACK_UNIT = 0.25;
/**
 * The weighted share of the question words the documentation never uses may hold and the
 * fallback still answer ("without duplicates" where it says "none twice"); a question more of
 * whose weight names what the documentation never speaks of ("my bank transfer") is not answered
 * by a passage that merely shares its other words. 0.25 and 0.35 measured: 0.35 answered one more tuned question, and
 * grounded an off-topic one of operator.json ("the lowest spot trading fees for a retail
 * account", with the 10 bps fee).
 */
const FALLBACK_UNKNOWN = 0.25;
/**
 * A fallback answer (no unit carries the question) must name one of the question's rare words
 * when they (with its unused words) carry more than MAX_UNKNOWN_SHARE of its weight: a rare word
 * is one whose weight is at least this share of an unused word's (at most about 15 of the 300
 * passages use it), beyond the service's own everyday words. "Why do funding rates go negative
 * in a bear market" was answered with a sentence about funding, rates and markets from the
 * passage titled Bull Bear Power. 0.39 to 0.47 measured alike (no right answer lost on the tuned
 * and tuning sets); 0.55 lost 6. Required whatever their share, it refused 4 of tuning19.json's
 * 45 questions whose rare word only shapes them ("put", "taken off", "borrowed").
 */
const FALLBACK_RARE = 0.45;
/** What a documented step must carry of a "how do I" to join a route's summary from the contract. */
const ROUTE_DETAIL = 0.75;
/** What a unit stating the cause of a "why" must carry of the question to join its answer. */
const CAUSE_UNIT = 0.25;
/** A "how do I" act at least this rare (its weight) names the route or command that does it. */
const RARE_ACT = 3;
/**
 * Passages longer than this are read unit by unit with the NEIGHBOURS units either side as their
 * context. 3,000 and 1,500 measured: 1,500 lost 3 tuned answers.
 */
const LONG_PASSAGE = 3_000;
const NEIGHBOURS = 2;
/** What a unit stating the kind of quantity asked must carry of the question, and where it stands. */
const MEASURE_UNIT = 0.4;
const MEASURE_PASSAGES = 5;
/** Leading passages whose unit naming the step after the question's words may answer a "how do I". */
const STEP_PASSAGES = 3;
/**
 * A unit of another passage than the best one joins the answer when it scores within this of the
 * best (those of the best passage, within 0.25): the fact asked often stands in the second
 * passage. 0.1, 0.125, 0.15, 0.175 and 0.2 measured on the tuned and tuning sets: 0.15 answered 5
 * more and lost none; 0.175 and 0.2 lost 2 ("why is every trade call a HOLD", the quota's 429
 * crowded out of the answer by other passages' units). A unit that does not name the act a "how
 * do I" asks about keeps NEAR_PASSAGE_REACH: a route beside the question's nouns ("GET
 * /mcp/server-card" for "how do I connect …") does not say how to do it.
 */
const OTHER_PASSAGE_REACH = 0.15;
const NEAR_PASSAGE_REACH = 0.1;
/** A best sentence shorter than this is read with the one after it. */
const SHORT_ANSWER = 120;

/** Lines of a code sample: quoted as an answer they read as noise. */
const CODE =
  /^(import|export|const|let|await|return|\/\/|curl|duckdb|node -e|npm run -s|npx|KEY=|-[dH] )|[{};\\]\s*$|=>|\$\(|'\{/;

export const DONT_KNOW =
  "I don't know: nothing in the documentation or the live facts matches this question closely enough.";

export interface Grounded {
  answer: string;
  citations: Citation[];
  grounded: boolean;
}

/**
 * Words of trading at large, and the plain words around them. The documentation speaks of this
 * service: a question made only of these ("what leverage should I use when trading perpetual
 * futures", "the difference between a bull market and a bear market") asks for trading advice or
 * a market concept, which no passage answers, though one may repeat its words in passing (a model
 * input named for leverage, an oscillator named Bull Bear Power). A question that names anything
 * of the service beside them (a call, a verdict, a scan, a route, a venue's feed) is not of this kind.
 */
const TRADING_AT_LARGE = new Set(
  contentTerms(
    'buy sell trade trading trader price prices market markets coin coins crypto cryptocurrency bitcoin ' +
      'ethereum eth solana sol altcoin altcoins leverage futures perpetual perpetuals short shorting long ' +
      'position positions stop loss losses profit profits invest investing investment investor portfolio ' +
      'bull bear indicator indicators rsi macd chart charts pattern patterns wallet wallets tax taxes ' +
      'gains halving mining mine stake staking defi gas best good better worth now today tomorrow ' +
      'beginner beginners money difference between use using right safe safest',
  ),
);

/** Conjunctions that open a condition, as terms: they shape a question, naming no topic. */
const CONJUNCTIONS = new Set(contentTerms('before after until since while once'));
const HOLD = termOf('hold')!;

/** Sentences of a passage, as they appear in its text (so a quote is always a substring). */
export function sentences(text: string): string[] {
  return text
    .split(/\n+|(?<=[.!?])\s+(?=[A-Z0-9"(`*_-])/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/**
 * Words the documentation uses for the same thing a user may name otherwise. Each group is one
 * meaning; a question's word is met by any word of its group.
 */
const SYNONYMS: string[][] = [
  ['cost', 'price', 'pay', 'paid', 'payment', 'charge'],
  ['exchange', 'venue'],
  ['exceed', 'past', 'beyond'],
  ['currency', 'usdc', 'usd'],
  ['coin', 'asset', 'market'],
  ['sign', 'signature', 'hmac'],
  ['support', 'serve', 'available', 'offer'],
  ['mean', 'meaning', 'means', 'definition'],
  ['allow', 'include'],
  ['keep', 'kept', 'store', 'cache'],
  ['export', 'download'],
  ['connect', 'setup', 'session', 'handshake'],
  ['disable', 'disabled', 'deactivate'],
  ['miss', 'missed', 'gap', 'missing'],
  ['retry', 'retries', 'resend'],
  ['compute', 'calculate', 'computed', 'derived'],
  ['url', 'receiver', 'endpoint', 'address'],
  ['flicker', 'hysteresis'],
  ['subscribe', 'subscription', 'register'],
  ['key', 'token'],
  ['verify', 'verifier', 'check', 'audit', 'prove'],
  ['contain', 'cover', 'coverage', 'inside'],
  ['actual', 'realised', 'realized'],
  ['answer', 'response', 'reply'],
  ['compare', 'against', 'beside', 'baseline'],
  ['browse', 'browser', 'render', 'page'],
  ['left', 'remaining', 'remain'],
  ['standard', 'rfc', 'specification', 'spec'],
  // Everyday words for what the documentation names otherwise: a buyer "starts" what it
  // "begins", is "told" what it "notices", "saves" what it "records".
  ['start', 'begin', 'launch'],
  ['notice', 'notify', 'notification', 'alert', 'told', 'inform'],
  ['record', 'save', 'saved', 'persist'],
  ['enable', 'activate'],
  ['app', 'application', 'client'],
  ['program', 'cli', 'executable', 'binary'],
  ['mac', 'macos'],
  ['fingerprint', 'hash'],
  ['blockchain', 'chain', 'onchain'],
  ['style', 'lint', 'linter', 'biome'],
  ['benchmark', 'bench'],
  ['combination', 'cell'],
  ['real', 'production', 'live'],
  ['private', 'local', 'loopback', 'internal'],
  ['old', 'older', 'earlier', 'previous', 'prior'],
  ['web', 'browser'],
  ['project', 'repository', 'repo', 'checkout'],
  ['development', 'dev'],
  ['decide', 'determine', 'decision', 'choose'],
  ['refresh', 'regenerate', 'rewrite', 'update'],
  // The words a buyer uses for the service's own acts and things: a key is "cancelled" where the
  // documentation revokes it, a payment tried on a "testnet" where it names Sepolia.
  ['backtest', 'evaluation', 'evaluate'],
  ['crypto', 'cryptocurrency', 'coin'],
  ['webhook', 'callback'],
  ['history', 'archive'],
  ['openapi', 'swagger'],
  ['reject', 'rejected', 'refuse', 'refused', 'deny', 'denied'],
  ['outage', 'unavailable'],
  ['testnet', 'sepolia', 'sandbox'],
  ['real', 'mainnet'],
  ['rotate', 'renew', 'roll', 'swap'],
  ['cost', 'purchase'],
  ['subscribe', 'signup'],
  ['revoke', 'cancel', 'kill'],
  ['delete', 'remove'],
  ['result', 'passage'],
  ['send', 'pass', 'supply'],
  // A plan is what a buyer calls a tier ("the free tier").
  ['plan', 'tier'],
];

/**
 * Phrasal verbs a question uses for an act the documentation names in one word: "switched off"
 * is disabled, "turn on" enables, "signed up" registered, "log in" signs in. A pronoun may stand
 * between the verb and its particle ("switch it off", "pick it up where it stopped").
 */
const PHRASAL: [RegExp, string][] = [
  [/\b(?:switch|turn|shut)(?:ed|es|s|ing)? (?:it |them )?off\b/gi, 'disable'],
  // "Turn a disabled webhook back on": the object may stand between the verb and its particle.
  [/\b(?:switch|turn)(?:ed|es|s|ing)? ((?:[\p{L}\p{N}_-]+ ){0,4}?)(?:back )?on\b/giu, 'enable $1'],
  // "How is the size worked out", "figure out the fee": computed.
  [/\b(?:work|figure)(?:ed|s|ing)? (?:it |them )?out\b/gi, 'compute'],
  // "Pick (it) up where it stopped / left off" resumes.
  [
    /\bpick(?:ed|s|ing)? (?:it |them )?up where (?:it|they|I|we|you) (?:stopped|left off|ended)\b/gi,
    'resume',
  ],
  // "Carry on from where it stopped" continues it ("--resume continues it").
  [/\bcarr(?:y|ies|ied|ying) on\b/gi, 'continue'],
  [/\bsign(?:ed|s|ing)? up\b/gi, 'register'],
  // "log in with my wallet", "login"; not "the log in PostgreSQL".
  [/\blog(?:ged|s|ging)? in(?= with\b| using\b| to\b|\?|$)|\blogin\b/gi, 'sign in'],
  // HTTP's own name for a 429, and what a used-up quota is called.
  [/\btoo many (?:requests|calls)\b/gi, 'rate limit'],
  [/\brun(?:s|ning)? out of\b/gi, 'exhausted'],
  // What "comes back" is what comes: "back" is the verb's particle, not a topic.
  [/\b(come|comes|came|coming) back\b/gi, '$1'],
  // "Right now" is "now", not a right.
  [/\bright now\b/gi, 'now'],
  // The documentation writes basis points as the unit it is: "10 bps".
  [/\bbasis points?\b/gi, 'bps'],
];
/** Numbers in words, as timeframes are written with them ("one-minute" is 1m, "four-hour" 4h). */
const NUMBER_WORDS: Record<string, number> = {
  one: 1,
  two: 2,
  three: 3,
  four: 4,
  five: 5,
  six: 6,
  eight: 8,
  twelve: 12,
  fifteen: 15,
  thirty: 30,
};
/**
 * A timeframe in words is the documentation's timeframe: "a one-minute call" is a 1m one, "an
 * hourly one" 1h, "fifteen-minute candles" 15m.
 */
const TIMEFRAME_WORDS = new RegExp(`\\b(${Object.keys(NUMBER_WORDS).join('|')})-(minute|hour|day)\\b`, 'gi');
function timeframes(question: string): string {
  // Hyphenated only, or "hourly" naming a kind of call or candle: "in one day", "after one hour",
  // "an hourly limit" speak of time, not of a timeframe.
  return question
    .replace(
      TIMEFRAME_WORDS,
      (_, n: string, unit: string) => `${NUMBER_WORDS[n.toLowerCase()]}${unit[0]!.toLowerCase()}`,
    )
    .replace(/\bhourly(?= (?:ones?|calls?|candles?|charts?|timeframe|bars?|verdicts?|trade)\b)/gi, '1h');
}
export function rephrase(question: string): string {
  return PHRASAL.reduce((q, [re, word]) => q.replace(re, word), timeframes(question));
}
/**
 * Words the documentation writes for an act, met only from the act: a disabled thing is "off",
 * but a question's own "off" is a particle ("paid off", "size off the label"; "switched off" is
 * already disable, PHRASAL), not a word for disabling.
 */
const ONE_WAY: [string, string][] = [['disable', 'off']];
const SYNONYM_OF = new Map<string, Set<string>>();
for (const group of SYNONYMS) {
  const terms = new Set(group.map((w) => termOf(w)).filter((t): t is string => t !== null));
  for (const t of terms) SYNONYM_OF.set(t, new Set([...(SYNONYM_OF.get(t) ?? []), ...terms]));
}
for (const [act, word] of ONE_WAY) {
  const from = termOf(act)!;
  for (const t of SYNONYM_OF.get(from) ?? [from])
    SYNONYM_OF.set(t, new Set([...(SYNONYM_OF.get(t) ?? [t]), termOf(word)!]));
}

/**
 * Words that shape a question rather than name its topic ("how *much*", "what does it *mean*",
 * "which ones are *supported*", "what *counts* as a HOLD", "where is it *shown*"): an answer
 * states the fact without repeating them.
 */
const QUESTION_WORDS = new Set(
  (
    'much many often long need want happen happens work works way know ask use used using make made come ' +
    'comes whether able kind type exactly there possible thing mean means meaning support supported ' +
    'available exist exists number value find see count counts take takes assume assumed field fields ' +
    // Where a thing is seen is asked as much by "shown" or "viewed" as by "see".
    'show shown view viewed display displayed ' +
    // How often or in place of what a thing holds ("sometimes null", "instead of the label"), and
    // the passive that only says it is there ("is the carry given"), shape the question too.
    'sometimes usually ever still instead given provided marked ' +
    // "How do I let my app call …" asks how the app calls; "which date" asks for one; "at most"
    // asks for the bound.
    'let date most least ' +
    // A superlative asks for the bound: the documentation states it as "at most 8 KiB".
    'largest longest biggest smallest shortest highest lowest maximum minimum ' +
    // A verb of motion and its particle ("will it go up", "set it up") name no topic.
    'go goes going went up ' +
    // "How far before …" asks for a distance; "what does it look like" for its form.
    'far look like ' +
    // The -ing forms of the shaping verbs above: their stems ("mak", "tak") are no word's.
    'making taking coming finding seeing ' +
    // "Too many", "too long": the degree shapes the question.
    'too ' +
    // Adverbs of emphasis and of the present ("what does it *actually* mean", "why is every
    // verdict a HOLD *right now*") ask the same question without them.
    'actually really basically currently now'
  )
    .split(' ')
    .map((w) => termOf(w))
    .filter((t): t is string => t !== null),
);

/**
 * Words that are prepositions in the sense their synonym group gives them ("past the limit" is
 * beyond it) and adjectives in another ("past deliveries" are earlier ones, not deliveries beyond
 * something).
 */
const PREPOSITIONS = new Set(['past', 'beyond'].map((w) => termOf(w)!));

/**
 * The question's prepositions used as adjectives: followed by a word (not an article, a pronoun
 * or a number), they qualify that noun and are met only by themselves.
 */
function qualifiers(question: string): Set<string> {
  const list = words(question);
  const out = new Set<string>();
  list.forEach((w, i) => {
    const t = termOf(w);
    const next = list[i + 1];
    if (t !== null && PREPOSITIONS.has(t) && next !== undefined && termOf(next) !== null && !/\d/.test(next))
      out.add(t);
  });
  return out;
}

/** Words naming a reply in general: a clause of them alone asks what comes back, not about what. */
const REPLY = new Set(contentTerms('status error code response answer reply back return returned'));

/**
 * The topical terms of the clause that asks: a condition ("… if my connection drops") frames the
 * question; one that opens it ("If I pay and my connection drops, is the answer lost?") ends at
 * its comma, and what follows asks.
 */
function mainClause(question: string): Set<string> {
  const cut = /\b(if|when|while|because|since|in case|before|after|until|once)\b/i.exec(question);
  const opening = cut?.index === 0 ? question.indexOf(', ') : -1;
  // "Once I have a key, how do I send it …": what the asking clause calls "it" the condition
  // names, so the condition's words (not its conjunction) are asked too.
  // Not a subject "it" ("how long does it take", "is it possible"): the one an act is done to.
  const referred = /(?<!\b(?:is|was|does|did|do|will|would|can|could|should|has|have|had) )\b(?:it|them)\b/i;
  if (opening > 0 && referred.test(question.slice(opening + 2)))
    return new Set(contentTerms(question.slice(cut![0].length)).filter((term) => !QUESTION_WORDS.has(term)));
  return new Set(
    contentTerms(
      opening > 0
        ? question.slice(opening + 2)
        : cut && cut.index > 0
          ? question.slice(0, cut.index)
          : question,
    ).filter((term) => !QUESTION_WORDS.has(term)),
  );
}

/** "What status / error comes back if …": a main clause naming only a reply asks for its code. */
function replyAsked(question: string): boolean {
  const main = mainClause(question);
  // "What status does /api/chat give me if …" asks for the code too, naming what answers it;
  // "what error handling …", "what code do I need to verify …" do not ask for one.
  return (
    /^\s*what (?:status|error)(?: code)?\b.*\b(?:if|when|give|gives|get|return|returns|send|sends|answer|answers)\b/i.test(
      question,
    ) ||
    (/^\s*what\b/i.test(question) && main.size > 0 && [...main].every((term) => REPLY.has(term)))
  );
}

/** A question's content term, the terms that meet it, and its share of the ask. */
type AskedTerm = { term: string; meets: Set<string>; share: number };

/**
 * The question's content terms, each with the terms that meet it and its share of the ask: a
 * condition frames the question, the main clause asks it.
 */
export function questionTerms(raw: string): AskedTerm[] {
  const question = rephrase(raw);
  const topical = (text: string) => contentTerms(text).filter((term) => !QUESTION_WORDS.has(term));
  const main = mainClause(question);
  // "What do I get when I exceed the rate limit?": the clause is the question itself. So it is
  // when the main clause names only the kind of reply asked for ("what status / error comes
  // back if …"): what the reply is to is the condition.
  const framed = [...main].some((term) => !REPLY.has(term));
  const qualifying = qualifiers(question);
  return topical(question).map((term) => ({
    term,
    meets: qualifying.has(term) ? new Set([term]) : (SYNONYM_OF.get(term) ?? new Set([term])),
    share: !framed || main.has(term) ? 1 : 0.5,
  }));
}

/**
 * Functions of a text, remembered by text (REMEMBERED_TEXTS at most). The picker reads the same
 * passages and units for every question: a chat's answer worked out the terms and tokens of the
 * same sentences again and again, half of its CPU. What they give back is shared, so read-only.
 * Bounded, since the texts a question brings (its own, the units around a long passage's) are new.
 */
const REMEMBERED_TEXTS = 20_000;

/**
 * The terms of a text, with the parts of its snake_case and camelCase names (expected_move_pct
 * names a move); of its PascalCase names (OpenAPI) too unless pascal is false.
 */
function termsIn(text: string, pascal = true): ReadonlySet<string> {
  return pascal ? termsWithPascal(text) : termsWithoutPascal(text);
}
const termsWithPascal = remembered((text: string) => termsOf(text, true), REMEMBERED_TEXTS);
const termsWithoutPascal = remembered((text: string) => termsOf(text, false), REMEMBERED_TEXTS);

function termsOf(text: string, pascal: boolean): ReadonlySet<string> {
  const out = new Set<string>();
  for (const w of words(text)) {
    const t = termOf(w);
    if (t !== null) out.add(t);
    // camelCase names name their parts too: verifyWebhook verifies a webhook.
    if (w.includes('_') || (pascal ? /[a-z][A-Z]/.test(w) : /^[a-z]+[A-Z]/.test(w)))
      for (const part of w.split(/_|(?<=[a-z])(?=[A-Z])/)) {
        const p = termOf(part);
        if (p !== null) out.add(p);
      }
  }
  return out;
}

/** Words that link a noun to what follows ("the fee over six candles"): no noun after them. */
const LINKING = new Set(
  'over under after before within between across above below through since until per each every than like once only both either'.split(
    ' ',
  ),
);

/** A text's words as terms, each with whether the next word follows it after spaces only. */
const tokens = remembered(tokensOf, REMEMBERED_TEXTS);

function tokensOf(text: string): readonly { readonly term: string | null; readonly joined: boolean }[] {
  const out: { term: string | null; joined: boolean }[] = [];
  let end = -1;
  for (const m of text.matchAll(/[\p{L}\p{N}_]+(?:[.'][\p{L}\p{N}_]+)*/gu)) {
    const last = out[out.length - 1];
    if (last) last.joined = /^ +$/.test(text.slice(end, m.index));
    out.push({ term: termOf(m[0]), joined: false });
    end = m.index + m[0].length;
  }
  return out;
}

/** How many of the passages each adjacent pair of terms stands in ("hit rate": many). */
function compoundsOf(texts: string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const text of texts) {
    const seen = new Set<string>();
    const list = tokens(text);
    list.forEach((t, i) => {
      const next = list[i + 1];
      if (t.joined && t.term && next?.term) seen.add(`${t.term} ${next.term}`);
    });
    for (const pair of seen) counts.set(pair, (counts.get(pair) ?? 0) + 1);
  }
  return counts;
}

/**
 * The question's terms a unit names only as the modifier of another noun the question does not
 * name: "hit rates" speaks of rates, not of what a hit is; "MCP Server Card" of a card, not of
 * the server. A pair is a compound when it stands in at least two of the passages read.
 */
function modifierOnly(
  text: string,
  asked: { meets: Set<string> }[],
  compounds: Map<string, number>,
): Set<string> {
  const inQuestion = (t: string) => asked.some(({ meets }) => meets.has(t));
  const modifier = new Set<string>();
  const named = new Set<string>();
  const list = tokens(text);
  list.forEach((t, i) => {
    if (t.term === null || !inQuestion(t.term)) return;
    const next = list[i + 1]?.term;
    // Only a plain word names a noun ("rate", "card"); a code or an identifier after the term
    // is one of its values ("tools get_trade_call"), and a question word is what it does.
    const modifies =
      t.joined &&
      next != null &&
      /^[a-z]+$/.test(next) &&
      !QUESTION_WORDS.has(next) &&
      !LINKING.has(next) &&
      !inQuestion(next) &&
      (compounds.get(`${t.term} ${next}`) ?? 0) >= 2;
    (modifies ? modifier : named).add(t.term);
  });
  for (const t of named) modifier.delete(t);
  return modifier;
}

/**
 * What retrieval looks for: the question's topical words (not the words that only shape it:
 * "when does a call *count* as a hit" is about calls and hits, not about counting), with the
 * documentation's words for them added.
 */
export function expandQuestion(raw: string): string {
  const question = rephrase(raw);
  const asked = questionTerms(question);
  if (asked.length === 0) return question;
  const topical = words(question).filter((w) => {
    const t = termOf(w);
    return t !== null && !QUESTION_WORDS.has(t);
  });
  const extra = asked.flatMap(({ term, meets }) => [...meets].filter((t) => t !== term));
  return [...topical, ...new Set(extra)].join(' ');
}

/** A question that asks for a quantity: how much, how long, the largest, at most. */
const NUMBER_ASKED =
  /\bhow (much|many|long|often|large|big|fast|far|old)\b|\b(at most|at least|largest|longest|biggest|smallest|shortest|highest|lowest|maximum|minimum)\b/i;

type Kind = 'reason' | 'number' | 'list' | 'steps' | 'definition' | 'condition' | 'other';

/**
 * "Which header carries …", "which file holds …": one thing is asked, not a list. The noun after
 * "which" (the last of up to three words before the verb) is singular and the verb agrees.
 */
function singularWhich(q: string): boolean {
  const m =
    /^which\s+((?:[\p{L}\p{N}_-]+\s+){0,2}?[\p{L}\p{N}_-]+)\s+(is|was|does|did|do|has|can|could|should|would|will|holds|carries|decides|runs|goes|comes|makes|gives|starts|sends|keeps|says|tells|answers|uses|needs|counts|means|sets|reads|writes|lists|covers)\b/iu.exec(
      q,
    );
  if (m === null) return false;
  const noun = m[1]!.split(/\s+/).at(-1)!;
  return !/(?<!s|u|i)s$/.test(noun);
}

/** What kind of sentence answers the question: the fact asked decides what a right answer holds. */
export function questionKind(question: string): Kind {
  const q = question.toLowerCase();
  // "Why is every answer a HOLD?" asks for a cause, whatever nouns it names.
  if (/^(why|how come)\b|\bwhat is the reason\b/.test(q)) return 'reason';
  // "Where can I see what it costs?" asks for a place (a route, a page), not the price.
  const placeAsked = /\bwhere(?:'s| (?:can|do|does|is|are|will|should))\b/.test(q);
  if (NUMBER_ASKED.test(q) || (/\b(price|cost|limits?\b|quota)/.test(q) && !placeAsked)) return 'number';
  if (
    /^(which|list)\b|^what (are|kinds?|types?) |\bwhich (\w+ ){1,2}(are|is|can|do|does)\b/.test(q) &&
    !singularWhich(q)
  )
    return 'list';
  if (/\bhow (do|can|should) (i|we|you)\b|\bhow to\b|\bwhere\b/.test(q)) return 'steps';
  // "When does a call count as a hit?": the rule that decides, a threshold or a moment.
  if (/^when (is|are|does|do|will)\b|\bcounts? as\b|\bconsidered\b/.test(q)) return 'condition';
  if (/\bmean(s|ing)?\b|^what (is|are|does)\b|\bwhat .* for\b/.test(q)) return 'definition';
  return 'other';
}

function kindFit(kind: Kind, text: string, asked: { meets: Set<string> }[]): number {
  const digits = DIGITS.test(text);
  const items = (text.match(/,|;/g) ?? []).length;
  switch (kind) {
    case 'reason':
      // A cause is stated ("because…", "so…", "…: the reason"); a list of arguments states none.
      return REASON.test(text) ? 0.12 : items >= 3 ? -0.08 : 0;
    case 'number':
      return digits ? 0.15 : -0.15;
    case 'list':
      // An enumeration ("one of 1m, 3m, 5m…") is what a "which" question asks for.
      return enumerates(text, asked) ? 0.2 : items >= 2 ? 0.12 : -0.05;
    case 'steps':
      return /\b(GET|POST|DELETE|npm|Authorization)\b|\s\/[a-z.]|\x60/.test(text) ? 0.1 : 0;
    case 'definition':
      return /\b(means?|is|are)\b/.test(text) ? 0.05 : 0;
    case 'condition':
      // A rule states a measure ("the 10 bps fee at 6 candles") and what it applies after or to.
      return /[<>≤≥] ?-?\d/.test(text) ||
        (MEASURE.test(text) && /\b(after|once|if|when|until|within|above|below|beats?|exceeds?)\b/.test(text))
        ? 0.15
        : 0;
    default:
      return 0;
  }
}

/**
 * A table row as the passages read it ("set perp; tf 4h; points 5478; …"): one measurement among
 * many, a worse answer to a general question than the prose that sums the table up.
 */
const TABLE_ROW = /^(?:[^;]{1,60}; ){4,}/;

/** A question about tests. */
const TESTS = /\b(tests?|tested|testing)\b/i;
/** The heading of a section about the test suite ("Testing"; not "Test months"). */
const TEST_SUITE = /^(testing|tests)$/i;

/** Words that state a cause or a purpose: what a "why" question asks for. */
const REASON =
  /\b(because|since|so|therefore|thus|hence|reason|why|otherwise|rather than|in order to|so that|would|cannot|only)\b/i;

/** The plainer words of cause, without REASON's modal ones ("would", "cannot", "only"). */
const CAUSE = /\b(because|since|so that|so|therefore|rather than|otherwise|in order to)\b/i;

/** A figure in digits, not the digits of a name ("SHA256", "x402", "EIP-4361"). */
const DIGITS = /(?<![\p{L}\p{N}_])(?<!\p{L}-)\d/u;

/** A sentence that draws a conclusion from the one before it: that one states the cause. */
const CONCLUSION = /\b(therefore|thus|hence|consequently)\b|^so\b|\bsays? so\b|\b(that|this) is why\b/i;

/** A number, in digits or in words ("six coins", "at most two"). */
const NUMBER =
  /(?<![\p{L}\p{N}_])(?<!\p{L}-)\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred|thousand|million|once|twice|half|dozen)\b/iu;

/**
 * What a step of a procedure is written with: a route ("POST /api/keys"), a command ("npm run
 * keys -- revoke"), an option ("--resume"), a setting ("EVENT_STORE=postgres"), a header
 * ("PAYMENT-SIGNATURE", "Authorization:"), a package ("@x402/fetch"), or the name of a field or
 * argument to send ("includeHolds", "recover_since").
 */
const STEP_TEXT =
  /\b(GET|POST|PUT|PATCH|DELETE)\s+\/|\b(npm|npx|curl|node|duckdb)\s|(?:^|\s)--?[a-z][\w-]*|(?:^|[\s(])\/[a-z.][\w./:-]*|\b[A-Z][A-Z0-9_]{2,}=|\b[a-z]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z0-9]+_[a-z0-9_]+\b|\b[A-Z][A-Za-z0-9]*(?:-[A-Z][A-Za-z0-9]*)+\b|\bAuthorization:|@[\w-]+\/[\w-]+/;
/** A URI ("track-record://7d") or a JSON-RPC method ("resources/read") is a step too. */
const STEP_URI = /\b[a-z][a-z-]*:\/\/|\b[a-z]+\/(?:list|read|call|get|set|subscribe)\b/;

/**
 * What an answer must hold to address the question at all: the number a "how many" question asks
 * for, the step (route, command, setting or field) a "how do I" question asks for. Null when the
 * question's shape asks for nothing such.
 */
function statedBy(
  question: string,
  codeAsked: boolean,
): { test: (text: string) => boolean; required: boolean; narrow?: boolean } | null {
  if (NUMBER_ASKED.test(question)) return { test: (text) => NUMBER.test(text), required: true };
  // "Which file holds …", "where in the code …" asks for a path.
  if (
    /\b(?:which|what) (?:file|folder|directory|module)\b|\bwhere in the (?:code|repo|repository|source)\b/i.test(
      question,
    )
  )
    return { test: (text) => PATH.test(text), required: false, narrow: true };
  // "What status comes back if …" asks for a code: an HTTP status, a SCREAMING_CASE or JSON-RPC code.
  if (codeAsked) return { test: (text) => REPLY_CODE.test(text), required: false };
  // "What does a secret look like" asks for its form: a prefix and a length, a hex literal.
  if (/\blooks? like\b|\bwhat (?:format|form|shape)\b/i.test(question))
    return { test: (text) => FORM.test(text), required: false };
  // A step can be told in words alone ("subscribe another subscription to …"): preferred, not
  // required. "How can I tell / know / see whether …" asks for a sign to read, not a procedure.
  if (
    /\bhow (?:do|can|should|would) (?:i|we|you)\b|\bhow to\b/i.test(question) &&
    !/\bhow (?:do|can|should|would) (?:i|we|you) (?:tell|know|see|recogni[sz]e|distinguish)\b/i.test(question)
  )
    return {
      test: (text) => STEP_TEXT.test(text) || STEP.test(text) || STEP_URI.test(text),
      required: false,
    };
  return null;
}

/** A code a refusal is answered with: "413", "BODY_TOO_LARGE", "-32602". */
const REPLY_CODE =
  /\b[1-5]\d\d\b(?! ?(?:ms|s|bytes|KiB|%|requests|calls))|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|-32\d{3}\b/;

/** A file's path or name: "services/engine/funding/carry.json", ".env.example", "contracts/errors.ts". */
const PATH =
  /(?:^|[\s(`])\.?[\w-]+(?:\/[\w.-]+)*\.(?:ts|js|mjs|json|md|example|sql|ya?ml|toml|sh)\b|\b[\w-]+\/[\w-]+\/[\w./-]+/;

/** How a value's form is written: a prefix and what follows it ("whsec_ + 48 hex"), a length, "0x…". */
const FORM = /\b[a-z]+_ ?\+|\b\d+ (?:hex|bytes?|characters|digits|chars)\b|\b0x[0-9a-f…]/i;

/** The noun a "how many" question counts ("how many *coins* …"), as the terms that meet it. */
function countedNoun(question: string, asked: { term: string; meets: Set<string> }[]): Set<string> | null {
  const m = /\bhow many\b/i.exec(question);
  if (!m) return null;
  // "how many venue and timeframe combinations does …": the noun is the last of the phrase.
  // "How many chats a month …", "how many coins have …": the noun ends before an article or a verb.
  // "How many of the cells …" counts cells; "out of all the cells, how many …" too.
  const before = /\bout of (?:all )?(?:the |its |your |our |their )?([^,]+),\s*how many\b/i.exec(
    question,
  )?.[1];
  const phrase = (
    before ?? question.slice(m.index + 8).replace(/^\s*of (?:the|its|your|my|our|their|these|those)\s+/i, '')
  ).split(
    /\b(?:does|do|did|can|could|is|are|was|were|will|would|should|go|in|of|on|at|for|per|a|an|the|have|has|get|gets)\b/i,
  )[0]!;
  // "How many actually issue BUY or SELL": no noun follows.
  if (words(phrase).length > 4) return null;
  const last = words(phrase).at(-1);
  const t = last === undefined ? null : termOf(last);
  if (t === null) return null;
  return asked.find(({ term }) => term === t)?.meets ?? new Set([t]);
}

/**
 * A number right before the counted noun, perhaps with one word between ("15 cells", "21 coins"),
 * or the noun bounded by one a few words on ("sessions are capped at 16", "keys … at most 5").
 */
function countsNoun(text: string, noun: Set<string>): boolean {
  const list = words(text);
  const isNoun = (w: string) => {
    const t = termOf(w);
    return t !== null && noun.has(t);
  };
  // The number and the noun stand in one phrase, spaces only between them: "120, free keys 300"
  // counts no keys.
  const phrase = tokens(text);
  const counts = (i: number) => {
    const next = phrase[i + 1];
    return (
      phrase[i]!.joined &&
      next !== undefined &&
      ((next.term !== null && noun.has(next.term)) ||
        (next.joined && phrase[i + 2]?.term != null && noun.has(phrase[i + 2]!.term!)))
    );
  };
  if (phrase.some((t, i) => t.term !== null && /^\d/.test(t.term) && counts(i))) return true;
  return list.some((w, i) => isNoun(w) && BOUNDED.test(list.slice(i + 1, i + 6).join(' ')));
}

/** A length of time: "30 s", "REQUEST_TIMEOUT_MS (30 s)", "24 h", "three minutes", "a day". */
const DURATION =
  /\b\d+(?:[.,]\d+)?\s?(?:ms|s|sec|seconds?|min|minutes?|h|hours?|d|days?|weeks?|months?|years?|candles?)\b|\b(?:two|three|four|five|six|ten|thirty) (?:seconds|minutes|hours|days|weeks|months)\b/i;
/** A size: "7.8 KB", "64 KiB", "500 characters", "8 bytes". */
const SIZE = /\d\s?(?:bytes?|B|KB|KiB|MB|MiB|GB|GiB|characters|chars)\b/;
/** A bound or a range: "at most 10,000,000", "up to 30 s", "top_n (1–100)", "from 1 to 100". */
const BOUND =
  /\b(?:at most|at least|up to|capped at|limited to|maximum|minimum|no more than|no fewer than)\b|\d ?– ?\d|\bfrom -?\d[\d,.]* to \d/i;

/**
 * The kind of quantity a "how many / how long / how large / the largest" question asks for: a
 * count of its noun ("how many cells": "0 of 15 cells"), a length of time, a size, a bound. Any
 * number does not answer it: "120 requests a minute" does not say how long a long poll waits.
 * Null for a price or a quantity of no such kind.
 */
function measureOf(question: string, counted: Set<string> | null): ((text: string) => boolean) | null {
  if (counted !== null) return (text) => countsNoun(text, counted);
  if (/\bhow long\b/i.test(question)) return (text) => DURATION.test(text) || SIZE.test(text);
  if (/\bhow (?:large|big)\b/i.test(question)) return (text) => SIZE.test(text);
  if (/\b(?:largest|biggest|maximum|minimum|smallest|highest|lowest|at most|at least)\b/i.test(question))
    return (text) => BOUND.test(text);
  return null;
}

/** A bound stated after what it bounds: "capped at 16", "limited to 5", "at most 50", "up to 100". */
const BOUNDED = /\b(?:capped at|limited to|at most|up to|maximum of|max) \d/;

/** A quantity with its unit: "10 bps", "6 candles", "5 days", "80 %". */
const MEASURE = /\b\d+(?:[.,]\d+)?\s?(?:bps|%|candles?|s|ms|min|h|hours?|days?)\b/;

/**
 * A list of three or more short phrases: "the next candle, six candles and one UTC day", "8 h,
 * 24 h, 72 h and 7 d". Its values are named only by the noun right after it or before it.
 */
const PHRASE_LIST =
  /(?:[\p{L}\p{N}_./-]+ ){0,2}[\p{L}\p{N}_./-]+(?:, (?:[\p{L}\p{N}_./-]+ ){0,2}[\p{L}\p{N}_./-]+)+,? (?:and|or) (?:[\p{L}\p{N}_./-]+ ){0,2}[\p{L}\p{N}_./-]+/gu;

/** Prepositions whose object a list following them is. */
const OBJECT_OF = /^(for|of|from|to|with|by|in|on|at|into|about|as)$/i;

/** A list of three or more items, each perhaps with a remark ("LMDB (default)"): "a, b, c", "a, b and c", "a|b|c", codes or measures as a table lists them ("BTC ETH SOL", "1h 2h 4h"). */
const LIST =
  /[\p{L}\p{N}_./-]+(?:\{[^{}]{1,30}\})?(?: \([^()]{1,30}\))?(?:(?:,\s+(?:and\s+|or\s+)?|\s+(?:and|or)\s+)[\p{L}\p{N}_./-]+(?:\{[^{}]{1,30}\})?(?: \([^()]{1,30}\))?){2,}|[\p{L}\p{N}_./-]+(?:\|[\p{L}\p{N}_./-]+){2,}|\b[A-Z][A-Z0-9]+(?: [A-Z][A-Z0-9]+){2,}\b|\b\d+[a-z]{1,3}(?: \d+[a-z]{1,3}){2,}\b/gu;

/**
 * The values of a thing the question names: "exchange (one of BINANCE, BYBIT, …)", "Events:
 * trade_call, regime_shift, scan_digest", "trade_call, regime_shift and scan_digest events",
 * "format=ndjson|csv|parquet".
 */
function enumerates(text: string, asked: { meets: Set<string> }[]): boolean {
  const named = (word: string | undefined) => {
    const t = word === undefined ? null : termOf(word);
    return t !== null && asked.some(({ meets }) => meets.has(t));
  };
  // "Only version 1 exists": a list of one value.
  for (const m of text.matchAll(
    /\bonly (?:[\p{L}-]+ )?([\p{L}_-]+) ([\p{L}\p{N}_.-]*\d[\p{L}\p{N}_.-]*|[A-Z][A-Z0-9_]{2,})\b/giu,
  ))
    if (named(m[1])) return true;
  for (const m of text.matchAll(/([\p{L}_]+) \(one of [^)]*,[^)]*,/gu)) if (named(m[1])) return true;
  for (const m of [...text.matchAll(LIST), ...text.matchAll(PHRASE_LIST)]) {
    const items = m[0].split(/,\s*|\|| and | or | /).filter((item) => item !== '');
    // "30, 28 and 18 coins" counts the coins; it does not name them.
    if (items.length < 3 || items.every((item) => /^\d+(?:[.,]\d+)?$/.test(item))) continue;
    // "a receiver for trade_call, regime_shift and scan_digest events": after a preposition the
    // list is its object, not the values of the noun before it.
    const lead = words(text.slice(0, m.index)).slice(-2);
    const before = OBJECT_OF.test(lead.at(-1) ?? '') ? [] : lead;
    // "On GET /metrics of the dispatcher role: a, b, c": what a colon introduces is named before it.
    const introduced = /([^:.;]{1,80}?)(?:\s*\([^()]*\))?:\s*$/.exec(text.slice(0, m.index));
    if (introduced !== null && words(introduced[1]!).some(named)) return true;
    // "…, metrics and a receiver example": the word after an article is its item's, not the list's.
    const after = termOf(items.at(-1)!) === null ? [] : words(text.slice(m.index + m[0].length)).slice(0, 1);
    if ([...before, ...after].some(named)) return true;
  }
  return false;
}

/**
 * The noun a "which" question asks for the values of: "Which webhook payload versions exist?"
 * asks for versions; a list of webhook headers does not answer it.
 */
function listedNoun(question: string): string | null {
  const m =
    /\bwhich\s+(?:[\p{L}\p{N}_-]+\s+){0,3}?([\p{L}\p{N}_-]+)\s+(?:are|is|was|were|does|do|did|can|could|will|would|should|exist|exists|have|has|may|must)\b/iu.exec(
      question,
    );
  return m === null ? null : termOf(m[1]!);
}

/**
 * The term a "what is X" question asks to define, as one or two terms ("QLIKE", "timing skill"),
 * or null: "what is X, the …" names it before its comma.
 */
function definedTerms(question: string): string[] | null {
  const named = /^what (?:is|are) (?:an? |the )?([^,?]+?)(?:,|\?|$)/i.exec(question.trim())?.[1];
  const terms = named === undefined ? [] : contentTerms(named);
  return terms.length >= 1 && terms.length <= 2 ? terms : null;
}

/** Verbs a step of a procedure opens with. */
const STEP =
  /^(send|retry|register|subscribe|set|run|use|call|pay|sign|present|store|read|open|ask|add|create)\b/i;

/**
 * A sentence whose subject is what the question names ("Volatile means…", "Confidence is…") is
 * the definition asked for; one that opens with a verb is a step of the procedure asked for.
 */
function subjectFit(kind: Kind, sentence: string, asked: { meets: Set<string> }[]): number {
  if (kind === 'steps') return STEP.test(sentence) ? 0.1 : 0;
  if (kind !== 'definition' && kind !== 'other') return 0;
  const first = words(sentence).slice(0, 3).map(termOf);
  const names = (t: string | null) => t !== null && asked.some(({ meets }) => meets.has(t));
  // "Squeeze means …" says what the word means; "X is …" may only say what it holds.
  if (first.some(names) && /^\S+(\s\S+){0,2}\s(means?)\b/.test(sentence)) return 0.2;
  if (first.some(names) && /^\S+(\s\S+){0,2}\s(is|are)\b/.test(sentence)) return 0.12;
  // A qualified subject ("A BUY or SELL call's confidence is …") defines its last word.
  const qualified = /^((?:\S+\s){0,5})(\S+)\s(?:means?|is|are)\b/.exec(sentence);
  return qualified?.[1]?.includes("'s ") && names(termOf(qualified[2]!)) ? 0.12 : 0;
}

/**
 * Acts a text names only for a narrower case than the question's: "hosts that connect only
 * through OAuth" tell how those hosts connect, not how one connects. Such a mention does not
 * name the act a "how do I" question asks about.
 */
function narrowedActs(text: string): Set<string> {
  const out = new Set<string>();
  for (const m of text.matchAll(/\b(?:that|who|which)\s+([\p{L}]+)\s+only\b/giu)) {
    const t = termOf(m[1]!);
    if (t !== null) out.add(t);
  }
  return out;
}

/** A title's parts ("Service › Using it › API keys"): a sentence that only restates one is a heading. */
function isHeading(sentence: string, passage: Passage): boolean {
  const bare = (s: string) =>
    s
      .replace(/[.:]\s*$/, '')
      .trim()
      .toLowerCase();
  const s = bare(sentence);
  return passage.title.split('›').some((part) => bare(part) === s);
}

interface Candidate {
  passage: Passage;
  rank: number;
  order: number;
  /** What is quoted: one sentence or clause, or a sentence and the list it introduces. */
  quotes: string[];
  coverage: number;
  score: number;
  /**
   * The weighted share of the question the unit's passage (title and text) carries; in a passage
   * over LONG_PASSAGE, the unit and its NEIGHBOURS either side with the title.
   */
  covered: number;
  /** It names the act a "how do I" question asks about (true when the question names none). */
  acts: boolean;
}

/** Best scored first, then the earlier passage, then the earlier unit in it. */
function bestFirst(a: Candidate, b: Candidate): number {
  return b.score - a.score || a.rank - b.rank || a.order - b.order;
}

/**
 * A long sentence's clauses: cut after a ";" or a full stop, but only outside brackets, so a
 * clause never opens a parenthesis it does not close ("exposure checked (balance … ; with …)").
 */
function clauses(sentence: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < sentence.length; i++) {
    const ch = sentence[i]!;
    if ('([{'.includes(ch)) depth++;
    else if (')]}'.includes(ch)) depth = Math.max(0, depth - 1);
    else if (
      depth === 0 &&
      /\s/.test(sentence[i + 1] ?? '') &&
      (ch === ';' || (ch === '.' && /\s[A-Z]/.test(sentence.slice(i + 1, i + 3))))
    ) {
      out.push(sentence.slice(start, i + 1));
      start = i + 1;
    }
  }
  out.push(sentence.slice(start));
  return out;
}

/** A text cut after each colon outside brackets ("builds (…: plain binaries)" is not cut). */
function afterColons(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if ('([{'.includes(ch)) depth++;
    else if (')]}'.includes(ch)) depth = Math.max(0, depth - 1);
    else if (depth === 0 && ch === ':' && /\s/.test(text[i + 1] ?? '')) {
      out.push(text.slice(start, i + 1).trim());
      start = i + 1;
    }
  }
  out.push(text.slice(start).trim());
  return out.filter((part) => part.length > 0);
}

/**
 * A clause still too long to quote, read as runs of its comma-separated parts (outside brackets),
 * each as long as fits: "… and an 80 % band for the next candle, six candles and one UTC day
 * (horizons[])" is quoted, not dropped with the rest of its sentence.
 */
function commaRuns(text: string): string[] {
  const cuts: number[] = [];
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if ('([{'.includes(ch)) depth++;
    else if (')]}'.includes(ch)) depth = Math.max(0, depth - 1);
    else if (depth === 0 && ch === ',' && text[i + 1] === ' ') cuts.push(i);
  }
  cuts.push(text.length);
  const out: string[] = [];
  let start = 0;
  while (start < text.length) {
    const fits = cuts.filter((c) => c > start && c - start <= LONG_SENTENCE);
    const end = fits.at(-1);
    if (end === undefined) {
      // One part longer than a quote: skipped, the next run starts after it.
      const after = cuts.find((c) => c > start);
      if (after === undefined) break;
      start = after + 1;
      continue;
    }
    const run = text.slice(start, end).trim();
    if (run.length > 0) out.push(run);
    start = end + 1;
  }
  return out;
}

/** The quotable units of a passage: sentences, long ones cut into their clauses. */
function units(passage: Passage): string[][] {
  const all = sentences(passage.text);
  const out: string[][] = [];
  all.forEach((sentence, i) => {
    if (sentence.length > LONG_SENTENCE) {
      for (const clause of clauses(sentence)) {
        // A clause is quoted without the ";" that joined it to the next; one still too long is
        // read as what leads up to its colon and what the colon introduces.
        const c = clause.trim().replace(/;$/, '');
        const parts = c.length > LONG_SENTENCE ? afterColons(c) : [c];
        for (const part of parts)
          for (const piece of part.length > LONG_SENTENCE ? commaRuns(part) : [part])
            if (piece.length >= 15) out.push([piece]);
      }
      return;
    }
    // A sentence that introduces a list of items ("Roles: … does:" then "api — the HTTP app…",
    // "engine — …") is quoted with every item, where they fit: the items are what it introduces.
    const items: string[] = [];
    for (let j = i + 1; sentence.endsWith(':') && j < all.length && ITEM.test(all[j]!); j++)
      items.push(all[j]!);
    if (items.length >= 2 && [sentence, ...items].join(' ').length <= 2 * LONG_SENTENCE) {
      out.push([sentence, ...items]);
      return;
    }
    // A sentence that introduces a list (ends with ":") is quoted with the list.
    const next = all[i + 1];
    const readsOn = next !== undefined && next.length <= LONG_SENTENCE && answerable(next);
    // A short sentence ("A paid answer is never lost.") opens what the next one says.
    if (sentence.length < SHORT_ANSWER && !sentence.endsWith(':') && readsOn) out.push([sentence, next]);
    else if (!sentence.endsWith(':')) out.push([sentence]);
    // A short sentence that introduces a code sample ("Install:") says nothing without it, and
    // code is not quoted.
    else if (next !== undefined && next.length <= LONG_SENTENCE && answerable(next))
      out.push([sentence, next]);
    // One that states a fact of its own before its sample ("Register an HTTPS receiver with a
    // live key (free or paid):") is quoted alone.
    else if (words(sentence).length >= 8) out.push([sentence]);
  });
  return out;
}

/** An item of a list as its own line: a name, a dash, what it is ("engine — verdicts for …"). */
const ITEM = /^[\p{L}\p{N}_./*-]+ — \S/u;

/** A unit that is a sentence introducing items and the items: the list of what its head names. */
function itemList(quotes: string[], asked: { meets: Set<string> }[]): boolean {
  if (quotes.length < 3 || !quotes.slice(1).every((q) => ITEM.test(q))) return false;
  const head = termsIn(quotes[0]!);
  return asked.some(({ meets }) => [...meets].some((t) => head.has(t)));
}

/** The routes, commands, packages and settings a unit names. */
const STEP_TOKEN =
  /\b(?:GET|POST|PUT|PATCH|DELETE)\s+\/[\w./:{}-]*|\b(?:npm run|npx) [@\w/.-]+(?: -- [\w-]+)?|@[\w-]+\/[\w-]+|\b[A-Z][A-Z0-9_]*=[\w.:/-]+/g;

/** Settings, options and query parameters a step is written with: "WEBHOOK_TEST_ALLOW_CIDRS", "--role api", "format=csv". */
const SETTING_TOKEN =
  /\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|(?<![\w-])--[a-z][\w-]*(?: [a-z][\w-]*)?|\b[a-z_]+=[\w|]+/g;

/** A route, command, package, setting or option the unit names whose own words meet the question's. */
function stepNamesAny(text: string, terms: Set<string>): boolean {
  for (const m of [...text.matchAll(STEP_TOKEN), ...text.matchAll(SETTING_TOKEN)])
    for (const w of m[0].split(/[^\p{L}\p{N}]+/u)) {
      const t = termOf(w);
      if (t !== null && terms.has(t)) return true;
    }
  return false;
}

/** A step the unit names whose own words meet what the question acts on. */
function stepNames(text: string, object: Set<string>): boolean {
  for (const m of text.matchAll(STEP_TOKEN))
    for (const w of m[0].split(/[^\p{L}\p{N}]+/u)) {
      const t = termOf(w);
      if (t !== null && object.has(t)) return true;
    }
  return false;
}

/**
 * Whether the text names a setting after the quantity asked and another of the question's words
 * ("WEBHOOK_TIMEOUT_MS" for "the timeout of a webhook delivery"): the documentation states that
 * quantity by the setting that holds it, as it states others by their value ("5 s, 5 min").
 */
function namesSettingOf(
  text: string,
  noun: string | null,
  asked: AskedTerm[],
  rarity: number[],
  unknownWeight: number,
): boolean {
  if (noun === null) return false;
  const other = asked.filter(({ term }, i) => term !== noun && rarity[i]! < unknownWeight);
  for (const m of text.matchAll(/\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b/g)) {
    const parts = new Set(
      m[0]
        .split('_')
        .map(termOf)
        .filter((t): t is string => t !== null),
    );
    if (parts.has(noun) && other.some(({ meets }) => [...meets].some((t) => parts.has(t)))) return true;
  }
  return false;
}

/** The routes a text names, as "POST /api/webhooks/:id/enable" ({id} written :id, no query). */
function routesIn(text: string): string[] {
  return [...text.matchAll(/\b(GET|POST|PUT|PATCH|DELETE)\s+(\/[\w./:{}-]*)/g)].map(
    (m) => `${m[1]} ${m[2]!.replace(/\{(\w+)\}/g, ':$1').replace(/[.:]$/, '')}`,
  );
}

/** A shell command of a code sample ("npm run keys -- list", "EVENT_STORE=postgres npm start"). */
function isCommand(text: string): boolean {
  return (
    text.length >= 15 &&
    text.length <= LONG_SENTENCE &&
    /^(?:[A-Z][A-Z0-9_]+=\S+\s+)*(npm|npx|curl|duckdb)\s/.test(text)
  );
}

/**
 * A line of a code sample (CODE) that calls or imports what does the act asked about on what the
 * question names: a name whose parts meet the act and another of the question's terms
 * ("verifyWebhook" for "how do I verify a webhook signature"). It is the code the step needs.
 */
function callsAct(text: string, act: Set<string>, asked: { meets: Set<string> }[]): boolean {
  if (text.length < 15 || text.length > LONG_SENTENCE || !CODE.test(text)) return false;
  return words(text).some((w) => {
    // A function is named in camelCase; snake_case names fields and settings.
    if (!/^[a-z]+(?:[A-Z][a-z0-9]*)+$/.test(w)) return false;
    const parts = w
      .split(/(?<=[a-z0-9])(?=[A-Z])/)
      .map(termOf)
      .filter((t): t is string => t !== null);
    const acts = parts.some((t) => act.has(t));
    const on = parts.some((t) => !act.has(t) && asked.some(({ meets }) => meets !== act && meets.has(t)));
    return acts && on;
  });
}

/** A line of code with a remark in prose after it ("verifyWebhook(…); // 300 s tolerance; …"). */
function commented(text: string): boolean {
  const remark = /\s\/\/\s+(.*)$/.exec(text)?.[1];
  return text.length <= LONG_SENTENCE && remark !== undefined && words(remark).length >= 3;
}

function answerable(text: string): boolean {
  if (text.endsWith('?') || text.length < 15 || CODE.test(text)) return false;
  // A query or a command line is dense in brackets, quotes and operators; prose is not.
  const symbols = (text.match(/[(){}[\]=|*<>]/g) ?? []).length;
  return symbols / text.length < 0.08;
}

/** Derivational endings the stemmer keeps: "deeply" and "deeper" are both of "deep". */
const DERIVED = ['ly', 'al', 'er', 'est', 'ness', 'ion', 'ment'];

/**
 * A question word the corpus never uses meets the corpus's word of the same root ("refused"
 * meets "refusal", "deeply" meets "deeper").
 */
function derived(a: AskedTerm, weight: (term: string) => number, unknown: number): AskedTerm {
  if ([...a.meets].some((t) => weight(t) < unknown)) return a;
  const roots = new Set([a.term]);
  for (const end of DERIVED)
    if (a.term.endsWith(end) && a.term.length - end.length >= 4) roots.add(a.term.slice(0, -end.length));
  const found = [...roots].flatMap((root) =>
    ['', ...DERIVED, 'e'].map((end) => root + end).filter((t) => t !== a.term && weight(t) < unknown),
  );
  return found.length === 0 ? a : { ...a, meets: new Set([...a.meets, ...found]) };
}

/**
 * A question asking for a judgement: what is best, better or worth it. Not "the best way to verify
 * a signature" nor "best practice": those ask how, as "how do I" does.
 */
const JUDGEMENT = /\b(?:better|worth|recommend(?:ed)?)\b|\bbest\b(?!\s+(?:ways?|practices?)\b)/i;
/** A sentence that makes a judgement. */
const JUDGED = /\b(?:best|better|worse|worst|recommend\w*|prefer\w*)\b/i;
/** A question asking for a forecast: what will go up or down. */
const FORECAST = /\bwill\b[^?]*\bgo (?:up|down)\b/i;
/**
 * A sentence that says what goes up or down: a judgement ("the better of the two") is no
 * forecast, so a forecast asked is answered only by one that speaks of a rise or a fall.
 */
const FORECAST_MADE = /\b(?:go(?:es)? (?:up|down)|rises?|rising|falls?|falling)\b/i;

/** A capitalised word inside a sentence with a lower-case letter in it: a proper name ("Stripe", "CoinGecko"). */
const PROPER_NAME = /(?<![.?!:;]\s*|["'(]|^\s*)\b[A-Z][\p{L}\p{N}]*\p{Ll}[\p{L}\p{N}]*/gu;

/**
 * A trailing "in Python", "with Express", "using Flask": the language, framework or tool the
 * asker works with, named after what the question asks of this service. Not "on Binance", "to
 * Heroku", "for Stripe" nor "from PayPal": those name where the act is done, for whom, or whose
 * it is ("a refund from PayPal", "a webhook signature from Stripe").
 */
const TOOL_QUALIFIER =
  /\s(?:in|with|using)\s+(?:the\s+)?[A-Z][\p{L}\p{N}.+#]*(?:\s+[A-Z][\p{L}\p{N}.+#]*)*(?:\s+\d[\p{L}\p{N}.]*)?[\s?.!]*$/u;

/**
 * Whether the question names something by a proper name the documentation never uses: as what
 * it is about ("What are Stripe's fees?", "Does CoinGecko have an API?"), or only as the tool the
 * asker works with, in a trailing qualifier ("… the webhook signature in Python?").
 */
function namesUnknown(
  question: string,
  asked: AskedTerm[],
  rarity: number[],
  unknownWeight: number,
): 'subject' | 'tool' | null {
  const tool = TOOL_QUALIFIER.exec(question)?.index ?? question.length;
  let named: 'tool' | null = null;
  for (const m of question.matchAll(PROPER_NAME)) {
    const t = termOf(m[0]);
    const at = t === null ? -1 : asked.findIndex(({ term }) => term === t);
    if (at < 0 || rarity[at]! < unknownWeight) continue;
    if (m.index < tool) return 'subject';
    named = 'tool';
  }
  return named;
}

/** What a name owns when it stands before it: "the Binance API", "my Coinbase account". */
const OWNED =
  /^\s+(?:api|apis|account|accounts|app|website|site|exchange|wallet|card|fees?|support|platform)\b/i;

/**
 * The proper names of a question that say where its act is done ("a stop loss on Bybit", "install
 * PostgreSQL on Windows"), what a "how do I" acts on ("how do I install Redis …") or whose product
 * it asks about ("the Binance API"), as terms.
 */
function placedNames(question: string): string[] {
  const out: string[] = [];
  for (const m of question.matchAll(PROPER_NAME)) {
    const before = question.slice(0, m.index);
    const t = termOf(m[0]);
    if (
      t !== null &&
      (/\bon\s+(?:the\s+)?$/i.test(before) ||
        OWNED.test(question.slice(m.index + m[0].length)) ||
        /\bhow (?:do|can|should|would) (?:i|we|you) \p{L}+\s+(?:(?:the|a|an|my|our)\s+)?$/iu.test(before))
    )
      out.push(t);
  }
  return out;
}

/**
 * Words that end what a "how do I" acts on: a preposition, a conjunction, a clause's start
 * ("how do I check *nobody* tampered with it" acts on a clause, not a noun).
 */
const OBJECT_END = new Set(
  (
    'in on at to for from with without using into onto via by of after before when if so and or while once ' +
    'until than as that which where whether what how why who nobody someone anyone everyone nothing'
  ).split(' '),
);

/** Verbs whose complement is no object ("get told", "be notified", "stay in sync"). */
const LINKING_VERBS = new Set(['get', 'be', 'become', 'stay', 'go']);

/**
 * The noun a "how do I <act> …" question acts on, as a term: the last word of what follows the
 * act, up to a preposition (a trailing "using Flask" included), a conjunction or the end ("revoke
 * token approvals in my wallet": approval). Null for another question, or when nothing follows.
 */
function actedOn(question: string): string | null {
  const m = /\bhow (?:do|can|should|would) (?:i|we|you) (\p{L}+)\s+([^?.!]*)/iu.exec(question);
  // "How do I get told when …", "be notified": what follows such a verb says how, acting on nothing.
  if (!m || LINKING_VERBS.has(m[1]!.toLowerCase())) return null;
  let last: string | null = null;
  for (const w of words(m[2]!)) {
    if (OBJECT_END.has(w.toLowerCase())) break;
    // A determiner before the noun phrase is passed over; a stop word after it ends it ("it", "my").
    if (termOf(w) === null) {
      if (last === null) continue;
      break;
    }
    last = w;
  }
  return last === null ? null : termOf(last);
}

/**
 * Answers from the retrieved passages. `weight` gives a term's weight (its rarity in the
 * corpus); without it every term weighs the same.
 */
export function extractiveAnswer(
  raw: string,
  retrieved: Retrieved[],
  weight?: (term: string) => number,
): Grounded {
  const question = rephrase(raw);
  // A term met through several words weighs as its most common form: the group is as rare as
  // its most used member. A term the corpus never uses (weight at its maximum) names something
  // the documentation does not speak of: when such terms carry most of the question, the
  // answer is "I don't know"; otherwise the answer is judged on the terms the corpus knows.
  const unknownWeight = weight ? weight('\u0000') : Number.POSITIVE_INFINITY;
  const terms = questionTerms(question);
  const asked = weight ? terms.map((a) => derived(a, weight, unknownWeight)) : terms;
  const dontKnow = { answer: DONT_KNOW, citations: [], grounded: false };
  if (asked.length === 0 || retrieved.length === 0) return dontKnow;
  const rarity = asked.map(({ meets }) => (weight ? Math.min(...[...meets].map(weight)) : 1));
  const weights = asked.map(({ share }, i) => share * rarity[i]!);
  const unknown = weights.filter((_, i) => rarity[i]! >= unknownWeight).reduce((a, b) => a + b, 0);
  const all = weights.reduce((a, b) => a + b, 0);
  if (unknown / all > MAX_UNKNOWN_SHARE) return dontKnow;
  // Two or more words, each a word of trading at large or one the documentation never uses (as
  // written: "founder" is not the documentation's "found", whatever their shared letters): the
  // question is about trading, not about this service.
  const unused = (i: number) =>
    weight !== undefined && [...terms[i]!.meets].every((t) => weight(t) >= unknownWeight);
  // "Hold" written in lower case is the trader's verb ("hold a position"), not the verdict HOLD;
  // a conjunction that opens a condition ("before taking profit") names nothing.
  const ofTrading = (term: string) =>
    TRADING_AT_LARGE.has(term) || CONJUNCTIONS.has(term) || (term === HOLD && /\bhold(?:ing)?\b/.test(raw));
  if (asked.length >= 2 && asked.every(({ term }, i) => unused(i) || ofTrading(term))) return dontKnow;
  // A proper name the documentation never uses (capitalised inside the sentence, in part lower
  // case: "Stripe", "CoinGecko", "Heroku"; not an acronym such as "SRE") is what the question is
  // about: "what retry schedule does Stripe use" asks about Stripe's webhooks, not these, though
  // a passage states this service's schedule in every other word of it. Named only in a trailing
  // "in Python", "with Express", it is the tool the asker works with: the question is answered
  // when the chosen unit carries the rest of it well (below).
  const unknownName = namesUnknown(raw, asked, rarity, unknownWeight);
  if (unknownName === 'subject') return dontKnow;
  // "How do I revoke token approvals in my wallet": what the act is done to is a thing the
  // documentation never names (its noun, the last word before a preposition or the end), so no
  // passage says how; its other words (revoke, token, wallet) meet passages about this service's.
  const actObject = actedOn(raw);
  if (actObject !== null && weight !== undefined && weight(actObject) >= unknownWeight) return dontKnow;
  // A word the documentation never uses still counts against an answer, at half its weight: a
  // question about sorting in Python is not answered by a sentence that sorts test points.
  const known = all - unknown + UNKNOWN_PENALTY * unknown;
  const kind = questionKind(question);
  // Read on the words asked: "what comes back if …" names a reply by its "back", which rephrase drops.
  const codeAsked = replyAsked(raw);
  // "How do I connect …": the act asked about. A unit that names neither it (nor a word for
  // it) in its text or its title speaks of something near the question, not of how to do it.
  const act = /\bhow (?:do|can|should|would) (?:i|we|you) ([\p{L}]+)/iu.exec(question)?.[1];
  const actTerm = act === undefined ? null : termOf(act);
  const cruxAt = actTerm === null ? -1 : asked.findIndex(({ term }) => term === actTerm);
  const read = retrieved.slice(0, READ_PASSAGES);
  const compounds = compoundsOf(read.map(({ passage }) => passage.text));
  const coverageOf = (text: string, title: ReadonlySet<string>, body: ReadonlySet<string>) => {
    const present = termsIn(text);
    // A part of a PascalCase name ("TradingView", "OpenAPI") names its word only in part.
    const plain = termsIn(text, false);
    // "Hosts that connect only through OAuth" answers a question that narrows the act as well.
    const narrowed = /\bonly\b/i.test(question) ? new Set<string>() : narrowedActs(text);
    const modifying = modifierOnly(text, asked, compounds);
    let own = 0;
    let context = 0;
    let crux = false;
    let narrowedAct = false;
    asked.forEach(({ meets }, i) => {
      const w = weights[i]!;
      if (rarity[i]! >= unknownWeight) return;
      const has = (set: ReadonlySet<string>) => [...meets].some((t) => set.has(t));
      // "What status comes back if …": a unit stating a code (413, BODY_TOO_LARGE) names the reply.
      const named =
        [...meets].some((t) => plain.has(t) && !modifying.has(t)) ||
        (codeAsked && [...meets].some((t) => REPLY.has(t)) && REPLY_CODE.test(text));
      if (i === cruxAt) {
        const narrows = has(narrowed);
        if (narrows) narrowedAct = true;
        // The act a "how do I" asks about is named by a word, or a part of a camelCase name
        // (verifyWebhook), not by a part of a PascalCase name: "OpenAPI" does not open anything.
        if ((named && !narrows && has(plain)) || has(title)) crux = true;
      }
      if (named) own += w;
      else if (has(present)) own += 0.5 * w;
      // A compound the documentation writes as one word ("Dockerfile" for "docker") names it in part.
      else if (
        [...meets].some(
          (t) => t.length >= 5 && [...present].some((p) => p.length > t.length && p.startsWith(t)),
        )
      )
        own += 0.5 * w;
      // The passage's title says what the sentence is about, though the sentence may not repeat
      // it; the rest of the passage, less so, and only to rank: what the sentence and its title
      // carry is what decides whether it answers at all.
      else if (has(title)) own += 0.6 * w;
      else if (has(body)) context += 0.3 * w;
    });
    return { own: own / known, ranked: (own + context) / known, crux, narrowedAct };
  };
  // What a "which" question asks for the values of ("which event stores": stores).
  const noun = kind === 'list' ? listedNoun(question) : null;
  const ofNoun = asked.filter(({ term }) => noun === null || term === noun);
  const listOf = ofNoun.length > 0 ? ofNoun : asked;
  const aboutTests = TESTS.test(question);
  const counted = kind === 'number' ? countedNoun(question, asked) : null;
  // "What is QLIKE[, the score the report keeps quoting]?" names the term it asks to define: a
  // sentence whose subject is that term ("QLIKE is r²/h + log h, …") answers it, however few of
  // the question's other words it repeats.
  const defined = kind === 'definition' ? definedTerms(question) : null;
  const defines = (head: string): boolean => {
    const subject = defined === null ? null : /^((?:\S+\s){0,3}?)(?:is|are|means?)\s/.exec(head)?.[1];
    if (defined === null || subject === undefined || subject === null) return false;
    const named = termsIn(subject);
    return defined.every((t) =>
      asked.some(({ term, meets }) => term === t && [...meets].some((x) => named.has(x))),
    );
  };
  // The rarest of a "how do I" question's terms other than its act: what the act is done to.
  const object =
    kind === 'steps'
      ? (asked
          .map((a, i) => ({ meets: a.meets, w: rarity[i]!, i }))
          .filter(({ i, w }) => i !== cruxAt && w < unknownWeight)
          .sort((a, b) => b.w - a.w)[0]?.meets ?? null)
      : null;
  const candidates: Candidate[] = [];
  const byPassage = new Map<string, string[][]>();
  read.forEach(({ passage }, rank) => {
    const title = termsIn(passage.title);
    const testsSection = passage.title.split('›').some((part) => TEST_SUITE.test(part.trim()));
    const list = units(passage);
    byPassage.set(passage.id, list);
    // A long passage (docs/evaluation-risk.md's 28,000-character method paragraph) names nearly
    // every word of any question somewhere: what its unit's neighbours say is its context, and
    // how much of the question it covers as a whole, not the whole passage.
    const long = passage.text.length > LONG_PASSAGE;
    // Else the passage as a whole (title and text): its terms, and how much of the question it carries.
    const passageBody = long ? null : termsIn(passage.text);
    const passageCovered = long ? 0 : coverageOf(passage.text, title, title).own;
    list.forEach((quotes, order) => {
      const head = quotes[0]!;
      // A "how do I" question may be answered by the command it needs, quoted from a sample.
      const codeCall = kind === 'steps' && cruxAt >= 0 && callsAct(head, asked[cruxAt]!.meets, asked);
      const quotable =
        answerable(head) ||
        (kind === 'steps' && quotes.length === 1 && (isCommand(head) || codeCall)) ||
        // A code line's remark is prose ("// 300 s tolerance"): quoted with its line.
        (quotes.length === 1 && commented(head));
      if (!quotable || isHeading(head, passage)) return;
      const near = long
        ? list
            .slice(Math.max(0, order - NEIGHBOURS), order + NEIGHBOURS + 1)
            .flat()
            .join(' ')
        : '';
      const body = passageBody ?? termsIn(near);
      const covered = long ? coverageOf(near, title, title).own : passageCovered;
      const text = quotes.join(' ');
      const { own, ranked, crux, narrowedAct } = coverageOf(text, title, body);
      // Not naming the act a "how do I" question asks about, a unit does not address it.
      // A unit that states the step (a command, a setting, a route) and carries the rest of the
      // question answers it though it names the act otherwise ("writes the answers" for refresh).
      // A sentence defining the term a "what is X" asks about carries the question.
      const coverage = Math.max(
        crux || cruxAt < 0 || (!narrowedAct && STEP_TEXT.test(text)) ? own : Math.min(own, MIN_COVERAGE / 2),
        defines(head) ? MIN_COVERAGE : 0,
      );
      const score =
        ranked +
        kindFit(kind, text, asked) +
        // Items on lines of their own, introduced by a sentence naming them, are the list itself.
        (kind === 'list' && itemList(quotes, listOf) ? 0.2 : 0) -
        rank * 0.01 -
        text.length / 5000 +
        subjectFit(kind, head, asked) +
        // "How many cells": a unit that counts them ("0 of 15 cells") ranks above one that
        // states another number.
        (counted !== null && countsNoun(text, counted) ? 0.1 : 0) +
        // The call that does the act asked about is the code a "how do I" answer quotes.
        (codeCall ? 0.25 : 0) +
        // A route, command, package or setting named after the thing a "how do I" acts on
        // ("npx @modelcontextprotocol/inspector", "POST …/rotate-secret") is the step for it.
        (kind === 'steps' && object !== null && stepNames(text, object) ? 0.15 : 0) -
        // The test suite's sections say how a behaviour is tested, not what it is or why: they
        // answer a question about tests, and rank far below the rest for any other.
        (testsSection && !aboutTests ? 0.3 : 0) -
        // A row that lists what a "which" question asks for is the list, not one measurement.
        (TABLE_ROW.test(text) && !(kind === 'list' && enumerates(text, asked)) ? 0.1 : 0);
      candidates.push({ passage, rank, order, quotes, coverage, score, covered, acts: crux || cruxAt < 0 });
    });
  });
  // Only a unit that carries the question may answer it; among those, the best scored. Failing
  // any, a unit of a leading passage that covers the question as a whole, unless more than
  // FALLBACK_UNKNOWN of the question names what the documentation never does ("why did my bank
  // transfer fail": no passage speaks of banks, whatever it says of transfers and failures). A unit that states a fact of
  // a narrow shape the question asks for (a path) carries it with less of its words, in a
  // passage that covers the question: few sentences name a file, and the one that does answers;
  // not when the question names what the documentation never does ("my tax return"). So does
  // a unit that enumerates what a "which" question asks for ("On GET /metrics of the dispatcher
  // role: webhook_delivery_attempts_total{trigger}, …" for "which metrics does the dispatcher
  // expose …"): the list names its items, not the question's other words; a third of the
  // question's weight may be words the documentation never uses.
  const stated = statedBy(question, codeAsked);
  let carrying = candidates
    .filter(
      (c) =>
        c.coverage >= MIN_COVERAGE ||
        (stated?.narrow === true &&
          unknown === 0 &&
          c.coverage >= NARROW_COVERAGE &&
          c.covered >= NARROW_PASSAGE &&
          stated.test(c.quotes.join(' '))) ||
        (kind === 'list' &&
          ofNoun.length > 0 &&
          noun !== null &&
          unknown <= LIST_UNKNOWN_SHARE * all &&
          c.coverage >= NARROW_COVERAGE &&
          c.covered >= LIST_PASSAGE &&
          (enumerates(c.quotes.join(' '), ofNoun) || itemList(c.quotes, ofNoun))),
    )
    .sort(bestFirst);
  const fallback = carrying.length === 0 && unknown <= FALLBACK_UNKNOWN * all;
  if (fallback)
    carrying = candidates
      .filter(
        (c) =>
          c.acts &&
          c.rank < FALLBACK_PASSAGES &&
          c.covered >= FALLBACK_COVERAGE &&
          c.coverage >= FALLBACK_UNIT,
      )
      .sort(bestFirst);
  // "Which coins …" asks for the coins: where the documentation lists them, a sentence that
  // only speaks of them (how many, where they are read from) is not the answer.
  if (kind === 'list') {
    const listing = carrying.filter(
      (c) => enumerates(c.quotes.join(' '), listOf) || itemList(c.quotes, listOf),
    );
    if (listing.length > 0) carrying.splice(0, carrying.length, ...listing);
  }
  // "How many …" is answered by a unit that states a number, "how do I …" by one that states the
  // step, where the passages read hold one. A "how many" with no number anywhere is not answered
  // by prose around it: the chat does not know the number.
  if (stated !== null) {
    const stating = carrying.filter((c) => stated.test(c.quotes.join(' ')));
    // "How do I rotate a secret": a step named after the act ("POST …/rotate-secret") is the step
    // for it; a sentence that names some other route beside the question's words is not. Only a
    // rare act names its step so: "run", "change" or "verify" stand in many commands and routes.
    const actMeets = cruxAt >= 0 && rarity[cruxAt]! >= RARE_ACT ? asked[cruxAt]!.meets : null;
    const naming =
      kind === 'steps' && actMeets !== null
        ? stating.filter((c) => stepNames(c.quotes.join(' '), actMeets))
        : [];
    // "How do I start just the api role": where no carrying unit states a step named after what
    // the question names (--role api, WEBHOOK_TEST_ALLOW_CIDRS, format=csv), a unit of a leading
    // passage that does, names the act and carries MEASURE_UNIT of the question answers: the
    // step asked for, though the question's other words ("scale the HTTP front separately") are
    // not the documentation's.
    const topical =
      kind === 'steps'
        ? new Set(
            asked.flatMap(({ meets }, i) => (i === cruxAt || rarity[i]! >= unknownWeight ? [] : [...meets])),
          )
        : null;
    const namingTopic =
      topical === null ? [] : stating.filter((c) => stepNamesAny(c.quotes.join(' '), topical));
    const nearTopic =
      topical === null || namingTopic.length > 0
        ? []
        : candidates
            .filter(
              (c) =>
                c.acts &&
                c.coverage >= MEASURE_UNIT &&
                c.rank < STEP_PASSAGES &&
                stated.test(c.quotes.join(' ')) &&
                stepNamesAny(c.quotes.join(' '), topical),
            )
            .sort(bestFirst);
    if (naming.length > 0) carrying.splice(0, carrying.length, ...naming);
    else if (nearTopic.length > 0) carrying.splice(0, carrying.length, ...nearTopic);
    else if (stating.length > 0) carrying.splice(0, carrying.length, ...stating);
    else if (stated.required) {
      // The number may stand beside the sentence that repeats the question's words: a unit of a
      // passage that carries the question, stating it and carrying a quarter of the question.
      const beside = candidates
        .filter(
          (c) =>
            carrying.some((k) => k.passage.id === c.passage.id) &&
            c.coverage >= FALLBACK_UNIT &&
            stated.test(c.quotes.join(' ')),
        )
        .sort(bestFirst);
      if (beside.length === 0) return dontKnow;
      carrying.splice(0, carrying.length, ...beside);
    }
  }
  // "How long will it hold my request": a length of time answers, not the nearest number. Where
  // no carrying unit states the kind of quantity asked, a unit that does and carries
  // MEASURE_UNIT of the question, in a leading passage or one that carries it, answers instead.
  // Not "how do I see how many calls I have left": that asks where to read the count.
  // "What is the retry schedule", "what timestamp tolerance …": a quantity of time is asked, by
  // the noun it is the value of.
  const timeNoun =
    /^\s*what(?:'s| is| are)?\b[^?]*\b(schedule|delays?|intervals?|timeouts?|tolerance|lifetime|expiry|half-li(?:fe|ves)|ttl)\b/i.exec(
      question,
    )?.[1];
  const measure =
    kind === 'number' && !/\bhow (?:do|can|should|would) (?:i|we|you)\b/i.test(question)
      ? measureOf(question, counted)
      : timeNoun !== undefined
        ? (text: string) =>
            DURATION.test(text) || namesSettingOf(text, termOf(timeNoun), asked, rarity, unknownWeight)
        : null;
  if (measure !== null && carrying.length > 0) {
    const fitting = carrying.filter((c) => measure(c.quotes.join(' ')));
    const near = candidates
      .filter(
        (c) =>
          c.coverage >= MEASURE_UNIT &&
          (c.rank < MEASURE_PASSAGES || carrying.some((k) => k.passage.id === c.passage.id)) &&
          measure(c.quotes.join(' ')),
      )
      .sort(bestFirst);
    if (fitting.length > 0) carrying.splice(0, carrying.length, ...fitting);
    // A count may be stated of what the sentence calls otherwise ("at most 5,000 such are kept"):
    // only a carrying unit that counts the noun is preferred, none is sought further.
    else if (near.length > 0 && counted === null) carrying.splice(0, carrying.length, ...near);
  }
  const best = carrying[0];
  if (best === undefined) return dontKnow;
  // A passage that covers the question as a whole, quoted with a unit naming only the service's
  // everyday words of it (funding, rates, market), does not answer what its rare words ask, when
  // those words carry most of the question: naming none of them, the unit leaves them as unsaid
  // as a word the documentation never uses, and more than MAX_UNKNOWN_SHARE of the question's
  // weight unsaid so is "I don't know" ("go negative in a bear market": 0.59). A rare word that
  // only shapes the question ("where does the sizing *put* a position's stop": 0.36) does not
  // refuse a unit that states the rest ("long_stop at band_low").
  if (fallback) {
    const quoted = termsIn(best.quotes.join(' '));
    const rare = asked
      .map((a, i) => ({ ...a, i }))
      .filter(({ i }) => rarity[i]! >= FALLBACK_RARE * unknownWeight && rarity[i]! < unknownWeight);
    const unsaid = rare.reduce((sum, { i }) => sum + weights[i]!, unknown);
    if (
      rare.length > 0 &&
      !rare.some(({ meets }) => [...meets].some((t) => quoted.has(t))) &&
      unsaid / all > MAX_UNKNOWN_SHARE
    )
      return dontKnow;
  }
  // "Which timeframe is best for day trading", "which coins will go up": a judgement or a
  // forecast is asked, and only a unit that makes one ("the best long/short pair") answers it.
  if (JUDGEMENT.test(raw) && !JUDGED.test(best.quotes.join(' '))) return dontKnow;
  if (FORECAST.test(raw) && !FORECAST_MADE.test(best.quotes.join(' '))) return dontKnow;
  // "How do I set a stop loss on Bybit", "install Redis on macOS", "the Binance API's rate limit":
  // a name the documentation uses for where the act is done, what it acts on or whose product is
  // asked about is what the question is about; a passage that never names it speaks of this
  // service's stops, installs or limits, not of that place's or product's.
  // Read off the passage's remembered term sets only when a placed name asks (no copy of them).
  const named = (t: string) => termsIn(best.passage.text).has(t) || termsIn(best.passage.title).has(t);
  for (const name of placedNames(raw)) {
    const at = asked.findIndex(({ term }) => term === name);
    if (at >= 0 && rarity[at]! < unknownWeight && ![...asked[at]!.meets].some(named)) return dontKnow;
  }
  // "What is the maker fee for spot trading on Binance": a unit that names, as words of its own,
  // nothing of the question but the place it is set in (a placed name) and words of trading at
  // large, while the question names more that the documentation knows (fee, spot), says nothing
  // of what is asked, though the parts of its codes (BINANCE_SPOT, scan_trade_calls) or its title
  // meet the rest.
  const placed = new Set(placedNames(raw));
  if (placed.size > 0) {
    const plainQuoted = new Set(
      words(best.quotes.join(' '))
        .map((w) => termOf(w))
        .filter((t): t is string => t !== null),
    );
    const plainWord = (i: number) => ofTrading(asked[i]!.term) || placed.has(asked[i]!.term);
    const knownAt = asked.map((_, i) => i).filter((i) => rarity[i]! < unknownWeight);
    const saidAt = knownAt.filter((i) => [...asked[i]!.meets].some((t) => plainQuoted.has(t)));
    if (saidAt.every(plainWord) && knownAt.some((i) => !plainWord(i))) return dontKnow;
  }
  // "… the webhook signature in Python?": the question, but for the tool named, is this service's
  // when the chosen unit carries TOOL_REST of what the documentation's words weigh in it.
  if (unknownName === 'tool' && best.coverage * known < TOOL_REST * (all - unknown)) return dontKnow;
  const chosen: Candidate[] = [best];
  let length = best.quotes.join(' ').length;
  const overlaps = (c: Candidate) =>
    chosen.some((x) => x.passage.id === c.passage.id && x.order === c.order) ||
    chosen.some((x) => x.quotes.some((q) => c.quotes.some((r) => q.includes(r) || r.includes(q))));
  // Quotes a unit beside the others when the answer has room for it.
  const add = (c: Candidate): void => {
    const size = c.quotes.join(' ').length;
    // Each quote is followed by its citation mark (" [1] ").
    if (length + size + CITATION_MARK * chosen.length > MAX_ANSWER_CHARS) return;
    chosen.push(c);
    length += size;
  };
  // A short best sentence ("Confidence is calibrated, not a rescaled score.") opens what its
  // passage goes on to say: the next sentence comes with it.
  const next = byPassage.get(best.passage.id)![best.order + 1];
  if (length < SHORT_ANSWER && next !== undefined && answerable(next[0]!)) {
    const follow = { ...best, order: best.order + 1, quotes: next, score: best.score };
    if (!overlaps(follow)) add(follow);
  }
  // "Why …" answered by a conclusion ("Every answer is therefore HOLD", "… say so; use X"): the
  // cause is what the sentence before it says, so that sentence comes first.
  if (kind === 'reason' && CONCLUSION.test(best.quotes[0]!)) {
    const all = sentences(best.passage.text);
    // The sentence the quote stands in (a clause of a long one stands in it too).
    const at = all.findIndex((sentence) => sentence.includes(best.quotes[0]!));
    const cause = at > 0 ? all[at - 1]! : undefined;
    if (cause !== undefined && answerable(cause) && !isHeading(cause, best.passage)) {
      const before = { ...best, order: best.order - 0.5, quotes: [cause], score: best.score };
      if (!overlaps(before)) add(before);
    }
  }
  // A "why" whose best quote states no cause: the best passage's unit that states one (with a
  // quarter of the question) comes with it ("…; use expected_move_pct, not the label" beside
  // what the labels are worth).
  if (kind === 'reason' && !CAUSE.test(best.quotes.join(' '))) {
    const cause = candidates
      .filter(
        (c) =>
          c.passage.id === best.passage.id &&
          c.coverage >= CAUSE_UNIT &&
          CAUSE.test(c.quotes.join(' ')) &&
          !overlaps(c),
      )
      .sort(bestFirst)[0];
    if (cause !== undefined) add(cause);
  }
  // Then what else the best passage says about the question, then units elsewhere that carry
  // as much of it.
  const rest = carrying
    .slice(1)
    .filter((c) =>
      c.passage.id === best.passage.id
        ? c.score >= best.score - 0.25
        : c.score >= best.score - (c.acts ? OTHER_PASSAGE_REACH : NEAR_PASSAGE_REACH),
    )
    .sort((a, b) => Number(b.passage.id === best.passage.id) - Number(a.passage.id === best.passage.id));
  for (const c of rest) {
    if (chosen.length >= MAX_SENTENCES) break;
    if (c.coverage < MIN_COVERAGE) continue;
    if (!overlaps(c)) add(c);
  }
  // A route's summary from the contract says what the route does; how to call it for what was
  // asked (the parameter, the header) is what the documentation says of it: for a "how do I",
  // the best documented unit that states a step and carries most of the question comes with it,
  // and the documentation's best unit naming the same route ("route POST /api/webhooks/:id/enable
  // {"recover_since": ISO}" beside the contract's "POST /api/webhooks/{id}/enable: Re-enable …"),
  // when it carries a quarter of the question.
  if (kind === 'steps' && stated !== null && best.passage.source_type === 'contract') {
    const how = carrying.find(
      (c) =>
        c.passage.source_type !== 'contract' &&
        c.coverage >= ROUTE_DETAIL &&
        stated.test(c.quotes.join(' ')) &&
        !overlaps(c),
    );
    if (how !== undefined) add(how);
    const called = routesIn(best.quotes.join(' '));
    const documented = candidates
      .filter(
        (c) =>
          c.passage.source_type !== 'contract' &&
          c.coverage >= FALLBACK_UNIT &&
          routesIn(c.quotes.join(' ')).some((r) => called.includes(r)) &&
          !overlaps(c),
      )
      .sort(bestFirst)[0];
    if (documented !== undefined) add(documented);
  }
  // The answer's room is used: what else the best passage says, best first. The fact asked (a
  // number, a code, a step) often stands in a sentence of that passage beside the one that names
  // the question's words best.
  const fill = candidates.filter((c) => c.passage.id === best.passage.id).sort(bestFirst);
  for (const c of fill) if (!overlaps(c)) add(c);
  // The best passage may not hold what the question's kind asks for (a number, a step, a code,
  // a form, a path; for "which", the list): then units of the two leading passages, or others
  // that carry the question, that state it join the answer, when they carry a quarter of it.
  const fills = (text: string) =>
    stated !== null ? stated.test(text) : kind === 'list' && enumerates(text, listOf);
  if ((stated !== null || kind === 'list') && !fills(chosen.map((c) => c.quotes.join(' ')).join(' '))) {
    const stating = candidates
      .filter(
        (c) =>
          (c.rank < SLOT_PASSAGES || carrying.includes(c)) &&
          c.coverage >= FALLBACK_UNIT &&
          fills(c.quotes.join(' ')),
      )
      .sort(bestFirst);
    for (const c of stating) if (!overlaps(c)) add(c);
  }
  // Read in passage order, then in the order the sentences stand in their passage.
  chosen.sort((a, b) => a.rank - b.rank || a.order - b.order);
  const numbers = new Map<string, number>();
  const quotes = new Map<string, string[]>();
  const parts: string[] = [];
  for (const c of chosen) {
    if (!numbers.has(c.passage.id)) numbers.set(c.passage.id, numbers.size + 1);
    quotes.set(c.passage.id, [...(quotes.get(c.passage.id) ?? []), ...c.quotes]);
    parts.push(`${c.quotes.join(' ')} [${numbers.get(c.passage.id)}]`);
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
