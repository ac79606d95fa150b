import type { z } from 'zod';
import type { Config } from '../../../contracts/config.ts';
import { type GetTradeCallInput, TOOL_SCHEMAS, type ToolName } from '../../../contracts/tools.ts';
import type { SignalOperations } from '../../engine/operations.ts';

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
  return [
    {
      name: 'get_trade_call',
      description: 'Composite BUY/SELL/HOLD verdict for a coin and timeframe',
      input: TOOL_SCHEMAS.get_trade_call.input,
      price: (input) =>
        input === null
          ? prices.X402_PRICE_GET_TRADE_CALL
          : tradeCallPrice(prices, (input as z.output<typeof GetTradeCallInput>).timeframe),
      run: (ops, input, requestId) => ops.getTradeCall(input as never, { requestId }),
    },
    {
      name: 'get_market_regime',
      description: 'Market regime reading for a coin and timeframe',
      input: TOOL_SCHEMAS.get_market_regime.input,
      price: () => prices.X402_PRICE_GET_MARKET_REGIME,
      run: (ops, input, requestId) => ops.getMarketRegime(input as never, { requestId }),
    },
    {
      name: 'scan_funding_arb',
      description: 'Funding-rate arbitrage scan across venues',
      input: TOOL_SCHEMAS.scan_funding_arb.input,
      price: () => prices.X402_PRICE_SCAN_FUNDING_ARB,
      run: (ops, input, requestId) => ops.scanFundingArb(input as never, { requestId }),
    },
    {
      name: 'scan_trade_calls',
      description: 'Ranked trade calls over the top markets of a venue',
      input: TOOL_SCHEMAS.scan_trade_calls.input,
      price: () => prices.X402_PRICE_SCAN_TRADE_CALLS,
      run: (ops, input, requestId) => ops.scanTradeCalls(input as never, { requestId }),
    },
  ];
}
