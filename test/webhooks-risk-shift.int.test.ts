import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openReplayFeed } from '../adapters/market/replay.ts';
import type { Timeframe } from '../contracts/market.ts';
import { CURRENT_EVENT_VERSION, envelopeSchema } from '../contracts/webhook-schemas.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { rankMarkets, SignalEngine } from '../services/engine/engine.ts';
import { volatilityDecile } from '../services/engine/risk-shift.ts';
import { recordVerdict, type VerdictDraft, verdictStream } from '../services/engine/verdict-recorder.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const HOUR = 3_600_000;

/** A verdict of `coin` on BINANCE as the engine records it, its forecast at `percentile`. */
function draft(coin: string, timeframe: Timeframe, i: number, percentile: number): VerdictDraft {
  return {
    exchange: 'BINANCE',
    coin,
    timeframe,
    call: 'HOLD',
    confidence: 55,
    score: 0.1,
    regime: 'ranging',
    price: 100 + i,
    candleCloseTime: 1_756_000_000_000 + i * HOUR,
    feed: 'replay',
    engineVersion: 'risk-test',
    inputs: {
      vol_expected_move_pct: 1.5,
      vol_band_low: 98,
      vol_band_high: 104,
      vol_band_coverage: 0.8,
      vol_horizon_candles: 6,
      vol_percentile: percentile,
    },
    trigger: 'schedule',
  };
}

/** Records a market's verdicts at these percentiles in turn; returns the ids of its RiskShifted events. */
async function record(stack: WebhookStack, coin: string, timeframe: Timeframe, percentiles: number[]) {
  for (const [i, p] of percentiles.entries()) await recordVerdict(stack.store, draft(coin, timeframe, i, p));
  const events = await stack.store.readStream(verdictStream({ exchange: 'BINANCE', coin, timeframe }));
  return events.filter((e) => e.type === 'RiskShifted').map((e) => e.id);
}

describe.runIf(reachable)('risk_shift webhooks', () => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    stack = await startWebhookStack({ settings: { tls: { ca: tls.cert } } });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  async function subscribe(key: string, filters: Record<string, unknown>) {
    const r = await startReceiver(tls);
    receivers.push(r);
    const res = await stack.request('POST', '/api/webhooks', key, { url: r.url, ...filters });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { r, id: res.body.id as string, secret: res.body.secret as string };
  }

  it('delivers each decile shift signed and numbered without gaps, only where the filters take it', async () => {
    const key = await stack.issue();
    const [first, second] = rankMarkets(await stack.engine.feed.markets('BINANCE')).map((m) => m.coin);
    // min_confidence filters verdicts, not risk shifts: the 55-confidence HOLDs' shifts below still
    // come (a HOLD is no trade_call; min_confidence on risk_shift alone is refused at create).
    const byCoin = await subscribe(key, {
      events: ['risk_shift', 'trade_call'],
      assets: [first],
      timeframes: ['1h'],
      min_confidence: 90,
    });
    const byRank = await subscribe(key, { events: ['risk_shift'], assets: ['top:1'], timeframes: ['4h'] });
    const regimeOnly = await subscribe(key, { events: ['regime_shift'], assets: [first] });

    // First verdict no shift; enter top; stay; leave top; enter bottom.
    const wanted = await record(stack, first!, '1h', [50, 95, 97, 60, 5]);
    expect(wanted).toHaveLength(3);
    // Not this coin, not this timeframe, and ranked second for the top:1 subscription.
    expect(await record(stack, second!, '1h', [50, 95])).toHaveLength(1);
    expect(await record(stack, first!, '15m', [50, 95])).toHaveLength(1);
    expect(await record(stack, second!, '4h', [50, 3])).toHaveLength(1);
    const ranked = await record(stack, first!, '4h', [50, 3, 40]);
    expect(ranked).toHaveLength(2);

    // Every shift published, and the dispatcher's consumer done with each: what matched is claimed.
    const last = ranked.at(-1)!;
    await expect
      .poll(async () => (await streamMessageIds(stack.stream)).includes(last), { timeout: 30_000 })
      .toBe(true);
    await expect
      .poll(() => consumerDrained(stack.stream, `${stack.durable}-risks`), { timeout: 30_000 })
      .toBe(true);
    await byCoin.r.waitFor(3);
    await byRank.r.waitFor(2);
    const logged = await stack.request('GET', `/api/webhooks/${byCoin.id}/deliveries`, key);
    expect(logged.body.deliveries).toHaveLength(3);
    expect(byCoin.r.received).toHaveLength(3);
    expect(byRank.r.received).toHaveLength(2);
    expect(regimeOnly.r.received).toHaveLength(0);

    const envelopes = byCoin.r.received.map((got) => {
      const body = JSON.parse(got.body);
      expect(envelopeSchema('risk_shift', CURRENT_EVENT_VERSION).safeParse(body).success).toBe(true);
      expect(verifyWebhook({ secret: byCoin.secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
      expect(() =>
        new Webhook(byCoin.secret.slice('whsec_'.length)).verify(got.body, got.headers),
      ).not.toThrow();
      expect(got.headers['x-service-event']).toBe('risk_shift');
      expect(got.headers['x-service-delivery']).toBe(body.delivery_id);
      expect(got.headers['x-service-sequence']).toBe(String(body.seq));
      expect(got.headers['x-service-event-version']).toBe(String(CURRENT_EVENT_VERSION));
      return body;
    });
    expect(envelopes.map((e) => e.seq).sort()).toEqual([1, 2, 3]);
    const stream = verdictStream({ exchange: 'BINANCE', coin: first!, timeframe: '1h' });
    const verdicts = (await stack.store.readStream(stream)).filter((e) => e.type === 'VerdictRecorded');
    const shifts = envelopes
      .map((e) => e.data)
      .sort((a, b) => a.candle_close_time - b.candle_close_time)
      .map((d) => {
        // Each links the verdict that carried it, by hash and by its verify URL.
        const verdict = verdicts.find(
          (v) =>
            Math.floor((v.data as { candleCloseTime: number }).candleCloseTime / 1000) ===
            d.candle_close_time,
        )!;
        expect(d.signal_hash).toBe((verdict.data as { hash: string }).hash);
        expect(d.verify_url).toMatch(new RegExp(`/verify/${stream}/${verdict.revision}$`));
        expect(d).toMatchObject({ coin: first, timeframe: '1h', exchange: 'BINANCE', feed: 'replay' });
        expect(d.expected_move).toEqual({
          horizon_candles: 6,
          expected_move_pct: 1.5,
          band_low: 98,
          band_high: 104,
          band_coverage: 0.8,
        });
        return [d.from, d.to, d.prior_percentile, d.percentile];
      });
    expect(shifts).toEqual([
      ['middle', 'top', 50, 95],
      ['top', 'middle', 97, 60],
      ['middle', 'bottom', 60, 5],
    ]);
    const rankedShifts = byRank.r.received.map((g) => JSON.parse(g.body).data);
    expect(rankedShifts.every((d) => d.coin === first && d.timeframe === '4h')).toBe(true);
    expect(rankedShifts.map((d) => d.to).sort()).toEqual(['bottom', 'middle']);
  });

  it('on the replayed candles, every risk shift of a backfilled market reaches its top:N subscriber, in sequence', async () => {
    const key = await stack.issue();
    const market = { exchange: 'BINANCE_SPOT', coin: 'BTC', timeframe: '1h' } as const;
    const byRank = await subscribe(key, { events: ['risk_shift'], assets: ['top:3'], timeframes: ['1h'] });
    const other = await subscribe(key, { events: ['risk_shift'], assets: ['ETH'] });
    // A verdict 400 hours back, then every hourly verdict since, computed from the real candles.
    const early = new SignalEngine({
      feed: await openReplayFeed({ run: false, start: stack.engine.feed.now() - 400 * HOUR }),
      store: stack.store,
    });
    await early.getTradeCall({ coin: market.coin, timeframe: market.timeframe });
    await early.close();
    expect(await stack.engine.backfill(market)).toBeGreaterThan(300);
    const recorded = (await stack.store.readStream(verdictStream(market))).filter(
      (e) => e.type === 'RiskShifted',
    );
    console.log(
      `risk shifts in ${market.coin} ${market.timeframe} over 400 replayed hours: ${recorded.length}`,
    );
    expect(recorded.length).toBeGreaterThan(0);
    await byRank.r.waitFor(recorded.length);
    const got = byRank.r.received.map((g) => {
      expect(verifyWebhook({ secret: byRank.secret, headers: g.headers, rawBody: g.body }).ok).toBe(true);
      return JSON.parse(g.body);
    });
    expect(got.map((e) => e.seq).sort((a, b) => a - b)).toEqual(recorded.map((_, i) => i + 1));
    for (const { data } of got) {
      expect(data.from).toBe(volatilityDecile(data.prior_percentile));
      expect(data.to).toBe(volatilityDecile(data.percentile));
      expect(data.from).not.toBe(data.to);
      expect(data.expected_move.expected_move_pct).toBeGreaterThan(0);
    }
    await expect
      .poll(() => consumerDrained(stack.stream, `${stack.durable}-risks`), { timeout: 30_000 })
      .toBe(true);
    expect(byRank.r.received).toHaveLength(recorded.length);
    expect(other.r.received).toHaveLength(0);
  });

  it('a recovery since T delivers the risk shifts recorded while the subscription was disabled', async () => {
    const key = await stack.issue();
    const { r, id } = await subscribe(key, { events: ['risk_shift'], assets: ['RCVR'] });
    const since = new Date(Date.now() - 1_000).toISOString();
    r.behave = () => ({ status: 410 }); // Gone: disabled at once
    await record(stack, 'RCVR', '1h', [50, 95]);
    await r.waitFor(1);
    await expect.poll(() => stack.api.runner.state.subscriptions.subs[id]?.status).toBe('disabled');
    // Two more shifts while disabled, handled by the dispatcher before the enable below.
    const all = await record(stack, 'RCVR', '4h', [50, 5, 50]);
    await expect.poll(async () => (await streamMessageIds(stack.stream)).includes(all.at(-1)!)).toBe(true);
    await expect.poll(() => consumerDrained(stack.stream, `${stack.durable}-risks`)).toBe(true);
    expect(r.received).toHaveLength(1);

    r.behave = () => ({ status: 200 });
    const enabled = await stack.request('POST', `/api/webhooks/${id}/enable`, key, { recover_since: since });
    expect(enabled.status).toBe(200);
    await r.waitFor(4);
    const bodies = r.received.slice(1).map((g) => JSON.parse(g.body));
    expect(bodies.every((b) => b.event === 'risk_shift')).toBe(true);
    expect(new Set(bodies.map((b) => b.delivery_id)).size).toBe(3);
    // The failed one keeps its number; the two never attempted are numbered on delivery.
    expect(bodies.find((b) => b.delivery_id === JSON.parse(r.received[0]!.body).delivery_id)?.seq).toBe(1);
    expect(bodies.map((b) => b.seq).sort()).toEqual([1, 2, 3]);
    expect(bodies.map((b) => [b.data.timeframe, b.data.to]).sort()).toEqual([
      ['1h', 'top'],
      ['4h', 'bottom'],
      ['4h', 'middle'],
    ]);
  });

  it('sends a signed sample risk_shift on request, marked as a test and unnumbered', async () => {
    const key = await stack.issue();
    const { r, id, secret } = await subscribe(key, { events: ['risk_shift'] });
    const sent = await stack.request('POST', `/api/webhooks/${id}/test`, key);
    expect(sent.body).toMatchObject({ delivered: true, status: 200 });
    await r.waitFor(1);
    const got = r.received[0]!;
    const body = JSON.parse(got.body);
    expect(body).toMatchObject({ event: 'risk_shift', test: true, data: { type: 'risk_shift', to: 'top' } });
    expect(body.seq).toBeUndefined();
    expect(envelopeSchema('risk_shift', CURRENT_EVENT_VERSION).safeParse(body).success).toBe(true);
    expect(verifyWebhook({ secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
  });
});
