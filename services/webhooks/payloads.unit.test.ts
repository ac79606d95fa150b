import { describe, expect, it } from 'vitest';
import type { EventData } from '../../contracts/events.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import { regimeShiftEnvelope, scanDigestEnvelope, tradeCallEnvelope, withSeq } from './payloads.ts';

const verdict = (inputs: Record<string, number | string | boolean | null>): EventData<'VerdictRecorded'> => ({
  exchange: 'BINANCE_SPOT',
  coin: 'BTC',
  timeframe: '15m',
  call: 'SELL',
  confidence: 47,
  score: 0.4,
  regime: 'ranging',
  price: 110_000,
  candleCloseTime: Date.UTC(2025, 9, 25, 10),
  feed: 'replay',
  engineVersion: 'signals-3',
  inputs,
  hash: 'a'.repeat(64),
  prevHash: null,
  trigger: 'schedule',
});

describe('trade_call webhook payload', () => {
  it('carries the verdict’s volatility forecast and expected-move band', () => {
    const envelope = tradeCallEnvelope({
      deliveryId: 'd-1',
      createdAt: new Date(0).toISOString(),
      verifyUrl: 'https://signals.example/verify/x/0',
      verdict: verdict({
        vol_horizon_candles: 6,
        vol_expected_move_pct: 0.42,
        vol_band_low: 109_400,
        vol_band_high: 110_600,
        vol_band_coverage: 0.8,
        vol_percentile: 63,
      }),
    });
    WebhookEnvelope.parse(envelope);
    expect(envelope.data).toMatchObject({
      expected_move: {
        horizon_candles: 6,
        expected_move_pct: 0.42,
        band_low: 109_400,
        band_high: 110_600,
        band_coverage: 0.8,
      },
    });
  });

  it('says null for verdicts recorded before the forecast existed', () => {
    const envelope = tradeCallEnvelope({
      deliveryId: 'd-2',
      createdAt: new Date(0).toISOString(),
      verifyUrl: 'https://signals.example/verify/x/1',
      verdict: verdict({ rsi: 40 }),
    });
    expect(envelope.data).toMatchObject({ expected_move: null });
  });
});

describe('every market payload says which feed its content came from', () => {
  it.each(['replay', 'live'] as const)('%s: trade_call, regime_shift and scan_digest carry it', (feed) => {
    const base = { deliveryId: 'd', createdAt: new Date(0).toISOString(), verifyUrl: 'https://s.example/v' };
    const call = tradeCallEnvelope({ ...base, verdict: { ...verdict({}), feed } });
    const shift = regimeShiftEnvelope({
      ...base,
      signalHash: null,
      shift: {
        exchange: 'BINANCE_SPOT',
        coin: 'BTC',
        timeframe: '1h',
        from: 'ranging',
        to: 'volatile',
        confidence: 50,
        price: 1,
        candleCloseTime: 0,
        feed,
        verdictEventId: crypto.randomUUID(),
      },
    });
    const digest = scanDigestEnvelope({
      ...base,
      cadence: '1h',
      periodStart: 0,
      scan: {
        timeframe: '1h',
        exchange: 'BINANCE_SPOT',
        feed,
        timestamp: 0,
        scanned: 0,
        calls: [],
        skipped: [],
      },
    });
    for (const envelope of [call, shift, digest]) {
      expect(WebhookEnvelope.parse(envelope).data).toMatchObject({ feed });
    }
  });
});

describe('withSeq', () => {
  const body = JSON.stringify({ event: 'trade_call', delivery_id: 'd-1', created_at: 't', data: { x: 1 } });

  it('places seq right after delivery_id, once', () => {
    const sequenced = withSeq(body, 'd-1', 7);
    expect(JSON.parse(sequenced)).toEqual({ ...JSON.parse(body), seq: 7 });
    expect(sequenced).toContain('"delivery_id":"d-1","seq":7,');
    expect(withSeq(sequenced, 'd-1', 7)).toBe(sequenced);
  });

  it('refuses a body of another delivery', () => {
    expect(() => withSeq(body, 'd-2', 1)).toThrow(/d-2/);
  });
});
