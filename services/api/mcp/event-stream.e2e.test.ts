import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';
import { MCP_HEADERS, mcpInitialize, mcpSessionHeaders } from '../../../test/mcp-wire.ts';

/**
 * A session holds one event stream (GET /mcp): a second one while it is open is refused 409 in
 * the shape of every other refusal of the route (the JSON-RPC error with `_service`, no-store),
 * and once the first has ended, a stream opens again.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

/** The header names of an answer, less those of every answer's framing. */
const headerNames = (res: Response) =>
  [...res.headers.keys()].filter(
    (name) => !['date', 'content-length', 'connection', 'keep-alive'].includes(name),
  );

describe('the event stream of a session', () => {
  let server: Server;
  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache(), rateLimited: true });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('a second stream is refused 409 as the route refuses, and opens once the first has ended', async () => {
    const { key } = await server.issue('pro', 'stream-twice');
    const bearer = { authorization: `Bearer ${key}` };
    const init = await fetch(`${server.url}/mcp`, {
      method: 'POST',
      headers: { ...MCP_HEADERS, ...bearer },
      body: JSON.stringify(mcpInitialize('stream-twice', 0)),
    });
    await init.text();
    const session = init.headers.get('mcp-session-id')!;
    const get = { ...mcpSessionHeaders(session), ...bearer, accept: 'text/event-stream' };
    const first = new AbortController();
    const open = await fetch(`${server.url}/mcp`, { headers: get, signal: first.signal });
    expect(open.status).toBe(200);

    const second = await fetch(`${server.url}/mcp`, { headers: get });
    expect(second.status).toBe(409);
    const body = (await second.json()) as { error: { data?: Record<string, unknown> } };
    expect(body).toMatchObject({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: expect.stringMatching(/one .*stream/i) },
    });
    expect(body.error.data).toMatchObject({ _service: { auth: { outcome: 'OK', tier: 'pro' } } });
    expect(second.headers.get('cache-control')).toBe('no-store');
    // The headers another refusal of a GET carries (Accept without text/event-stream: 406), no fewer.
    const refused = await fetch(`${server.url}/mcp`, { headers: { ...get, accept: 'application/json' } });
    expect(refused.status).toBe(406);
    await refused.text();
    expect(headerNames(second).sort()).toEqual(headerNames(refused).sort());

    // The client drops the first stream: once the server has seen it closed, a stream opens.
    first.abort();
    let reopened = await fetch(`${server.url}/mcp`, { headers: get });
    for (let tries = 0; reopened.status === 409 && tries < 50; tries++) {
      await reopened.text();
      reopened = await fetch(`${server.url}/mcp`, { headers: get });
    }
    expect(reopened.status).toBe(200);
    await reopened.body!.cancel();
  });
});
