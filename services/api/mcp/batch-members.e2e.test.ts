import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize } from '../../../test/mcp-wire.ts';

/**
 * A JSON-RPC batch on a revision that has batches (2025-03-26 and earlier) answers each member on
 * its own (JSON-RPC 2.0 §6): one bad member gets its own -32600, the rest are served. On 2025-06-18
 * and later a batch is refused whole, saying batches are not part of that revision.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

describe('a JSON-RPC batch on a revision that has batches (2025-03-26)', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
  });
  afterAll(async () => {
    await server?.close();
  });

  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...headers },
      body: JSON.stringify(body),
    }).then(async (res) => ({ status: res.status, body: (await res.json().catch(() => null)) as unknown }));

  const open = async (): Promise<string> => {
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: MCP_HEADERS,
      body: JSON.stringify({
        ...mcpInitialize('batch', 0),
        params: { ...mcpInitialize('batch', 0).params, protocolVersion: '2025-03-26' },
      }),
    });
    await init.text();
    return init.headers.get('mcp-session-id')!;
  };

  it('answers each member on its own: the good ones served, each bad one its own -32600', async () => {
    const session = await open();
    // A session, a one-shot naming its revision, and a one-shot naming none (read as 2025-03-26).
    for (const headers of [
      { 'mcp-session-id': session },
      { 'mcp-protocol-version': '2025-03-26' },
      {},
    ] as Record<string, string>[]) {
      const answer = await post(
        [
          { jsonrpc: '2.0', id: 1, method: 'ping' },
          { jsonrpc: '2.0', id: 2, method: 'ping', params: { _meta: 'x' } },
          { id: 3, method: 'ping' },
          1,
          { jsonrpc: '2.0', id: 5, method: 'ping' },
        ],
        headers,
      );
      expect(answer.status).toBe(200);
      const answers = answer.body as {
        id: unknown;
        result?: unknown;
        error?: { code: number; message: string };
      }[];
      expect(answers).toHaveLength(5);
      const byId = (id: unknown) => answers.filter((a) => a.id === id);
      expect(byId(1)).toMatchObject([{ result: {} }]);
      expect(byId(5)).toMatchObject([{ result: {} }]);
      expect(byId(2)).toMatchObject([{ error: { code: -32600 } }]);
      expect(byId(2)[0]!.error!.message).toContain('params._meta must be an object');
      expect(byId(3)).toMatchObject([{ error: { code: -32600 } }]);
      expect(byId(null)).toMatchObject([{ error: { code: -32600 } }]);
    }
  });

  it('a batch of notifications and one bad member answers that member alone', async () => {
    const session = await open();
    const answer = await post(
      [
        { jsonrpc: '2.0', method: 'notifications/initialized' },
        { jsonrpc: '1.0', id: 'x', method: 'ping' },
      ],
      { 'mcp-session-id': session },
    );
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject([{ jsonrpc: '2.0', id: 'x', error: { code: -32600 } }]);
    expect(answer.body).toHaveLength(1);
  });

  it('with a refused key, the requests get -32003 and the bad member its -32600, in one array', async () => {
    const { key } = await server.issue('pro', 'batch-refused-key');
    const answer = await post(
      [
        { jsonrpc: '2.0', id: 1, method: 'ping' },
        { jsonrpc: '2.0', id: 2, method: 'ping', params: 3 },
      ],
      {
        'mcp-protocol-version': '2025-03-26',
        authorization: `Bearer ${key.slice(0, -1)}${key.endsWith('A') ? 'B' : 'A'}`,
      },
    );
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ id: 1, error: expect.objectContaining({ code: -32003 }) }),
        expect.objectContaining({ id: 2, error: expect.objectContaining({ code: -32600 }) }),
      ]),
    );
  });

  it('a batch on 2025-06-18 is refused whole, saying batches are not part of that revision', async () => {
    const answer = await post(
      [
        { jsonrpc: '2.0', id: 1, method: 'ping' },
        { jsonrpc: '2.0', id: 2, method: 'ping', params: 3 },
      ],
      { 'mcp-protocol-version': '2025-06-18' },
    );
    expect(answer.status).toBe(400);
    expect(answer.body).toMatchObject({
      id: null,
      error: { code: -32600, message: expect.stringContaining('batches are not part of MCP 2025-06-18') },
    });
  });
});
