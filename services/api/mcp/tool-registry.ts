import type { z } from 'zod';
import { jsonSchema } from '../../../contracts/json-schema.ts';
import { TOOL_NAMES, TOOLS, type ToolAnnotations, type ToolName } from '../../../contracts/tools.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import type { Caller } from '../../metering/caller.ts';
import { ServiceBlock } from '../../metering/service-meta.ts';

export interface ToolContext {
  requestId: string;
  /** Who is calling: tools with a budget of their own (the chat quota) count against it. */
  caller?: Caller;
  /**
   * The origin the call came to (requestOrigin: scheme and Host), where the channel has one: a tool
   * naming the service's own addresses (the knowledge tools' source_url) names them under it when
   * PUBLIC_BASE_URL is unset.
   */
  origin?: string;
}

/**
 * One MCP tool: its input schema (the single source for validation and the advertised JSON
 * Schema) and what it runs. The sold tools are registered from the table in contracts/tools.ts;
 * the knowledge slice adds its free tools (search_knowledge, chat_knowledge) to the same registry.
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
  /** Absent: read-only and open-world, titled like the tool. */
  annotations?: ToolAnnotations;
  run(args: z.output<S>, ctx: ToolContext): Promise<Record<string, unknown>>;
}

export interface AdvertisedTool {
  name: string;
  title: string;
  description: string;
  inputSchema: { type: 'object'; [key: string]: unknown };
  outputSchema?: { type: 'object'; [key: string]: unknown };
  annotations: ToolAnnotations;
}

/** The annotations MCP advertises for a tool (discovery's server card repeats them). */
export function annotationsOf(tool: Pick<ToolDefinition, 'title' | 'annotations'>): ToolAnnotations {
  return tool.annotations ?? { title: tool.title, readOnlyHint: true, openWorldHint: true };
}

/**
 * A tool schema as agents read it: tools/list goes into a model's context, so the keywords that
 * only repeat what another states are left out — zod writes a 330-character pattern beside every
 * `format: date-time` (49 of them in the listing) and JavaScript's safe-integer bound on every
 * integer (256). The schema accepts what it accepted; `format` still says the time's form.
 */
export function forAgents(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(forAgents);
  if (node === null || typeof node !== 'object') return node;
  const out: Record<string, unknown> = {};
  const record = node as Record<string, unknown>;
  for (const [key, value] of Object.entries(record)) {
    if (key === 'pattern' && record.format === 'date-time') continue;
    if (key === 'maximum' && value === Number.MAX_SAFE_INTEGER) continue;
    if (key === 'minimum' && value === Number.MIN_SAFE_INTEGER) continue;
    out[key] = forAgents(value);
  }
  return out;
}

/** `_service` as the OpenAPI document types it (auth, quota, a paid call's receipt, the chat quota). */
const SERVICE_SCHEMA = forAgents(jsonSchema(ServiceBlock, 'output'));

/**
 * What every tool error's structuredContent carries: a code, and `_service`. Clients that check
 * structuredContent against outputSchema even on errors must find errors valid too.
 */
const TOOL_ERROR_SCHEMA = {
  type: 'object',
  properties: { code: { type: 'string' }, error: { type: 'string' }, _service: SERVICE_SCHEMA },
  required: ['code'],
} as const;

/**
 * The advertised output: the result with its `_service` block, or a tool error. One object
 * schema (MCP requires `type: object` at the top) with the two shapes as alternatives.
 */
export function outputSchemaOf(output: z.ZodType): { type: 'object'; anyOf: Record<string, unknown>[] } {
  return {
    type: 'object',
    anyOf: [forAgents(answerSchemaOf(output)) as Record<string, unknown>, TOOL_ERROR_SCHEMA],
  };
}

/** The schema of a tool's answer with its `_service` block (what a paid HTTP call answers 200 with). */
export function answerSchemaOf(output: z.ZodType): Record<string, unknown> {
  const result = jsonSchema(output, 'output');
  const properties = { ...(result.properties as Record<string, unknown>), _service: SERVICE_SCHEMA };
  const required = [...((result.required as string[] | undefined) ?? []), '_service'];
  return { ...result, properties, required };
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
      annotations: annotationsOf(tool),
    }));
    return this.advertised;
  }

  /** Every registered tool, in registration order. */
  all(): ToolDefinition[] {
    return [...this.tools.values()];
  }
}

/**
 * The engine operation behind each sold tool. Kept here, not in the table: contracts/ does not
 * import the engine.
 */
const OPERATIONS = {
  get_trade_call: 'getTradeCall',
  get_market_regime: 'getMarketRegime',
  get_risk_forecast: 'getRiskForecast',
  scan_trade_calls: 'scanTradeCalls',
  scan_funding_arb: 'scanFundingArb',
  get_track_record: 'getTrackRecord',
} as const satisfies Record<ToolName, keyof SignalOperations>;

/**
 * Runs a sold tool's operation. With `parsed`, `input` is the output of the tool's own input
 * schema and the operation does not parse it again; without, the operation parses it.
 */
export function runOperation<N extends ToolName>(
  ops: Pick<SignalOperations, (typeof OPERATIONS)[N]>,
  name: N,
  input: unknown,
  requestId: string,
  parsed = false,
): Promise<object> {
  // `ops` holds the operation of `name` (its type says so); TypeScript cannot call the union.
  return (ops as SignalOperations)[OPERATIONS[name]](input as never, { requestId, parsed });
}

/** The sold tools as contracts/tools.ts describes them, in MCP's terms. */
export function signalToolTable(): Omit<ToolDefinition, 'run'>[] {
  return TOOL_NAMES.map((name) => {
    const { title, description, annotations, input, output, example } = TOOLS[name];
    return { name, title, description, annotations, input, output, example };
  });
}

/** The sold tools as MCP tools, over the engine. */
export function signalTools(ops: SignalOperations): ToolDefinition[] {
  return signalToolTable().map((tool) => ({
    ...tool,
    // `args` is what the tool's input schema output (tool-call.ts parsed them).
    run: (args, ctx) =>
      runOperation(ops, tool.name as ToolName, args, ctx.requestId, true) as Promise<Record<string, unknown>>,
  }));
}

export function toolRegistry(tools: ToolDefinition[]): ToolRegistry {
  const registry = new ToolRegistry();
  for (const tool of tools) registry.register(tool);
  return registry;
}
