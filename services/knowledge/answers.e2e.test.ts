import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatAnswer } from '../../contracts/knowledge.ts';
import { issueServiceKey, startApiOnly } from '../../test/service-keys.ts';
import type { RunningService } from '../service.ts';
import { loadQuestionSet, offTopicFault, onTopicFault, QUESTION_SETS } from './eval/score.ts';
import type { KnowledgeModule } from './module.ts';

/**
 * The fixed question sets (eval/questions.json, eval/heldout.json) through the real chat: a
 * started api role, a key, POST /api/chat over HTTP. The shares answered right are the figures
 * in docs/knowledge.md.
 */
describe('knowledge chat on the fixed question sets (POST /api/chat)', () => {
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    service = await startApiOnly({ CHAT_QUOTA_PRO: '1000' });
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    key = (await issueServiceKey(service, { plan: 'pro', owner: 'eval' })).key;
  });
  afterAll(async () => {
    await service?.stop();
  });

  async function ask(question: string): Promise<ChatAnswer> {
    const res = await fetch(`${service.url}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ question }),
    });
    expect(res.status, question).toBe(200);
    return ChatAnswer.parse(await res.json());
  }

  it.each(QUESTION_SETS)(
    '%s: at least 90 % of the questions answered right, "I don\'t know" to every off-topic one',
    async (file) => {
      const set = loadQuestionSet(file);
      expect(set.questions.length).toBeGreaterThanOrEqual(file === 'heldout.json' ? 20 : 40);
      const wrong: string[] = [];
      for (const q of set.questions) {
        const answer = await ask(q.question);
        const fault = onTopicFault(answer, q.expect, set.maxAnswerChars);
        if (fault) wrong.push(`${q.id}: ${fault}\n      → ${answer.answer.slice(0, 300)}`);
      }
      const offWrong: string[] = [];
      for (const q of set.offTopic) {
        const fault = offTopicFault(await ask(q.question));
        if (fault) offWrong.push(`${q.id}: ${fault}`);
      }
      const right = set.questions.length - wrong.length;
      const share = right / set.questions.length;
      // The figures docs/knowledge.md reports, and what was wrong, for whoever runs it.
      process.stdout.write(
        `knowledge chat, ${file}: ${right}/${set.questions.length} = ${(100 * share).toFixed(1)} % answered right; ` +
          `off-topic ${set.offTopic.length - offWrong.length}/${set.offTopic.length} "I don't know"` +
          (wrong.length + offWrong.length ? `\n  wrong:\n  ${[...wrong, ...offWrong].join('\n  ')}` : '') +
          '\n',
      );
      expect(offWrong).toEqual([]);
      expect(share).toBeGreaterThanOrEqual(0.9);
    },
  );
});
