import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { ChatAnswer } from '../../../contracts/knowledge.ts';
import { DONT_KNOW } from '../extractive.ts';

/**
 * The fixed question sets of the knowledge chat and the rule that says whether one answer is
 * right: questions.json (written before the answer logic was first tuned, then used to tune it),
 * heldout.json (written and committed before the builder's third change, then tuned on in its
 * last step), fresh.json (written after that change), ordinary.json (written before issue 62's
 * first change to the picker; fresh.json and ordinary.json were tuned on in its second),
 * everyday.json (written and committed before that second change, not tuned on in it; read and
 * tuned on in issue 62's third change) and analyst.json (written blind and committed before that
 * third change, scored once after it, then tuned on in the fourth), buyer.json (written blind
 * before the eighth change, scored once after it, then tuned on in the ninth) and newcomer.json
 * (104 questions and 14 off-topic ones a newcomer who has not read the docs asks, written blind
 * before the ninth change, scored once after it: 65 / 104; then tuned on in the tenth). Only
 * BLIND_SETS are out of sample.
 */
export const QuestionSet = z.strictObject({
  about: z.string(),
  maxAnswerChars: z.number().int().positive(),
  questions: z.array(
    z.strictObject({
      id: z.string(),
      question: z.string(),
      /** Every group must be met by one of its strings. */
      expect: z.array(z.array(z.string()).min(1)).min(1),
    }),
  ),
  offTopic: z.array(z.strictObject({ id: z.string(), question: z.string() })),
});
export type QuestionSet = z.infer<typeof QuestionSet>;

/** The sets the picker was tuned on: answers.e2e.test.ts holds each at its floor. */
export const TUNED_SETS = [
  'questions.json',
  'heldout.json',
  'fresh.json',
  'ordinary.json',
  'everyday.json',
  'analyst.json',
  'buyer.json',
  'newcomer.json',
  'thirdparty.json',
  'operator.json',
] as const;

/**
 * Sets whose wrong answers have been read but that are not yet held at a floor by
 * answers.e2e.test.ts, because that test requires "I don't know" to every off-topic question and
 * the picker still grounds one of theirs. Scored by the CLI only when named; not out of sample. A
 * set moves to TUNED_SETS, with its floor, once the picker passes its off-topic questions:
 * thirdparty.json (82 questions and 14 off-topic ones a third party evaluating the service asks,
 * written blind on 2026-11-27, scored once after the picker's tenth change, 43 / 82; the eleventh
 * change's validation set, 52 / 82 and 0 / 14 off-topic grounded after it) moved so, and so did
 * operator.json (79 questions and 14 off-topic ones a crypto trader or small fund operator asks,
 * written blind on 2026-11-27, before the picker's eleventh change): out of sample until the
 * thirteenth change, whose wrong answers and grounded off-topic one were read to make that change
 * (out-of-sample figures before: 41 / 79 before the eleventh change, 45 / 79 after it, and 46 / 79
 * with 1 / 14 off-topic grounded after the twelfth); 55 / 79 and 0 / 14 after it.
 *
 * tuning15.json: in sample from the start, written for the picker's fifteenth change and tuned on
 * by it: 12 questions of the kinds that change aimed at (a kind of quantity, a step named after
 * what the question names) and 30 near-topic off-topic probes (another exchange's, payment
 * provider's or host's API, webhooks and deployment; trading advice and forecasts), 13 of them
 * answered grounded before that change and 6 after it; 1 after the sixteenth (funding rates going
 * negative in a bear market), so it has no floor yet.
 *
 * tuning16.json: in sample from the start, written for the picker's sixteenth change and tuned on
 * by it: 12 on-topic guards worded as that change's refusals might catch them (a venue, chain or
 * platform after "on", "should I", HOLD) and 40 off-topic probes (another exchange's, wallet's or
 * platform's product, a chain's gas, trading advice and forecasts, tax, a few far ones), 6 of them
 * answered grounded before that change and 3 after it, so it has no floor yet.
 *
 * tuning17.json: in sample from the start, written for the picker's seventeenth lever round
 * before the chat was asked them and committed before any change of that round: 45 questions of a
 * security engineer reviewing a self-hosted deployment (key storage, webhook secrets and
 * signatures, the SSRF guard, CORS and page headers, rate limits, OAuth sign-in, tamper evidence)
 * and 10 near-topic security probes about other products.
 *
 * tuning18.json: in sample from the start, written for the picker's eighteenth change before the
 * chat was asked them and committed before any change of that round: 44 questions of a compliance
 * officer at a crypto fund doing due diligence on the service as a vendor (what is recorded and
 * kept, tamper evidence and anchors, history exports and their checks, what is sold and how it was
 * measured, prices, charges and refunds, keys, rate limits, webhook secrets) and 12 near-topic
 * probes (regulation at large, investment advice, custodians, another exchange's KYC, SQL,
 * chit-chat).
 *
 * tuning19.json: in sample from the start, written for the picker's nineteenth change before the
 * chat was asked them and committed before any change of that round: 45 questions of a risk
 * analyst at a crypto market maker (the risk forecast's meaning, horizons, fit and benchmarks, the
 * adaptive band, sizing and stops, weekends and restarts, regime labels and their worth,
 * risk_shift webhooks, funding normalisation and carry, the gate's evidence, prices, re-scoring)
 * and 10 near-topic probes (market making and options at large, another venue's rebate or margin,
 * a trading call before a data release, a book, the weather).
 *
 * tuning20.json: in sample from the start, a probe set written for the off-topic round (never
 * grounded: true for an answer that does not address the question) before the chat was asked
 * them and committed before any rule of that round changed: 36 crypto-adjacent or near-topic
 * questions the documentation does not answer (tax, wallets, other exchanges' fees, trading
 * advice and forecasts, DeFi, mining, ETFs, the weather) and 4 on-topic guards worded near them.
 * 2 of its probes are answered grounded on the nineteenth change's picker, 0 on the twentieth's
 * (its guards 4 / 4 on both); with 4 questions, under the 40 of a tuned set, it has no floor.
 */
export const SPENT_SETS = [
  'tuning15.json',
  'tuning16.json',
  'tuning17.json',
  'tuning18.json',
  'tuning19.json',
  'tuning20.json',
] as const;

/**
 * Sets never tuned on, scored by the CLI only when named (main.ts), never by a test a picker
 * change must pass: a set the picker is changed to pass is tuned on, and its figure stops being
 * out of sample (analyst.json, buyer.json, newcomer.json and thirdparty.json were, until each had
 * been scored once).
 *
 * integrator.json: 69 questions and 12 off-topic ones a developer wiring the service into a trading
 * bot or an agent host (MCP, x402, keys, webhooks, history exports) and a risk analyst reading the
 * risk forecast ask, written blind from the indexed documentation on 2026-11-27 and committed with
 * this line, before the picker's twelfth change and before the chat was ever asked them. Never
 * tuned on; scored once after that change, summary line only: 51 / 69, 0 / 12. The same rule
 * holds: summary line only.
 *
 * reviewer.json: 67 questions and 14 off-topic ones asked by someone connecting an AI agent host
 * over MCP with OAuth for the first time, a data journalist or academic checking the track record
 * and evaluation claims, a small team's DevOps person deploying and operating the service, and a
 * developer writing a webhook receiver, written blind by a helper from the indexed documentation
 * on 2026-11-27 and committed with this line, before the picker's thirteenth change and before the
 * chat was ever asked them. Never tuned on. Summary line only.
 *
 * auditor.json and desk.json: written blind the same way (auditor.json after the thirteenth
 * change; desk.json, a risk desk analyst's and a trading firm developer's questions, on
 * 2026-11-28 before the fourteenth). docs/knowledge.md gives their figures. Summary line only.
 *
 * frontline.json: 76 questions and 16 off-topic ones asked by a finance or operations person
 * reconciling x402 revenue, refunds and key plans, an on-call SRE, a front-end developer embedding
 * the track record and webhooks, and a student or journalist wanting HOLD, the risk band and the
 * track record in plain words, written blind on 2026-11-28 after the fourteenth change and
 * committed with this line, before the picker's next change and before the chat was ever asked
 * them. Summary line only.
 *
 * scout.json: 87 questions and 16 off-topic ones asked by a market-data vendor's product manager
 * comparing the service with competitors, a hobbyist building a Telegram or Discord bot on the
 * webhooks and the HTTP API, a portfolio risk manager using the risk band and sizing, an auditor of
 * the verdict history (verify, anchors, exports) and an agent developer using the MCP tools and x402,
 * written blind by a helper from the indexed documentation on 2026-11-29 and committed with this
 * line, before the picker's fifteenth change and before the chat was ever asked them. Summary line
 * only.
 *
 * vpsquant.json: 54 questions and 10 off-topic ones asked by a newcomer operator installing the
 * service on a small VPS and a quant buyer comparing it with a peer, written blind by a helper
 * from the indexed documentation on 2026-11-29 and committed with this line, before the chat was
 * ever asked them. docs/knowledge.md gives its figures. Summary line only.
 *
 * treasurer.json: 60 questions and 16 off-topic ones asked by a crypto fund's operations person
 * paying per call with x402, watching key plans and quotas, keeping the fund's webhooks alive and
 * reading the risk band, written blind by a helper from the indexed documentation on 2026-11-29
 * and committed with this line, before the picker's sixteenth change and before the chat was ever
 * asked them. Summary line only.
 */
export const BLIND_SETS = [
  'integrator.json',
  'reviewer.json',
  'auditor.json',
  'desk.json',
  'frontline.json',
  'scout.json',
  'vpsquant.json',
  'treasurer.json',
] as const;

export const QUESTION_SETS = [...TUNED_SETS, ...SPENT_SETS, ...BLIND_SETS] as const;

export function loadQuestionSet(file: (typeof QUESTION_SETS)[number] = 'questions.json'): QuestionSet {
  return QuestionSet.parse(JSON.parse(readFileSync(new URL(`./${file}`, import.meta.url), 'utf8')));
}

const flat = (s: string) => s.replace(/\s+/g, ' ').toLowerCase();

/** Why an on-topic answer is wrong, or null when it is right. */
export function onTopicFault(
  answer: Pick<ChatAnswer, 'answer' | 'grounded' | 'citations'>,
  expect: string[][],
  maxChars: number,
): string | null {
  if (answer.answer === DONT_KNOW) return "answered I don't know";
  if (!answer.grounded || answer.citations.length === 0) return 'not grounded';
  if (answer.answer.length > maxChars) return `longer than ${maxChars} characters`;
  const text = flat(answer.answer);
  const missing = expect.filter((group) => !group.some((s) => text.includes(flat(s))));
  return missing.length === 0 ? null : `missing ${missing.map((g) => g.join(' | ')).join('; ')}`;
}

/** Why an off-topic answer is wrong, or null when it is the ungrounded "I don't know". */
export function offTopicFault(answer: Pick<ChatAnswer, 'answer' | 'grounded' | 'citations'>): string | null {
  if (answer.answer !== DONT_KNOW) return 'answered instead of saying it does not know';
  if (answer.grounded || answer.citations.length > 0) return "grounded or cited with I don't know";
  return null;
}
