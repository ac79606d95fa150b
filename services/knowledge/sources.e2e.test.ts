import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatAnswer, SearchAnswer } from '../../contracts/knowledge.ts';
import { issueServiceKey, startApiOnly } from '../../test/service-keys.ts';
import type { RunningService } from '../service.ts';
import { REPO_ROOT } from './corpus.ts';
import type { KnowledgeModule } from './module.ts';
import { headingAnchors } from './passages.ts';

/**
 * A citation's source_url, clicked: it opens on the running service (GET /knowledge/{file}, the
 * document as indexed, at a heading of it), and that route serves the index's documents only.
 */
describe('GET /knowledge/{file}: where search results and citations open', () => {
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    service = await startApiOnly();
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    key = (await issueServiceKey(service, { plan: 'pro', owner: 'sources' })).key;
  });
  afterAll(async () => {
    await service?.stop();
  });

  async function post(route: 'search' | 'chat', body: object): Promise<unknown> {
    const res = await fetch(`${service.url}/api/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify(body),
    });
    expect(res.status, JSON.stringify(body)).toBe(200);
    return res.json();
  }

  it('every source_url of search results and citations opens, at a heading of the document', async () => {
    const urls = new Set<string>();
    for (const query of [
      'market regime squeeze',
      'webhook signature secret',
      'INVALID_MODEL error code',
      'get_trade_call arguments',
      'price per call plan quota',
      'walk-forward evaluation months',
      'track record hit rate venues',
      'HTTP routes authenticate',
    ]) {
      const answer = SearchAnswer.parse(await post('search', { query, limit: 50 }));
      for (const r of answer.results) urls.add(r.source_url);
    }
    for (const question of [
      'What does INVALID_MODEL mean?',
      'How much does a trade call cost?',
      'How is a webhook signed?',
    ]) {
      const answer = ChatAnswer.parse(await post('chat', { question }));
      expect(answer.citations.length, question).toBeGreaterThan(0);
      for (const c of answer.citations) urls.add(c.source_url);
    }
    // GitHub's anchor of the heading: the underscores of a code kept.
    expect(urls).toContain('/knowledge/errors.md#error-code-invalid_model');
    const served = [...urls].filter((u) => u.startsWith('/knowledge/'));
    const files = new Set(served.map((u) => u.split('#')[0]));
    for (const file of ['README.md', 'methodology.md', 'webhooks.md', 'errors.md', 'tools.md', 'pricing.md'])
      expect(files, file).toContain(`/knowledge/${file}`);
    // Anything else is the OpenAPI document, a live fact's route, or a live fact's MCP tool call.
    expect(
      [...urls].filter(
        (u) => !/^(\/knowledge\/|\/openapi\.json|\/api\/track-record|\/readyz|mcp:\/\/tool\/)/.test(u),
      ),
    ).toEqual([]);
    const texts = new Map<string, string>();
    for (const file of files) {
      const res = await fetch(`${service.url}${file}`);
      expect(res.status, file).toBe(200);
      expect(res.headers.get('content-type'), file).toBe('text/markdown; charset=utf-8');
      texts.set(file!, await res.text());
    }
    for (const url of served) {
      const [file, anchor] = url.split('#');
      expect(anchor, url).toBeTruthy();
      expect(['top', ...headingAnchors(texts.get(file!)!)], url).toContain(anchor);
    }
    for (const url of [...urls].filter((u) => u.startsWith('/') && !u.startsWith('/knowledge/'))) {
      const res = await fetch(`${service.url}${url.split('#')[0]}`);
      await res.arrayBuffer();
      expect(res.status, url).toBe(200);
    }
    // The text the index is built from, byte for byte.
    expect(texts.get('/knowledge/README.md')).toBe(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'));
    expect(texts.get('/knowledge/webhooks.md')).toBe(
      readFileSync(join(REPO_ROOT, 'services/webhooks/README.md'), 'utf8'),
    );
  });

  /** GET `path` as sent, unnormalised (fetch would resolve `..` before sending it). */
  function getRaw(path: string): Promise<{ status: number; text: string }> {
    const { hostname, port } = new URL(service.url);
    return new Promise((resolve, reject) => {
      request({ host: hostname, port, path, method: 'GET' }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, text: Buffer.concat(chunks).toString('utf8') }),
        );
        res.on('error', reject);
      })
        .on('error', reject)
        .end();
    });
  }

  it('a name that is no document of the index is 404 NOT_FOUND, traversal included', async () => {
    for (const path of [
      '/knowledge/nope.md',
      '/knowledge/knowledge.md',
      '/knowledge/..%2fpackage.json',
      '/knowledge/..%2F..%2Fetc%2Fpasswd',
      '/knowledge/%2e%2e%2fcontracts%2fconfig.ts',
      '/knowledge/docs%2fmethodology.md',
      '/knowledge/readme.md',
      '/knowledge/README.md%00',
      '/knowledge/..',
      '/knowledge/../package.json',
      '/knowledge/%2e%2e/package.json',
      '/knowledge/',
    ]) {
      const { status, text } = await getRaw(path);
      expect(status, path).toBe(404);
      expect(JSON.parse(text), path).toMatchObject({ code: 'NOT_FOUND' });
      expect(text, path).not.toContain('"name"');
    }
  });

  it('GET / and /llms.txt list the documents, at an address that serves one', async () => {
    const index = (await (await fetch(`${service.url}/`)).json()) as {
      links: Record<string, { href: string; method: string; description: string }>;
    };
    expect(index.links.knowledge).toMatchObject({ href: '/knowledge/README.md', method: 'GET' });
    expect(index.links.knowledge!.description).toContain('/knowledge/{file}');
    const llms = await (await fetch(`${service.url}/llms.txt`)).text();
    expect(llms).toContain(`(${service.url}/knowledge/README.md)`);
    expect(llms).toContain(`${service.url}/knowledge/{file}`);
    const res = await fetch(`${service.url}${index.links.knowledge!.href}`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/markdown; charset=utf-8');
    await res.arrayBuffer();
  });
});

/**
 * An MCP client has no base to resolve a path against: under PUBLIC_BASE_URL, every source_url
 * naming the service is absolute, over HTTP and MCP alike, and opens where it says.
 */
describe('source_url under PUBLIC_BASE_URL', () => {
  const BASE = 'https://signals.example.com/sig';
  let service: RunningService;
  let key: string;

  beforeAll(async () => {
    service = await startApiOnly({ PUBLIC_BASE_URL: `${BASE}/` });
    await (service.components.find((c) => c.name === 'knowledge') as KnowledgeModule).ready;
    key = (await issueServiceKey(service, { plan: 'pro', owner: 'sources-public' })).key;
  });
  afterAll(async () => {
    await service?.stop();
  });

  it('is absolute under it in search results and citations, HTTP and MCP; a tool call stays mcp://', async () => {
    const urls: string[] = [];
    const res = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: 'latest market regime webhook signature readiness', limit: 50 }),
    });
    expect(res.status).toBe(200);
    urls.push(...SearchAnswer.parse(await res.json()).results.map((r) => r.source_url));
    const client = new Client({ name: 'sources-public', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
        requestInit: { headers: { authorization: `Bearer ${key}` } },
      }),
    );
    try {
      const search = await client.callTool({
        name: 'search_knowledge',
        arguments: { query: 'INVALID_MODEL' },
      });
      urls.push(...SearchAnswer.parse(search.structuredContent).results.map((r) => r.source_url));
      const chat = await client.callTool({
        name: 'chat_knowledge',
        arguments: { question: 'How is a webhook signed?' },
      });
      const answer = ChatAnswer.parse(chat.structuredContent);
      expect(answer.citations.length).toBeGreaterThan(0);
      urls.push(...answer.citations.map((c) => c.source_url));
    } finally {
      await client.close();
    }
    expect(urls.some((u) => u.startsWith(`${BASE}/knowledge/`))).toBe(true);
    expect(urls.filter((u) => !u.startsWith(`${BASE}/`) && !u.startsWith('mcp://tool/'))).toEqual([]);
    // Each opens on the service at the path after the base.
    for (const url of new Set(
      urls.filter((u) => u.startsWith(`${BASE}/knowledge/`)).map((u) => u.split('#')[0]!),
    )) {
      const opened = await fetch(`${service.url}${url.slice(BASE.length)}`);
      await opened.arrayBuffer();
      expect(opened.status, url).toBe(200);
    }
  });
});
