import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatAnswer } from '../../contracts/knowledge.ts';
import { issueServiceKey, startApiOnly } from '../../test/service-keys.ts';
import type { RunningService } from '../service.ts';
import { loadQuestionSet, offTopicFault, onTopicFault, TUNED_SETS } from './eval/score.ts';
import type { KnowledgeModule } from './module.ts';

/**
 * The fixed question sets (eval/score.ts TUNED_SETS: questions.json, heldout.json, fresh.json,
 * ordinary.json, everyday.json, analyst.json, buyer.json, newcomer.json, thirdparty.json) through the real chat: a started api role, a key, POST /api/chat over HTTP. The
 * shares answered right are the figures in docs/knowledge.md.
 */
describe('knowledge chat on the fixed question sets (POST /api/chat)', () => {
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    // The default configuration, as a user meets it: the prices and quotas the answers quote are
    // the defaults the sets expect.
    service = await startApiOnly();
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
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

  /**
   * Each set's floor is its score as measured after the picker's eighteenth change (issue 62 item 5;
   * docs/knowledge.md): a change that makes the chat worse on any set fails here. All ten sets
   * are tuned on; the sets of eval/score.ts SPENT_SETS and BLIND_SETS are not run here. A paragraph of documentation written later can
   * move an answer (ordinary.json once went 38 → 36 of 46 that way): when one does, the figure in
   * docs/knowledge.md and the floor move together, with the reason in the commit.
   */
  const FLOOR: Record<(typeof TUNED_SETS)[number], number> = {
    'questions.json': 54 / 54,
    'heldout.json': 40 / 42,
    'fresh.json': 22 / 22,
    'ordinary.json': 45 / 46,
    'everyday.json': 54 / 61,
    'analyst.json': 65 / 80,
    'buyer.json': 62 / 65,
    'newcomer.json': 83 / 104,
    'thirdparty.json': 64 / 82,
    'operator.json': 57 / 79,
  };

  it.each(TUNED_SETS)(
    '%s: the share answered right at its floor, "I don\'t know" to every off-topic one',
    async (file) => {
      // A pro key per set: its 200 chats a month hold any one set's questions.
      key = (await issueServiceKey(service, { plan: 'pro', owner: `eval-${file}` })).key;
      const set = loadQuestionSet(file);
      expect(set.questions.length).toBeGreaterThanOrEqual(file === 'fresh.json' ? 20 : 40);
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
      expect(share).toBeGreaterThanOrEqual(FLOOR[file]);
    },
  );
});
