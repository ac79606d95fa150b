import type { TrackRecordResponse } from '../../contracts/history.ts';
import type {
  GetMarketRegimeInput,
  GetRiskForecastInput,
  GetTrackRecordInput,
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
  /** The track record (the history slice's, which decorates the engine's operations with it). */
  getTrackRecord(input: GetTrackRecordInput, ctx?: OperationContext): Promise<TrackRecordResponse>;
}

/** What the engine answers itself: every sold operation but the track record, which history keeps. */
export type EngineOperations = Omit<SignalOperations, 'getTrackRecord'>;
