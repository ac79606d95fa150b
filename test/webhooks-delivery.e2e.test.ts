import { createHmac, timingSafeEqual } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ReplayFeed } from '../adapters/market/replay.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { WebhookEnvelope } from '../contracts/webhooks.ts';
import { rankMarkets } from '../services/engine/engine.ts';
import { deliveryStream } from '../services/webhooks/delivery-log-fold.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from './webhooks-harness.ts';
import { type Behaviour, type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)('webhook delivery through NATS to HTTPS receivers', () => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];
  const receiver = async () => {
    const r = await startReceiver(tls);
    receivers.push(r);
    return r;
  };

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: { WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '2' },
      settings: { tls: { ca: tls.cert } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  async function subscribe(key: string, body: Record<string, unknown>) {
    const res = await stack.request('POST', '/api/webhooks', key, body);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body as { id: string; secret: string };
  }

  it('signs trade calls and regime shifts so node crypto and standardwebhooks both verify them', async () => {
    const r = await receiver();
    const key = await stack.issue();
    const sub = await subscribe(key, {
      url: r.url,
      events: ['trade_call', 'regime_shift'],
      assets: ['SIGA'],
    });
    expect(sub.secret).toMatch(/^whsec_[0-9a-f]{48}$/);
    await appendVerdict(stack.store, {
      coin: 'SIGA',
      call: 'BUY',
      confidence: 70,
      regime: 'trending-up',
      from: 'ranging',
    });
    await r.waitFor(2);
    for (const got of r.received) {
      const ts = got.headers['x-service-timestamp']!;
      const expected = createHmac('sha256', sub.secret).update(`${ts}.${got.body}`).digest('hex');
      expect(timingSafeEqual(Buffer.from(expected), Buffer.from(got.headers['x-service-signature']!))).toBe(
        true,
      );
      expect(new Webhook(sub.secret).verify(got.body, got.headers)).toBeTruthy();
      expect(verifyWebhook({ secret: sub.secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
      const envelope = WebhookEnvelope.parse(JSON.parse(got.body));
      expect(got.headers['x-service-delivery']).toBe(envelope.delivery_id);
      expect(got.headers['x-service-event']).toBe(envelope.event);
    }
    const byType = Object.fromEntries(r.received.map((g) => [JSON.parse(g.body).event, JSON.parse(g.body)]));
    expect(byType.trade_call.data).toMatchObject({
      type: 'trade_call',
      coin: 'SIGA',
      call: 'BUY',
      confidence: 70,
    });
    expect(byType.trade_call.data.signal_hash).toMatch(/^[0-9a-f]{64}$/);
    expect(byType.regime_shift.data).toMatchObject({ regime: 'trending-up', prior_regime: 'ranging' });
    expect(byType.regime_shift.data.signal_hash).toBe(byType.trade_call.data.signal_hash);
  });

  it('applies events, timeframes, assets and min_confidence filters; HOLD is never a trade call', async () => {
    const r = await receiver();
    const key = await stack.issue();
    await subscribe(key, {
      url: r.url,
      events: ['trade_call'],
      timeframes: ['4h'],
      assets: ['FILTA'],
      min_confidence: 60,
    });
    await appendVerdict(stack.store, { coin: 'FILTA', timeframe: '1h', call: 'BUY', confidence: 90 }); // timeframe
    await appendVerdict(stack.store, { coin: 'FILTB', timeframe: '4h', call: 'BUY', confidence: 90 }); // asset
    await appendVerdict(stack.store, { coin: 'FILTA', timeframe: '4h', call: 'SELL', confidence: 59 }); // confidence
    await appendVerdict(stack.store, { coin: 'FILTA', timeframe: '4h', call: 'HOLD', confidence: 95 }); // HOLD
    await appendVerdict(stack.store, {
      coin: 'FILTA',
      timeframe: '4h',
      call: 'SELL',
      confidence: 60,
      regime: 'ranging',
      from: 'trending-up',
    }); // regime_shift not subscribed
    await appendVerdict(stack.store, { coin: 'FILTA', timeframe: '4h', call: 'SELL', confidence: 61 });
    await r.waitFor(2, 20_000).catch(() => undefined);
    const bodies = r.received.map((g) => JSON.parse(g.body));
    expect(bodies.map((b) => [b.event, b.data.confidence])).toEqual([
      ['trade_call', 60],
      ['trade_call', 61],
    ]);
    expect(bodies[1].data.verify_url).toMatch(/\/verify\/verdict-BINANCE-FILTA-4h\/\d+$/);
  });

  it('retries a failing receiver on the schedule with the same delivery_id, honouring Retry-After', async () => {
    const r = await receiver();
    r.behave = (_req, i): Behaviour =>
      i === 0
        ? { status: 503, headers: { 'retry-after': '1' } }
        : i === 1
          ? { status: 302, headers: { location: 'https://127.0.0.1/' } }
          : { status: 200 };
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['RETRA'] });
    await appendVerdict(stack.store, { coin: 'RETRA', call: 'BUY', confidence: 50 });
    await r.waitFor(3);
    expect(new Set(r.received.map((g) => g.headers['x-service-delivery'])).size).toBe(1);
    expect(new Set(r.received.map((g) => g.body)).size).toBe(1);
    const log = await until(
      () => stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key),
      (res) => res.body.deliveries[0]?.status === 'succeeded',
    );
    const attempts = log.body.deliveries[0].attempts;
    expect(attempts.map((a: { outcome: string; status: number }) => [a.outcome, a.status])).toEqual([
      ['failed', 503],
      ['failed', 302],
      ['succeeded', 200],
    ]);
    expect(attempts[1].error).toMatch(/redirect/);
    // Retry-After: 1 outweighs the 100 ms schedule step.
    expect(
      Date.parse(attempts[0].next_attempt_at) - Date.parse(attempts[0].attempted_at),
    ).toBeGreaterThanOrEqual(1_000);
  });

  it('keeps every retry on the schedule: each due time counts from the one before, not from when a failure was recorded', async () => {
    const r = await receiver();
    r.behave = () => ({ status: 500 });
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['DRIFA'] });
    await appendVerdict(stack.store, { coin: 'DRIFA', call: 'BUY', confidence: 50 });
    const log = await until(
      () => stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key),
      (res) => res.body.deliveries[0]?.status === 'failed',
    );
    const delivery = log.body.deliveries[0] as {
      delivery_id: string;
      attempts: { attempted_at: string; next_attempt_at: string | null }[];
    };
    const due = delivery.attempts.map((a) => a.next_attempt_at && Date.parse(a.next_attempt_at));
    expect(due).toHaveLength(3);
    expect(due[2]).toBeNull();
    // Jitter 0, schedule 0,100,200: the second retry is due 200 ms after the first was. Only when
    // the machine was so slow that the failure before it was recorded after that time is it
    // due at once instead, and then at no later than that recording.
    const failures = (await stack.store.readStream(deliveryStream(delivery.delivery_id))).filter(
      (e) => e.type === 'DeliveryFailed',
    );
    const secondRecorded = Date.parse(failures[1]!.recordedAt);
    const onSchedule = due[1] === (due[0] as number) + 200;
    const overdue = (due[1] as number) > (due[0] as number) + 200 && (due[1] as number) <= secondRecorded;
    expect(onSchedule || overdue, JSON.stringify({ due, secondRecorded })).toBe(true);
  });

  it('disables a subscription at once on 410 Gone, and shows it in the list and the log', async () => {
    const r = await receiver();
    r.behave = () => ({ status: 410 });
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['GONEA'] });
    await appendVerdict(stack.store, { coin: 'GONEA', call: 'BUY', confidence: 50 });
    const list = await until(
      () => stack.request('GET', '/api/webhooks?status=all', key),
      (res) => res.body.webhooks[0]?.status === 'disabled',
    );
    expect(list.body.webhooks[0].disabled_reason).toMatch(/410/);
    expect(r.received).toHaveLength(1);
    const log = await stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key);
    expect(log.body.subscription.status).toBe('disabled');
    expect(log.body.deliveries[0].attempts[0]).toMatchObject({
      status: 410,
      outcome: 'failed',
      next_attempt_at: null,
    });
  });

  it('disables after persistent failure, then re-enable recovers what failed since T', async () => {
    const r = await receiver();
    let healthy = false;
    r.behave = () => (healthy ? { status: 204 } : { status: 500 });
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['PERSA'] });
    const since = new Date().toISOString();
    await appendVerdict(stack.store, { coin: 'PERSA', call: 'BUY', confidence: 50 });
    await appendVerdict(stack.store, { coin: 'PERSA', call: 'SELL', confidence: 50 });
    const list = await until(
      () => stack.request('GET', '/api/webhooks?status=all', key),
      (res) => res.body.webhooks[0]?.status === 'disabled',
    );
    expect(list.body.webhooks[0].disabled_reason).toMatch(/2 consecutive deliveries failed/);
    expect(r.received).toHaveLength(6); // 2 deliveries × 3 attempts
    healthy = true;
    const enabled = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: since,
    });
    expect(enabled.status).toBe(200);
    expect(enabled.body.status).toBe('active');
    // Re-enabled, it is among the active subscriptions the list shows by default again.
    expect((await stack.request('GET', '/api/webhooks', key)).body.webhooks).toMatchObject([
      { id: sub.id, status: 'active' },
    ]);
    await r.waitFor(8);
    const log = await until(
      () => stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key),
      (res) => res.body.deliveries.every((d: { status: string }) => d.status === 'succeeded'),
    );
    expect(log.body.deliveries).toHaveLength(2);
    for (const d of log.body.deliveries) expect(d.attempts.at(-1).trigger).toBe('recover');
    const ids = r.received.map((g) => g.headers['x-service-delivery']);
    expect(new Set(ids).size).toBe(2);
  });

  it('resends one delivery on request and answers the test route with a signed sample', async () => {
    const r = await receiver();
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['RESA'] });
    await appendVerdict(stack.store, { coin: 'RESA', call: 'BUY', confidence: 50 });
    await r.waitFor(1);
    const log = await until(
      () => stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key),
      (res) => res.body.deliveries[0]?.status === 'succeeded',
    );
    const deliveryId = log.body.deliveries[0].delivery_id;
    const resent = await stack.request(
      'POST',
      `/api/webhooks/${sub.id}/deliveries/${deliveryId}/resend`,
      key,
    );
    expect(resent.body).toMatchObject({ delivery_id: deliveryId, delivered: true, status: 200 });
    expect(r.received[1]!.headers['x-service-delivery']).toBe(deliveryId);
    expect(r.received[1]!.body).toBe(r.received[0]!.body);
    const test = await stack.request('POST', `/api/webhooks/${sub.id}/test`, key);
    expect(test.body).toMatchObject({ delivered: true, status: 200 });
    const sample = r.received[2]!;
    expect(JSON.parse(sample.body)).toMatchObject({ test: true, event: 'trade_call' });
    expect(
      verifyWebhook({
        secret: (await Promise.resolve(sub)).secret,
        headers: sample.headers,
        rawBody: sample.body,
      }).ok,
    ).toBe(true);
  });

  it('a delivery sent again under another X-Service-Delivery or X-Service-Event fails verifyWebhook (those headers are not signed)', async () => {
    const r = await receiver();
    const key = await stack.issue();
    const sub = await subscribe(key, { url: r.url, events: ['trade_call'] });
    const test = await stack.request('POST', `/api/webhooks/${sub.id}/test`, key);
    expect(test.body).toMatchObject({ delivered: true, status: 200 });
    const got = r.received[0]!;
    const { delivery_id } = JSON.parse(got.body) as { delivery_id: string };
    expect(verifyWebhook({ secret: sub.secret, headers: got.headers, rawBody: got.body })).toMatchObject({
      ok: true,
      deliveryId: delivery_id,
      event: 'trade_call',
    });
    // What someone holding a captured delivery would send within the 300 s tolerance, so that a
    // receiver's 'handled this delivery id already' check lets it through a second time.
    const forgedId = { ...got.headers, 'x-service-delivery': `${delivery_id}-again` };
    expect(verifyWebhook({ secret: sub.secret, headers: forgedId, rawBody: got.body })).toEqual({
      ok: false,
      reason: 'header_mismatch',
    });
    const forgedEvent = { ...got.headers, 'x-service-event': 'regime_shift' };
    expect(verifyWebhook({ secret: sub.secret, headers: forgedEvent, rawBody: got.body })).toEqual({
      ok: false,
      reason: 'header_mismatch',
    });
  });

  it('matches top:N against the venue ranking', async () => {
    const r = await receiver();
    const key = await stack.issue();
    const ranked = (await stack.engine.feed.markets('BINANCE')).map((m) => m.coin);
    expect(ranked.length).toBeGreaterThan(1);
    const order = rankMarkets(await stack.engine.feed.markets('BINANCE')).map((m) => m.coin);
    await subscribe(key, { url: r.url, events: ['trade_call'], assets: ['top:1'], timeframes: ['12h'] });
    await appendVerdict(stack.store, { coin: order[1]!, timeframe: '12h', call: 'BUY', confidence: 50 });
    await appendVerdict(stack.store, { coin: order[0]!, timeframe: '12h', call: 'BUY', confidence: 50 });
    await r.waitFor(1);
    await new Promise((res) => setTimeout(res, 500));
    expect(r.received.map((g) => JSON.parse(g.body).data.coin)).toEqual([order[0]]);
  });
});

describe.runIf(reachable)('top:N filters on market events', () => {
  let stack: WebhookStack;
  let r: Receiver;

  beforeAll(async () => {
    stack = await startWebhookStack({ settings: { tls: { ca: tls.cert } } });
    r = await startReceiver(tls);
  });
  afterAll(async () => {
    await stack?.close();
    await r?.close();
  });

  it('rank by the venue’s ranking at the event’s candle close, on the feed clock', async () => {
    const hour = 3_600_000;
    const feed = stack.engine.feed as ReplayFeed;
    const top4 = async () =>
      rankMarkets(await feed.markets('BINANCE'))
        .map((m) => m.coin)
        .slice(0, 4);
    // On the shipped slice the venue's 4th market at the replay's 01:00 close is out of its top 4
    // at 02:00 (the feed ranks by 24 h volume, so the ranking moves with the feed's clock).
    const first = Math.floor(feed.now() / hour) * hour + hour;
    feed.clock.setTime(first + 10 * 60_000);
    const before = await top4();
    const key = await stack.issue();
    const res = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['top:4'],
      timeframes: ['1h'],
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    const out = before[3]!;
    await appendVerdict(stack.store, { coin: out, call: 'BUY', confidence: 50, candleCloseTime: first });
    await r.waitFor(1);
    // Feed time moves on an hour (seconds of wall time at the default replay speed).
    feed.clock.setTime(first + hour + 10 * 60_000);
    const after = await top4();
    expect(after).not.toContain(out);
    const into = after.find((coin) => !before.includes(coin));
    if (!into) throw new Error('no market entered the top 4');
    await appendVerdict(stack.store, {
      coin: out,
      call: 'BUY',
      confidence: 50,
      candleCloseTime: first + hour,
    });
    const last = await appendVerdict(stack.store, {
      coin: into,
      call: 'BUY',
      confidence: 50,
      candleCloseTime: first + hour,
    });
    // Every call published and the dispatcher's consumer done with each: what matched is claimed.
    await expect
      .poll(async () => (await streamMessageIds(stack.stream)).includes(last), { timeout: 30_000 })
      .toBe(true);
    await expect
      .poll(() => consumerDrained(stack.stream, `${stack.durable}-calls`), { timeout: 30_000 })
      .toBe(true);
    await stack.api.runner.waitFor(await stack.store.headPosition());
    const log = await stack.request('GET', `/api/webhooks/${res.body.id}/deliveries`, key);
    expect(log.body.deliveries).toHaveLength(2);
    await r.waitFor(2);
    const sent = r.received.map((got) => {
      const { data } = JSON.parse(got.body);
      return `${data.coin} ${(data.candle_close_time - first / 1000) / 3600}h`;
    });
    // The call of the market that left the top 4 is not sent; the one that entered it is.
    expect(sent.sort()).toEqual([`${out} 0h`, `${into} 1h`].sort());
  });
});
