import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RpcErrorBody } from '../contracts/errors.ts';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * A JSON object that names a member twice (`{"coin":"BTC","coin":"ETH"}`) means what the parser
 * makes of it: JSON.parse keeps the last, a proxy or WAF in front may keep the first and judge
 * another request than the one served. I-JSON (RFC 7493 §2.3) forbids it; every channel refuses
 * it with its own framing error for a body that is not JSON, naming the repeated name.
 */

let running: TestService;
let url: string;
let key: string;

beforeAll(async () => {
  running = await startTestService(['api']);
  url = running.service.url;
  key = await running.issue();
}, 60_000);
afterAll(async () => {
  await running?.stop();
});

async function post(path: string, body: string, headers: Record<string, string> = {}) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body,
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

const MCP_HEADERS = { accept: 'application/json, text/event-stream' };
const words = (name: string) =>
  `the body is not valid JSON: the member name "${name}" appears twice in one object; send each name once (I-JSON, RFC 7493)`;

describe('a JSON object with a repeated member name', () => {
  it('is refused on /x402 with invalid_input naming it, at the top level and nested, escaped or not', async () => {
    for (const [body, name] of [
      ['{"coin":"BTC","coin":"ETH","timeframe":"1h"}', 'coin'],
      ['{"coin":"BTC","\\u0063oin":"ETH","timeframe":"1h"}', 'coin'],
      ['{"coin":"BTC","timeframe":"1h","exchange":{"a":1,"a":2}}', 'a'],
    ]) {
      const res = await post('/x402/get_trade_call', body!);
      expect({ status: res.status, code: res.body.code, message: res.body.message }, body).toEqual({
        status: 400,
        code: 'invalid_input',
        message: words(name!),
      });
      expect(res.body.issues).toEqual([]);
    }
  });

  it('is refused on /api with INVALID_JSON naming it', async () => {
    for (const [body, name] of [
      ['{"url":"https://1.1.1.1/","url":"https://2.2.2.2/","events":["trade_call"]}', 'url'],
      ['{"url":"https://1.1.1.1/","events":["trade_call"],"x":[{"y":1},{"y":1,"y":2}]}', 'y'],
    ]) {
      const res = await post('/api/webhooks', body!);
      expect(res.status, body).toBe(400);
      expect(res.body, body).toMatchObject({ code: 'INVALID_JSON', message: words(name!) });
    }
  });

  it('is refused on /api/search in its own code, as a body that is not JSON is', async () => {
    const res = await post('/api/search', '{"query":"regime","query":"funding","limit":2}');
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject({
      code: 'INVALID_QUERY',
      message: `the request body could not be read: ${words('query')}`,
    });
  });

  it('is refused on /mcp with the JSON-RPC parse error naming it, in the envelope and in a tool’s arguments', async () => {
    for (const [body, name] of [
      ['{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/list"}', 'id'],
      [
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_trade_call","arguments":{"coin":"BTC","coin":"ETH","timeframe":"1h"}}}',
        'coin',
      ],
    ]) {
      const res = await post('/mcp', body!, MCP_HEADERS);
      expect(res.status, body).toBe(400);
      expect(RpcErrorBody.parse(res.body), body).toMatchObject({
        jsonrpc: '2.0',
        error: { code: -32700, message: words(name!), data: { code: 'INVALID_JSON' } },
        id: null,
      });
    }
  });

  it('is not a name repeated in two objects, or a `:` inside a string', async () => {
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'get_trade_call', arguments: { coin: 'BTC', timeframe: '1h' }, _meta: { name: 'a:b' } },
    });
    const res = await post('/mcp', body, MCP_HEADERS);
    expect(res.status).toBe(200);
  });
});
