import type { z } from 'zod';
import { priceKeyOf, TOOL_NAMES, TOOLS, type ToolName, type ToolPrices } from '../../contracts/tools.ts';
import { runOperation } from '../api/mcp/tool-registry.ts';
import type { SignalOperations } from '../engine/operations.ts';

/** What each paid route sells, its price for a given (validated) body, and how it runs. */
export interface PaidTool {
  name: ToolName;
  title: string;
  description: string;
  input: z.ZodType;
  output: z.ZodType;
  /** Price for a validated body; null (an unreadable body) prices the tool's base call. */
  price(input: unknown | null): number;
  /** The price of each value of the one input field the price depends on, if it depends on one. */
  priceBy: { field: string; amounts: Record<string, number> } | null;
  /**
   * Runs the tool on `input`, the output of `input`'s parse (the route read and validated the body
   * before anything was charged): the engine does not parse it again.
   */
  run(ops: SignalOperations, input: unknown, requestId: string): Promise<unknown>;
}

export type X402Prices = ToolPrices;

/** Every tool of contracts/tools.ts, priced from configuration. */
export function paidTools(prices: X402Prices): PaidTool[] {
  return TOOL_NAMES.map((name) => {
    const { title, description, input, output, price: rule } = TOOLS[name];
    return {
      name,
      title,
      description,
      input,
      output,
      price: (body) => prices[priceKeyOf(rule, body)],
      priceBy: rule.by
        ? {
            field: rule.by.field,
            amounts: Object.fromEntries(
              Object.entries(rule.by.keys).map(([value, key]) => [value, prices[key]]),
            ),
          }
        : null,
      run: (ops, body, requestId) => runOperation(ops, name, body, requestId, true),
    };
  });
}
