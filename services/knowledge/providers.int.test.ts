import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeProvider } from '../../test/knowledge-provider.ts';
import { answerQuestion, checkGenerated } from './chat.ts';
import { DONT_KNOW } from './extractive.ts';
import type { Passage } from './passages.ts';
import { chatProvider, ProviderError } from './providers.ts';
import { KnowledgeIndex } from './search-index.ts';

const logger = pino({ level: 'silent' });

const passages: Passage[] = [
  {
    id: 'doc#squeeze',
    source_type: 'methodology',
    source_url: 'docs/methodology.md#market-regimes',
    title: 'Market regimes',
    text: 'Squeeze means the Bollinger bandwidth is compressed near its recent low. A breakout is likely but its direction is not known yet.',
  },
  {
    id: 'doc#prices',
    source_type: 'pricing',
    source_url: 'README.md#using-it',
    title: 'Prices',
    text: 'A 1m trade call costs 0.05 USD. A funding arbitrage scan costs 0.01 USD.',
  },
];

describe('chat providers against a local server speaking each protocol', () => {
  let server: Awaited<ReturnType<typeof startFakeProvider>>;
  const index = new KnowledgeIndex(passages);
  beforeAll(async () => {
    // slow-model never answers within the life of the suite: only a timeout ends its requests.
    server = await startFakeProvider({ slowMs: 600_000 });
  });
  afterAll(async () => {
    await server?.close();
  });

  for (const kind of ['openai-compatible', 'anthropic'] as const) {
    const provider = () =>
      chatProvider({
        CHAT_PROVIDER: kind,
        CHAT_BASE_URL: kind === 'anthropic' ? server.url : `${server.url}/v1`,
        CHAT_API_KEY: 'secret-1',
      })!;

    it(`${kind}: sends the protocol's request and reads its answer`, async () => {
      const before = server.requests.length;
      const text = await provider().complete({
        model: 'good-model',
        system: 'be brief',
        user: '[1] id=doc#squeeze title=Market regimes\nSqueeze means compression.',
        signal: AbortSignal.timeout(60_000), // ends only a hang: the answer comes at once
      });
      expect(text).toBe('According to the documentation: Squeeze means compression. [1].');
      const sent = server.requests[before]!;
      if (kind === 'anthropic') {
        expect(sent.path).toBe('/v1/messages');
        expect(sent.headers['x-api-key']).toBe('secret-1');
        expect(sent.headers['anthropic-version']).toBe('2023-06-01');
        expect(sent.body).toMatchObject({ model: 'good-model', system: 'be brief', max_tokens: 800 });
        expect(sent.body.messages).toEqual([{ role: 'user', content: expect.stringContaining('Squeeze') }]);
      } else {
        expect(sent.path).toBe('/v1/chat/completions');
        expect(sent.headers.authorization).toBe('Bearer secret-1');
        expect(sent.body.messages).toEqual([
          { role: 'system', content: 'be brief' },
          { role: 'user', content: expect.stringContaining('Squeeze') },
        ]);
      }
    });

    it(`${kind}: an error status or a timeout is a ProviderError`, async () => {
      await expect(
        provider().complete({
          model: 'down-model',
          system: '',
          user: 'x',
          signal: AbortSignal.timeout(60_000), // ends only a hang: the answer comes at once
        }),
      ).rejects.toThrow(ProviderError);
      await expect(
        provider().complete({ model: 'slow-model', system: '', user: 'x', signal: AbortSignal.timeout(100) }),
      ).rejects.toThrow(/timed out/);
    });

    it(`${kind}: grounded answers cite given passages; anything else falls back to extractive`, async () => {
      // Models that answer get all the time a loaded machine needs; the one that never answers
      // is cut off by a short timeout, which it cannot meet however idle the machine is.
      const deps = {
        retrieve: (q: string) => index.retrieve(q),
        provider: provider(),
        timeoutMs: 60_000,
        logger,
      };
      const good = await answerQuestion(deps, 'what does squeeze mean', 'good-model');
      expect(good.answer).toMatchObject({ model: 'good-model', grounded: true });
      expect(good.answer.citations.map((c) => c.id)).toEqual(['doc#squeeze']);
      expect(passages[0]!.text).toContain(good.answer.citations[0]!.quote);

      const liar = await answerQuestion(deps, 'what does squeeze mean', 'liar-model');
      expect(liar).toMatchObject({ providerFailed: false, answer: { model: 'extractive', grounded: true } });
      expect(liar.answer.note).toMatch(/cited sources or numbers it was not given/);

      const slow = await answerQuestion({ ...deps, timeoutMs: 300 }, 'what does squeeze mean', 'slow-model');
      expect(slow).toMatchObject({ providerFailed: true, answer: { model: 'extractive', grounded: true } });
      expect(slow.answer.note).toMatch(/slow-model was unavailable/);

      // Nothing relevant: the model is not asked.
      const before = server.requests.length;
      const unknown = await answerQuestion(deps, 'who won the football match yesterday', 'good-model');
      expect(unknown.answer).toMatchObject({ answer: DONT_KNOW, citations: [], grounded: false });
      expect(server.requests.length).toBe(before);
    });
  }

  it('checkGenerated renumbers citations and refuses foreign ones', () => {
    const context = index.retrieve('squeeze price 1m trade call');
    expect(context).toHaveLength(2);
    const ok = checkGenerated('Costs 0.05 USD [2]. Squeeze is compression [1] [2].', context);
    expect(ok?.text).toBe('Costs 0.05 USD [1]. Squeeze is compression [2] [1].');
    expect(ok?.citations.map((c) => c.id)).toEqual([context[1]!.passage.id, context[0]!.passage.id]);
    expect(checkGenerated('No citation at all.', context)).toBeNull();
    expect(checkGenerated('Out of range [3].', context)).toBeNull();
    expect(checkGenerated('By id [doc#other].', context)).toBeNull();
    expect(checkGenerated('Zero [0].', context)).toBeNull();
    // A number none of the given passages holds is generated, not quoted.
    expect(checkGenerated('A 1m trade call costs 0.07 USD [1].', context)).toBeNull();
    expect(checkGenerated('A 1m trade call costs 0.05 USD [1].', context)).not.toBeNull();
  });
});
