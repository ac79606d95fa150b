import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { type RawAnswer, rawRequest } from '../../../test/raw-http.ts';
import { mcpServerCard } from '../discovery/catalog.ts';
import { PROTOCOL_VERSIONS } from './versions.ts';

/**
 * What a conformance walk of POST /mcp found, over real HTTP: valid JSON is never a parse error
 * (a wrong-typed `_meta`, a message mixing a method and a result, a malformed error object), a
 * wrong-typed cursor is -32602 in one line, a batch is answered with an array, the protocol
 * version header is checked against the session, Accept is read as media ranges, one list of
 * revisions, ids echoed where the body carries one, an empty body is -32700, every 415 has
 * the documented shape, and Allow lists OPTIONS, which the path answers.
 */
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
/** A refusal's error.data once the caller is known: the caller's `_service` (this suite's pro key) beside `data`. */
const withService = (data: Record<string, unknown> = {}) => ({
  ...data,
  _service: { auth: expect.objectContaining({ outcome: 'OK', tier: 'pro' }), quota: expect.any(Object) },
});
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

const regime = (id: string | number, extra: Record<string, unknown> = {}) => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'get_market_regime', arguments: { coin: 'BTC' }, ...extra },
});
const ping = (id: string | number, params?: unknown) => ({
  jsonrpc: '2.0',
  id,
  method: 'ping',
  ...(params === undefined ? {} : { params }),
});

describe('MCP conformance of POST /mcp', () => {
  let server: Server;
  let key: string;
  let url: string;
  const sessions: Record<string, string> = {};

  /** POST /mcp with the headers as given: an array sends the field once per value, which fetch cannot. */
  const post = (body: unknown, headers: Record<string, string | string[]> = {}) =>
    rawRequest(url, {
      headers: { ...HEADERS, authorization: `Bearer ${key}`, ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  const open = async (version: string): Promise<string> => {
    const answer = await post({
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: {
        protocolVersion: version,
        capabilities: {},
        clientInfo: { name: 'conformance', version: '0' },
      },
    });
    expect(answer.status).toBe(200);
    const session = answer.headers.get('mcp-session-id')!;
    await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': session });
    return session;
  };
  const on = (version: string) => ({ 'mcp-session-id': sessions[version]!, 'mcp-protocol-version': version });

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    key = (await server.issue('pro')).key;
    url = `${server.url}/mcp`;
    sessions['2025-06-18'] = await open('2025-06-18');
    sessions['2025-03-26'] = await open('2025-03-26');
  });
  afterAll(async () => {
    await server?.close();
  });

  describe('valid JSON is never a parse error', () => {
    const BAD_META: [string, unknown, string][] = [
      ['a string', 'x', 'params._meta must be an object (or left out), not a string'],
      ['a number', 5, 'params._meta must be an object (or left out), not a number'],
      ['null', null, 'params._meta must be an object (or left out), not null'],
      [
        'a boolean progressToken',
        { progressToken: true },
        'progressToken must be a string or an integer, not a boolean',
      ],
      [
        'a fractional progressToken',
        { progressToken: 1.5 },
        'progressToken must be a string or an integer, not a number (1.5)',
      ],
      [
        'an object progressToken',
        { progressToken: {} },
        'progressToken must be a string or an integer, not an object',
      ],
    ];
    for (const [label, meta, words] of BAD_META) {
      it(`tools/call with _meta ${label} is the -32602 tool error, on a session and one-shot`, async () => {
        for (const headers of [on('2025-06-18'), {}]) {
          const answer = await post(regime('t', { _meta: meta }), headers);
          // Before: 400 -32700 "Parse error" with id null on a session, -32600 without one.
          expect(answer.status, answer.text).toBe(200);
          expect(answer.body.id).toBe('t');
          expect(answer.body.result.isError).toBe(true);
          expect(answer.body.result.content[0].text).toMatch(/^-32602 invalid params: params\._meta/);
          expect(answer.body.result.content[0].text).toContain(words);
          expect(answer.body.result.structuredContent.code).toBe('invalid_arguments');
        }
      });
      it(`another method with _meta ${label} is -32600 Invalid Request with its id`, async () => {
        for (const method of ['ping', 'tools/list', 'resources/read']) {
          for (const headers of [on('2025-06-18'), {}]) {
            const answer = await post({ jsonrpc: '2.0', id: 'r', method, params: { _meta: meta } }, headers);
            expect(answer.status, answer.text).toBe(400);
            expect(answer.body).toEqual({
              jsonrpc: '2.0',
              error: { code: -32600, message: expect.stringContaining(words), data: withService() },
              id: 'r',
            });
          }
        }
      });
    }

    it('a message with a method and a result, or an error object of the wrong shape, is -32600 with its id', async () => {
      const cases: [unknown, string][] = [
        [{ jsonrpc: '2.0', id: 'm', method: 'ping', result: {} }, 'carries no result'],
        [{ jsonrpc: '2.0', id: 'm', method: 'ping', error: { code: 1, message: 'x' } }, 'carries no error'],
        [{ jsonrpc: '2.0', id: 'm', error: { code: 'x', message: 'x' } }, 'error.code must be an integer'],
        [{ jsonrpc: '2.0', id: 'm', error: { code: 1 } }, 'error.message must be a string'],
        [{ jsonrpc: '2.0', id: 'm', error: 'x' }, 'error must be an object'],
        [{ jsonrpc: '2.0', id: 'm', result: 5 }, 'result must be an object'],
        [{ jsonrpc: '2.0', id: 'm', result: {}, error: { code: 1, message: 'x' } }, 'not both'],
        [{ jsonrpc: '2.0', id: 'm', method: 'ping', extra: 1 }, 'has no member "extra"'],
        [{ ...regime('m'), extra: 1 }, 'has no member "extra"'],
        [{ jsonrpc: '2.0', id: 'm', result: {}, extra: 1 }, 'has no member "extra"'],
      ];
      for (const [body, words] of cases) {
        for (const headers of [on('2025-06-18'), {}]) {
          const answer = await post(body, headers);
          expect(answer.status, answer.text).toBe(400);
          expect(answer.body.error.code).toBe(-32600);
          expect(answer.body.error.message).toContain(words);
          expect(answer.body.id).toBe('m');
        }
      }
    });

    it('a batched message with a wrong-typed _meta is answered -32600 on its own, never -32700', async () => {
      const answer = await post([ping(1), ping(2, { _meta: 'x' })], on('2025-03-26'));
      expect(answer.status).toBe(200);
      const answers = answer.body as unknown as {
        id: number;
        result?: object;
        error?: { code: number; message: string };
      }[];
      expect(answers.find((a) => a.id === 1)).toMatchObject({ result: {} });
      const refused = answers.find((a) => a.id === 2)!;
      expect(refused.error!.code).toBe(-32600);
      expect(refused.error!.message).toContain('batch message 1: params._meta must be an object');
    });

    it("an empty body is the catalog's INVALID_JSON (-32700), as a malformed one is, saying it is empty", async () => {
      for (const headers of [on('2025-06-18'), {}]) {
        const answer = await post('', headers);
        expect(answer.status).toBe(400);
        expect(answer.body).toEqual({
          jsonrpc: '2.0',
          error: {
            code: -32700,
            message: 'the body is not valid JSON: it is empty; send a JSON-RPC message',
            data: withService({ code: 'INVALID_JSON' }),
          },
          id: null,
        });
        const malformed = await post('{"jsonrpc":', headers);
        expect(malformed.status).toBe(answer.status);
        expect(malformed.body.error.code).toBe(answer.body.error.code);
        expect(malformed.body.error.data.code).toBe(answer.body.error.data.code);
      }
    });
  });

  it('a cursor of the wrong type on a list is -32602 in one line (not -32603 with zod issues)', async () => {
    const modern = {
      'mcp-protocol-version': '2026-07-28',
      'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    };
    for (const method of ['tools/list', 'resources/list', 'resources/templates/list']) {
      for (const [cursor, kind] of [
        [5, 'a number'],
        [null, 'null'],
        [{}, 'an object'],
      ] as const) {
        for (const path of ['session', 'one-shot', 'modern'] as const) {
          const params: Record<string, unknown> = { cursor };
          let headers: Record<string, string> = {};
          if (path === 'session') headers = on('2025-06-18');
          if (path === 'modern') {
            headers = { 'mcp-protocol-version': modern['mcp-protocol-version'], 'mcp-method': method };
            params._meta = {
              'io.modelcontextprotocol/protocolVersion': '2026-07-28',
              'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
              'io.modelcontextprotocol/clientCapabilities': {},
            };
          }
          const answer = await post({ jsonrpc: '2.0', id: 'c', method, params }, headers);
          expect(answer.body.id, `${path} ${method}`).toBe('c');
          expect(answer.body.error, `${path} ${method}: ${answer.text}`).toMatchObject({
            code: -32602,
            message: `Invalid params: ${method}'s params.cursor must be a string (or left out), not ${kind}`,
          });
          expect(answer.body.error, `${path} ${method}`).not.toHaveProperty('data');
        }
      }
    }
  });

  it('a batch is answered with an array, one request alone or with notifications, session and one-shot', async () => {
    const note = {
      jsonrpc: '2.0',
      method: 'notifications/progress',
      params: { progressToken: 'p', progress: 1 },
    };
    for (const headers of [on('2025-03-26'), {}]) {
      for (const batch of [[ping('b')], [ping('b'), note], [regime('b')]]) {
        const answer = await post(batch, headers);
        expect(answer.status, answer.text).toBe(200);
        // Before: the bare object.
        expect(Array.isArray(answer.body), answer.text).toBe(true);
        expect(answer.body).toHaveLength(1);
        expect(answer.body[0].id).toBe('b');
        expect(Number(answer.headers.get('content-length'))).toBe(Buffer.byteLength(answer.text));
      }
      const two = await post([ping(1), ping(2)], headers);
      expect(two.body.map((m: { id: number }) => m.id).sort()).toEqual([1, 2]);
    }
  });

  describe('MCP-Protocol-Version', () => {
    it('a header that disagrees with the session is 400, and cannot turn batches back on', async () => {
      const answer = await post([ping('v'), ping('w')], {
        'mcp-session-id': sessions['2025-06-18']!,
        'mcp-protocol-version': '2025-03-26',
      });
      // Before: served, as a 2025-03-26 batch.
      expect(answer.status).toBe(400);
      expect(answer.body.error.code).toBe(-32000);
      expect(answer.body.error.message).toBe(
        'Bad Request: MCP-Protocol-Version 2025-03-26 disagrees with 2025-06-18, the revision this session negotiated at initialize',
      );
    });

    it('a header sent twice is 400 saying so', async () => {
      for (const headers of [{ 'mcp-session-id': sessions['2025-06-18']! }, {}] as Record<string, string>[]) {
        const answer = await post(ping('v'), {
          ...headers,
          'mcp-protocol-version': ['2025-06-18', '2025-06-18'],
        });
        expect(answer.status).toBe(400);
        expect(answer.body.error.message).toBe(
          'Bad Request: MCP-Protocol-Version was sent 2 times; send it once',
        );
        expect(answer.body.id).toBe('v');
      }
    });

    it('an unsupported revision is 400 with the id and the one list of revisions', async () => {
      const answer = await post(ping('u'), { 'mcp-protocol-version': '1999-01-01' });
      expect(answer.status).toBe(400);
      expect(answer.body).toEqual({
        jsonrpc: '2.0',
        error: {
          code: -32000,
          message: `Bad Request: Unsupported protocol version: 1999-01-01 (supported versions: ${PROTOCOL_VERSIONS.join(', ')})`,
          data: withService(),
        },
        id: 'u',
      });
    });

    it('one list of revisions: the card lists what initialize settles on and what stateless serves', async () => {
      expect(mcpServerCard('https://example.test', []).protocolVersions).toEqual([...PROTOCOL_VERSIONS]);
      expect(PROTOCOL_VERSIONS).toContain('2026-07-28');
      for (const version of PROTOCOL_VERSIONS.filter((v) => v !== '2026-07-28')) {
        const answer = await post({
          jsonrpc: '2.0',
          id: 0,
          method: 'initialize',
          params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'v', version: '0' } },
        });
        expect(answer.body.result.protocolVersion).toBe(version);
      }
      // A revision not listed settles on a listed one.
      const unknown = await post({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: '2099-01-01', capabilities: {}, clientInfo: { name: 'v', version: '0' } },
      });
      expect(PROTOCOL_VERSIONS).toContain(unknown.body.result.protocolVersion);
    });
  });

  it('Accept is read as media ranges: case aside, parameters and wildcards; not as substrings', async () => {
    for (const accept of [
      'Application/JSON, Text/Event-Stream',
      'application/json;q=0.9, text/event-stream;q=0.8',
      '*/*',
      'application/*, text/*',
    ]) {
      for (const headers of [on('2025-06-18'), {}]) {
        const list = await post({ jsonrpc: '2.0', id: 'a', method: 'tools/list' }, { ...headers, accept });
        expect(list.status, `${accept}: ${list.text}`).toBe(200);
        const call = await post(regime('a'), { ...headers, accept });
        expect(call.status, `${accept}: ${call.text}`).toBe(200);
        expect(call.body.result.structuredContent.coin).toBe('BTC');
      }
    }
    for (const accept of [
      'application/jsonx, text/event-streamy',
      'application/json',
      'application/json, text/event-stream;q=0',
    ]) {
      for (const headers of [on('2025-06-18'), {}]) {
        const answer = await post(regime('n'), { ...headers, accept });
        expect(answer.status, accept).toBe(406);
        expect(answer.body.error.code).toBe(-32000);
        expect(answer.body.id).toBe('n');
      }
    }
  });

  it('ids are echoed where the body carries one: an unknown session, initialize in a batch', async () => {
    const lost = await post(ping('s'), { 'mcp-session-id': 'no-such-session' });
    expect(lost.status).toBe(404);
    expect(lost.body).toEqual({
      jsonrpc: '2.0',
      error: { code: -32001, message: 'Session not found', data: withService({ code: 'SESSION_NOT_FOUND' }) },
      id: 's',
    });
    const batch = await post([
      ping(1),
      {
        jsonrpc: '2.0',
        id: 'i',
        method: 'initialize',
        params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'b', version: '0' } },
      },
    ]);
    expect(batch.status).toBe(400);
    expect(batch.body.error.code).toBe(-32600);
    expect(batch.body.error.message).toContain('initialize must be sent alone');
    expect(batch.body.id).toBe('i');
  });

  it('initialize again on an open session is -32600 with its id, saying how to start a new one; the session goes on', async () => {
    for (const version of ['2025-06-18', '2025-03-26']) {
      for (const id of ['again', 7]) {
        const again = await post(
          {
            jsonrpc: '2.0',
            id,
            method: 'initialize',
            params: {
              protocolVersion: version,
              capabilities: {},
              clientInfo: { name: 'again', version: '0' },
            },
          },
          on(version),
        );
        expect(again.status).toBe(400);
        // Before the change: the SDK transport's "Server already initialized" with id null.
        expect(again.body).toEqual({
          jsonrpc: '2.0',
          error: {
            code: -32600,
            message:
              'Invalid Request: this session is already initialised; to start a new one, send initialize without Mcp-Session-Id',
            data: withService(),
          },
          id,
        });
      }
      const still = await post(ping('p'), on(version));
      expect(still.status).toBe(200);
    }
  });

  it('every 415 has the documented shape: Content-Type twice, text/plain, a compressed body', async () => {
    const documented = (answer: RawAnswer, words: string) => {
      expect(answer.status, answer.text).toBe(415);
      expect(answer.body).toEqual({
        jsonrpc: '2.0',
        error: {
          code: -32600,
          message: expect.stringContaining(words),
          data: withService({ code: 'UNSUPPORTED_MEDIA_TYPE' }),
        },
        id: null,
      });
    };
    for (const headers of [on('2025-06-18'), {}]) {
      documented(
        await post(ping('x'), { ...headers, 'content-type': ['application/json', 'application/json'] }),
        'Content-Type was sent 2 times',
      );
      documented(
        await post(JSON.stringify(ping('x')), { ...headers, 'content-type': 'text/plain' }),
        'application/json',
      );
      const gzip = await rawRequest(url, {
        headers: { ...HEADERS, ...headers, authorization: `Bearer ${key}`, 'content-encoding': 'gzip' },
        body: gzipSync(JSON.stringify(ping('x'))),
      });
      documented(gzip, 'Content-Encoding gzip');
      expect(gzip.headers.get('accept-encoding')).toBe('identity');
    }
  });

  it('Allow names every method the path answers, OPTIONS included: on a 405 and on OPTIONS (RFC 9110 §10.2.1)', async () => {
    for (const method of ['PUT', 'PATCH', 'OPTIONS']) {
      const res = await fetch(url, { method, headers: { authorization: `Bearer ${key}` } });
      await res.arrayBuffer();
      expect(res.status, method).toBe(method === 'OPTIONS' ? 204 : 405);
      expect(res.headers.get('allow'), method).toBe('GET, POST, DELETE, OPTIONS');
    }
  });
});
