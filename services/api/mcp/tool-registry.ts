import type { z } from 'zod';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { TOOL_SCHEMAS, type ToolName } from '../../../contracts/tools.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import type { Caller } from '../caller.ts';

export interface ToolContext {
  requestId: string;
  /** Who is calling: tools with a budget of their own (the chat quota) count against it. */
  caller?: Caller;
}

/**
 * One MCP tool: its input schema (the single source for validation and the advertised JSON
 * Schema) and what it runs. The four signal tools are registered from contracts/tools.ts; the
 * knowledge tools join the same registry later.
 */
export interface ToolDefinition<S extends z.ZodType = z.ZodType> {
  name: string;
  title: string;
  description: string;
  input: S;
  /** What a successful call returns (before `_service` is added); advertised as outputSchema. */
  output?: z.ZodType;
  /** A valid set of arguments, for discovery documents. */
  example?: Record<string, unknown>;
  run(args: z.output<S>, ctx: ToolContext): Promise<Record<string, unknown>>;
}

export interface AdvertisedTool {
  name: string;
  title: string;
  description: string;
  inputSchema: { type: 'object'; [key: string]: unknown };
  outputSchema?: { type: 'object'; [key: string]: unknown };
  annotations: { title: string; readOnlyHint: boolean; openWorldHint: boolean };
}

/**
 * What every tool error's structuredContent carries: a code, and `_service`. Clients that check
 * structuredContent against outputSchema even on errors must find errors valid too.
 */
const TOOL_ERROR_SCHEMA = {
  type: 'object',
  properties: { code: { type: 'string' }, error: { type: 'string' }, _service: { type: 'object' } },
  required: ['code'],
} as const;

/**
 * The advertised output: the result with its `_service` block, or a tool error. One object
 * schema (MCP requires `type: object` at the top) with the two shapes as alternatives.
 */
export function outputSchemaOf(output: z.ZodType): { type: 'object'; anyOf: Record<string, unknown>[] } {
  const result = jsonSchema(output, 'output');
  const properties = { ...(result.properties as Record<string, unknown>), _service: { type: 'object' } };
  const required = [...((result.required as string[] | undefined) ?? []), '_service'];
  return { type: 'object', anyOf: [{ ...result, properties, required }, TOOL_ERROR_SCHEMA] };
}

export class ToolRegistry {
  private readonly tools = new Map<string, ToolDefinition>();
  private advertised: AdvertisedTool[] | null = null;

  register<S extends z.ZodType>(tool: ToolDefinition<S>): this {
    if (this.tools.has(tool.name)) throw new Error(`tool ${tool.name} is registered twice`);
    this.tools.set(tool.name, tool as unknown as ToolDefinition);
    this.advertised = null;
    return this;
  }

  get(name: string): ToolDefinition | undefined {
    return this.tools.get(name);
  }

  /** The tools/list answer, computed once: converting schemas on every list call is waste. */
  list(): AdvertisedTool[] {
    this.advertised ??= [...this.tools.values()].map((tool) => ({
      name: tool.name,
      title: tool.title,
      description: tool.description,
      inputSchema: { ...jsonSchema(tool.input, 'input'), type: 'object' as const },
      ...(tool.output ? { outputSchema: outputSchemaOf(tool.output) } : {}),
      annotations: { title: tool.title, readOnlyHint: true, openWorldHint: true },
    }));
    return this.advertised;
  }

  /** Every registered tool, in registration order. */
  all(): ToolDefinition[] {
    return [...this.tools.values()];
  }
}

const DESCRIPTIONS: Record<
  ToolName,
  { title: string; description: string; example: Record<string, unknown> }
> = {
  get_trade_call: {
    example: { coin: 'BTC', timeframe: '1h' },
    title: 'Trade call',
    description:
      'Composite BUY / SELL / HOLD verdict for a coin on one timeframe and venue, from closed candles only, with calibrated confidence, regime, indicator readings and a verifiable signal hash.',
  },
  get_market_regime: {
    example: { coin: 'ETH', timeframe: '4h' },
    title: 'Market regime',
    description:
      'Market regime (trending, ranging, choppy, volatile, squeeze) for a coin and timeframe, with the metrics behind it.',
  },
  scan_trade_calls: {
    example: { limit: 5 },
    title: 'Scan trade calls',
    description: 'Evaluates the top-N markets of a venue by volume and returns the strongest calls, ranked.',
  },
  scan_funding_arb: {
    example: { limit: 5 },
    title: 'Funding arbitrage scan',
    description:
      'Perpetual funding-rate spreads across venues, normalised per hour and annualised, with the best long/short pair per coin.',
  },
};

/** The engine operation behind each sold tool. */
const OPERATIONS: Record<ToolName, keyof SignalOperations> = {
  get_trade_call: 'getTradeCall',
  get_market_regime: 'getMarketRegime',
  scan_trade_calls: 'scanTradeCalls',
  scan_funding_arb: 'scanFundingArb',
};

/** Runs a sold tool's operation; `input` must already be parsed by the tool's input schema. */
export function runOperation(
  ops: SignalOperations,
  name: ToolName,
  input: unknown,
  requestId: string,
): Promise<object> {
  return ops[OPERATIONS[name]](input as never, { requestId });
}

/** The four sold operations as the tool table describes them: what discovery documents are built from. */
export function signalToolTable(): Omit<ToolDefinition, 'run'>[] {
  return (Object.keys(OPERATIONS) as ToolName[]).map((name) => ({
    name,
    ...DESCRIPTIONS[name],
    input: TOOL_SCHEMAS[name].input,
    output: TOOL_SCHEMAS[name].output,
  }));
}

/** The four sold operations as MCP tools, over the engine. */
export function signalTools(ops: SignalOperations): ToolDefinition[] {
  return signalToolTable().map((tool) => ({
    ...tool,
    run: (args, ctx) =>
      runOperation(ops, tool.name as ToolName, args, ctx.requestId) as Promise<Record<string, unknown>>,
  }));
}

export function toolRegistry(tools: ToolDefinition[]): ToolRegistry {
  const registry = new ToolRegistry();
  for (const tool of tools) registry.register(tool);
  return registry;
}
