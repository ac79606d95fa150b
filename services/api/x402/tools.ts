import type { z } from 'zod';
import type { Config } from '../../../contracts/config.ts';
import { type GetTradeCallInput, TOOL_SCHEMAS, type ToolName } from '../../../contracts/tools.ts';
import type { SignalOperations } from '../../engine/operations.ts';
import { runOperation } from '../mcp/tool-registry.ts';

/** What each paid route sells, its price for a given (validated) body, and how it runs. */
export interface PaidTool {
  name: ToolName;
  description: string;
  input: z.ZodType;
  /** Price for a validated body; null (an unreadable body) prices the tool's base call. */
  price(input: unknown | null): number;
  run(ops: SignalOperations, input: unknown, requestId: string): Promise<unknown>;
}

export type X402Prices = Pick<
  Config,
  | 'X402_PRICE_GET_TRADE_CALL'
  | 'X402_PRICE_GET_TRADE_CALL_1M'
  | 'X402_PRICE_GET_TRADE_CALL_3M'
  | 'X402_PRICE_GET_TRADE_CALL_5M'
  | 'X402_PRICE_GET_MARKET_REGIME'
  | 'X402_PRICE_SCAN_FUNDING_ARB'
  | 'X402_PRICE_SCAN_TRADE_CALLS'
>;

/** Short timeframes cost more: the quote states the price of the request actually made. */
export function tradeCallPrice(prices: X402Prices, timeframe: string): number {
  switch (timeframe) {
    case '1m':
      return prices.X402_PRICE_GET_TRADE_CALL_1M;
    case '3m':
      return prices.X402_PRICE_GET_TRADE_CALL_3M;
    case '5m':
      return prices.X402_PRICE_GET_TRADE_CALL_5M;
    default:
      return prices.X402_PRICE_GET_TRADE_CALL;
  }
}

export function paidTools(prices: X402Prices): PaidTool[] {
  const tool = (name: ToolName, description: string, price: PaidTool['price']): PaidTool => ({
    name,
    description,
    input: TOOL_SCHEMAS[name].input,
    price,
    run: (ops, input, requestId) => runOperation(ops, name, input, requestId),
  });
  return [
    tool('get_trade_call', 'Composite BUY/SELL/HOLD verdict for a coin and timeframe', (input) =>
      input === null
        ? prices.X402_PRICE_GET_TRADE_CALL
        : tradeCallPrice(prices, (input as z.output<typeof GetTradeCallInput>).timeframe),
    ),
    tool(
      'get_market_regime',
      'Market regime reading for a coin and timeframe',
      () => prices.X402_PRICE_GET_MARKET_REGIME,
    ),
    tool(
      'scan_funding_arb',
      'Funding-rate arbitrage scan across venues',
      () => prices.X402_PRICE_SCAN_FUNDING_ARB,
    ),
    tool(
      'scan_trade_calls',
      'Ranked trade calls over the top markets of a venue',
      () => prices.X402_PRICE_SCAN_TRADE_CALLS,
    ),
  ];
}
