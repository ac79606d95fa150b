import { describe, expect, it } from 'vitest';
import type { EventData } from '../../contracts/events.ts';
import { CURRENT_EVENT_VERSION, envelopeSchema } from '../../contracts/webhook-schemas.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import { defaultCalibration, ENGINE_VERSION, recordedMeaning } from '../engine/signals/index.ts';
import { trackRecordBrief } from '../history/track-record.ts';
import { scanDigestEnvelope, tradeCallEnvelope } from './payloads.ts';
import { sampleEnvelope } from './sample.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';

const sub = (events: SubscriptionRecord['events'], extra: Partial<SubscriptionRecord> = {}) =>
  ({
    id: 's-1',
    url: 'https://h.example/x',
    events,
    eventVersion: CURRENT_EVENT_VERSION,
    ...extra,
  }) as SubscriptionRecord;

const sample = (s: SubscriptionRecord) =>
  WebhookEnvelope.parse(sampleEnvelope(s, 'https://s.example', 'replay'));
const keys = (o: object) => Object.keys(o).sort();

const verdict: EventData<'VerdictRecorded'> = {
  exchange: 'BINANCE',
  coin: 'BTC',
  timeframe: '1h',
  call: 'BUY',
  confidence: 72,
  score: 0.4,
  regime: 'trending-up',
  price: 65_000,
  candleCloseTime: Date.UTC(2025, 9, 25, 10),
  feed: 'replay',
  engineVersion: ENGINE_VERSION,
  inputs: {
    vol_horizon_candles: 6,
    vol_expected_move_pct: 1.9,
    vol_band_low: 63_450,
    vol_band_high: 66_580,
    vol_band_coverage: 0.8,
    vol_percentile: 60,
  },
  hash: 'a'.repeat(64),
  prevHash: null,
  trigger: 'schedule',
};

describe('test deliveries carry every field the real payload carries', () => {
  it('trade_call: the forecast and the track record too, schema-valid', () => {
    const real = tradeCallEnvelope({
      deliveryId: 'd',
      createdAt: new Date(0).toISOString(),
      verdict,
      verifyUrl: 'https://s.example/verify/x/0',
      trackRecord: {
        window: '90d',
        exchange: 'BINANCE',
        timeframe: '1h',
        confidenceBucket: '70-79',
        calls: 10,
        hits: 6,
        hitRate: 0.6,
        interval: { low: 0.3, high: 0.85 },
        randomHitRate: 0.5,
      },
    });
    const got = sample(sub(['trade_call'])).data;
    expect(keys(got)).toEqual(keys(real.data));
    if (got.type !== 'trade_call' || real.data.type !== 'trade_call') throw new Error('not a trade call');
    expect(keys(got.track_record!)).toEqual(keys(real.data.track_record!));
    expect(keys(got.expected_move!)).toEqual(keys(real.data.expected_move!));
  });

  it('trade_call: its track record is of the window a real call carries', () => {
    const got = sample(sub(['trade_call'])).data;
    if (got.type !== 'trade_call') throw new Error('not a trade call');
    const carried = trackRecordBrief({}, { exchange: 'BINANCE', timeframe: '1h', confidence: 72 }, 0);
    expect(carried.window).toBe('90d');
    expect(got.track_record!.window).toBe(carried.window);
  });

  it("scan_digest: its period starts on a boundary of the cadence, as a real digest's does", () => {
    const hours = { '1h': 1, '4h': 4, '1d': 24 } as const;
    for (const cadence of ['1h', '4h', '1d'] as const) {
      const got = sample(
        sub(['scan_digest'], { cadence, timeframe: '1h', exchange: 'BINANCE_SPOT', topN: 3 }),
      ).data;
      if (got.type !== 'scan_digest') throw new Error('not a digest');
      expect(Date.parse(got.period_start) % (hours[cadence] * 3_600_000), cadence).toBe(0);
      expect(Date.parse(got.period_start)).toBeLessThanOrEqual(Date.now());
    }
  });

  it('scan_digest: every row field, expected_move_pct included, schema-valid', () => {
    const real = scanDigestEnvelope({
      deliveryId: 'd',
      createdAt: new Date(0).toISOString(),
      cadence: '1h',
      periodStart: 0,
      scan: {
        timeframe: '1h',
        exchange: 'BINANCE_SPOT',
        feed: 'replay',
        timestamp: 0,
        scanned: 1,
        calls: [
          {
            rank: 1,
            coin: 'BTC',
            call: 'BUY',
            confidence: 72,
            score: 0.4,
            regime: 'trending-up',
            price: 65_000,
            timestamp: verdict.candleCloseTime / 1000,
            quoteVolume24h: null,
            verdictId: crypto.randomUUID(),
            expectedMovePct: 1.9,
            ...recordedMeaning({ ...verdict, exchange: 'BINANCE_SPOT' }, defaultCalibration),
          },
        ],
        skipped: [],
      } as never,
    });
    const got = sample(
      sub(['scan_digest'], { exchange: 'BINANCE_SPOT', timeframe: '1h', cadence: '1h', topN: 5 }),
    );
    if (got.data.type !== 'scan_digest' || real.data.type !== 'scan_digest') throw new Error('not a digest');
    expect(keys(got.data)).toEqual(keys(real.data));
    expect(keys(got.data.calls[0]!)).toEqual(keys(real.data.calls[0]!));
  });

  it('scan_digest at version 1: rows without candle_close_time, valid against scan_digest.v1', () => {
    const digest = { exchange: 'BINANCE_SPOT', timeframe: '1h', cadence: '1h', topN: 5 } as const;
    const v1 = sampleEnvelope(
      sub(['scan_digest'], { ...digest, eventVersion: 1 }),
      'https://s.example',
      'replay',
    );
    expect(envelopeSchema('scan_digest', 1).safeParse(v1).success).toBe(true);
    if (v1.data.type !== 'scan_digest') throw new Error('not a digest');
    expect(v1.data.calls[0]).not.toHaveProperty('candle_close_time');
    const v2 = sample(sub(['scan_digest'], digest)).data;
    if (v2.type !== 'scan_digest') throw new Error('not a digest');
    expect(v2.calls[0]!.candle_close_time).toEqual(expect.any(Number));
  });

  it('every other event type is schema-valid', () => {
    for (const event of ['regime_shift', 'risk_shift', 'subscription_disabled'] as const) {
      expect(sample(sub([event])).data.type).toBe(event);
    }
  });
});
