import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatAnswer, SearchAnswer } from '../../contracts/knowledge.ts';
import { issueServiceKey, startApiOnly } from '../../test/service-keys.ts';
import type { RunningService } from '../service.ts';
import type { KnowledgeModule } from './module.ts';

/**
 * Questions and queries as people type or paste them: full-width letters (an East Asian input
 * method), a terminal's colour escapes around a pasted line. The real api role, over HTTP.
 */
describe('POST /api/search and /api/chat on text as typed', () => {
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    service = await startApiOnly();
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    key = (await issueServiceKey(service, { plan: 'pro', owner: 'as-typed' })).key;
  });
  afterAll(async () => {
    await service?.stop();
  });

  async function send(route: 'search' | 'chat', body: object): Promise<Response> {
    return fetch(`${service.url}/api/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
  }

  async function post(route: 'search' | 'chat', body: object): Promise<unknown> {
    const res = await send(route, body);
    expect(res.status, JSON.stringify(body)).toBe(200);
    return res.json();
  }

  const PLAIN = 'what is the risk band';
  const TYPED = [
    'ｗｈａｔ ｉｓ ｔｈｅ ｒｉｓｋ ｂａｎｄ',
    '\u001b[1;31mwhat is the risk band\u001b[0m',
    '\u001b]0;shell\u0007what is the\u200b risk\tband\u001b[K',
  ];

  it('a chat answers as for the plain question, and echoes the question as sent', async () => {
    const plain = ChatAnswer.parse(await post('chat', { question: PLAIN }));
    expect(plain.grounded).toBe(true);
    for (const question of TYPED) {
      const answer = ChatAnswer.parse(await post('chat', { question }));
      expect(answer.question, JSON.stringify(question)).toBe(question);
      expect({ ...answer, question: PLAIN }, JSON.stringify(question)).toEqual(plain);
    }
  });

  it('a search finds what the plain query finds, and echoes the query as sent', async () => {
    const plain = SearchAnswer.parse(await post('search', { query: PLAIN, limit: 5 }));
    expect(plain.total_results).toBeGreaterThan(0);
    for (const query of TYPED) {
      const answer = SearchAnswer.parse(await post('search', { query, limit: 5 }));
      expect(answer.query, JSON.stringify(query)).toBe(query);
      expect({ ...answer, query: PLAIN }, JSON.stringify(query)).toEqual(plain);
    }
  });

  it('escape sequences alone are no text: refused as an invisible one is, over HTTP and MCP', async () => {
    // Long enough by their characters ("[31m[0m" is 8), they leave nothing to look up: the
    // answer was "I don't know" for a chat, no passage for a search.
    const TEXTS = [
      '\u001b[31m\u001b[0m',
      ' \u001b[1;31m\u001b[K \u001b]0;title\u0007 \u009b2J\u200b ',
      '\u001bM\u001bc\u001b7',
    ];
    const client = new Client({ name: 'as-typed', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    try {
      for (const text of TEXTS) {
        for (const [route, tool, field, code] of [
          ['search', 'search_knowledge', 'query', 'INVALID_QUERY'],
          ['chat', 'chat_knowledge', 'question', 'INVALID_QUESTION'],
        ] as const) {
          const res = await send(route, { [field]: text });
          expect(
            { status: res.status, code: ((await res.json()) as { code: string }).code },
            JSON.stringify(text),
          ).toEqual({
            status: 400,
            code,
          });
          const call = await client.callTool({ name: tool, arguments: { [field]: text } });
          expect(call.isError, JSON.stringify(text)).toBe(true);
          expect(call.structuredContent, JSON.stringify(text)).toMatchObject({ code });
        }
      }
      // Around words they count for nothing: two letters coloured are still too short.
      const short = await send('search', { query: '\u001b[31mab\u001b[0m' });
      expect(((await short.json()) as { code: string }).code).toBe('QUERY_TOO_SHORT');
    } finally {
      await client.close();
    }
  });
});
