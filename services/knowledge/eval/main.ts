import { pino } from 'pino';
import { EXTRACTIVE_MODEL } from '../../../contracts/knowledge.ts';
import { startApiOnly } from '../../../test/service-keys.ts';
import { answerQuestion } from '../chat.ts';
import type { KnowledgeModule } from '../module.ts';
import {
  BLIND_SETS,
  loadQuestionSet,
  offTopicFault,
  onTopicFault,
  QUESTION_SETS,
  TUNED_SETS,
} from './score.ts';

/**
 * Scores the extractive chat on the question sets named on the command line (the tuned sets
 * without any; a blind set, score.ts BLIND_SETS, only when named):
 * `npx tsx services/knowledge/eval/main.ts heldout.json fresh.json`.
 * The api role is started as answers.e2e.test.ts starts it (default configuration, in-process
 * adapters, no live facts), so the index holds the same passages, the routes' included; the
 * questions go to the answerer directly rather than over HTTP, so no key or chat quota is spent.
 * Prints each set's right/total, its off-topic answers, and every wrong answer, except a blind
 * set's: its summary line only, so that running it never shows what to tune on.
 */
const files = process.argv.slice(2) as (typeof QUESTION_SETS)[number][];
for (const file of files)
  if (!(QUESTION_SETS as readonly string[]).includes(file))
    throw new Error(`unknown question set ${file}; known: ${QUESTION_SETS.join(', ')}`);

const logger = pino({ level: 'silent' });
const service = await startApiOnly();
try {
  const knowledge = await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
  knowledge.refresh();
  const ask = async (question: string) =>
    (
      await answerQuestion(
        {
          retrieve: (q) => knowledge.index.retrieve(q),
          weight: (term) => knowledge.index.weight(term),
          provider: null,
          timeoutMs: 0,
          logger,
        },
        question,
        EXTRACTIVE_MODEL,
      )
    ).answer;
  const lines: string[] = [];
  for (const file of files.length > 0 ? files : TUNED_SETS) {
    const set = loadQuestionSet(file);
    const wrong: string[] = [];
    for (const q of set.questions) {
      const answer = await ask(q.question);
      const fault = onTopicFault(answer, q.expect, set.maxAnswerChars);
      if (fault) wrong.push(`  ${q.id}: ${q.question}\n    ${fault}\n    → ${answer.answer.slice(0, 400)}`);
    }
    let offGrounded = 0;
    for (const q of set.offTopic) {
      const answer = await ask(q.question);
      if (answer.grounded) offGrounded++;
      if (offTopicFault(answer))
        wrong.push(`  ${q.id} (off-topic): ${q.question}\n    → ${answer.answer.slice(0, 200)}`);
    }
    const right = set.questions.length - wrong.filter((w) => !w.includes('(off-topic)')).length;
    const summary = `${file}: ${right}/${set.questions.length} (${((100 * right) / set.questions.length).toFixed(1)} %); off-topic grounded ${offGrounded}/${set.offTopic.length}`;
    lines.push(summary);
    const blind = (BLIND_SETS as readonly string[]).includes(file);
    process.stdout.write(blind ? `${summary}\n\n` : `${summary}\n${wrong.join('\n')}\n\n`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await service.stop();
}
