import type { EventData } from '../../contracts/events.ts';
import type { ScanTradeCallsOutput } from '../../contracts/tools.ts';
import type { Cadence, WebhookEnvelope } from '../../contracts/webhooks.ts';
import { deterministicId } from '../engine/deterministic-id.ts';

/** Derived from (event id, subscription id): every redelivery carries the same id. */
export function deliveryIdFor(eventId: string, subscriptionId: string): string {
  return deterministicId('webhook-delivery', eventId, subscriptionId);
}

/** A digest's "event": its subscription and the start of the cadence period it covers. */
export function digestEventId(subscriptionId: string, periodStart: number): string {
  return `digest:${subscriptionId}:${new Date(periodStart).toISOString()}`;
}

export function tradeCallEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  verdict: EventData<'VerdictRecorded'>;
  verifyUrl: string;
}): WebhookEnvelope {
  const v = input.verdict;
  if (v.call === 'HOLD') throw new Error('HOLD verdicts are not trade calls');
  return {
    event: 'trade_call',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'trade_call',
      coin: v.coin,
      timeframe: v.timeframe,
      exchange: v.exchange,
      call: v.call,
      confidence: v.confidence,
      regime: v.regime,
      price_at_call: v.price,
      candle_close_time: Math.floor(v.candleCloseTime / 1000),
      signal_hash: v.hash,
      verify_url: input.verifyUrl,
    },
  };
}

export function regimeShiftEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  shift: EventData<'RegimeShifted'>;
  signalHash: string | null;
  verifyUrl: string;
}): WebhookEnvelope {
  const s = input.shift;
  return {
    event: 'regime_shift',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'regime_shift',
      coin: s.coin,
      timeframe: s.timeframe,
      exchange: s.exchange,
      regime: s.to,
      prior_regime: s.from,
      confidence: s.confidence,
      price_at_call: s.price,
      candle_close_time: Math.floor(s.candleCloseTime / 1000),
      signal_hash: input.signalHash,
      verify_url: input.verifyUrl,
    },
  };
}

export function scanDigestEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  cadence: Cadence;
  periodStart: number;
  scan: ScanTradeCallsOutput;
}): WebhookEnvelope {
  return {
    event: 'scan_digest',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'scan_digest',
      cadence: input.cadence,
      timeframe: input.scan.timeframe,
      exchange: input.scan.exchange,
      period_start: new Date(input.periodStart).toISOString(),
      calls: input.scan.calls.map((c) => ({
        rank: c.rank,
        coin: c.coin,
        call: c.call,
        confidence: c.confidence,
        regime: c.regime,
        price: c.price,
        verdict_id: c.verdictId,
      })),
    },
  };
}
