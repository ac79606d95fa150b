import { randomUUID } from 'node:crypto';
import type { z } from 'zod';
import { TRADE_CALL_TRACK_RECORD_WINDOW } from '../../contracts/history.ts';
import type { FeedKind } from '../../contracts/market.ts';
import type { TradeCallData, WebhookEnvelope } from '../../contracts/webhooks.ts';
import { periodStart } from './digest-schedule.ts';
import { type PinnedEnvelope, pinnedEnvelope } from './payloads.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

/**
 * Where a sample's verify_url points: a route that answers 200 and says it is a sample (there is
 * no recorded verdict behind a test delivery to verify).
 */
export const SAMPLE_VERIFY_PATH = '/verify/sample';

export const SAMPLE_VERIFY_BODY = {
  sample: true,
  message:
    'this verify_url comes from a test delivery (POST /api/webhooks/:id/test): no verdict was recorded for it; real deliveries link /verify/<stream>/<revision>',
} as const;

/** A clearly marked sample delivery for POST /api/webhooks/:id/test, shaped like the real thing. */
export function sampleEnvelope(
  sub: SubscriptionRecord,
  verifyBaseUrl: string,
  feed: FeedKind,
): PinnedEnvelope {
  return pinnedEnvelope(sampleAtCurrentVersion(sub, verifyBaseUrl, feed), sub.eventVersion);
}

/** The sample at the current payload version; `sampleEnvelope` pins it to the subscription's. */
function sampleAtCurrentVersion(
  sub: SubscriptionRecord,
  verifyBaseUrl: string,
  feed: FeedKind,
): WebhookEnvelope {
  const deliveryId = `test_${randomUUID()}`;
  const created = new Date().toISOString();
  const verify = `${verifyBaseUrl}${SAMPLE_VERIFY_PATH}`;
  const base: SampleCallFields = {
    feed,
    coin: 'BTC',
    timeframe: sub.timeframes?.[0] ?? '1h',
    exchange: sub.exchange ?? 'BINANCE',
    confidence: 72,
    price_at_call: 65_000,
    candle_close_time: Math.floor(Date.now() / 3_600_000) * 3_600,
    signal_hash: '0'.repeat(64),
    verify_url: verify,
  };
  const event = sub.events[0]!;
  return {
    event,
    delivery_id: deliveryId,
    created_at: created,
    test: true,
    data: sampleData(event, sub, created, base),
  } as WebhookEnvelope;
}

/** The fields a sample trade call and regime shift share (typed from the payload contract). */
type SampleCallFields = Pick<
  z.infer<typeof TradeCallData>,
  | 'feed'
  | 'coin'
  | 'timeframe'
  | 'exchange'
  | 'confidence'
  | 'price_at_call'
  | 'candle_close_time'
  | 'signal_hash'
  | 'verify_url'
>;

/** A sample BUY's lean and the words for its confidence, shaped like a real call's. */
const SAMPLE_MEANING: Pick<z.infer<typeof TradeCallData>, 'lean' | 'confidence_meaning'> = {
  lean: {
    direction: 'BUY',
    timing_skill: true,
    measurable: true,
    expected_net_bps: 4.2,
    expected_net_bps_low: 0.6,
    expected_net_bps_high: 7.8,
  },
  confidence_meaning:
    '72 = the calibrated chance that this BUY beats the 10 bps round-trip fee over the next 6 candles (sample: no cell sells a direction today).',
};

/** A sample forecast: σ over the verdict horizon and its band, as real calls and shifts carry it. */
const SAMPLE_EXPECTED_MOVE = {
  horizon_candles: 6,
  expected_move_pct: 1.9,
  band_low: 63_450,
  band_high: 66_580,
  band_coverage: 0.8,
};

/** A sample track record of the call's cell, as a real trade call carries it when one is known. */
function sampleTrackRecord(
  base: SampleCallFields,
): NonNullable<z.infer<typeof TradeCallData>['track_record']> {
  return {
    window: TRADE_CALL_TRACK_RECORD_WINDOW,
    exchange: base.exchange,
    timeframe: base.timeframe,
    confidenceBucket: '70-79',
    calls: 120,
    hits: 71,
    hitRate: 71 / 120,
    interval: { low: 0.5, high: 0.68 },
    randomHitRate: 0.5,
  };
}

/** The sample's data for the subscription's first event type. */
function sampleData(
  event: SubscriptionRecord['events'][number],
  sub: SubscriptionRecord,
  created: string,
  base: SampleCallFields,
): WebhookEnvelope['data'] {
  switch (event) {
    case 'scan_digest':
      return {
        type: 'scan_digest',
        feed: base.feed,
        cadence: sub.cadence ?? '1h',
        timeframe: sub.timeframe ?? '1h',
        exchange: sub.exchange ?? 'BINANCE',
        // Aligned to the cadence, as a real digest's period is (on the wall clock here).
        period_start: new Date(periodStart(sub.cadence ?? '1h', Date.parse(created))).toISOString(),
        calls: [
          {
            rank: 1,
            coin: 'BTC',
            call: 'BUY',
            confidence: 72,
            regime: 'trending-up',
            price: 65_000,
            candle_close_time: base.candle_close_time,
            verdict_id: '00000000-0000-4000-8000-000000000000',
            expected_move_pct: SAMPLE_EXPECTED_MOVE.expected_move_pct,
            ...SAMPLE_MEANING,
          },
        ],
        skipped: [],
      };
    case 'subscription_disabled':
      return {
        type: 'subscription_disabled',
        subscription_id: sub.id,
        url: sub.url,
        reason: 'sample: this is a test delivery, nothing was disabled',
        disabled_at: created,
        consecutive_failures: 0,
      };
    case 'regime_shift':
      return {
        type: 'regime_shift',
        ...base,
        regime: 'trending-up',
        prior_regime: 'ranging',
      };
    case 'risk_shift':
      return {
        type: 'risk_shift',
        feed: base.feed,
        coin: base.coin,
        timeframe: base.timeframe,
        exchange: base.exchange,
        from: 'middle',
        to: 'top',
        percentile: 93,
        prior_percentile: 71,
        expected_move: SAMPLE_EXPECTED_MOVE,
        price: base.price_at_call,
        candle_close_time: base.candle_close_time,
        signal_hash: base.signal_hash,
        verify_url: base.verify_url,
      };
    default:
      return {
        type: 'trade_call',
        ...base,
        call: 'BUY',
        regime: 'trending-up',
        expected_move: SAMPLE_EXPECTED_MOVE,
        ...SAMPLE_MEANING,
        track_record: sampleTrackRecord(base),
      };
  }
}
