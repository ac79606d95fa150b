import type {
  GetMarketRegimeInput,
  GetRiskForecastInput,
  GetTradeCallInput,
  RegimeReading,
  RiskForecast,
  ScanFundingArbInput,
  ScanFundingArbOutput,
  ScanTradeCallsInput,
  ScanTradeCallsOutput,
  TradeCall,
} from '../../contracts/tools.ts';

/** Who asked, for correlation in the log; the channels fill it in. */
export interface OperationContext {
  requestId?: string;
  /**
   * The input is already the output of the operation's own input schema (contracts/tools.ts),
   * parsed at the edge (the MCP tool call, the HTTP route): not parsed a second time.
   */
  parsed?: boolean;
}

/**
 * The sold operations, as the channels (x402 HTTP, API-key HTTP, MCP) call them. Inputs are
 * the zod *input* shapes of contracts/tools.ts: each operation parses (and defaults) them itself,
 * so a bad input is an InvalidInputError before any market data is touched, unless the channel
 * says it parsed them already (`parsed`).
 */
export interface SignalOperations {
  getTradeCall(input: GetTradeCallInput, ctx?: OperationContext): Promise<TradeCall>;
  getMarketRegime(input: GetMarketRegimeInput, ctx?: OperationContext): Promise<RegimeReading>;
  getRiskForecast(input: GetRiskForecastInput, ctx?: OperationContext): Promise<RiskForecast>;
  scanTradeCalls(input: ScanTradeCallsInput, ctx?: OperationContext): Promise<ScanTradeCallsOutput>;
  scanFundingArb(input: ScanFundingArbInput, ctx?: OperationContext): Promise<ScanFundingArbOutput>;
}
