import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryCache } from '../../../adapters/cache/memory.ts';
import { startKeyedServer } from '../../../test/keyed-harness.ts';

/**
 * What an LLM agent reads before it trades on an answer: the tool's description and its output
 * schema, as the official SDK client lists them. A walk as a trading agent's developer found the
 * core field, `call`, and the `feed` that tells replayed data from live data, without a word in
 * the schema (their meaning was only in TypeScript comments), and the trade call's description
 * not saying what HOLD asks of the agent or the range of its confidence.
 */
type Server = Awaited<ReturnType<typeof startKeyedServer>>;
type Schema = { description?: string; properties?: Record<string, Schema>; items?: Schema; anyOf?: Schema[] };

/** The schema of a successful answer: the output schema's first branch (the second is a tool error). */
const answerOf = (schema: Schema) => (schema.anyOf ?? [schema])[0]!;

describe('what an agent reads in tools/list (SDK client, real port)', () => {
  let server: Server;
  let client: Client;
  let tools: Awaited<ReturnType<Client['listTools']>>['tools'];

  beforeAll(async () => {
    server = await startKeyedServer({ cache: new MemoryCache() });
    client = new Client({ name: 'trading-agent', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`)));
    ({ tools } = await client.listTools());
  });
  afterAll(async () => {
    await client?.close();
    await server?.close();
  });

  const output = (name: string) => answerOf(tools.find((t) => t.name === name)!.outputSchema as Schema);

  it('the trade call says what HOLD asks of the agent and the range of its confidence', () => {
    const description = tools.find((t) => t.name === 'get_trade_call')!.description!;
    expect(description).toContain('HOLD: stand aside, no trade advised');
    expect(description).toContain('confidence (0–100');
  });

  it('every verdict says in its schema what BUY, SELL and HOLD mean, over which horizon', () => {
    const calls = [
      output('get_trade_call').properties!.call!,
      output('scan_trade_calls').properties!.calls!.items!.properties!.call!,
    ];
    for (const call of calls) {
      expect(call.description).toMatch(/six candles/);
      expect(call.description).toMatch(
        /BUY, go long; SELL, go short; HOLD, stand aside \(no trade advised\)/,
      );
    }
    const trade = output('get_trade_call').properties!;
    for (const field of ['edge', 'verifyUrl', 'signalHash', 'trackRecord'])
      expect(trade[field]!.description, field).toEqual(expect.any(String));
  });

  it('every answer built from market data says in its schema what a replayed feed is', () => {
    for (const name of ['get_trade_call', 'get_market_regime', 'get_risk_forecast', 'scan_trade_calls']) {
      expect(output(name).properties!.feed!.description, name).toMatch(
        /^live: .*; replay: .*not the market now/,
      );
    }
  });

  it('every regime label is explained where the answers carry one', () => {
    const regimes = [
      output('get_trade_call').properties!.regime!,
      output('get_market_regime').properties!.regime!,
      output('get_risk_forecast').properties!.regime!,
      output('scan_trade_calls').properties!.calls!.items!.properties!.regime!,
    ];
    for (const regime of regimes) {
      for (const label of ['trending-up / trending-down:', 'ranging:', 'volatile:', 'squeeze:'])
        expect(regime.description).toContain(label);
    }
    const reading = output('get_market_regime').properties!;
    for (const field of ['suggestion', 'label_evidence', 'confidence_meaning'])
      expect(reading[field]!.description, field).toEqual(expect.any(String));
  });

  it('an answer read against that schema is one of the verdicts it describes', async () => {
    const result = await client.callTool({
      name: 'get_trade_call',
      arguments: { coin: 'BTC', timeframe: '1h' },
    });
    const answer = result.structuredContent as { call: string; feed: string };
    expect(['BUY', 'SELL', 'HOLD']).toContain(answer.call);
    expect(['live', 'replay']).toContain(answer.feed);
  });
});
