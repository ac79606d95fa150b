import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import type { EventData } from '../../contracts/events.ts';
import {
  DELIVERY_HEADERS,
  EVENT_VERSIONS,
  envelopeSchema,
  webhookOpenApi,
} from '../../contracts/webhook-schemas.ts';
import { EVENT_VERSION_HEADER, SEQUENCE_HEADER, signedHeaders } from '../../contracts/webhook-verify.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import type { LatestVerdict } from '../../projections/latest-verdicts.ts';
import { defaultCalibration, ENGINE_VERSION, recordedMeaning } from '../engine/signals/index.ts';
import { projectedScan } from './digest-scan.ts';
import {
  pinnedEnvelope,
  regimeShiftEnvelope,
  riskShiftEnvelope,
  scanDigestEnvelope,
  tradeCallEnvelope,
  withSeq,
} from './payloads.ts';

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

describe('trade_call and scan_digest payloads say what their confidence means', () => {
  it('restates the lean and the words from the recorded score and the engine’s table', () => {
    const recorded = { ...verdict({}), engineVersion: ENGINE_VERSION, call: 'BUY' as const, score: -0.4 };
    const envelope = tradeCallEnvelope({
      deliveryId: 'd-3',
      createdAt: new Date(0).toISOString(),
      verifyUrl: 'https://signals.example/verify/x/2',
      verdict: recorded,
    });
    const data = WebhookEnvelope.parse(envelope).data;
    expect(data).toMatchObject(recordedMeaning(recorded, defaultCalibration));
    // spot:15m fades the score: a negative score leans BUY, with timing skill and a net below 0.
    expect(data).toMatchObject({ lean: { direction: 'BUY', timing_skill: true } });
    expect((data as { confidence_meaning: string }).confidence_meaning).toContain(
      '47 = the calibrated chance that this BUY beats the 10 bps round-trip fee',
    );
    // An older engine's verdict says so rather than borrow today's table.
    const old = tradeCallEnvelope({
      createdAt: new Date(0).toISOString(),
      deliveryId: 'd-4',
      verifyUrl: 'https://s.example/v',
      verdict: verdict({}),
    });
    expect(old.data).toMatchObject({ lean: null });
    expect((old.data as { confidence_meaning: string }).confidence_meaning).toContain('engine signals-3');
  });

  it('a digest row carries its row’s lean and meaning', () => {
    const row = {
      rank: 1,
      coin: 'BTC',
      call: 'HOLD' as const,
      confidence: 55,
      score: 0.2,
      regime: 'ranging' as const,
      price: 1,
      timestamp: 0,
      quoteVolume24h: null,
      verdictId: crypto.randomUUID(),
      expectedMovePct: 0.3,
      ...recordedMeaning(
        {
          exchange: 'BINANCE_SPOT',
          timeframe: '15m',
          call: 'HOLD',
          confidence: 55,
          score: 0.2,
          engineVersion: ENGINE_VERSION,
        },
        defaultCalibration,
      ),
    };
    const digest = scanDigestEnvelope({
      deliveryId: 'd',
      createdAt: new Date(0).toISOString(),
      cadence: '1h',
      periodStart: 0,
      scan: {
        timeframe: '15m',
        exchange: 'BINANCE_SPOT',
        feed: 'replay',
        timestamp: 0,
        scanned: 1,
        calls: [row],
        skipped: [],
      },
    });
    const [call] = (
      WebhookEnvelope.parse(digest).data as { calls: { lean: unknown; confidence_meaning: string }[] }
    ).calls;
    expect(call).toMatchObject({ lean: row.lean, confidence_meaning: row.confidence_meaning });
    expect(call!.confidence_meaning).toContain('55 = how often standing aside was right');
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

describe('risk_shift webhook payload', () => {
  it('carries the decile bands, both percentiles and the forecast behind the shift, in the published schema', () => {
    const verdictEventId = crypto.randomUUID();
    const envelope = riskShiftEnvelope({
      deliveryId: 'd',
      createdAt: new Date(0).toISOString(),
      verifyUrl: 'https://s.example/verify/verdicts-BINANCE-ETH-1h/7',
      signalHash: 'b'.repeat(64),
      shift: {
        exchange: 'BINANCE',
        coin: 'ETH',
        timeframe: '1h',
        from: 'middle',
        to: 'top',
        percentile: 94.5,
        priorPercentile: 80,
        expectedMovePct: 2.1,
        bandLow: 3900,
        bandHigh: 4150,
        bandCoverage: 0.8,
        horizonCandles: 6,
        price: 4020,
        candleCloseTime: Date.UTC(2025, 9, 25, 10),
        feed: 'live',
        verdictEventId,
      },
    });
    expect(envelope).toEqual({
      event: 'risk_shift',
      delivery_id: 'd',
      created_at: new Date(0).toISOString(),
      data: {
        type: 'risk_shift',
        feed: 'live',
        coin: 'ETH',
        timeframe: '1h',
        exchange: 'BINANCE',
        from: 'middle',
        to: 'top',
        percentile: 94.5,
        prior_percentile: 80,
        expected_move: {
          horizon_candles: 6,
          expected_move_pct: 2.1,
          band_low: 3900,
          band_high: 4150,
          band_coverage: 0.8,
        },
        price: 4020,
        candle_close_time: Date.UTC(2025, 9, 25, 10) / 1000,
        signal_hash: 'b'.repeat(64),
        verify_url: 'https://s.example/verify/verdicts-BINANCE-ETH-1h/7',
      },
    });
    expect(envelopeSchema('risk_shift', 1).safeParse({ ...envelope, event_version: 1 }).success).toBe(true);
    // A band outside the three is not a risk_shift.
    const bad = { ...envelope, event_version: 1, data: { ...envelope.data, to: 'high' } };
    expect(envelopeSchema('risk_shift', 1).safeParse(bad).success).toBe(false);
  });
});

describe('scan_digest at each payload version', () => {
  const hour = 3_600_000;
  const close = Date.UTC(2025, 9, 25, 10);
  const latest = (coin: string, candleCloseTime: number): LatestVerdict => ({
    exchange: 'BINANCE',
    coin,
    timeframe: '1h',
    verdictId: crypto.randomUUID(),
    call: 'HOLD',
    confidence: 60,
    score: 0.1,
    regime: 'ranging',
    price: 100,
    candleCloseTime,
    feed: 'replay',
    hash: 'a'.repeat(64),
    expectedMovePct: 1.2,
    engineVersion: ENGINE_VERSION,
    regimeShifts: 0,
  });
  // Each market's verdict of its own close (the digest's, or a later one): a row's close is its own.
  const verdicts = [latest('BTC', close), latest('ETH', close + hour), latest('SOL', close + 2 * hour)];
  const envelope = scanDigestEnvelope({
    deliveryId: 'd',
    createdAt: new Date(0).toISOString(),
    cadence: '1h',
    periodStart: close,
    scan: projectedScan(
      { exchange: 'BINANCE', timeframe: '1h', topN: 3 },
      {
        verdicts: Object.fromEntries(verdicts.map((v) => [`BINANCE:${v.coin}:1h`, v])),
        ranked: verdicts.map((v) => v.coin),
        volumeOf: () => null,
        feed: 'replay',
        now: close + 3 * hour,
        close,
      },
    ),
  });
  // The JSON Schema a receiver downloads (GET /api/webhooks/schemas), objects closed to other keys.
  const published = (version: number) => {
    const op = (webhookOpenApi() as { webhooks: Record<string, { post: Operation }> }).webhooks[
      `scan_digest.v${version}`
    ]!;
    const ajv = new Ajv2020({ strict: false });
    addFormats.default(ajv);
    return ajv.compile(op.post.requestBody.content['application/json'].schema);
  };
  const wire = (version: number) => JSON.parse(JSON.stringify(pinnedEnvelope(envelope, version)));

  it('version 2: every row carries the close time of its own verdict, in Unix seconds', () => {
    const body = wire(2);
    expect(body.event_version).toBe(2);
    const validate = published(2);
    expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
    expect(body.data.calls).toHaveLength(3);
    for (const row of body.data.calls as { verdict_id: string; candle_close_time: number }[]) {
      const of = verdicts.find((v) => v.verdictId === row.verdict_id)!;
      expect(row.candle_close_time).toBe(of.candleCloseTime / 1000);
    }
  });

  it('version 1: the same rows without candle_close_time, valid against the published v1 shape', () => {
    const body = wire(1);
    expect(body.event_version).toBe(1);
    const validate = published(1);
    expect(validate(body), JSON.stringify(validate.errors)).toBe(true);
    for (const row of body.data.calls) expect(row).not.toHaveProperty('candle_close_time');
    // Version 1 refuses a row with the field (the v2 rows under a v1 envelope): a v1 receiver's
    // validator would not accept it.
    const validateV1 = published(1);
    expect(validateV1({ ...wire(2), event_version: 1 })).toBe(false);
    expect(validateV1.errors).toContainEqual(
      expect.objectContaining({
        keyword: 'additionalProperties',
        params: { additionalProperty: 'candle_close_time' },
      }),
    );
    // Only the field differs: the rest of each row, and of the digest, is version 2's.
    const v2 = wire(2);
    for (const row of v2.data.calls) delete row.candle_close_time;
    expect({ ...body, event_version: 2 }).toEqual(v2);
  });

  it('every other event type is the same at both versions; a version that does not exist is refused', () => {
    const call = tradeCallEnvelope({
      deliveryId: 'd',
      createdAt: new Date(0).toISOString(),
      verifyUrl: 'https://s.example/v',
      verdict: verdict({}),
    });
    expect(EVENT_VERSIONS).toEqual([1, 2]);
    expect(pinnedEnvelope(call, 1)).toEqual({ ...call, event_version: 1 });
    expect(pinnedEnvelope(call, 2)).toEqual({ ...call, event_version: 2 });
    // A subscription recorded before versions existed receives version 1.
    expect(pinnedEnvelope(envelope, undefined)).toEqual(pinnedEnvelope(envelope, 1));
    expect(() => pinnedEnvelope(envelope, 3)).toThrow(/no payload version 3/);
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

type Operation = {
  parameters?: { name: string; in: string; required: boolean; description: string }[];
  requestBody: { content: { 'application/json': { schema: JsonSchema } } };
};
type JsonSchema = {
  properties?: Record<string, JsonSchema>;
  items?: JsonSchema;
  description?: string;
  type?: string;
};
const operations = () =>
  Object.entries((webhookOpenApi() as { webhooks: Record<string, { post: Operation }> }).webhooks);

describe('the webhooks section of the OpenAPI document', () => {
  it('says candle_close_time is Unix seconds in every payload that carries it', () => {
    const carried: string[] = [];
    for (const [name, { post }] of operations()) {
      const data = post.requestBody.content['application/json'].schema.properties!.data!;
      // The data, its objects, and the rows of its arrays (a digest's calls).
      const rows = [data, ...Object.values(data.properties ?? {}).flatMap((p) => [p, p.items ?? {}])];
      for (const schema of rows) {
        const close = schema.properties?.candle_close_time;
        if (!close) continue;
        carried.push(name);
        expect(close.description, name).toMatch(/Unix seconds/);
      }
    }
    expect(carried.sort()).toEqual(
      ['regime_shift', 'risk_shift', 'trade_call']
        .flatMap((e) => [`${e}.v1`, `${e}.v2`])
        .concat('scan_digest.v2')
        .sort(),
    );
  });

  it("says whose confidence a regime_shift carries: the verdict's, not the regime label's", () => {
    const [, { post }] = operations().find(([name]) => name === 'regime_shift.v1')!;
    const data = post.requestBody.content['application/json'].schema.properties!.data!;
    expect(data.properties!.confidence!.description).toMatch(
      /^Confidence of the verdict that carried the shift/,
    );
  });

  it('describes every header a delivery carries, on every delivery operation', () => {
    // Every header the sender sets but Content-Type and User-Agent: a rotation's overlap signs twice.
    const sent = Object.keys(
      signedHeaders({
        secret: 'whsec_AAAA',
        previousSecret: 'whsec_BBBB',
        event: 'trade_call',
        deliveryId: 'd-1',
        timestamp: 1,
        rawBody: '{}',
      }),
    );
    const names = [...sent, SEQUENCE_HEADER, EVENT_VERSION_HEADER].sort();
    expect(DELIVERY_HEADERS.map((h) => h.name).sort()).toEqual(names);
    expect(names).toHaveLength(10);
    for (const [name, { post }] of operations()) {
      expect(post.parameters, name).toEqual(
        DELIVERY_HEADERS.map((h) =>
          expect.objectContaining({ name: h.name, in: 'header', required: h.required }),
        ),
      );
      for (const p of post.parameters!) expect(p.description.length, `${name} ${p.name}`).toBeGreaterThan(10);
    }
  });
});

/**
 * Every payload field that may be null says when it is (README, Deliveries): a receiver reading
 * the published schema learns from its description what a null means, not only that one may come.
 */
describe('the published payload schemas say when a field is null', () => {
  type Schema = {
    description?: string;
    anyOf?: Schema[];
    type?: string;
    properties?: Record<string, Schema>;
    items?: Schema;
  };
  const nullable = (s: Schema) =>
    s.type === 'null' || (s.anyOf ?? []).some((branch) => branch.type === 'null');
  function fields(schema: Schema, path: string, out: [string, Schema][] = []): [string, Schema][] {
    for (const [name, inner] of Object.entries(schema.properties ?? {})) {
      out.push([`${path}.${name}`, inner]);
      fields(inner, `${path}.${name}`, out);
      for (const branch of inner.anyOf ?? []) fields(branch, `${path}.${name}`, out);
      if (inner.items) fields(inner.items, `${path}.${name}[]`, out);
    }
    return out;
  }
  const webhooks = webhookOpenApi().webhooks as Record<
    string,
    { post: { requestBody: { content: { 'application/json': { schema: Schema } } } } }
  >;

  it('in the words "null when", "null if" or "null where", on every nullable field of every event and version', () => {
    const silent: string[] = [];
    for (const [name, op] of Object.entries(webhooks)) {
      for (const [path, field] of fields(op.post.requestBody.content['application/json'].schema, name)) {
        if (nullable(field) && !/\bnull (when|if|where)\b/i.test(field.description ?? '')) silent.push(path);
      }
    }
    expect(silent).toEqual([]);
  });

  it("names both reasons for a null lean: a score of exactly 0, and a verdict of another engine than the table's", () => {
    for (const event of ['trade_call.v2', 'scan_digest.v2']) {
      const schema = webhooks[event]!.post.requestBody.content['application/json'].schema;
      const lean = fields(schema, event).find(([path]) => path.endsWith('.lean'))![1];
      expect(lean.description).toMatch(/score is exactly 0/);
      expect(lean.description).toMatch(/engine/);
    }
  });
});
