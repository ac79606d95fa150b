import { z } from 'zod';
import { TOOL_SCHEMAS, type ToolName } from '../../../contracts/tools.ts';
import type { SignalOperations } from '../../engine/operations.ts';

export interface ToolContext {
  requestId: string;
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
  run(args: z.output<S>, ctx: ToolContext): Promise<Record<string, unknown>>;
}

export interface AdvertisedTool {
  name: string;
  title: string;
  description: string;
  inputSchema: { type: 'object'; [key: string]: unknown };
  annotations: { readOnlyHint: boolean; openWorldHint: boolean };
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
    this.advertised ??= [...this.tools.values()].map((tool) => {
      const { $schema: _drop, ...schema } = z.toJSONSchema(tool.input, { io: 'input' }) as Record<
        string,
        unknown
      >;
      return {
        name: tool.name,
        title: tool.title,
        description: tool.description,
        inputSchema: { ...schema, type: 'object' as const },
        annotations: { readOnlyHint: true, openWorldHint: true },
      };
    });
    return this.advertised;
  }
}

const DESCRIPTIONS: Record<ToolName, { title: string; description: string }> = {
  get_trade_call: {
    title: 'Trade call',
    description:
      'Composite BUY / SELL / HOLD verdict for a coin on one timeframe and venue, from closed candles only, with calibrated confidence, regime, indicator readings and a verifiable signal hash.',
  },
  get_market_regime: {
    title: 'Market regime',
    description:
      'Market regime (trending, ranging, choppy, volatile, squeeze) for a coin and timeframe, with the metrics behind it.',
  },
  scan_trade_calls: {
    title: 'Scan trade calls',
    description: 'Evaluates the top-N markets of a venue by volume and returns the strongest calls, ranked.',
  },
  scan_funding_arb: {
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

/** The four sold operations as MCP tools, over the engine. */
export function signalTools(ops: SignalOperations): ToolDefinition[] {
  return (Object.keys(OPERATIONS) as ToolName[]).map((name) => ({
    name,
    ...DESCRIPTIONS[name],
    input: TOOL_SCHEMAS[name].input,
    run: (args, ctx) => runOperation(ops, name, args, ctx.requestId) as Promise<Record<string, unknown>>,
  }));
}

export function toolRegistry(tools: ToolDefinition[]): ToolRegistry {
  const registry = new ToolRegistry();
  for (const tool of tools) registry.register(tool);
  return registry;
}
