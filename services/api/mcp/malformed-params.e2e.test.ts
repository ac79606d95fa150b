import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * Malformed params answer in words, alike on a session, one-shot and on the 2026-07-28 revision:
 * a tools/call whose params are not an object, whose name is not a string or whose arguments are
 * not an object is the -32602 tool error of contract 7.3 (HTTP 200, result.isError, the code in
 * the text), as an unknown tool or bad arguments are; for any other method, params that are not
 * an object are -32600 Invalid Request (HTTP 400); initialize missing members is -32602 Invalid
 * params (HTTP 400, a JSON-RPC error: the handshake is not a tool), naming them. Never zod's issue
 * list.
 */
const HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};
type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Path = 'session' | 'one-shot' | 'modern';
const PATHS: Path[] = ['session', 'one-shot', 'modern'];

/** What a validation dump looks like: zod's issue keys. */
const DUMP = /invalid_type|"expected"|"path"|received/;

interface Answer {
  status: number;
  body: {
    id?: unknown;
    error?: { code: number; message: string };
    result?: { isError?: boolean; content: { text: string }[]; structuredContent: Record<string, unknown> };
  };
}

describe('malformed MCP params', () => {
  let server: Server;
  let key: string;
  let session: string;

  const post = async (path: Path, body: Record<string, unknown>): Promise<Answer> => {
    const headers: Record<string, string> = { ...HEADERS, authorization: `Bearer ${key}` };
    let sent = body;
    if (path === 'session') headers['mcp-session-id'] = session;
    if (path === 'modern') {
      headers['mcp-protocol-version'] = '2026-07-28';
      headers['mcp-method'] = String(body.method);
      const params = body.params as Record<string, unknown> | undefined;
      if (typeof params?.name === 'string') headers['mcp-name'] = params.name;
      // The envelope rides in params._meta; params that are not an object are sent as they are.
      if (params !== null && typeof params === 'object' && !Array.isArray(params)) {
        sent = { ...body, params: { ...params, _meta: ENVELOPE } };
      }
    }
    const res = await fetch(`${server.url}/mcp`, { method: 'POST', headers, body: JSON.stringify(sent) });
    return { status: res.status, body: (await res.json()) as Answer['body'] };
  };
  const call = (params: unknown, method = 'tools/call') => ({
    jsonrpc: '2.0',
    id: 'm-1',
    method,
    ...(params === undefined ? {} : { params }),
  });

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    key = (await server.issue('pro')).key;
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...HEADERS, authorization: `Bearer ${key}` },
      body: JSON.stringify(
        call(
          { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '0' } },
          'initialize',
        ),
      ),
    });
    await init.text();
    session = init.headers.get('mcp-session-id')!;
  });
  afterAll(async () => {
    await server?.close();
  });

  /** [label, params, structuredContent.code, words in the text, the issue's path] */
  const TOOL_ERRORS: [string, unknown, string, string, string][] = [
    [
      'arguments a string',
      { name: 'get_market_regime', arguments: 'BTC' },
      'invalid_arguments',
      'a string',
      'arguments',
    ],
    [
      'arguments null',
      { name: 'get_market_regime', arguments: null },
      'invalid_arguments',
      'null',
      'arguments',
    ],
    [
      'arguments an array',
      { name: 'get_market_regime', arguments: [] },
      'invalid_arguments',
      'an array',
      'arguments',
    ],
    ['name a number', { name: 5, arguments: {} }, 'invalid_arguments', 'a number', 'name'],
    ['name missing', { arguments: { coin: 'BTC' } }, 'invalid_arguments', 'missing', 'name'],
    // params that are not an object: malformed params (invalid_arguments), never a 400 nor an unknown tool.
    ['params a string', 'x', 'invalid_arguments', 'not a string', 'params'],
    ['params null', null, 'invalid_arguments', 'not null', 'params'],
    ['params a number', 7, 'invalid_arguments', 'not a number', 'params'],
    ['params a boolean', true, 'invalid_arguments', 'not a boolean', 'params'],
    ['params an empty array', [], 'invalid_arguments', 'not an array', 'params'],
    ['params an array', [{ name: 'get_market_regime' }], 'invalid_arguments', 'not an array', 'params'],
  ];

  for (const path of PATHS) {
    for (const [label, params, code, words, issuePath] of TOOL_ERRORS) {
      it(`${path}: tools/call with ${label} is the -32602 tool error, in words`, async () => {
        const { status, body } = await post(path, call(params));
        expect(status).toBe(200);
        expect(body.error).toBeUndefined();
        expect(body.id).toBe('m-1');
        const result = body.result!;
        expect(result.isError).toBe(true);
        const text = result.content[0]!.text;
        expect(text).toMatch(/^-32602 invalid params: params(\.(name|arguments) | must be an object )/);
        expect(text).toContain(words);
        expect(text).not.toMatch(DUMP);
        expect(result.structuredContent).toMatchObject({
          code,
          issues: [{ path: issuePath }],
          _service: { quota: { used: 0 } },
        });
      });
    }

    it(`${path}: a list with a cursor this server never gave is -32602 (every list is one page)`, async () => {
      for (const method of ['tools/list', 'resources/list', 'resources/templates/list']) {
        const { status, body } = await post(path, call({ cursor: 'garbage' }, method));
        expect(status).toBe(200);
        expect(body.id).toBe('m-1');
        // Before the change: the whole list, as if no cursor were sent.
        expect(body.error?.code, `${method}: ${JSON.stringify(body).slice(0, 200)}`).toBe(-32602);
        expect(body.error?.message).toContain('no nextCursor');
        // The message names the field and why; no empty data object beside it (resources/read's -32602 has none).
        expect(body.error, method).not.toHaveProperty('data');
      }
      const whole = await post(path, call({}, 'tools/list'));
      expect(whole.body.error).toBeUndefined();
    });

    it(`${path}: resources/read without a uri is -32602 in words, params empty or absent`, async () => {
      // Absent params stay absent on the modern path too (its envelope rides in params).
      for (const params of path === 'modern' ? [{}] : [{}, undefined]) {
        const { status, body } = await post(path, call(params, 'resources/read'));
        expect(status).toBe(200);
        expect(body.id).toBe('m-1');
        // Before the change, absent params: -32603 with zod's issue list.
        expect(body.error?.code, JSON.stringify(body)).toBe(-32602);
        expect(body.error?.message).toContain('resources/read needs params.uri');
        expect(body.error?.message).not.toMatch(DUMP);
      }
    });

    it(`${path}: another method's params that are not an object are -32600 Invalid Request`, async () => {
      for (const [params, words] of [
        ['x', 'not a string'],
        [null, 'not null'],
        [7, 'not a number'],
        [false, 'not a boolean'],
        [[], 'not an array'],
      ] as const) {
        for (const method of ['initialize', 'tools/list', 'resources/read']) {
          const { status, body } = await post(path, call(params, method));
          expect(status).toBe(400);
          expect(body.id).toBe('m-1');
          expect(body.error?.code).toBe(-32600);
          expect(body.error?.message).toContain(words);
          expect(body.error?.message).not.toMatch(DUMP);
        }
      }
    });
  }

  for (const path of ['session', 'one-shot'] as const) {
    it(`${path}: initialize with params missing members is -32602 naming them`, async () => {
      for (const params of [{}, undefined]) {
        const { status, body } = await post(path, call(params, 'initialize'));
        expect(status).toBe(400);
        expect(body.id).toBe('m-1');
        expect(body.error?.code).toBe(-32602);
        expect(body.error?.message).toBe(
          'Invalid params: initialize needs params.protocolVersion (a string), params.capabilities (an object), params.clientInfo (an object with name and version)',
        );
      }
      // protocolVersion alone missing: named, and no session is opened on a revision guessed for it.
      const unversioned = await fetch(`${server.url}/mcp`, {
        method: 'POST',
        headers: { ...HEADERS, authorization: `Bearer ${key}` },
        body: JSON.stringify(
          call({ capabilities: {}, clientInfo: { name: 't', version: '0' } }, 'initialize'),
        ),
      });
      expect(unversioned.status).toBe(400);
      expect(unversioned.headers.get('mcp-session-id')).toBeNull();
      expect(await unversioned.json()).toEqual({
        jsonrpc: '2.0',
        error: {
          code: -32602,
          message: 'Invalid params: initialize needs params.protocolVersion (a string)',
          data: { _service: expect.objectContaining({ auth: expect.objectContaining({ outcome: 'OK' }) }) },
        },
        id: 'm-1',
      });
      const partial = await post(
        path,
        call({ protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't' } }, 'initialize'),
      );
      expect(partial.status).toBe(400);
      expect(partial.body.error).toEqual({
        code: -32602,
        message: 'Invalid params: initialize needs params.clientInfo.version (a string)',
        data: { _service: expect.objectContaining({ quota: expect.any(Object) }) },
      });
    });
  }

  it('a malformed call in a shape only the SDKs took (progress token, task, declared capabilities) is refused in words too', async () => {
    const bad = { name: 'get_market_regime', arguments: 'BTC' };
    for (const path of ['session', 'one-shot'] as const) {
      for (const params of [
        { ...bad, _meta: { progressToken: 'p' } },
        { name: 5, arguments: {}, task: {} },
      ]) {
        const { body } = await post(path, call(params));
        expect(body.result?.isError).toBe(true);
        expect(body.result!.content[0]!.text).toMatch(/^-32602 invalid params: params\.(name|arguments) /);
      }
    }
    const res = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: {
        ...HEADERS,
        authorization: `Bearer ${key}`,
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'tools/call',
        'mcp-name': 'get_market_regime',
      },
      body: JSON.stringify(
        call({
          ...bad,
          _meta: { ...ENVELOPE, 'io.modelcontextprotocol/clientCapabilities': { experimental: {} } },
        }),
      ),
    });
    const body = (await res.json()) as Answer['body'];
    expect(body.result?.isError).toBe(true);
    expect(body.result!.content[0]!.text).not.toMatch(DUMP);
  });

  it('a body over the limit is 413 -32600 BODY_TOO_LARGE naming the limit, on every path', async () => {
    for (const path of PATHS) {
      const { status, body } = await post(
        path,
        call({ name: 'get_market_regime', arguments: { coin: 'BTC', pad: 'x'.repeat(70_000) } }),
      );
      expect(status, path).toBe(413);
      expect(body.error, path).toMatchObject({
        code: -32600,
        message: 'the body is larger than this route accepts (at most 65536 bytes)',
        data: { code: 'BODY_TOO_LARGE' },
      });
    }
  });

  it('a well-formed call still answers on every path', async () => {
    for (const path of PATHS) {
      const { body } = await post(
        path,
        call({ name: 'get_market_regime', arguments: { coin: 'BTC', timeframe: '4h' } }),
      );
      expect(body.result?.isError).toBeUndefined();
      expect(body.result?.structuredContent).toMatchObject({ coin: 'BTC' });
    }
  });
});
