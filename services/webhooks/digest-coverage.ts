import { unservedAnswer } from '../../adapters/market/errors.ts';
import { ServiceError } from '../../contracts/errors.ts';
import type { Exchange, Timeframe } from '../../contracts/market.ts';

/** The venues and timeframes the engine records a verdict for on every candle close (its schedule). */
export interface RecordedMarkets {
  exchanges: readonly Exchange[];
  timeframes: readonly Timeframe[];
}

/**
 * Whether a `scan_digest` subscription can ever list a market, checked at create. A digest lists
 * the verdicts on record (the latest-verdicts projection), so its venue and timeframe must be
 * both served and recorded:
 *
 * - served: refused as scan_trade_calls refuses the same venue and timeframe, same code (422
 *   `unsupported_exchange` / `unsupported_timeframe`) and words, by the scan's own check
 *   (`unserved`, the engine's unservedVenue); `field` names the venue or the timeframe;
 * - recorded: a venue or timeframe the scan answers but the engine does not record on its
 *   schedule (SCHEDULE_EXCHANGE, SCHEDULE_TIMEFRAMES) has a verdict on record only where a call
 *   asked for one (get_trade_call and the scans record what they compute), of any age: a digest of
 *   it would list stale rows or "no verdict recorded". 400 INVALID_FIELD naming the field and
 *   what is recorded.
 */
export function digestCoverage(deps: {
  unserved: (input: { exchange: Exchange; timeframe: Timeframe }) => Promise<Error | null>;
  /** Read at each check: the default venue is the feed's, known once it is open. */
  recorded: () => RecordedMarkets;
}) {
  return {
    async check(exchange: Exchange, timeframe: Timeframe): Promise<void> {
      const refusal = unservedAnswer(await deps.unserved({ exchange, timeframe }));
      if (refusal) throw refusal;
      const { exchanges, timeframes } = deps.recorded();
      if (!exchanges.includes(exchange)) {
        const detail = `exchange: a digest lists the verdicts the engine records on its schedule, on ${exchanges.join(', ')} only; a verdict on ${exchange} is recorded only when a call asks for it, so a digest's rows would be whatever was asked last, of any age`;
        throw new ServiceError('INVALID_FIELD', { detail }, 'exchange');
      }
      if (!timeframes.includes(timeframe)) {
        const detail = `timeframe: a digest lists the verdicts the engine records on its schedule, at ${timeframes.join(', ') || 'no timeframe'} only; a ${timeframe} verdict is recorded only when a call asks for it, so a digest's rows would be whatever was asked last, of any age`;
        throw new ServiceError('INVALID_FIELD', { detail }, 'timeframe');
      }
    },
  };
}

export type DigestCoverage = ReturnType<typeof digestCoverage>;
