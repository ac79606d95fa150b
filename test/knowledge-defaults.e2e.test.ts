import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import { ChatAnswer, SearchAnswer } from '../contracts/knowledge.ts';
import { ROLES } from '../services/component.ts';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import { type RunningService, startService } from '../services/service.ts';
import { issueServiceKey } from './service-keys.ts';

/**
 * The issue's "done when": a newcomer on `npm start` (every role, embedded defaults: LMDB in
 * DATA_DIR, in-process bus and cache, no Redis) asks both tools over MCP and HTTP with a key and
 * gets grounded answers whose citations point at passages of the index.
 */
describe('knowledge tools on embedded defaults (npm start)', () => {
  let dir: string;
  let service: RunningService;
  let module: KnowledgeModule;
  let key: string;
  let client: Client;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'knowledge-defaults-'));
    const config = loadConfig({
      DATA_DIR: dir,
      PORT: '0',
      HOST: '127.0.0.1',
      FEED: 'replay',
      LOG_LEVEL: 'silent',
    });
    service = await startService(config, [...ROLES], pino({ level: 'silent' }));
    module = service.components.find((c) => c.name === 'knowledge') as KnowledgeModule;
    await module.ready;
    key = (await issueServiceKey(service, { plan: 'free', owner: 'newcomer' })).key;
    client = new Client({ name: 'newcomer', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
  });
  afterAll(async () => {
    await client?.close().catch(() => undefined);
    await service?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Every citation names a passage of the index and quotes it verbatim; every [n] is a citation. */
  function expectGrounded(answer: ChatAnswer) {
    expect(answer).toMatchObject({ model: 'extractive', grounded: true });
    expect(answer.citations.length).toBeGreaterThan(0);
    for (const citation of answer.citations) {
      const passage = module.knowledge.index.get(citation.id);
      expect(passage, citation.id).toBeDefined();
      for (const quoted of citation.quote.split(' … ')) expect(passage!.text).toContain(quoted);
    }
    const cited = [...answer.answer.matchAll(/\[(\d+)\]/g)].map((m) => Number(m[1]));
    expect(cited.length).toBeGreaterThan(0);
    for (const n of cited) expect(answer.citations[n - 1]).toBeDefined();
  }

  it('runs on the embedded adapters', async () => {
    const ready = (await (await fetch(`${service.url}/readyz`)).json()) as {
      checks: Record<string, { ok: boolean; kind?: string }>;
    };
    expect(ready.checks.eventStore).toMatchObject({ ok: true, kind: 'lmdb' });
    expect(ready.checks.cache).toMatchObject({ ok: true, kind: 'memory' });
    expect(ready.checks.bus).toMatchObject({ ok: true, kind: 'memory' });
    expect(ready.checks['knowledge-index']).toMatchObject({ ok: true, built: true });
  });

  it('HTTP with a key: search and a grounded chat with citations', async () => {
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
    const search = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ query: 'how do I verify a webhook signature', limit: 3 }),
    });
    expect(search.status).toBe(200);
    const found = SearchAnswer.parse(await search.json());
    expect(found.results).toHaveLength(3);
    expect(found.results[0]!.excerpt).toMatch(/\*\*\w+\*\*/);

    const chat = await fetch(`${service.url}/api/chat`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ question: 'how is confidence computed?' }),
    });
    expect(chat.status).toBe(200);
    const body = (await chat.json()) as Record<string, unknown>;
    expectGrounded(ChatAnswer.parse(body));
    expect(ServiceMeta.parse(body._service).auth).toMatchObject({ outcome: 'OK', tier: 'free' });
    expect(body._service).toMatchObject({ chat_quota: { used: 1, total: 10 } });
  });

  it('MCP (official SDK client) with a key: both tools, grounded answers with citations', async () => {
    const search = await client.callTool({
      name: 'search_knowledge',
      arguments: { query: 'what does squeeze mean', limit: 3 },
    });
    expect(search.isError).toBeFalsy();
    expect(SearchAnswer.parse(search.structuredContent).results.length).toBeGreaterThan(0);

    const chat = await client.callTool({
      name: 'chat_knowledge',
      arguments: { question: 'what is the price of a 1m trade call' },
    });
    expect(chat.isError).toBeFalsy();
    const answer = ChatAnswer.parse(chat.structuredContent);
    expectGrounded(answer);
    expect(answer.answer).toMatch(/\d+\.\d+ USD/);
  });

  it('knows every route of its OpenAPI document', async () => {
    const document = (await (await fetch(`${service.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, unknown>>;
    };
    const overview = module.knowledge.index.get('contract#routes')!.text;
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const method of Object.keys(operations)) {
        expect(overview).toMatch(
          new RegExp(
            `\\b${method.toUpperCase()}\\b[^;]* ${path.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} \\(`,
          ),
        );
      }
    }
    for (const path of [
      '/api/verdicts',
      '/api/track-record',
      '/track-record',
      '/openapi.json',
      '/.well-known/x402',
      '/llms.txt',
      '/docs',
    ]) {
      expect(overview).toContain(` ${path}`);
    }
    const where = await client.callTool({
      name: 'search_knowledge',
      arguments: { query: 'where is the OpenAPI document', limit: 3 },
    });
    expect(SearchAnswer.parse(where.structuredContent).results.map((r) => r.id)).toContain(
      'contract#routes-discovery',
    );
  });
});
