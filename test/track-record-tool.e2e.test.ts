import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { TrackRecordResponse } from '../contracts/history.ts';
import { Exchange, Timeframe } from '../contracts/market.ts';
import { MAX_TOOL_RESULT_CHARS } from '../contracts/tools.ts';
import { escapeJson } from '../services/api/mcp/answer-json.ts';
import { startX402Stack, type X402Stack } from './chain/x402-app.ts';
import { type ServedHistory, startSettledHistory } from './history-harness.ts';

/**
 * Agents read the track record through MCP (the get_track_record tool and the track-record://
 * resources, through the official MCP client) and buy it over x402 at a regime reading's price:
 * the same answer GET /api/track-record serves, over a real recorded history whose outcomes the
 * real resolver labelled.
 */
let settled: ServedHistory;
let history: ServedHistory['server'];
let stack: X402Stack;
let client: Client;

beforeAll(async () => {
  settled = await startSettledHistory({ steps: 40 });
  history = settled.server;
  const { fx } = settled;
  // The selling side over the same log and the same replay clock (the track record's `asOf`).
  stack = await startX402Stack({}, undefined, undefined, { store: fx.store, feed: fx.feed });
  client = new Client({ name: 'analyst-agent', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${stack.url}/mcp`)));
});
afterAll(async () => {
  await client?.close();
  await stack?.stop();
  await settled?.close();
});

async function publicRecord(window: string): Promise<TrackRecordResponse> {
  const res = await fetch(`${history.url}/api/track-record?window=${window}`);
  expect(res.status).toBe(200);
  return TrackRecordResponse.parse(await res.json());
}

function withoutService(structured: unknown): unknown {
  const { _service, ...rest } = structured as Record<string, unknown>;
  expect(_service).toMatchObject({ auth: { tier: 'free' } });
  return rest;
}

/**
 * What the tool answers, stated from the public answer: no day-by-day series; asked for neither
 * an exchange nor a timeframe, every line without its confidence buckets and the risk baselines
 * at the six-candle horizon only; asked for one, the lines and the baselines (cells, risk and
 * regime-label rows) of that venue (kind) and timeframe, buckets and every horizon included.
 */
function narrowed(record: TrackRecordResponse, exchange?: string, timeframe?: string): TrackRecordResponse {
  const kind = exchange === undefined ? undefined : exchange === 'BINANCE_SPOT' ? 'spot' : 'perp';
  const asked = exchange !== undefined || timeframe !== undefined;
  return {
    ...record,
    series: [],
    lines: record.lines
      .filter((l) => (!exchange || l.exchange === exchange) && (!timeframe || l.timeframe === timeframe))
      .map((l) => (asked ? l : { ...l, buckets: [] })),
    baselines: {
      ...record.baselines!,
      cells: record.baselines!.cells.filter(
        (c) => (!kind || c.cell.startsWith(`${kind}:`)) && (!timeframe || c.cell.endsWith(`:${timeframe}`)),
      ),
      risk: record.baselines!.risk.filter(
        (r) =>
          (asked || r.horizon === 'verdict') &&
          (!kind || r.set === kind) &&
          (!timeframe || r.timeframe === timeframe),
      ),
      labels: record.baselines!.labels.filter(
        (l) => (!kind || l.set === kind) && (!timeframe || l.timeframe === timeframe),
      ),
    },
  };
}

describe('get_track_record over MCP (official client)', () => {
  it('is listed with its schemas and answers what GET /api/track-record serves', async () => {
    const { tools } = await client.listTools();
    const tool = tools.find((t) => t.name === 'get_track_record')!;
    expect(tool.title).toBe('Track record');
    expect(tool.inputSchema.properties).toHaveProperty('window');
    expect(tool.outputSchema).toBeDefined();
    expect(tool.annotations).toMatchObject({ readOnlyHint: true });

    const expected = await publicRecord('all');
    // The per-cell record, the risk forecast's record and the free baselines are all there.
    expect(expected.overall.calls + expected.overall.holds).toBeGreaterThan(0);
    expect(expected.overall.risk.points).toBeGreaterThan(0);
    expect(expected.lines.length).toBeGreaterThan(0);
    expect(expected.baselines?.cells.length).toBeGreaterThan(0);
    // The stack folds the same log on its own runner: wait until it has caught up.
    await vi.waitFor(
      async () => {
        const result = await client.callTool({ name: 'get_track_record', arguments: { window: 'all' } });
        expect(result.isError).toBeFalsy();
        expect(withoutService(result.structuredContent)).toEqual(narrowed(expected));
      },
      // A bound against a hang, not a figure: the fold of the whole slice on a loaded machine.
      { timeout: 60_000, interval: 50 },
    );
    const month = await client.callTool({ name: 'get_track_record', arguments: { window: '30d' } });
    expect(withoutService(month.structuredContent)).toEqual(narrowed(await publicRecord('30d')));
    // Defaulted: the whole history.
    const plain = await client.callTool({ name: 'get_track_record', arguments: {} });
    expect(withoutService(plain.structuredContent)).toEqual(narrowed(expected));
    // Built from the replay feed, and the agent is told so: in a field, in words, counted per line.
    const told = withoutService(plain.structuredContent) as TrackRecordResponse;
    expect(told.feed).toBe('replay');
    expect(told.feedNote).toContain('not a live track record');
    expect(told.overall.feeds).toEqual({
      live: 0,
      replay: expected.overall.calls + expected.overall.holds,
      replayLooped: 0,
    });
    expect(told.lines.every((l) => l.feeds.live === 0 && l.feeds.replay === l.calls + l.holds)).toBe(true);
    // One venue, one timeframe: its line with its confidence buckets, its cell's baselines.
    const spot = await client.callTool({
      name: 'get_track_record',
      arguments: { exchange: 'BINANCE_SPOT', timeframe: '5m' },
    });
    const one = withoutService(spot.structuredContent) as TrackRecordResponse;
    expect(one).toEqual(narrowed(expected, 'BINANCE_SPOT', '5m'));
    expect(one.lines).toHaveLength(1);
    expect(one.lines[0]!.buckets.length).toBeGreaterThan(0);
    expect(one.baselines!.cells.map((c) => c.cell)).toEqual(['spot:5m']);
    expect(one.baselines!.risk.length).toBeGreaterThan(0);
    // The whole answer, twice in the MCP result (structuredContent and its text), fits a host's limit.
    const json = JSON.stringify(plain.structuredContent);
    console.log(
      `get_track_record on this history: ${JSON.stringify(plain).length} characters (answer ${json.length})`,
    );
    expect(JSON.stringify(plain).length).toBeLessThanOrEqual(MAX_TOOL_RESULT_CHARS);
  });

  it('stays within an MCP host’s limit at its largest: every venue and timeframe a live feed serves', async () => {
    const record = await publicRecord('all');
    const longest = record.lines.reduce((a, b) =>
      JSON.stringify(b).length > JSON.stringify(a).length ? b : a,
    );
    expect(longest.buckets.length).toBeGreaterThan(0);
    /** The tools/call result as the service writes it (the JSON twice: structuredContent and its text). */
    const mcpChars = (answer: unknown) => {
      const json = JSON.stringify({ ...(answer as object), _service: { auth: {}, quota: {} } });
      return `{"content":[{"type":"text","text":"${escapeJson(json)}"}],"structuredContent":${json}}`.length;
    };
    const every = (timeframes: readonly string[], exchanges: readonly string[]) =>
      exchanges.flatMap((exchange) => timeframes.map((timeframe) => ({ ...longest, exchange, timeframe })));
    // Asked for nothing: a line per venue and timeframe, without buckets; all the baselines.
    const wide = narrowed({ ...record, lines: every(Timeframe.options, Exchange.options) as never });
    expect(wide.lines).toHaveLength(Exchange.options.length * Timeframe.options.length);
    // One venue: its lines with their buckets, the baselines of its kind (spot has the most rows).
    const venue = narrowed(
      { ...record, lines: every(Timeframe.options, ['BINANCE_SPOT']) as never },
      'BINANCE_SPOT',
    );
    for (const [label, answer] of [
      ['every venue and timeframe', wide],
      ['one venue, every timeframe', venue],
    ] as const) {
      const chars = mcpChars(answer);
      console.log(`get_track_record worst case (${label}): ${chars} characters`);
      expect(chars, label).toBeLessThanOrEqual(MAX_TOOL_RESULT_CHARS);
    }
  });

  it('refuses a window it does not know, as a tool error', async () => {
    const result = await client.callTool({ name: 'get_track_record', arguments: { window: '1y' } });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ code: 'invalid_arguments' });
  });

  it('refuses a venue or timeframe no market is served on, as get_trade_call does; a held one answers', async () => {
    const text = (result: Awaited<ReturnType<typeof client.callTool>>) =>
      (result.content as { type: string; text: string }[])[0]!.text;
    for (const [args, tradeCall] of [
      [
        { exchange: 'BYBIT', timeframe: '1h' },
        { coin: 'BTC', exchange: 'BYBIT', timeframe: '1h' },
      ],
      [
        { exchange: 'OKX', timeframe: '1m' },
        { coin: 'BTC', exchange: 'OKX', timeframe: '1m' },
      ],
      [{ exchange: 'OKX' }, { coin: 'BTC', exchange: 'OKX' }],
    ] as const) {
      const refused = await client.callTool({ name: 'get_track_record', arguments: args });
      const call = await client.callTool({ name: 'get_trade_call', arguments: tradeCall });
      expect(call.isError, JSON.stringify(tradeCall)).toBe(true);
      expect(refused.isError, JSON.stringify(args)).toBe(true);
      expect(refused.structuredContent).toMatchObject({
        code: (call.structuredContent as { code: string }).code,
      });
      expect(text(refused)).toBe(text(call));
      expect(text(refused)).toMatch(
        /^unsupported_exchange: exchange (BYBIT|OKX) is not served by the replay feed/,
      );
    }
    // A timeframe no venue serves, asked of every venue (no exchange): the scans' code, said of
    // every venue with the timeframes they serve, not of the one venue a scan defaults to.
    const minute = await client.callTool({ name: 'get_track_record', arguments: { timeframe: '1m' } });
    const scan = await client.callTool({ name: 'scan_trade_calls', arguments: { timeframe: '1m' } });
    expect(minute.isError).toBe(true);
    expect(minute.structuredContent).toMatchObject({ code: 'unsupported_timeframe' });
    expect(text(scan)).toMatch(/^unsupported_timeframe: timeframe 1m is not available for BINANCE_SPOT/);
    expect(text(minute)).toBe(
      'unsupported_timeframe: timeframe 1m is not available on any venue here (BINANCE_SPOT, BINANCE): ' +
        'they serve 5m, 15m, 30m, 1h, 2h, 4h, 8h, 12h, 1d',
    );
    expect(text(minute)).not.toContain('not available for');
    // The call named no coin: the refusal names none (not the venue's top market it probed).
    expect(text(minute)).not.toMatch(/\b(BTC|ETH)\b/);
    // Served and held: answered (the history holds BINANCE 1h and BINANCE_SPOT 5m).
    for (const args of [
      { exchange: 'BINANCE', timeframe: '1h' },
      { exchange: 'BINANCE' },
      { timeframe: '5m' },
    ]) {
      const served = await client.callTool({ name: 'get_track_record', arguments: args });
      expect(served.isError, JSON.stringify(args)).toBeFalsy();
    }
  });

  it('refuses a misspelt argument naming the ones it accepts', async () => {
    const result = await client.callTool({ name: 'get_track_record', arguments: { windw: '7d' } });
    expect(result.isError).toBe(true);
    expect(result.structuredContent).toMatchObject({ code: 'invalid_arguments' });
    const text = (result.content as { type: string; text: string }[])[0]!.text;
    expect(text).toContain(
      'invalid arguments for get_track_record: (arguments): unknown key "windw"; accepted: window',
    );
  });

  it('serves the same as resources: resources/list answers, each window reads as JSON', async () => {
    const { resources } = await client.listResources();
    expect(resources.map((r) => r.uri)).toEqual([
      'track-record://7d',
      'track-record://30d',
      'track-record://90d',
      'track-record://all',
    ]);
    expect(resources.every((r) => r.mimeType === 'application/json')).toBe(true);
    const { resourceTemplates } = await client.listResourceTemplates();
    expect(resourceTemplates.map((t) => t.uriTemplate)).toEqual(['track-record://{window}']);
    // A read takes no arguments: each describes what it carries, not the tool's narrowing by
    // exchange and timeframe, nor buckets, horizons or a series it never holds.
    for (const { description } of [...resources, ...resourceTemplates]) {
      expect(description).not.toContain('narrowed to the exchange and timeframe asked');
      expect(description).toContain('without their confidence buckets');
      expect(description).toContain('the risk baselines at the six-candle horizon only');
      expect(description).toContain('It carries no day-by-day series');
    }
    for (const window of ['7d', 'all']) {
      const read = await client.readResource({ uri: `track-record://${window}` });
      expect(read.contents).toHaveLength(1);
      const [content] = read.contents as { uri: string; mimeType: string; text: string }[];
      expect(content!.uri).toBe(`track-record://${window}`);
      expect(content!.mimeType).toBe('application/json');
      const carried = JSON.parse(content!.text) as TrackRecordResponse;
      expect(carried).toEqual(narrowed(await publicRecord(window)));
      // What the descriptions say it carries.
      expect(carried.series).toEqual([]);
      expect(carried.lines.every((l) => l.buckets.length === 0)).toBe(true);
      expect(new Set(carried.baselines!.risk.map((r) => r.horizon))).toEqual(new Set(['verdict']));
    }
    const missing = await client.readResource({ uri: 'track-record://1y' }).then(
      () => null,
      (err: unknown) => err,
    );
    expect(missing).toBeInstanceOf(McpError);
    expect((missing as McpError).code).toBe(-32002);
  });

  it('answers resources/list on a session-less request too, not -32601', async () => {
    const res = await fetch(`${stack.url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'resources/list' }),
    });
    const body = (await res.json()) as { result?: { resources: { uri: string }[] }; error?: unknown };
    expect(body.error).toBeUndefined();
    expect(body.result!.resources.map((r) => r.uri)).toContain('track-record://all');
  });
});

describe('get_track_record over x402', () => {
  it('is quoted at a regime reading’s price, then served on payment', async () => {
    const quote = await fetch(`${stack.url}/x402/get_track_record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ window: '30d' }),
    });
    expect(quote.status).toBe(402);
    const regime = await fetch(`${stack.url}/x402/get_market_regime`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ coin: 'ETH' }),
    });
    const amounts = async (res: Response) =>
      ((await res.json()) as { accepts: { maxAmountRequired: string }[] }).accepts.map(
        (a) => a.maxAmountRequired,
      );
    expect(await amounts(quote)).toEqual(['20000']);
    expect(await amounts(regime)).toEqual([String(stack.config.X402_PRICE_GET_MARKET_REGIME)]);

    const payer = await stack.chain.fundedPayer(1_000_000n);
    const x402 = new x402Client();
    registerExactEvmScheme(x402, { signer: privateKeyToAccount(payer.key) });
    const res = await wrapFetchWithPayment(fetch, x402)(`${stack.url}/x402/get_track_record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ window: '30d' }),
    });
    expect(res.status).toBe(200);
    const { _service, ...record } = (await res.json()) as Record<string, unknown>;
    expect(record).toEqual(narrowed(await publicRecord('30d')));
    expect(_service).toMatchObject({ payment: { amount: '20000', payer: payer.address } });
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n - 20_000n);
  });

  it('a bad window is refused with the payment attached, and nothing is charged', async () => {
    const payer = await stack.chain.fundedPayer(1_000_000n);
    const x402 = new x402Client();
    registerExactEvmScheme(x402, { signer: privateKeyToAccount(payer.key) });
    const res = await wrapFetchWithPayment(fetch, x402)(`${stack.url}/x402/get_track_record`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ window: 'forever' }),
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { code: string; message: string }).code).toBe('invalid_input');
    await stack.x402.settled();
    expect(await stack.chain.balanceOf(payer.address)).toBe(1_000_000n);
  });
});
