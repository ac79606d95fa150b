import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pino } from 'pino';
import { beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../../adapters/event-store/memory.ts';
import { loadConfig } from '../../../contracts/config.ts';
import { TrackRecordWindow } from '../../../contracts/history.ts';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { Regime } from '../../../contracts/market.ts';
import { priceKeyOf, TOOL_NAMES, TOOLS } from '../../../contracts/tools.ts';
import { CARRY_HORIZONS_HOURS } from '../../engine/funding/carry.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import { ServiceBlock } from '../../metering/service-meta.ts';
import { quotedDescription } from '../../payments/quote.ts';
import { setupX402, type X402Setup } from '../../payments/setup.ts';
import {
  catalogTools,
  llmsTxt,
  mcpServerCard,
  paymentPolicy,
  registryServerJson,
  undescribed,
  x402Manifest,
} from '../discovery/catalog.ts';
import { forAgents, outputSchemaOf, signalTools, signalToolTable, toolRegistry } from './tool-registry.ts';

/**
 * contracts/tools.ts is the only place a sold tool is described and priced: MCP, the x402 quote
 * and every discovery document say what the table says, and no other source file says it again.
 */

// A facilitator key: the MCP quote is offered only where a payment can settle (mcpPayments).
const config = loadConfig({
  NODE_ENV: 'test',
  EVENT_STORE: 'memory',
  X402_FACILITATOR_PRIVATE_KEY: `0x${'11'.repeat(32)}`,
});
const ORIGIN = 'http://api.test';
let x402: X402Setup;

beforeAll(async () => {
  // Setup only builds the routes and quotes; no operation runs here.
  const setup = await setupX402(config, {
    ops: {} as SignalOperations,
    store: new MemoryEventStore(),
    logger: pino({ level: 'silent' }),
  });
  if (setup === null) throw new Error('expected the development rail');
  x402 = setup;
});

describe('the tool table', () => {
  it('has valid examples and price keys that configuration defines', () => {
    for (const name of TOOL_NAMES) {
      const tool = TOOLS[name];
      expect(tool.input.safeParse(tool.example).success, name).toBe(true);
      expect(config[tool.price.key], name).toBeGreaterThan(0);
      for (const key of Object.values(tool.price.by?.keys ?? {}))
        expect(config[key], name).toBeGreaterThan(0);
      expect(tool.annotations.title).toBe(tool.title);
    }
  });

  it('is what MCP lists: title, description, annotations, input and output schemas', () => {
    const listed = toolRegistry(signalTools({} as SignalOperations)).list();
    expect(listed.map((t) => t.name)).toEqual(TOOL_NAMES);
    for (const name of TOOL_NAMES) {
      const tool = TOOLS[name];
      expect(listed.find((t) => t.name === name)).toEqual({
        name,
        title: tool.title,
        description: tool.description,
        inputSchema: { ...jsonSchema(tool.input, 'input'), type: 'object' },
        outputSchema: outputSchemaOf(tool.output),
        annotations: tool.annotations,
      });
    }
  });

  it('types `_service` in every outputSchema as the OpenAPI document does (ServiceBlock), in an answer and in a tool error', () => {
    const service = forAgents(jsonSchema(ServiceBlock, 'output'));
    expect(service).toMatchObject({ required: ['auth', 'quota'], additionalProperties: false });
    for (const tool of toolRegistry(signalTools({} as SignalOperations)).list()) {
      const [answer, refusal] = tool.outputSchema!.anyOf as { properties: Record<string, unknown> }[];
      expect(answer!.properties._service, tool.name).toEqual(service);
      expect(refusal!.properties._service, tool.name).toEqual(service);
    }
  });

  it('lists no keyword that only repeats another: no pattern beside format date-time, no safe-integer bound', () => {
    const listed = JSON.stringify(toolRegistry(signalTools({} as SignalOperations)).list());
    // zod writes both on every time and integer field; the OpenAPI document keeps them.
    expect(JSON.stringify(jsonSchema(ServiceBlock, 'output'))).toContain('"pattern"');
    expect(listed).toContain('"format":"date-time"');
    // Whatever order a schema's keywords come in.
    const timed: unknown[] = [];
    JSON.parse(listed, (_key, value) => {
      if (value?.format === 'date-time') timed.push(value);
      return value;
    });
    expect(timed.length).toBeGreaterThan(0);
    expect(timed.filter((node) => Object.hasOwn(node as object, 'pattern'))).toEqual([]);
    expect(listed).not.toContain(String(Number.MAX_SAFE_INTEGER));
    expect(listed).not.toContain(String(Number.MIN_SAFE_INTEGER));
  });

  it('is what x402 sells and quotes: the description and the price of the rule', async () => {
    expect(x402.tools.map((t) => t.name)).toEqual(TOOL_NAMES);
    for (const name of TOOL_NAMES) {
      const tool = TOOLS[name];
      const paid = x402.tools.find((t) => t.name === name)!;
      expect(paid.description).toBe(tool.description);
      expect(paid.title).toBe(tool.title);
      const args = tool.input.parse(tool.example);
      const quote = (await x402.mcp.paymentRequirements(name, args)) as {
        resource: { description: string };
        accepts: { amount: string }[];
        extensions: { bazaar: unknown };
      };
      expect(quote.resource.description).toBe(quotedDescription(tool.description));
      const price = config[priceKeyOf(tool.price, args)];
      expect(quote.accepts.map((a) => a.amount)).toEqual(x402.rails.map(() => String(price)));
      // The bazaar extension carries the table's example and input schema, without the field
      // descriptions (they ride in a header; tools/list and the server card carry them).
      expect(quote.extensions.bazaar).toMatchObject({
        info: { input: { method: 'POST', body: tool.example } },
        schema: {
          properties: { input: { properties: { body: undescribed(jsonSchema(tool.input, 'input')) } } },
        },
      });
      expect(JSON.stringify(quote.extensions.bazaar)).not.toContain('"description"');
    }
  });

  it('prices a trade call per timeframe from its config key, and an unreadable body at the base price', () => {
    const trade = x402.tools.find((t) => t.name === 'get_trade_call')!;
    expect(trade.price(null)).toBe(config.X402_PRICE_GET_TRADE_CALL);
    expect(trade.price(TOOLS.get_trade_call.input.parse({ coin: 'BTC', timeframe: '1m' }))).toBe(
      config.X402_PRICE_GET_TRADE_CALL_1M,
    );
    expect(trade.price(TOOLS.get_trade_call.input.parse({ coin: 'BTC' }))).toBe(
      config.X402_PRICE_GET_TRADE_CALL,
    );
    expect(trade.priceBy).toMatchObject({
      field: 'timeframe',
      amounts: {
        '1m': config.X402_PRICE_GET_TRADE_CALL_1M,
        '3m': config.X402_PRICE_GET_TRADE_CALL_3M,
        '5m': config.X402_PRICE_GET_TRADE_CALL_5M,
        '4h': config.X402_PRICE_GET_TRADE_CALL,
      },
    });
  });

  it('describes every input field of every tool in tools/list, and says the unit of the output figures that carry one', () => {
    const listed = toolRegistry(signalTools({} as SignalOperations)).list();
    const undescribed = listed.flatMap((tool) =>
      Object.entries(tool.inputSchema.properties as Record<string, { description?: string }>)
        .filter(([, field]) => !field.description?.trim())
        .map(([key]) => `${tool.name}.${key}`),
    );
    expect(undescribed).toEqual([]);
    // The answer's schema (the first alternative of the advertised output), field by dotted path:
    // arrays by their items, a nullable object by its non-null alternative.
    type Node = { description?: string; properties?: Record<string, Node>; items?: Node; anyOf?: Node[] };
    const field = (name: string, path: string): string | undefined => {
      let node = (listed.find((t) => t.name === name)!.outputSchema as unknown as { anyOf: Node[] })
        .anyOf[0]!;
      for (const key of path.split('.')) {
        if (node.anyOf) node = node.anyOf.find((n) => n.properties || n.items)!;
        if (node.items) node = node.items;
        node = node.properties![key]!;
      }
      return node.description;
    };
    const units: [string, string, RegExp][] = [
      ['get_trade_call', 'timestamp', /Unix time in seconds/],
      ['get_trade_call', 'confidence', /Percent, 0–100/],
      [
        'get_trade_call',
        'volatility.expected_move_pct',
        /^Percent .*standard deviation \(σ\) of the log return/,
      ],
      ['get_trade_call', 'volatility.band_coverage', /^Fraction \(0–1, not percent\)/],
      ['get_trade_call', 'volatility.sizing.notional_usd', /USD notional/],
      ['get_trade_call', 'lean.expected_net_bps', /basis points/],
      ['get_market_regime', 'timestamp', /Unix time in seconds/],
      ['get_market_regime', 'confidence', /not a probability/],
      ['get_risk_forecast', 'horizons.expected_move_pct', /^Percent/],
      ['get_risk_forecast', 'horizons.band_coverage', /^Fraction/],
      ['scan_trade_calls', 'timestamp', /Unix time in seconds/],
      ['scan_trade_calls', 'calls.expectedMovePct', /^Percent \(not a fraction\)/],
      ['scan_trade_calls', 'calls.quoteVolume24h', /USD/],
      ['scan_trade_calls', 'skipped', /ranked below limit/],
      ['scan_funding_arb', 'timestamp', /Unix time in seconds/],
      ['scan_funding_arb', 'opportunities.venues.fundingTime', /Unix time in milliseconds/],
      ['scan_funding_arb', 'opportunities.venues.nextFundingTime', /Unix time in milliseconds/],
      ['scan_funding_arb', 'opportunities.venues.rate', /decimal fraction .* per intervalHours/],
      ['scan_funding_arb', 'opportunities.best.spreadBps', /per 8 h, in basis points/],
      ['scan_funding_arb', 'opportunities.carry.feeBps', /bps of one leg's notional/],
      ['scan_funding_arb', 'opportunities.carry.horizons.shareNetPositive', /Fraction \(0–1, not percent\)/],
      ['scan_funding_arb', 'note', /empty/],
    ];
    for (const [name, path, unit] of units) expect(field(name, path), `${name} ${path}`).toMatch(unit);
    const inputOf = (name: string, key: string) =>
      (
        listed.find((t) => t.name === name)!.inputSchema.properties as Record<string, { description: string }>
      )[key]!.description;
    expect(inputOf('scan_funding_arb', 'minSpreadBps')).toMatch(/basis points per 8 h/);
    expect(inputOf('scan_funding_arb', 'minLiquidityUsd')).toMatch(/unknown/);
    expect(inputOf('scan_trade_calls', 'limit')).toMatch(/named in skipped/);
    expect(inputOf('scan_trade_calls', 'topN')).toMatch(/evaluate/);
  });

  it('lists, where a description lists labels, exactly the labels the schema allows', () => {
    // The first parenthesised list of the description, split on commas and a final "or".
    const listed = (description: string) =>
      /\(([^()]+)\)/
        .exec(description)![1]!
        .split(/,\s*|\s+or\s+/)
        .map((label) => label.trim());
    const labelled: [string, readonly string[]][] = [
      [TOOLS.get_market_regime.description, TOOLS.get_market_regime.output.shape.regime.options],
      // The window argument's enum (GetTrackRecordInput.window).
      [TOOLS.get_track_record.description, TrackRecordWindow.options],
    ];
    for (const [description, options] of labelled) expect(listed(description)).toEqual([...options]);
    expect(TOOLS.get_market_regime.output.shape.regime.options).toEqual(Regime.options);
  });

  it('advertises how scan_funding_arb reads repeats: exchanges refused (uniqueItems), coins read once', () => {
    const listed = toolRegistry(signalTools({} as SignalOperations)).list();
    const schema = listed.find((t) => t.name === 'scan_funding_arb')!.inputSchema as unknown as {
      properties: Record<string, Record<string, unknown>>;
    };
    const input = TOOLS.scan_funding_arb.input;
    // Refused by the tool: the schema it advertises says so (before, it passed a validating client).
    expect(input.safeParse({ exchanges: ['BINANCE', 'BINANCE'] }).success).toBe(false);
    expect(schema.properties.exchanges!.uniqueItems).toBe(true);
    // Read once (letter case aside, so uniqueItems could not say it): the description does.
    expect(input.safeParse({ coins: ['btc', 'BTC', 'BTC'] }).success).toBe(true);
    expect(schema.properties.coins!.uniqueItems).toBeUndefined();
    expect(schema.properties.coins!.description).toContain(
      'a symbol named twice, in any letter case, is read once',
    );
  });

  it('says what the funding scan ranks by, over the horizons the carry figures use', () => {
    const description = TOOLS.scan_funding_arb.description;
    expect(description).toContain('ranked by expected net carry (carry.expectedNetCarryBps');
    expect(description).toContain('not by the spread now');
    const hours = [...CARRY_HORIZONS_HOURS];
    const days = Math.max(...hours) / 24;
    expect(description).toContain(`over horizons of ${Math.min(...hours)} hours to ${days} days`);
  });

  it('is what discovery publishes: manifest, server card, llms.txt and server.json', () => {
    const catalog = catalogTools(signalToolTable(), x402.tools);
    const manifest = x402Manifest(ORIGIN, catalog, x402.rails, paymentPolicy(60_000));
    const card = mcpServerCard(ORIGIN, catalog);
    const llms = llmsTxt(ORIGIN, catalog, x402.rails);
    expect(
      registryServerJson(catalog)._meta['io.modelcontextprotocol.registry/publisher-provided'].tools,
    ).toEqual(TOOL_NAMES);
    for (const name of TOOL_NAMES) {
      const tool = TOOLS[name];
      const resource = manifest.resources.find((r) => r.tool === name)!;
      expect(resource).toMatchObject({
        resource: `${ORIGIN}/x402/${name}`,
        title: tool.title,
        description: tool.description,
        price: { amount: String(config[tool.price.key]) },
      });
      expect(card.tools.find((t) => t.name === name)).toEqual({
        name,
        title: tool.title,
        description: tool.description,
        inputSchema: jsonSchema(tool.input, 'input'),
        outputSchema: outputSchemaOf(tool.output),
        annotations: tool.annotations,
      });
      expect(llms).toContain(`- ${name}: ${tool.description} — POST ${ORIGIN}/x402/${name}`);
    }
    // A trade call's price per timeframe, from the amounts the quotes use (not typed in).
    const usd = (atomic: number) => String(atomic / 1_000_000);
    expect(llms).toContain(
      `/x402/get_trade_call, ${usd(config.X402_PRICE_GET_TRADE_CALL)} USD per call; timeframe ` +
        `1m ${usd(config.X402_PRICE_GET_TRADE_CALL_1M)}, 3m ${usd(config.X402_PRICE_GET_TRADE_CALL_3M)}, ` +
        `5m ${usd(config.X402_PRICE_GET_TRADE_CALL_5M)} USD\n`,
    );
    expect(llms).toContain(
      `/x402/get_market_regime, ${usd(config.X402_PRICE_GET_MARKET_REGIME)} USD per call\n`,
    );
  });

  it('is the only source of the descriptions: no other source file repeats one', async () => {
    const root = new URL('../../../', import.meta.url).pathname;
    const sources: string[] = [];
    for (const dir of ['services', 'scripts', 'contracts']) {
      for (const file of await readdir(join(root, dir), { recursive: true })) {
        if (file.endsWith('.ts') && !file.endsWith('.test.ts')) sources.push(join(dir, file));
      }
    }
    const repeats: string[] = [];
    for (const file of sources) {
      if (file === join('contracts', 'tools.ts')) continue;
      const text = await readFile(join(root, file), 'utf8');
      for (const name of TOOL_NAMES) {
        if (text.includes(TOOLS[name].description)) repeats.push(`${file}: ${name}`);
      }
    }
    expect(repeats).toEqual([]);
  });
});
