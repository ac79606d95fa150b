import type { z } from 'zod';
import { deterministicId } from '../../contracts/deterministic-id.ts';
import type { EventData } from '../../contracts/events.ts';
import type { TrackRecordBrief, TrackRecordBriefPayload } from '../../contracts/history.ts';
import type { ScanTradeCallsOutput } from '../../contracts/tools.ts';
import { EVENT_VERSIONS } from '../../contracts/webhook-schemas.ts';
import type { Cadence, ScanDigestDataV1, WebhookEnvelope } from '../../contracts/webhooks.ts';
import { recordedVolatility } from '../engine/recorded-volatility.ts';
import { defaultCalibration, recordedMeaning } from '../engine/signals/index.ts';

/** A delivery body at a pinned version: the current one's, or version 1's digest (rows without the close). */
export type PinnedEnvelope =
  | WebhookEnvelope
  | (Omit<WebhookEnvelope, 'data'> & { data: z.infer<typeof ScanDigestDataV1> });

/**
 * The envelope in the payload version the subscription pinned (1 for one recorded before versions
 * were). The builders here make the current version's; an earlier version is the same data with
 * what it lacks taken out: version 1 has no `candle_close_time` on a digest's rows.
 */
export function pinnedEnvelope(envelope: WebhookEnvelope, eventVersion: number | undefined): PinnedEnvelope {
  const version = eventVersion ?? 1;
  if (!EVENT_VERSIONS.includes(version))
    throw new Error(`no payload version ${version} of ${envelope.event}`);
  if (version === 1 && envelope.data.type === 'scan_digest') {
    const calls = envelope.data.calls.map(({ candle_close_time: _v2, ...row }) => row);
    return { ...envelope, data: { ...envelope.data, calls }, event_version: version };
  }
  return { ...envelope, event_version: version };
}

/**
 * The body with its sequence number right after `delivery_id`. The claim stores the body without
 * it (the number is appended beside the claim, not before it), and every attempt splices in the
 * same number, so retries still send the same bytes. A body that has one already is returned as is.
 */
export function withSeq(body: string, deliveryId: string, seq: number): string {
  const anchor = `"delivery_id":${JSON.stringify(deliveryId)},`;
  const at = body.indexOf(anchor);
  if (at < 0) throw new Error(`body of ${deliveryId} has no delivery_id to place seq after`);
  const end = at + anchor.length;
  if (body.startsWith('"seq":', end)) return body;
  return `${body.slice(0, end)}"seq":${seq},${body.slice(end)}`;
}

/** Derived from (event id, subscription id): every redelivery carries the same id. */
export function deliveryIdFor(eventId: string, subscriptionId: string): string {
  return deterministicId('webhook-delivery', eventId, subscriptionId);
}

/** A digest's "event": its subscription and the start of the cadence period it covers. */
export function digestEventId(subscriptionId: string, periodStart: number): string {
  return `digest:${subscriptionId}:${new Date(periodStart).toISOString()}`;
}

/** The period start of one of the subscription's digest event ids (digestEventId); null for another id. */
export function digestPeriodOf(subscriptionId: string, eventId: string): number | null {
  const prefix = `digest:${subscriptionId}:`;
  return eventId.startsWith(prefix) ? Date.parse(eventId.slice(prefix.length)) : null;
}

/**
 * A trade call's track-record line as the payload carries it: the published versions pin its
 * shape (closed to other keys), so the trade call's `holds` and `note` stay out.
 */
function payloadLine({ holds: _holds, note: _note, ...line }: TrackRecordBrief): TrackRecordBriefPayload {
  return line;
}

export function tradeCallEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  verdict: EventData<'VerdictRecorded'>;
  verifyUrl: string;
  trackRecord?: TrackRecordBrief | null;
}): WebhookEnvelope {
  const v = input.verdict;
  if (v.call === 'HOLD') throw new Error('HOLD verdicts are not trade calls');
  const vol = recordedVolatility(v.inputs, v.timeframe);
  return {
    event: 'trade_call',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'trade_call',
      feed: v.feed,
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
      expected_move: vol
        ? {
            horizon_candles: vol.horizon_candles,
            expected_move_pct: vol.expected_move_pct,
            band_low: vol.band_low,
            band_high: vol.band_high,
            band_coverage: vol.band_coverage,
          }
        : null,
      ...recordedMeaning(v, defaultCalibration),
      ...(input.trackRecord ? { track_record: payloadLine(input.trackRecord) } : {}),
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
      feed: s.feed,
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

export function riskShiftEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  shift: EventData<'RiskShifted'>;
  signalHash: string | null;
  verifyUrl: string;
}): WebhookEnvelope {
  const s = input.shift;
  return {
    event: 'risk_shift',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'risk_shift',
      feed: s.feed,
      coin: s.coin,
      timeframe: s.timeframe,
      exchange: s.exchange,
      from: s.from,
      to: s.to,
      percentile: s.percentile,
      prior_percentile: s.priorPercentile,
      expected_move: {
        horizon_candles: s.horizonCandles,
        expected_move_pct: s.expectedMovePct,
        band_low: s.bandLow,
        band_high: s.bandHigh,
        band_coverage: s.bandCoverage,
      },
      price: s.price,
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
      feed: input.scan.feed,
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
        candle_close_time: c.timestamp,
        verdict_id: c.verdictId,
        expected_move_pct: c.expectedMovePct,
        lean: c.lean,
        confidence_meaning: c.confidence_meaning,
      })),
      skipped: input.scan.skipped,
      ...(input.scan.note === undefined ? {} : { note: input.scan.note }),
    },
  };
}

export function subscriptionDisabledEnvelope(input: {
  deliveryId: string;
  createdAt: string;
  disabled: { id: string; url: string };
  reason: string;
  consecutiveFailures: number;
}): WebhookEnvelope {
  return {
    event: 'subscription_disabled',
    delivery_id: input.deliveryId,
    created_at: input.createdAt,
    data: {
      type: 'subscription_disabled',
      subscription_id: input.disabled.id,
      url: input.disabled.url,
      reason: input.reason,
      disabled_at: input.createdAt,
      consecutive_failures: input.consecutiveFailures,
    },
  };
}
