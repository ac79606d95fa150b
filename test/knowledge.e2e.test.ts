import { createHash, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../contracts/config.ts';
import type { Plan } from '../contracts/events.ts';
import { ChatAnswer, ChatQuotaSnapshot, SearchAnswer } from '../contracts/knowledge.ts';
import { foldLog } from '../projections/projection.ts';
import { issueKey } from '../services/keys/key-commands.ts';
import { chatQuotaProjection, chatStream } from '../services/knowledge/chat-quota.ts';
import { expandQuestion } from '../services/knowledge/extractive.ts';
import { knowledgeFactsProjection } from '../services/knowledge/facts.ts';
import type { KnowledgeModule } from '../services/knowledge/module.ts';
import { rebuildQuotaGeneration } from '../services/metering/quota-rebuild.ts';
import { ServiceMeta } from '../services/metering/service-meta.ts';
import { quotaPeriod } from '../services/metering/windows.ts';
import { type RunningService, startService } from '../services/service.ts';
import { startFakeProvider } from './knowledge-provider.ts';
import { REDIS_URL, shouldRunRedisSuite, wipePrefix } from './redis-probe.ts';

const run = await shouldRunRedisSuite('knowledge e2e suite');
const PREFIX = `test:knowledge:${randomUUID()}:`;
const MODELS = [
  'good-model',
  'liar-model',
  'mute-model',
  'bare-model',
  'slow-model',
  'down-model',
  'late-model',
];

type Body = Record<string, unknown> & { code?: string; message?: string; _service?: unknown };

describe.runIf(run)('knowledge tools over HTTP and MCP (started service, real Redis, SDK client)', () => {
  let service: RunningService;
  let provider: Awaited<ReturnType<typeof startFakeProvider>>;
  let module: KnowledgeModule;
  const clients: Client[] = [];
  const month = quotaPeriod(Date.now()).month;

  async function issue(plan: Plan) {
    const issued = await issueKey(service.adapters.eventStore, {
      plan,
      owner: 'knowledge-test',
      via: 'operator',
    });
    const keyed = service.components.find((c) => c.name === 'keyed-channel') as unknown as {
      registry: { waitFor(position: number): Promise<void> };
    };
    await keyed.registry.waitFor(issued.position);
    return { ...issued, hash: createHash('sha256').update(issued.key).digest('hex') };
  }

  async function post(path: string, body: unknown, headers: Record<string, string> = {}) {
    const res = await fetch(`${service.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    return { res, body: (text === '' ? {} : JSON.parse(text)) as Body };
  }

  async function mcp(key?: string): Promise<Client> {
    const client = new Client({ name: 'knowledge-test', version: '1.0.0' });
    await client.connect(
      new StreamableHTTPClientTransport(new URL(`${service.url}/mcp`), {
        requestInit: { headers: key ? { authorization: `Bearer ${key}` } : {} },
      }),
    );
    clients.push(client);
    return client;
  }

  const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

  beforeAll(async () => {
    // slow-model never answers within the life of the suite: its chats end on CHAT_TIMEOUT_MS alone.
    provider = await startFakeProvider({ slowMs: 600_000, lateMs: 150 });
    const config = loadConfig({
      NODE_ENV: 'test',
      LOG_LEVEL: 'silent',
      EVENT_STORE: 'memory',
      CACHE: 'redis',
      REDIS_URL,
      REDIS_PREFIX: PREFIX,
      FEED: 'replay',
      HOST: '127.0.0.1',
      PORT: '0',
      CHAT_QUOTA_STARTER: '12',
      CHAT_QUOTA_FREE: '1',
      PLAN_PRO_MONTHLY_CALLS: '3',
      CHAT_PROVIDER: 'openai-compatible',
      CHAT_BASE_URL: `${provider.url}/v1`,
      CHAT_API_KEY: 'sk-provider-test',
      CHAT_MODELS: MODELS.join(','),
      // Generous, so that late-model (150 ms, or held by a test until its chats have all arrived)
      // answers in time on a machine under load 10-30; only the slow-model case waits it out.
      CHAT_TIMEOUT_MS: '5000',
    });
    service = await startService(config, ['api'], pino({ level: 'silent' }));
    module = service.components.find((c) => c.name === 'knowledge') as KnowledgeModule;
    await module.ready;
  });
  afterAll(async () => {
    for (const client of clients) await client.close().catch(() => undefined);
    await service?.stop();
    await provider?.close();
    await wipePrefix(PREFIX);
  });

  it('lists the knowledge tools beside the signal tools', async () => {
    const client = await mcp();
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'chat_knowledge',
      'get_market_regime',
      'get_risk_forecast',
      'get_track_record',
      'get_trade_call',
      'scan_funding_arb',
      'scan_trade_calls',
      'search_knowledge',
    ]);
    const search = tools.find((t) => t.name === 'search_knowledge')!;
    expect(search.inputSchema.required).toEqual(['query']);
    // The bounds the tool enforces (with INVALID_LIMIT, QUERY_TOO_SHORT …) are the ones it advertises.
    expect(search.inputSchema.properties).toMatchObject({
      query: { type: 'string', minLength: 3, maxLength: 500 },
      limit: { type: 'integer', minimum: 1, maximum: 50, default: 10 },
    });
    // The models it takes are the ones the OpenAPI document's /api/chat lists, the default first.
    expect(tools.find((t) => t.name === 'chat_knowledge')!.inputSchema.properties).toMatchObject({
      question: { type: 'string', minLength: 5, maxLength: 500 },
      model: { type: 'string', enum: ['extractive', ...MODELS], default: 'extractive' },
    });
    // Every tool, the knowledge ones included, declares what it answers and that it only reads;
    // SDK clients check each structuredContent against the outputSchema (calls below).
    for (const tool of tools) {
      expect(tool.outputSchema, tool.name).toMatchObject({ type: 'object' });
      expect(tool.annotations?.readOnlyHint, tool.name).toBe(true);
    }
    expect(JSON.stringify(search.outputSchema)).toContain('total_results');
    const chat = tools.find((t) => t.name === 'chat_knowledge')!;
    expect(JSON.stringify(chat.outputSchema)).toContain('citations');
    // The MCP registry entry in the repository names exactly the tools the service serves.
    const serverJson = JSON.parse(await readFile(new URL('../server.json', import.meta.url), 'utf8')) as {
      _meta: Record<string, { tools: string[] }>;
    };
    expect(serverJson._meta['io.modelcontextprotocol.registry/publisher-provided']!.tools.sort()).toEqual(
      tools.map((t) => t.name).sort(),
    );
  });

  it('search: ranked passages with highlighted excerpts, cache headers, ETag and 304, one call counted', async () => {
    const key = await issue('starter');
    const first = await post(
      '/api/search',
      { query: 'how is confidence computed', limit: 5 },
      bearer(key.key),
    );
    expect(first.res.status).toBe(200);
    // As the contract says; a shared cache keeps it per key (Vary: Authorization, below).
    expect(first.res.headers.get('cache-control')).toBe('public, max-age=300');
    const etag = first.res.headers.get('etag');
    expect(etag).toMatch(/^W\/"[0-9a-f]+-[0-9a-f]+"$/);
    const answer = SearchAnswer.parse(first.body);
    expect(answer.query).toBe('how is confidence computed');
    expect(answer.results).toHaveLength(5);
    expect(answer.total_results).toBeGreaterThanOrEqual(5);
    expect(answer.results[0]!.id).toBe('docs/methodology.md#how-confidence-is-computed');
    expect(answer.results[0]!.excerpt).toContain('**confidence**');
    const scores = answer.results.map((r) => r.score);
    expect([...scores].sort((a, b) => b - a)).toEqual(scores);
    const service1 = ServiceMeta.parse(first.body._service);
    expect(service1.auth).toMatchObject({ outcome: 'OK', tier: 'starter' });
    expect(service1.quota?.used).toBe(1);

    // The same query gives the same bytes (apart from the caller's live figures).
    const again = await post(
      '/api/search',
      { query: '  how is confidence computed ', limit: 5 },
      bearer(key.key),
    );
    const { _service: _a, ...one } = first.body;
    const { _service: _b, ...two } = again.body;
    expect(JSON.stringify(two)).toBe(JSON.stringify(one));
    expect(again.res.headers.get('etag')).toBe(etag);
    expect(ServiceMeta.parse(again.body._service).quota?.used).toBe(2);

    const cached = await fetch(`${service.url}/api/search`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...bearer(key.key), 'if-none-match': etag! },
      body: JSON.stringify({ query: 'how is confidence computed', limit: 5 }),
    });
    expect(cached.status).toBe(304);
    expect(await cached.text()).toBe('');
    expect(cached.headers.get('etag')).toBe(etag);
    expect(cached.headers.get('cache-control')).toBe('public, max-age=300');
    // The 200's Vary, which a 304 must repeat: a shared cache keys the stored answer by it.
    expect(first.res.headers.get('vary')).toBe('authorization');
    expect(cached.headers.get('vary')).toBe('authorization');
    // Another limit is another representation.
    const other = await post(
      '/api/search',
      { query: 'how is confidence computed', limit: 4 },
      bearer(key.key),
    );
    expect(other.res.headers.get('etag')).not.toBe(etag);
    const after = await post('/api/search', { query: 'price of a 1m trade call', limit: 1 }, bearer(key.key));
    expect(ServiceMeta.parse(after.body._service).quota?.used).toBe(4);
    expect(after.body.results).toMatchObject([{ id: 'pricing#pay-per-call', source_type: 'pricing' }]);
  });

  it('search: the ETag changes when the live facts change, and the new facts are searchable', async () => {
    const key = await issue('starter');
    const query = { query: 'latest market regime of BTC on BINANCE', limit: 3 };
    const before = await post('/api/search', query, bearer(key.key));
    const client = await mcp(key.key);
    const call = await client.callTool({
      name: 'get_trade_call',
      arguments: { coin: 'BTC', timeframe: '1h' },
    });
    expect(call.isError).toBeFalsy();
    await module.facts.waitFor(await service.adapters.eventStore.headPosition());
    const after = await post('/api/search', query, bearer(key.key));
    expect(after.res.headers.get('etag')).not.toBe(before.res.headers.get('etag'));
    const top = SearchAnswer.parse(after.body).results[0]!;
    // The venue a request without one lands on depends on the feed (BINANCE_SPOT on replay).
    const { regime, exchange } = call.structuredContent as { regime: string; exchange: string };
    expect(top).toMatchObject({ id: `live#regime-${exchange}:BTC`, source_type: 'live' });
    expect(module.knowledge.index.get(top.id)!.text).toContain(`on 1h the regime is ${regime}`);
    // The live facts are a projection: folding the log from position 0 gives the same state.
    const rebuilt = await foldLog(service.adapters.eventStore, knowledgeFactsProjection);
    expect(rebuilt.state).toEqual(module.facts.state);
    expect(Object.keys(rebuilt.state.markets)).toContain(`${exchange}:BTC:1h`);
  });

  it('search: every bad input answers its code with status 400 and _service', async () => {
    const key = await issue('starter');
    const cases: [unknown, string][] = [
      [{}, 'INVALID_QUERY'],
      [{ query: 42 }, 'INVALID_QUERY'],
      [{ query: '   ' }, 'INVALID_QUERY'],
      // Control and format characters show nothing: alone (or with whitespace) they are no query.
      [{ query: '\u0000\u0000\u0000' }, 'INVALID_QUERY'],
      [{ query: '\u200b\u200b\u200b\u200b' }, 'INVALID_QUERY'],
      [{ query: '\ufeff \u200b\u0007\u2060 \u00ad' }, 'INVALID_QUERY'],
      ['{"query": "not json', 'INVALID_QUERY'],
      [{ query: 'ab' }, 'QUERY_TOO_SHORT'],
      [{ query: '   ab   ' }, 'QUERY_TOO_SHORT'],
      // …nor count toward the minimum.
      [{ query: 'ab\u200b\u0000' }, 'QUERY_TOO_SHORT'],
      [{ query: 'x'.repeat(501) }, 'QUERY_TOO_LONG'],
      [{ query: 'webhooks', limit: 0 }, 'INVALID_LIMIT'],
      [{ query: 'webhooks', limit: 51 }, 'INVALID_LIMIT'],
      [{ query: 'webhooks', limit: 2.5 }, 'INVALID_LIMIT'],
      [{ query: 'webhooks', limit: '3' }, 'INVALID_LIMIT'],
      // A misspelt field is refused naming it, not ignored (the tool refuses it too, -32602).
      [{ query: 'webhooks', limt: 3 }, 'INVALID_FIELD'],
    ];
    for (const [body, code] of cases) {
      const { res, body: answer } = await post('/api/search', body, bearer(key.key));
      expect({ status: res.status, code: answer.code }, JSON.stringify(body)).toEqual({ status: 400, code });
      expect(typeof answer.message).toBe('string');
      // An invisible query is told what a whitespace one is, in the same words.
      if (code === 'INVALID_QUERY' && typeof body === 'object') {
        expect(answer.message).toBe('query is missing, not a string, or all whitespace or invisible');
      }
      expect(res.headers.get('cache-control')).toBe('no-store');
      expect(ServiceMeta.parse(answer._service).auth.outcome).toBe('OK');
    }
    const misspelt = await post('/api/search', { query: 'webhooks', limt: 3 }, bearer(key.key));
    expect(misspelt.body).toMatchObject({
      code: 'INVALID_FIELD',
      message: 'unknown field "limt"',
      field: 'limt',
    });
    // 500 characters after trimming is still fine.
    const edge = await post('/api/search', { query: ` ${'a'.repeat(500)} ` }, bearer(key.key));
    expect(edge.res.status).toBe(200);
    // Bad inputs were not counted.
    expect(ServiceMeta.parse(edge.body._service).quota?.used).toBe(1);
  });

  it('the error codes’ passages name the route that answers each, and what MCP answers instead', async () => {
    const key = await issue('starter');
    const passage = async (code: string) => {
      const { body } = await post('/api/search', { query: code, limit: 5 }, bearer(key.key));
      const found = SearchAnswer.parse(body).results.find((r) => r.id === `errors#${code}`);
      return found?.excerpt.replaceAll('**', '');
    };
    // A search code is never answered on /api/chat, a chat code never on /api/search.
    const search = await passage('QUERY_TOO_SHORT');
    expect(search).toContain('on POST /api/search');
    expect(search).not.toContain('/api/chat');
    const chat = await passage('INVALID_MODEL');
    expect(chat).toContain('on POST /api/chat');
    expect(chat).not.toContain('/api/search');
    // Over MCP a refused key is a JSON-RPC error and an exhausted quota quota_exhausted, not these codes.
    expect(await passage('UNAUTHORIZED')).toContain('-32003');
    expect(await passage('UNAUTHORIZED')).not.toContain('result.isError');
    expect(await passage('QUOTA_EXHAUSTED')).toContain('quota_exhausted');
    expect(await passage('KEY_UNVERIFIABLE')).toContain('-32004');
  });

  it('both routes answer 401 UNAUTHORIZED without a live key', async () => {
    for (const path of ['/api/search', '/api/chat']) {
      const body = { query: 'webhooks', question: 'what does squeeze mean' };
      const variants: Record<string, string>[] = [
        {},
        { authorization: 'Token abc' },
        { 'x-api-key': 'sk_live_whatever' },
        { authorization: `Bearer sk_live_${'0'.repeat(43)}` },
      ];
      for (const headers of variants) {
        const { res, body: answer } = await post(path, body, headers);
        expect({ path, status: res.status, code: answer.code }).toEqual({
          path,
          status: 401,
          code: 'UNAUTHORIZED',
        });
        expect(answer.message).toMatch(/Bearer/);
        // No key applied, served as anonymous or refused (never issued): tier `free`.
        expect(answer._service).toMatchObject({ auth: { tier: 'free' } });
        // The live figures of the quota the request counts against without a key (its address's).
        expect(ServiceMeta.parse(answer._service).quota).toMatchObject({
          monthly: { total: 200 },
          daily: { total: 100 },
        });
      }
    }
    const anonymousUsed = async () =>
      ServiceMeta.parse((await post('/api/search', { query: 'webhooks' })).body._service).quota!.used;
    const before = await anonymousUsed();
    // An anonymous MCP call from the same address is served on the free quota: the 401 shows it.
    const served = await (await mcp()).callTool({
      name: 'search_knowledge',
      arguments: { query: 'webhooks' },
    });
    expect(served.isError).toBeFalsy();
    expect(await anonymousUsed()).toBe(before + 1);
  });

  it('chat (extractive): quoted sentences with [n] citations that point at retrieved passages', async () => {
    const key = await issue('starter');
    for (const question of [
      'how is confidence computed?',
      'what does squeeze mean?',
      'what is the price of a 1m trade call',
      'how do I verify a webhook signature',
    ]) {
      const { res, body } = await post('/api/chat', { question }, bearer(key.key));
      expect(res.status).toBe(200);
      expect(res.headers.get('cache-control')).toBe('no-store');
      const answer = ChatAnswer.parse(body);
      expect(answer).toMatchObject({ question, model: 'extractive', grounded: true });
      expect(answer.citations.length).toBeGreaterThan(0);
      const retrieved = await post('/api/search', { query: question, limit: 50 }, bearer(key.key));
      const retrievedIds = SearchAnswer.parse(retrieved.body).results.map((r) => r.id);
      for (const citation of answer.citations) {
        expect(retrievedIds).toContain(citation.id);
        const passage = module.knowledge.index.get(citation.id)!;
        for (const quoted of citation.quote.split(' … ')) expect(passage.text).toContain(quoted);
      }
      // Every "sentence [n]" of the answer is in the n-th citation's passage, up to line breaks: a
      // list quoted with its items (one per line in the passage) reads as one line in the answer.
      const flat = (text: string) => text.replace(/\s+/g, ' ');
      const segments = [...answer.answer.matchAll(/(.+?) \[(\d+)\](?: |$)/g)];
      expect(segments.length).toBeGreaterThan(0);
      expect(
        segments
          .map((m) => m[0])
          .join('')
          .trim(),
      ).toBe(answer.answer);
      for (const [, sentence, n] of segments) {
        const citation = answer.citations[Number(n) - 1]!;
        expect(flat(module.knowledge.index.get(citation.id)!.text)).toContain(flat(sentence!.trim()));
      }
      const meta = body._service as { chat_quota: unknown; auth: unknown };
      expect(ChatQuotaSnapshot.parse(meta.chat_quota).total).toBe(12);
      expect(ServiceMeta.parse(meta).auth.outcome).toBe('OK');
    }
    const price = await post(
      '/api/chat',
      { question: 'what is the price of a 1m trade call' },
      bearer(key.key),
    );
    expect(price.body.answer).toContain('0.05 USD');
  });

  it('chat: below the relevance threshold it does not know and cites nothing', async () => {
    const key = await issue('starter');
    const { res, body } = await post(
      '/api/chat',
      { question: 'what is the weather in Paris tomorrow' },
      bearer(key.key),
    );
    expect(res.status).toBe(200);
    expect(ChatAnswer.parse(body)).toMatchObject({ grounded: false, citations: [], model: 'extractive' });
    expect(body.answer).toMatch(/I don't know/);
  });

  it('chat: every bad input answers its code with status 400', async () => {
    const key = await issue('starter');
    const cases: [unknown, string][] = [
      [{}, 'INVALID_QUESTION'],
      [{ question: ['why'] }, 'INVALID_QUESTION'],
      [{ question: ' \n\t ' }, 'INVALID_QUESTION'],
      // Control and format characters show nothing: alone (or with whitespace) they are no question.
      [{ question: '\u0000'.repeat(6) }, 'INVALID_QUESTION'],
      [{ question: '\u200b'.repeat(6) }, 'INVALID_QUESTION'],
      [{ question: '\ufeff\u200b \u001b\u200e\u2060\ufeff' }, 'INVALID_QUESTION'],
      // …nor count toward the minimum.
      [{ question: 'why\u200b\u200b\u0000' }, 'QUESTION_TOO_SHORT'],
      ['not json at all', 'INVALID_QUESTION'],
      [{ question: 'why?' }, 'QUESTION_TOO_SHORT'],
      [{ question: 'q'.repeat(501) }, 'QUESTION_TOO_LONG'],
      [{ question: 'what does squeeze mean', model: 'gpt-9' }, 'INVALID_MODEL'],
      [{ question: 'what does squeeze mean', model: 7 }, 'INVALID_MODEL'],
      // A misspelt field is refused naming it, not answered by the default model.
      [{ question: 'what does squeeze mean', modle: 'good-model' }, 'INVALID_FIELD'],
    ];
    for (const [body, code] of cases) {
      const { res, body: answer } = await post('/api/chat', body, bearer(key.key));
      expect({ status: res.status, code: answer.code }, JSON.stringify(body)).toEqual({ status: 400, code });
      if (code === 'INVALID_QUESTION' && typeof body === 'object' && !Array.isArray(body)) {
        expect(answer.message).toBe('question is missing, not a string, or all whitespace or invisible');
      }
      expect(ServiceMeta.parse(answer._service).auth.outcome).toBe('OK');
    }
    const invalid = await post(
      '/api/chat',
      { question: 'what does squeeze mean', model: 'gpt-9' },
      bearer(key.key),
    );
    expect(invalid.body.message).toContain('"extractive", "good-model"');
    const misspelt = await post(
      '/api/chat',
      { question: 'what does squeeze mean', modle: 'good-model' },
      bearer(key.key),
    );
    expect(misspelt.body).toMatchObject({
      code: 'INVALID_FIELD',
      message: 'unknown field "modle"',
      field: 'modle',
    });
    // No refused input took a chat unit or a call.
    const served = await post('/api/chat', { question: 'what does squeeze mean' }, bearer(key.key));
    expect(served.res.status).toBe(200);
    expect((served.body._service as { chat_quota: { used: number } }).chat_quota.used).toBe(1);
    expect(ServiceMeta.parse(served.body._service).quota?.used).toBe(1);
    // A question sent as text (as any media type but JSON), or JSON that is not an object, is told
    // what to send.
    const asText = await fetch(`${service.url}/api/chat`, {
      method: 'POST',
      headers: { 'content-type': 'text/plain', ...bearer(key.key) },
      body: 'what does squeeze mean',
    });
    const array = await post('/api/chat', ['what does squeeze mean'], bearer(key.key));
    for (const { status, body, message } of [
      {
        status: asText.status,
        body: (await asText.json()) as Body,
        message: 'the request body could not be read: send the body as application/json',
      },
      {
        status: array.res.status,
        body: array.body,
        message: 'the body must be a JSON object, sent with Content-Type: application/json',
      },
    ]) {
      expect({ status, code: body.code }).toEqual({ status: 400, code: 'INVALID_QUESTION' });
      expect(body.message).toBe(message);
    }
  });

  it('search and chat word the transport’s refusals in their own codes (contract 7.1), with its status', async () => {
    const key = await issue('starter');
    /** A request whose header fields go out exactly as listed (fetch merges a repeated one). */
    const raw = (path: string, fields: [string, string][], body: string) =>
      new Promise<{ status: number; body: Body; cacheControl: unknown }>((resolve, reject) => {
        const target = new URL(`${service.url}${path}`);
        const req = httpRequest(
          target,
          { method: 'POST', headers: fields as unknown as Record<string, string> },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (chunk: Buffer) => chunks.push(chunk));
            res.on('error', reject);
            res.on('end', () =>
              resolve({
                status: res.statusCode!,
                body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Body,
                cacheControl: res.headers['cache-control'],
              }),
            );
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    const host = new URL(service.url).host;
    for (const [path, text, tooLong, invalid] of [
      ['/api/search', { query: 'market regime' }, 'QUERY_TOO_LONG', 'INVALID_QUERY'],
      ['/api/chat', { question: 'what does squeeze mean' }, 'QUESTION_TOO_LONG', 'INVALID_QUESTION'],
    ] as const) {
      const body = JSON.stringify(text);
      const json: [string, string] = ['content-type', 'application/json'];
      // Over BODY_LIMIT_BYTES (64 KiB by default): 413, the text's too-long code, naming the limit.
      const large = await post(path, { ...text, pad: 'x'.repeat(70_000) }, bearer(key.key));
      expect({ status: large.res.status, code: large.body.code }, path).toEqual({
        status: 413,
        code: tooLong,
      });
      expect(large.body.message).toBe('the request body is over this route’s limit of 65536 bytes');
      expect(large.res.headers.get('cache-control')).toBe('no-store');
      ServiceMeta.parse(large.body._service);
      // Authorization, Host or Content-Type sent twice: 400, the invalid-input code, naming the header.
      for (const [header, fields] of [
        ['Authorization', [['host', host], json, ...Array(2).fill(['authorization', `Bearer ${key.key}`])]],
        ['Host', [['host', host], ['host', host], json, ['authorization', `Bearer ${key.key}`]]],
        ['Content-Type', [['host', host], json, json, ['authorization', `Bearer ${key.key}`]]],
      ] as [string, [string, string][]][]) {
        const twice = await raw(path, fields, body);
        expect({ status: twice.status, code: twice.body.code }, `${path} ${header}`).toEqual({
          status: 400,
          code: invalid,
        });
        expect(twice.body.message).toBe(`the ${header} header was sent more than once; send it exactly once`);
        expect(twice.cacheControl).toBe('no-store');
        ServiceMeta.parse(twice.body._service);
      }
    }
    // Nothing was served: no call counted.
    const served = await post('/api/search', { query: 'market regime' }, bearer(key.key));
    expect(ServiceMeta.parse(served.body._service).quota?.used).toBe(1);
  });

  it('chat quota: 30 concurrent chats with 10 left answer exactly 10, and the log rebuilds the counter', async () => {
    const key = await issue('starter');
    for (let i = 0; i < 2; i++) {
      expect(
        (await post('/api/chat', { question: 'what does squeeze mean' }, bearer(key.key))).res.status,
      ).toBe(200);
    }
    const sent = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 30 }, () =>
        post('/api/chat', { question: 'how is confidence computed' }, bearer(key.key)),
      ),
    );
    const answered = Date.now();
    const statuses = answers.map((a) => a.res.status);
    expect(
      statuses.filter((s) => s === 200),
      JSON.stringify(answers.filter((a) => a.res.status !== 429).map((a) => [a.res.status, a.body.code])),
    ).toHaveLength(10);
    expect(statuses.filter((s) => s === 429)).toHaveLength(20);
    const refused = answers.find((a) => a.res.status === 429)!;
    expect(refused.body.code).toBe('CHAT_QUOTA_EXHAUSTED');
    // Not retryable (/api sends retryable only when true): the month's end is no wait to retry through.
    expect(refused.body.retryable).toBeUndefined();
    const retryAfter = Number(refused.res.headers.get('retry-after'));
    // The month's end as the server saw the time, somewhere between sending and the last answer.
    const toMonthEnd = (at: number) => Math.ceil((quotaPeriod(at).monthResetsAt - at) / 1000);
    expect(retryAfter).toBeGreaterThanOrEqual(toMonthEnd(answered));
    expect(retryAfter).toBeLessThanOrEqual(toMonthEnd(sent));
    expect((refused.body._service as { chat_quota: unknown }).chat_quota).toMatchObject({
      used: 12,
      remaining: 0,
    });
    expect(ServiceMeta.parse(refused.body._service).auth.outcome).toBe('OK');

    const redis = new Redis(REDIS_URL);
    try {
      expect(await redis.get(await chatCounter(redis, key.hash))).toBe('12');
      // The log holds the same count: rebuild the quota generation from the events.
      const { state } = await foldLog(service.adapters.eventStore, chatQuotaProjection);
      expect(state[`chat:${key.hash}:m:${month}`]).toBe(12);
      const rebuilt = await rebuildQuotaGeneration({
        store: service.adapters.eventStore,
        cache: service.adapters.cache,
        settleMs: 0,
      });
      expect(rebuilt.switched).toBe(true);
      expect(await redis.get(await chatCounter(redis, key.hash))).toBe('12');
    } finally {
      redis.disconnect();
    }
    const more = await post('/api/chat', { question: 'how is confidence computed' }, bearer(key.key));
    expect(more.res.status).toBe(429);
    // Over MCP the same refusal says the same: not retryable, as the catalog has CHAT_QUOTA_EXHAUSTED.
    const viaMcp = await (await mcp(key.key)).callTool({
      name: 'chat_knowledge',
      arguments: { question: 'how is confidence computed' },
    });
    expect(viaMcp.isError).toBe(true);
    expect(viaMcp.structuredContent).toMatchObject({ code: 'CHAT_QUOTA_EXHAUSTED', retryable: false });
    // Searches do not use the chat quota.
    expect((await post('/api/search', { query: 'squeeze' }, bearer(key.key))).res.status).toBe(200);
  });

  it('search and chat count against the plan call quota: 429 QUOTA_EXHAUSTED with Retry-After', async () => {
    const key = await issue('pro');
    expect((await post('/api/search', { query: 'webhooks' }, bearer(key.key))).res.status).toBe(200);
    expect(
      (await post('/api/chat', { question: 'what does squeeze mean' }, bearer(key.key))).res.status,
    ).toBe(200);
    expect((await post('/api/search', { query: 'webhooks' }, bearer(key.key))).res.status).toBe(200);
    const search = await post('/api/search', { query: 'webhooks' }, bearer(key.key));
    // Not retryable (/api sends retryable only when true), as MCP's quota_exhausted: a day or a month
    // is no wait to retry through; Retry-After says when the window serves again.
    expect({ status: search.res.status, code: search.body.code, retryable: search.body.retryable }).toEqual({
      status: 429,
      code: 'QUOTA_EXHAUSTED',
      retryable: undefined,
    });
    expect(Number(search.res.headers.get('retry-after'))).toBeGreaterThan(0);
    const chat = await post('/api/chat', { question: 'what does squeeze mean' }, bearer(key.key));
    expect({ status: chat.res.status, code: chat.body.code, retryable: chat.body.retryable }).toEqual({
      status: 429,
      code: 'QUOTA_EXHAUSTED',
      retryable: undefined,
    });
    // The refused chat did not take a unit of the chat quota.
    const redis = new Redis(REDIS_URL);
    try {
      expect(await redis.get(await chatCounter(redis, key.hash))).toBe('1');
    } finally {
      redis.disconnect();
    }
  });

  it('INTERNAL_ERROR: 500 without detail, and the failed chat takes nothing', async () => {
    const key = await issue('starter');
    const redis = new Redis(REDIS_URL);
    try {
      // A counter that is not a number (a corrupted cache) is a fault on our side.
      await redis.set(await chatCounter(redis, key.hash), 'garbage');
      const chat = await post('/api/chat', { question: 'what does squeeze mean' }, bearer(key.key));
      expect(chat.res.status).toBe(500);
      expect({ code: chat.body.code, message: chat.body.message }).toEqual({
        code: 'INTERNAL_ERROR',
        message: 'the request failed on our side; nothing was counted',
      });
      expect(JSON.stringify(chat.body)).not.toMatch(/garbage|TypeError|at .*\.ts/);
      expect((await post('/api/search', { query: 'webhooks' }, bearer(key.key))).res.status).toBe(200);
      const counters = await callCounters(redis, key.hash);
      expect(counters.length).toBeGreaterThan(0);
      for (const counter of counters) await redis.set(counter, 'garbage');
      // A key this slow holds no lease, so the next call reads its counters before its run and
      // meets the corrupted one there (services/metering/metered-call.ts): a fault on our side,
      // answered without detail, and nothing run or counted.
      const search = await post('/api/search', { query: 'webhooks' }, bearer(key.key));
      expect(search.res.status).toBe(500);
      expect(search.body).toMatchObject({ code: 'INTERNAL_ERROR', _service: { auth: { outcome: 'OK' } } });
      expect(JSON.stringify(search.body)).not.toMatch(/garbage|TypeError/);
      // Over MCP the same fault is INTERNAL_ERROR as result.isError, without detail.
      await redis.del(...counters);
      const client = await mcp(key.key);
      const viaMcp = await client.callTool({
        name: 'chat_knowledge',
        arguments: { question: 'what does squeeze mean' },
      });
      expect(viaMcp.isError).toBe(true);
      const text = (viaMcp.content as { text: string }[])[0]!.text;
      expect(text).toBe('INTERNAL_ERROR: the request failed on our side; nothing was counted');
      // Not retryable on either channel (/api sends retryable only when true).
      expect(chat.body.retryable).toBeUndefined();
      expect(viaMcp.structuredContent).toMatchObject({ code: 'INTERNAL_ERROR', retryable: false });
    } finally {
      redis.disconnect();
    }
  });

  it('MCP: the same answers and the same codes as result.isError; wrong types stay -32602', async () => {
    const key = await issue('starter');
    const client = await mcp(key.key);
    const search = await client.callTool({
      name: 'search_knowledge',
      arguments: { query: 'INVALID_MODEL', limit: 2 },
    });
    expect(search.isError).toBeFalsy();
    const found = search.structuredContent as Record<string, unknown>;
    expect(SearchAnswer.parse(found).results[0]!.id).toBe('errors#INVALID_MODEL');
    expect(ServiceMeta.parse(found._service).quota?.used).toBe(1);

    const chat = await client.callTool({
      name: 'chat_knowledge',
      arguments: { question: 'what does squeeze mean' },
    });
    expect(chat.isError).toBeFalsy();
    const chatted = chat.structuredContent as Record<string, unknown>;
    expect(ChatAnswer.parse(chatted)).toMatchObject({ grounded: true, model: 'extractive' });
    const meta = chatted._service as Record<string, unknown>;
    expect(ChatQuotaSnapshot.parse(meta.chat_quota)).toMatchObject({ used: 1, total: 12, remaining: 11 });
    expect(ServiceMeta.parse(meta).quota?.used).toBe(2);

    const cases: [string, Record<string, unknown>, string][] = [
      ['search_knowledge', { query: '   ' }, 'INVALID_QUERY'],
      ['search_knowledge', { query: 'ab' }, 'QUERY_TOO_SHORT'],
      ['search_knowledge', { query: 'x'.repeat(501) }, 'QUERY_TOO_LONG'],
      ['search_knowledge', { query: 'webhooks', limit: 99 }, 'INVALID_LIMIT'],
      ['chat_knowledge', { question: '  ' }, 'INVALID_QUESTION'],
      ['chat_knowledge', { question: '\u200b\u0000\ufeff\u200b\u0000\u200b' }, 'INVALID_QUESTION'],
      ['chat_knowledge', { question: 'why\u200b\u200b' }, 'QUESTION_TOO_SHORT'],
      ['search_knowledge', { query: '\u0000\u200b\u0000' }, 'INVALID_QUERY'],
      ['chat_knowledge', { question: 'why' }, 'QUESTION_TOO_SHORT'],
      ['chat_knowledge', { question: 'q'.repeat(501) }, 'QUESTION_TOO_LONG'],
      ['chat_knowledge', { question: 'what does squeeze mean', model: 'gpt-9' }, 'INVALID_MODEL'],
      ['search_knowledge', { query: 42 }, '-32602'],
      ['search_knowledge', {}, '-32602'],
      ['chat_knowledge', { question: 'what does squeeze mean', extra: true }, '-32602'],
    ];
    for (const [name, args, code] of cases) {
      const result = await client.callTool({ name, arguments: args });
      expect(result.isError, `${name} ${JSON.stringify(args)}`).toBe(true);
      const text = (result.content as { type: string; text: string }[])[0]!.text;
      expect(text.startsWith(code), `${name} ${JSON.stringify(args)} → ${text}`).toBe(true);
    }
    // No refused call took a chat unit or a call.
    const after = await client.callTool({
      name: 'chat_knowledge',
      arguments: { question: 'what does squeeze mean' },
    });
    const spent = (after.structuredContent as Record<string, unknown>)._service as Record<string, unknown>;
    expect(ChatQuotaSnapshot.parse(spent.chat_quota).used).toBe(2);
    expect(ServiceMeta.parse(spent).quota?.used).toBe(3);
  });

  it('MCP: CHAT_QUOTA_EXHAUSTED as result.isError; anonymous callers get the free chat quota', async () => {
    const client = await mcp();
    const first = await client.callTool({
      name: 'chat_knowledge',
      arguments: { question: 'what does squeeze mean' },
    });
    expect(first.isError).toBeFalsy();
    const second = await client.callTool({
      name: 'chat_knowledge',
      arguments: { question: 'what does squeeze mean' },
    });
    expect(second.isError).toBe(true);
    expect((second.content as { text: string }[])[0]!.text).toMatch(/^CHAT_QUOTA_EXHAUSTED: /);
    expect(second.structuredContent).toMatchObject({ code: 'CHAT_QUOTA_EXHAUSTED' });
    // The chat quota, as HTTP's 429 carries it (the tool's description says to read it).
    const chatQuota = (second.structuredContent as { _service: { chat_quota: Record<string, unknown> } })
      ._service.chat_quota;
    expect(chatQuota).toMatchObject({ used: 1, total: 1, remaining: 0 });
    expect(typeof chatQuota.resets_at).toBe('string');
    // When it serves again, in the fields quota_exhausted says it with: resets_at, retry_after_ms.
    const { resets_at, retry_after_ms } = second.structuredContent as Record<string, unknown>;
    expect(resets_at).toBe(chatQuota.resets_at);
    expect(retry_after_ms).toBeGreaterThan(0);
  });

  /**
   * The Redis keys of a key's call-quota counters this month, wherever the cache keeps them
   * (their generation is part of the name); the chat counter is not one of them.
   */
  async function callCounters(redis: Redis, hash: string): Promise<string[]> {
    const keys = await redis.keys(`${PREFIX}*${hash}:m:${month}`);
    return keys.filter((k) => !k.includes(':chat:'));
  }

  /** The Redis key of a key's chat counter this month, in the live quota generation. */
  async function chatCounter(redis: Redis, hash: string): Promise<string> {
    const marker = JSON.parse((await redis.get(`${PREFIX}quota:generation`)) ?? 'null') as { id: string };
    return `${PREFIX}g:${marker.id}:chat:${hash}:m:${month}`;
  }

  /** The chat units of a key this month: the cache's counter and the log's events, which must agree. */
  async function chatUnits(hash: string) {
    const redis = new Redis(REDIS_URL);
    try {
      const cached = Number((await redis.get(await chatCounter(redis, hash))) ?? 0);
      const events = await service.adapters.eventStore.readStream(chatStream(hash));
      const taken = events.filter((e) => e.type === 'ChatQuotaConsumed').length;
      const refunds = events
        .filter((e) => e.type === 'ChatQuotaRefunded')
        .map((e) => (e.data as { reason: string }).reason);
      return { cached, taken, refunds };
    } finally {
      redis.disconnect();
    }
  }

  it('MCP: chats that lose the race for the last call of the plan give their chat units back', async () => {
    const key = await issue('pro'); // 3 calls a month in this suite
    for (let i = 0; i < 2; i++) {
      expect((await post('/api/search', { query: 'webhooks' }, bearer(key.key))).res.status).toBe(200);
    }
    const client = await mcp(key.key);
    const before = provider.requests.length;
    // All four pass the call quota's check (one call left), take a chat unit and wait at the
    // provider; only one debit of the last call succeeds. The provider holds every answer until
    // all four have arrived, so no chat can finish (and debit) before another has been checked,
    // however the machine schedules them.
    let release = () => {};
    const allArrived = new Promise<void>((resolve) => {
      release = resolve;
    });
    provider.hooks.onRequest = async () => {
      if (provider.requests.length - before >= 4) release();
      await allArrived;
    };
    let results: Awaited<ReturnType<typeof client.callTool>>[];
    try {
      results = await Promise.all(
        Array.from({ length: 4 }, () =>
          client.callTool({
            name: 'chat_knowledge',
            arguments: { question: 'what does squeeze mean', model: 'late-model' },
          }),
        ),
      );
    } finally {
      provider.hooks.onRequest = null;
    }
    expect(provider.requests.length - before).toBe(4);
    const served = results.filter((r) => !r.isError);
    const refused = results.filter((r) => r.isError);
    expect(served).toHaveLength(1);
    expect(refused).toHaveLength(3);
    for (const r of refused) expect((r.content as { text: string }[])[0]!.text).toMatch(/^quota_exhausted: /);
    expect(await chatUnits(key.hash)).toEqual({
      cached: 1,
      taken: 4,
      refunds: ['call_quota_exhausted', 'call_quota_exhausted', 'call_quota_exhausted'],
    });
    const { state } = await foldLog(service.adapters.eventStore, chatQuotaProjection);
    expect(state[`chat:${key.hash}:m:${month}`]).toBe(1);
  });

  it('a chat that fails after its unit was taken gives it back, over HTTP and MCP', async () => {
    const key = await issue('starter');
    const redis = new Redis(REDIS_URL);
    let corrupted: string[] = [];
    try {
      // The provider (a local server speaking the protocol) fails: the extractive answer, unit back.
      const client = await mcp(key.key);
      const down = await client.callTool({
        name: 'chat_knowledge',
        arguments: { question: 'what does squeeze mean', model: 'down-model' },
      });
      expect(down.isError).toBeFalsy();
      expect(down.structuredContent).toMatchObject({
        model: 'extractive',
        _service: { chat_quota: { used: 0 } },
      });
      expect(await chatUnits(key.hash)).toEqual({ cached: 0, taken: 1, refunds: ['provider_unavailable'] });

      // The call quota's counter is corrupted while the chat waits at the provider: the chat has
      // taken its unit, then the debit of its call fails on our side.
      provider.hooks.onRequest = async () => {
        corrupted = await callCounters(redis, key.hash);
        for (const counter of corrupted) await redis.set(counter, 'garbage');
      };
      const chat = await post(
        '/api/chat',
        { question: 'what does squeeze mean', model: 'late-model' },
        bearer(key.key),
      );
      expect(chat.res.status).toBeGreaterThanOrEqual(500);
      expect(chat.body.code).toBe('QUOTA_UNAVAILABLE');
      expect(await chatUnits(key.hash)).toEqual({
        cached: 0,
        taken: 2,
        refunds: ['provider_unavailable', 'call_quota_exhausted'],
      });

      expect(corrupted.length).toBeGreaterThan(0);
      // Counters again (the hook corrupts them once more while the next chat is in flight).
      for (const counter of corrupted) await redis.set(counter, '1');
      const failed = await client
        .callTool({
          name: 'chat_knowledge',
          arguments: { question: 'what does squeeze mean', model: 'late-model' },
        })
        .then(
          () => null,
          (err: unknown) => err,
        );
      expect(failed).toBeInstanceOf(McpError);
      expect((failed as McpError).code).toBe(-32004);
      expect(await chatUnits(key.hash)).toEqual({
        cached: 0,
        taken: 3,
        refunds: ['provider_unavailable', 'call_quota_exhausted', 'call_quota_exhausted'],
      });
    } finally {
      provider.hooks.onRequest = null;
      if (corrupted.length > 0) await redis.del(...corrupted);
      redis.disconnect();
    }
  });

  it('generative model: cites retrieved passages only; off-source, slow or down falls back to extractive', async () => {
    const key = await issue('starter');
    const before = provider.requests.length;
    const good = await post(
      '/api/chat',
      { question: 'what does squeeze mean', model: 'good-model' },
      bearer(key.key),
    );
    expect(good.res.status).toBe(200);
    const answer = ChatAnswer.parse(good.body);
    expect(answer).toMatchObject({ model: 'good-model', grounded: true });
    expect(answer.answer).toMatch(/\[1\]/);
    const sent = provider.requests[before]!;
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.headers.authorization).toBe('Bearer sk-provider-test');
    const prompt = String((sent.body.messages as { content: string }[])[1]!.content);
    // The model is given what the chat retrieves: the passages searched for the question's words.
    const query = expandQuestion('what does squeeze mean');
    const retrieved = SearchAnswer.parse(
      (await post('/api/search', { query, limit: 4 }, bearer(key.key))).body,
    ).results.map((r) => r.id);
    const given = [...prompt.matchAll(/^\[\d+\] id=(\S+)/gm)].map((m) => m[1]);
    expect(given).toEqual(retrieved);
    expect(answer.citations[0]!.id).toBe(retrieved[0]);
    expect(module.knowledge.index.get(answer.citations[0]!.id)!.text).toContain(answer.citations[0]!.quote);

    const liar = await post(
      '/api/chat',
      { question: 'what does squeeze mean', model: 'liar-model' },
      bearer(key.key),
    );
    expect(ChatAnswer.parse(liar.body)).toMatchObject({ model: 'extractive', grounded: true });
    expect(liar.body.note).toMatch(/liar-model cited sources or numbers it was not given/);
    expect(liar.body.answer).not.toContain('12 USD');
    // A model that cites nothing is not said to have cited what it was not given.
    const mute = await post(
      '/api/chat',
      { question: 'what does squeeze mean', model: 'mute-model' },
      bearer(key.key),
    );
    expect(ChatAnswer.parse(mute.body)).toMatchObject({ model: 'extractive', grounded: true });
    expect(mute.body.note).toBe(
      'the model mute-model cited none of the passages it was given; this answer is extractive',
    );
    // A citation marker alone says nothing: not grounded, answered extractively as an uncited one.
    const bare = await post(
      '/api/chat',
      { question: 'what does squeeze mean', model: 'bare-model' },
      bearer(key.key),
    );
    expect(ChatAnswer.parse(bare.body)).toMatchObject({ model: 'extractive', grounded: true });
    expect(bare.body.answer).not.toBe('[1]');
    expect(bare.body.answer).toBe(mute.body.answer);
    expect(bare.body.note).toBe(
      'the model bare-model cited none of the passages it was given; this answer is extractive',
    );
    const used = () => (good.body._service as { chat_quota: { used: number } }).chat_quota.used;
    expect(used()).toBe(1);

    for (const model of ['slow-model', 'down-model']) {
      // slow-model never answers: an answer at all shows CHAT_TIMEOUT_MS ended the wait.
      const late = await post('/api/chat', { question: 'what does squeeze mean', model }, bearer(key.key));
      expect(late.res.status).toBe(200);
      expect(ChatAnswer.parse(late.body)).toMatchObject({ model: 'extractive', grounded: true });
      expect(late.body.note).toMatch(new RegExp(`the model ${model} was unavailable`));
      // The provider failed: the unit came back (good, liar, mute and bare took one each).
      expect((late.body._service as { chat_quota: { used: number } }).chat_quota.used).toBe(4);
    }
  });
});
