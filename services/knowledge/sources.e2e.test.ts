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

/** An MCP client (the SDK's) of the service at `url`, with `key`. */
async function mcpClient(url: string, key: string): Promise<Client> {
  const client = new Client({ name: 'sources', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
    }),
  );
  return client;
}

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
    // A live regime in the index (a trade call records its verdict): its source_url is served too.
    const client = await mcpClient(service.url, key);
    try {
      const call = await client.callTool({
        name: 'get_trade_call',
        arguments: { coin: 'BTC', timeframe: '1h' },
      });
      expect(call.isError).toBeFalsy();
    } finally {
      await client.close();
    }
    const module = service.components.find((c) => c.name === 'knowledge') as KnowledgeModule;
    await module.facts.waitFor(await service.adapters.eventStore.headPosition());
    const absolute = new Set<string>();
    for (const query of [
      'market regime squeeze',
      'webhook signature secret',
      'INVALID_MODEL error code',
      'get_trade_call arguments',
      'price per call plan quota',
      'walk-forward evaluation months',
      'track record hit rate venues',
      'HTTP routes authenticate',
      'latest market regime of BTC',
    ]) {
      const answer = SearchAnswer.parse(await post('search', { query, limit: 50 }));
      for (const r of answer.results) absolute.add(r.source_url);
    }
    for (const question of [
      'What does INVALID_MODEL mean?',
      'How much does a trade call cost?',
      'How is a webhook signed?',
    ]) {
      const answer = ChatAnswer.parse(await post('chat', { question }));
      expect(answer.citations.length, question).toBeGreaterThan(0);
      for (const c of answer.citations) absolute.add(c.source_url);
    }
    // Without PUBLIC_BASE_URL, under the origin the request came to; an HTTP URL each, no mcp://.
    expect([...absolute].filter((u) => !u.startsWith(`${service.url}/`))).toEqual([]);
    const urls = new Set([...absolute].map((u) => u.slice(service.url.length)));
    // GitHub's anchor of the heading: the underscores of a code kept.
    expect(urls).toContain('/knowledge/errors.md#error-code-invalid_model');
    // The live regime opens in the live document, at its market's heading.
    expect(urls).toContain('/knowledge/live.md#latest-market-regime-of-btc-on-binance_spot');
    const served = [...urls].filter((u) => u.startsWith('/knowledge/'));
    const files = new Set(served.map((u) => u.split('#')[0]));
    for (const file of [
      'README.md',
      'methodology.md',
      'webhooks.md',
      'errors.md',
      'tools.md',
      'pricing.md',
      'live.md',
    ])
      expect(files, file).toContain(`/knowledge/${file}`);
    // Anything else is the OpenAPI document or a live fact's route.
    expect(
      [...urls].filter((u) => !/^(\/knowledge\/|\/openapi\.json|\/api\/track-record|\/readyz)/.test(u)),
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
    expect(texts.get('/knowledge/live.md')).toContain(
      module.knowledge.index.get('live#regime-BINANCE_SPOT:BTC')!.text,
    );
    expect(texts.get('/knowledge/webhooks.md')).toBe(
      readFileSync(join(REPO_ROOT, 'services/webhooks/README.md'), 'utf8'),
    );
  });

  it('names the origin the request came to, over HTTP and MCP alike; a search answer stays public, varying by key', async () => {
    const search = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: 'webhook signature secret', limit: 5 }),
    });
    expect(search.status).toBe(200);
    // The contract's Cache-Control (interface.md 4.2). Another Host is another answer with its own
    // ETag; a shared cache keeps it per key (Vary: Authorization), so a forged Host reaches only
    // the key that sent it.
    expect(search.headers.get('cache-control')).toBe('public, max-age=300');
    expect(search.headers.get('vary')?.toLowerCase()).toContain('authorization');
    const http = SearchAnswer.parse(await search.json()).results.map((r) => r.source_url);
    expect(http.length).toBeGreaterThan(0);
    for (const url of http) expect(url.startsWith(`${service.url}/knowledge/`), url).toBe(true);
    const { port } = new URL(service.url);
    const elsewhere = await postRaw(
      '/api/search',
      { query: 'webhook signature secret', limit: 5 },
      `localhost:${port}`,
    );
    expect(elsewhere.status).toBe(200);
    const named = (JSON.parse(elsewhere.text) as { results: { source_url: string }[] }).results;
    expect(named.map((r) => r.source_url)).toEqual(
      http.map((u) => u.replace(service.url, `http://localhost:${port}`)),
    );
    expect(elsewhere.etag).not.toBe(search.headers.get('etag'));
    const client = await mcpClient(service.url, key);
    try {
      const found = await client.callTool({
        name: 'search_knowledge',
        arguments: { query: 'INVALID_MODEL' },
      });
      const chat = await client.callTool({
        name: 'chat_knowledge',
        arguments: { question: 'How is a webhook signed?' },
      });
      const answer = ChatAnswer.parse(chat.structuredContent);
      expect(answer.citations.length).toBeGreaterThan(0);
      const urls = [
        ...SearchAnswer.parse(found.structuredContent).results.map((r) => r.source_url),
        ...answer.citations.map((c) => c.source_url),
      ];
      expect(urls.filter((u) => !u.startsWith(`${service.url}/`))).toEqual([]);
      for (const url of new Set(urls.map((u) => u.split('#')[0]!))) {
        const opened = await fetch(url);
        await opened.arrayBuffer();
        expect(opened.status, url).toBe(200);
      }
    } finally {
      await client.close();
    }
  });

  /** POST `body` to `path` naming `host` in the Host header (fetch will not set it). */
  function postRaw(
    path: string,
    body: object,
    host: string,
  ): Promise<{ status: number; text: string; etag: string | undefined }> {
    const { hostname, port } = new URL(service.url);
    const bytes = JSON.stringify(body);
    return new Promise((resolve, reject) => {
      request(
        {
          host: hostname,
          port,
          path,
          method: 'POST',
          headers: {
            host,
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(bytes),
            authorization: `Bearer ${key}`,
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve({
              status: res.statusCode!,
              text: Buffer.concat(chunks).toString('utf8'),
              etag: res.headers.etag,
            }),
          );
          res.on('error', reject);
        },
      )
        .on('error', reject)
        .end(bytes);
    });
  }

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

  it('is absolute under it in search results and citations, HTTP and MCP', async () => {
    const urls: string[] = [];
    const res = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: 'latest market regime webhook signature readiness', limit: 50 }),
    });
    expect(res.status).toBe(200);
    urls.push(...SearchAnswer.parse(await res.json()).results.map((r) => r.source_url));
    const client = await mcpClient(service.url, key);
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
    expect(urls.filter((u) => !u.startsWith(`${BASE}/`))).toEqual([]);
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
