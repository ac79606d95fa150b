import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestService, type TestService } from './service-harness.ts';

/**
 * Every kind of bad value (not a number, a fraction for a whole number, below the minimum, above
 * the maximum, a value not among the allowed ones, the wrong type, an unknown field) sent over
 * real HTTP to a representative set of routes (webhook management's body and query, the keyed
 * pay-per-call body) and to a tool through the MCP SDK client: each answer keeps its documented
 * status, code and `field`, and its message says what the field must be and what was sent, in
 * words of ours, never zod's ("expected number, received NaN", "Invalid input", "Too small").
 */

const ZOD_WORDING = /NaN|received|expected|Invalid input|Invalid option|Too (small|big)|Unrecognized key/;

let running: TestService;
let url: string;
let key: string;
let hook: string;
let mcp: Client;

beforeAll(async () => {
  running = await startTestService(['api'], {
    REPLAY_SPEED: '0',
    // Subscriptions to a loopback URL (nothing listens: nothing is delivered here).
    WEBHOOK_TEST_ALLOW_CIDRS: '127.0.0.1/32',
    WEBHOOK_ALLOWED_PORTS: '*',
  });
  url = running.service.url;
  key = await running.issue();
  const created = await send('POST', '/api/webhooks', {
    url: 'https://127.0.0.1:9/hook',
    events: ['trade_call'],
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  hook = (created.body as { id: string }).id;
  mcp = new Client({ name: 'bad-values-test', version: '1.0.0' });
  await mcp.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${key}` } },
    }),
  );
}, 60_000);
afterAll(async () => {
  await mcp?.close().catch(() => undefined);
  await running?.stop();
});

async function send(method: string, path: string, body?: unknown) {
  const res = await fetch(url + path, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const subscription = { url: 'https://127.0.0.1:9/hook', events: ['trade_call'] };
const digest = {
  url: 'https://127.0.0.1:9/hook',
  events: ['scan_digest'],
  timeframe: '1h',
  exchange: 'BINANCE',
  top_n: 10,
  cadence: '1h',
};

interface Case {
  kind: string;
  method: 'GET' | 'POST';
  /** `{id}` is the suite's subscription. */
  path: string;
  body?: unknown;
  status: number;
  code: string;
  field?: string;
  /** The message, exactly. */
  message: string;
}

const CASES: Case[] = [
  // GET /api/webhooks/{id}/deliveries: integer query parameters.
  ...(
    [
      ['not a number', 'after_seq=abc', 'after_seq', 'after_seq must be a whole number ≥ 0; got "abc"'],
      ['a fraction', 'limit=1.5', 'limit', 'limit must be a whole number from 1 to 200; got "1.5"'],
      ['below the minimum', 'limit=0', 'limit', 'limit must be a whole number from 1 to 200; got "0"'],
      ['above the maximum', 'limit=201', 'limit', 'limit must be a whole number from 1 to 200; got "201"'],
      ['empty', 'after_seq=', 'after_seq', 'after_seq must be a whole number ≥ 0; got ""'],
    ] as const
  ).map(
    ([kind, query, field, message]): Case => ({
      kind: `deliveries ${kind}`,
      method: 'GET',
      path: `/api/webhooks/{id}/deliveries?${query}`,
      status: 400,
      code: 'INVALID_FIELD',
      field,
      message,
    }),
  ),
  {
    kind: 'list: a status not among the allowed',
    method: 'GET',
    path: '/api/webhooks?status=paused',
    status: 400,
    code: 'INVALID_FIELD',
    field: 'status',
    message: 'status must be one of active, disabled, all; got "paused"',
  },
  {
    kind: 'list: an unknown parameter',
    method: 'GET',
    path: '/api/webhooks?colour=blue',
    status: 400,
    code: 'UNKNOWN_FILTER',
    field: 'colour',
    message: 'unknown parameter "colour"; known: status',
  },
  // POST /api/webhooks: body fields.
  ...(
    [
      ['a fraction', { min_confidence: 50.5 }, 'min_confidence', '50.5'],
      ['below the minimum', { min_confidence: -1 }, 'min_confidence', '-1'],
      ['above the maximum', { min_confidence: 101 }, 'min_confidence', '101'],
      ['the wrong type', { min_confidence: '50' }, 'min_confidence', '"50"'],
    ] as const
  ).map(
    ([kind, extra, field, got]): Case => ({
      kind: `create: min_confidence ${kind}`,
      method: 'POST',
      path: '/api/webhooks',
      body: { ...subscription, ...extra },
      status: 400,
      code: 'INVALID_FIELD',
      field,
      message: `min_confidence must be a whole number from 0 to 100, or null; got ${got}`,
    }),
  ),
  {
    kind: 'create: an event not among the allowed',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...subscription, events: ['price_tick'] },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'events.0',
    message:
      'events.0 must be one of trade_call, regime_shift, scan_digest, subscription_disabled, risk_shift; got "price_tick"',
  },
  {
    kind: 'create: events of the wrong type',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...subscription, events: 'trade_call' },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'events',
    message:
      'events must be a list of at least 1 item, each one of trade_call, regime_shift, scan_digest, subscription_disabled, risk_shift; got "trade_call"',
  },
  {
    kind: 'create: a digest top_n that is a fraction',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...digest, top_n: 2.5 },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'top_n',
    message: 'top_n must be a whole number from 1 to 100, or null; got 2.5',
  },
  {
    kind: 'create: a digest cadence not among the allowed',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...digest, cadence: '2h' },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'cadence',
    message: 'cadence must be one of 1h, 4h, 1d, or null; got "2h"',
  },
  {
    kind: 'create: a digest venue the service does not know',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...digest, exchange: 'KRAKEN' },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'exchange',
    message: 'exchange must be one of BINANCE, BINANCE_SPOT, BYBIT, OKX, HYPERLIQUID, or null; got "KRAKEN"',
  },
  {
    kind: 'create: a digest venue the service knows but does not serve',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...digest, exchange: 'BYBIT' },
    status: 422,
    code: 'unsupported_exchange',
    field: 'exchange',
    message:
      'exchange BYBIT is not served by the replay feed: the replay data has no BYBIT candles (funding only); candles are served for BINANCE_SPOT, BINANCE',
  },
  {
    kind: 'create: an unknown field',
    method: 'POST',
    path: '/api/webhooks',
    body: { ...subscription, colour: 'blue' },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'colour',
    message: 'unknown field "colour"',
  },
  {
    kind: 'create: a required field left out',
    method: 'POST',
    path: '/api/webhooks',
    body: { events: ['trade_call'] },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'url',
    message: 'url is required: it must be a string of at most 2048 characters',
  },
  {
    kind: 'rotate-secret: overlap_seconds not a number',
    method: 'POST',
    path: '/api/webhooks/{id}/rotate-secret',
    body: { overlap_seconds: 'soon' },
    status: 400,
    code: 'INVALID_FIELD',
    field: 'overlap_seconds',
    message: 'overlap_seconds must be a whole number from 0 to 604800; got "soon"',
  },
  // A route whose family names each field's refusal in a code of its own.
  {
    kind: 'verdicts: an exchange not among the allowed',
    method: 'GET',
    path: '/api/verdicts?exchange=KRAKEN',
    status: 400,
    code: 'INVALID_EXCHANGE',
    field: 'exchange',
    message: 'exchange must be one of BINANCE, BINANCE_SPOT, BYBIT, OKX, HYPERLIQUID',
  },
  {
    kind: 'verdicts: a limit that is not a number',
    method: 'GET',
    path: '/api/verdicts?limit=abc',
    status: 400,
    code: 'INVALID_LIMIT',
    field: 'limit',
    message: 'limit must be an integer from 1 to 1000000',
  },
  {
    kind: 'search: a query of the wrong type',
    method: 'POST',
    path: '/api/search',
    body: { query: 5 },
    status: 400,
    code: 'INVALID_QUERY',
    message: 'query is missing, not a string, or all whitespace or invisible',
  },
  {
    kind: 'search: a limit that is a fraction',
    method: 'POST',
    path: '/api/search',
    body: { query: 'funding rate', limit: 1.5 },
    status: 400,
    code: 'INVALID_LIMIT',
    message: 'limit must be an integer from 1 to 50',
  },
  // The keyed pay-per-call route: a tool's input over HTTP.
  {
    kind: 'x402 get_trade_call: coin of the wrong type',
    method: 'POST',
    path: '/x402/get_trade_call',
    body: { coin: 5 },
    status: 400,
    code: 'invalid_input',
    message: 'coin must be a string of 1 to 20 characters; got 5',
  },
  {
    kind: 'x402 get_trade_call: a coin given as a pair',
    method: 'POST',
    path: '/x402/get_trade_call',
    body: { coin: 'BTC-USDT' },
    status: 400,
    code: 'invalid_input',
    message:
      'coin must be letters and digits only, a coin symbol such as BTC (the market is its USDT pair); got "BTC-USDT"',
  },
  {
    kind: 'x402 get_trade_call: a timeframe not among the allowed',
    method: 'POST',
    path: '/x402/get_trade_call',
    body: { coin: 'BTC', timeframe: '7m' },
    status: 400,
    code: 'invalid_input',
    message: 'timeframe must be one of 1m, 3m, 5m, 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d; got "7m"',
  },
  {
    kind: 'x402 get_trade_call: riskBudgetUsd of the wrong type',
    method: 'POST',
    path: '/x402/get_trade_call',
    body: { coin: 'BTC', riskBudgetUsd: '100' },
    status: 400,
    code: 'invalid_input',
    message: 'riskBudgetUsd must be a number from 0.01 to 10000000; got "100"',
  },
  // The scan a digest runs answers the same two venues the same way: a name that is no venue is
  // a bad value (400), a venue this deployment does not serve is unprocessable (422).
  {
    kind: 'x402 scan_trade_calls: a venue the service does not know',
    method: 'POST',
    path: '/x402/scan_trade_calls',
    body: { exchange: 'KRAKEN', timeframe: '1h' },
    status: 400,
    code: 'invalid_input',
    message: 'exchange must be one of BINANCE, BINANCE_SPOT, BYBIT, OKX, HYPERLIQUID; got "KRAKEN"',
  },
  {
    kind: 'x402 scan_trade_calls: a venue the service knows but does not serve',
    method: 'POST',
    path: '/x402/scan_trade_calls',
    body: { exchange: 'BYBIT', timeframe: '1h' },
    status: 422,
    code: 'unsupported_exchange',
    message:
      'exchange BYBIT is not served by the replay feed: the replay data has no BYBIT candles (funding only); candles are served for BINANCE_SPOT, BINANCE',
  },
];

describe('a bad value is refused in words of ours, with its documented status, code and field', () => {
  it.each(CASES.map((c) => [c.kind, c] as const))('%s', async (_kind, c) => {
    const res = await send(c.method, c.path.replace('{id}', hook), c.body);
    expect(res.status, JSON.stringify(res.body)).toBe(c.status);
    expect(res.body.code).toBe(c.code);
    expect(res.body.field).toBe(c.field);
    expect(res.body.message).not.toMatch(ZOD_WORDING);
    expect(res.body.message).toBe(c.message);
  });

  it.each([
    ['a budget given as text', { coin: 'BTC', riskBudgetUsd: '100' }, 'riskBudgetUsd'],
    ['a timeframe not among the allowed', { coin: 'BTC', timeframe: '7m' }, 'timeframe'],
    ['coin of the wrong type', { coin: 5 }, 'coin'],
    ['a coin given as a pair', { coin: 'BTC-USDT' }, 'coin'],
  ])('MCP get_trade_call: %s is -32602 naming the field, in words of ours', async (_kind, args, field) => {
    const result = (await mcp.callTool({ name: 'get_trade_call', arguments: args })) as {
      isError?: boolean;
      structuredContent?: { code?: string; issues?: { path: string; message: string }[] };
      content: { text: string }[];
    };
    expect(result.isError).toBe(true);
    expect(result.content[0]!.text).toMatch(/^-32602 /);
    expect(result.content[0]!.text).not.toMatch(ZOD_WORDING);
    expect(result.structuredContent?.code).toBe('invalid_arguments');
    const issue = result.structuredContent?.issues?.[0];
    expect(issue?.path).toBe(field);
    expect(issue?.message).toMatch(new RegExp(`^${field} must be .+; got `));
    expect(issue?.message).not.toMatch(ZOD_WORDING);
  });

  it('MCP search_knowledge: a limit out of bounds is INVALID_LIMIT in the words POST /api/search uses', async () => {
    const result = (await mcp.callTool({
      name: 'search_knowledge',
      arguments: { query: 'funding rate', limit: 0 },
    })) as { isError?: boolean; structuredContent?: { code?: string }; content: { text: string }[] };
    expect(result.isError).toBe(true);
    expect(result.structuredContent?.code).toBe('INVALID_LIMIT');
    expect(result.content[0]!.text).toBe('INVALID_LIMIT: limit must be an integer from 1 to 50');
  });
});
