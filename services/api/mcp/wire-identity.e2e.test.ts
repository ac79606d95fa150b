import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * What /mcp says of itself on the wire: initialize names the package's version (package.json, the
 * one place it is set), and every JSON answer carries one Content-Type, spelled one way, whoever
 * writes it (the route's refusals, its tool answers, the 1.x transports, the 2.x handler); the
 * event stream is text/event-stream, a 202 and a DELETE carry none.
 */
const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
const JSON_TYPE = 'application/json; charset=utf-8';
const ACCEPT = 'application/json, text/event-stream';
const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
  'io.modelcontextprotocol/clientCapabilities': {},
};
type Server = Awaited<ReturnType<typeof startKeyedServer>>;

interface Answer {
  status: number;
  /** Every Content-Type line as sent (rawHeaders: a repeated header stays repeated). */
  contentTypes: string[];
  text: string;
}

/** One request over node:http; a GET stream is read until its headers, then dropped. */
function send(url: string, method: string, headers: Record<string, string>, body?: unknown): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      const contentTypes: string[] = [];
      for (let i = 0; i < res.rawHeaders.length; i += 2) {
        if (res.rawHeaders[i]!.toLowerCase() === 'content-type') contentTypes.push(res.rawHeaders[i + 1]!);
      }
      if (res.headers['content-type'] === 'text/event-stream') {
        res.destroy();
        resolve({ status: res.statusCode!, contentTypes, text: '' });
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        resolve({ status: res.statusCode!, contentTypes, text: Buffer.concat(chunks).toString('utf8') }),
      );
    });
    req.on('error', reject);
    req.end(body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body));
  });
}

describe('/mcp on the wire: its version and its media types', () => {
  let server: Server;
  let key: string;
  let url: string;

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    key = (await server.issue('pro')).key;
    url = `${server.url}/mcp`;
  });
  afterAll(async () => {
    await server?.close();
  });

  it("initialize names the package's version (the SDK client reads it)", async () => {
    const client = new Client({ name: 'version-reader', version: '0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      expect(client.getServerVersion()).toMatchObject({ name: 'signal-service', version: PACKAGE_VERSION });
    } finally {
      await client.close();
    }
  });

  it('every JSON answer has one Content-Type, one spelling; the stream, a 202 and a DELETE as HTTP wants', async () => {
    const base = { 'content-type': 'application/json', accept: ACCEPT, authorization: `Bearer ${key}` };
    const post = (body: unknown, headers: Record<string, string> = {}) =>
      send(url, 'POST', { ...base, ...headers }, body);
    const call = { name: 'get_market_regime', arguments: { coin: 'BTC', timeframe: '4h' } };

    const init = await new Promise<{ session: string; answer: Answer }>((resolve, reject) => {
      const req = httpRequest(url, { method: 'POST', headers: base }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            session: res.headers['mcp-session-id'] as string,
            answer: {
              status: res.statusCode!,
              contentTypes: [String(res.headers['content-type'])],
              text: Buffer.concat(chunks).toString('utf8'),
            },
          }),
        );
      });
      req.on('error', reject);
      req.end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: 1,
          method: 'initialize',
          params: {
            protocolVersion: '2025-03-26',
            capabilities: {},
            clientInfo: { name: 't', version: '0' },
          },
        }),
      );
    });
    const onSession = { 'mcp-session-id': init.session };

    const json: Record<string, Answer> = {
      initialize: init.answer,
      'session tools/list': await post({ jsonrpc: '2.0', id: 2, method: 'tools/list' }, onSession),
      'session ping': await post({ jsonrpc: '2.0', id: 3, method: 'ping' }, onSession),
      'session tools/call': await post(
        { jsonrpc: '2.0', id: 4, method: 'tools/call', params: call },
        onSession,
      ),
      'session tools/call with a progress token (SDK transport)': await post(
        { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { ...call, _meta: { progressToken: 'p' } } },
        onSession,
      ),
      'session batch': await post([{ jsonrpc: '2.0', id: 6, method: 'ping' }], onSession),
      'session unknown method (-32601)': await post({ jsonrpc: '2.0', id: 7, method: 'no/such' }, onSession),
      'initialize again (the transport refuses)': await post(
        {
          jsonrpc: '2.0',
          id: 8,
          method: 'initialize',
          params: {
            protocolVersion: '2025-03-26',
            capabilities: {},
            clientInfo: { name: 't', version: '0' },
          },
        },
        onSession,
      ),
      'one-shot tools/call': await post({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: call }),
      'session-less tools/list': await post({ jsonrpc: '2.0', id: 10, method: 'tools/list' }),
      '2026-07-28 tools/call': await post(
        { jsonrpc: '2.0', id: 11, method: 'tools/call', params: { ...call, _meta: ENVELOPE } },
        { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': call.name },
      ),
      '2026-07-28 tools/list': await post(
        { jsonrpc: '2.0', id: 12, method: 'tools/list', params: { _meta: ENVELOPE } },
        { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/list' },
      ),
      'unknown session (404)': await post(
        { jsonrpc: '2.0', id: 13, method: 'ping' },
        { 'mcp-session-id': 'no-such-session' },
      ),
      'not JSON (400)': await post('{'),
      'Accept without JSON (406)': await post(
        { jsonrpc: '2.0', id: 14, method: 'ping' },
        { accept: 'text/html' },
      ),
      'text/plain (415)': await post('x', { 'content-type': 'text/plain' }),
      'PUT (405)': await send(url, 'PUT', base, {}),
    };
    for (const [what, answer] of Object.entries(json)) {
      expect(answer.contentTypes, what).toEqual([JSON_TYPE]);
      expect(() => JSON.parse(answer.text), what).not.toThrow();
    }

    const owner = { authorization: `Bearer ${key}`, ...onSession };
    const stream = await send(url, 'GET', { accept: 'text/event-stream', ...owner });
    expect(stream.status).toBe(200);
    expect(stream.contentTypes).toEqual(['text/event-stream']);
    const accepted = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, onSession);
    expect(accepted.status).toBe(202);
    expect(accepted.contentTypes).toEqual([]);
    const ended = await send(url, 'DELETE', owner);
    expect(ended.status).toBe(200);
    expect(ended.contentTypes).toEqual([]);
  });
});
