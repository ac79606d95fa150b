import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyWebhook } from '../../contracts/webhook-verify.ts';
import { WebhookEnvelope } from '../../contracts/webhooks.ts';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from '../../test/webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from '../../test/webhooks-receiver.ts';
import { subscriptionStream } from './subscription-fold.ts';

/**
 * A subscriber pausing a subscription (POST /api/webhooks/:id/disable) and changing it
 * (PATCH /api/webhooks/:id), on real parts: the management API on a port, the relay, the in-process
 * bus, the dispatcher and an HTTPS receiver. A witness subscription taking every trade call says
 * when the dispatcher has matched an event, so that an event a subscription must not get is known
 * to have been passed over, not merely not yet sent.
 */
const tls = selfSignedCert();
/** A path of its own on a receiver: the receiver tells the subscriptions apart by it. */
const at = (r: Receiver, path: string) => `${new URL(r.url).origin}/${path}`;

describe('a subscriber pausing and changing a subscription', () => {
  let stack: WebhookStack;
  let receiver: Receiver;
  let other: Receiver;
  let key: string;
  let keyId: string;
  let witness: string;

  beforeAll(async () => {
    stack = await startWebhookStack({
      bus: 'memory',
      env: { WEBHOOK_RETRY_SCHEDULE: '0', WEBHOOK_MAX_PER_KEY: '10' },
      settings: { tls: { ca: tls.cert } },
      checkCoins: true,
      checkDigests: true,
    });
    receiver = await startReceiver(tls);
    other = await startReceiver(tls);
    receiver.behave = (request) => (request.path.startsWith('/gone') ? { status: 410 } : { status: 200 });
    ({ key, keyId } = await stack.issueWithId('edit'));
    witness = (await create({ url: at(receiver, 'witness'), events: ['trade_call'] })).id;
  });
  afterAll(async () => {
    await receiver?.close();
    await other?.close();
    await stack?.close();
  });

  async function create(body: Record<string, unknown>) {
    const res = await stack.request('POST', '/api/webhooks', key, body);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body as { id: string; secret: string };
  }
  const deliveries = async (id: string): Promise<{ event_id: string; seq: number; status: string }[]> =>
    (await stack.request('GET', `/api/webhooks/${id}/deliveries`, key)).body.deliveries;
  /** Appends a verdict and waits for the witness's delivery of it: the dispatcher has matched it. */
  async function matched(v: Parameters<typeof appendVerdict>[1]): Promise<string> {
    const id = await appendVerdict(stack.store, v);
    await until(
      () => deliveries(witness),
      (d) => d.some((x) => x.event_id === id && x.status === 'succeeded'),
    );
    return id;
  }
  const eventsOf = async (id: string) => (await deliveries(id)).map((d) => d.event_id).sort();
  /** The subscription events recorded on the key's stream, by type. */
  async function recorded(type: string): Promise<number> {
    const events = await stack.store.readStream(subscriptionStream(keyId));
    return events.filter((e) => e.type === type).length;
  }
  const listed = async (id: string) =>
    (await stack.request('GET', '/api/webhooks?status=all', key)).body.webhooks.find(
      (w: { id: string }) => w.id === id,
    );

  it('PATCH changes filters and url: the next event is matched by the new filters, id, secret and seq stay', async () => {
    const sub = await create({ url: at(receiver, 'edit'), events: ['trade_call'], assets: ['BTC'] });
    const before = await matched({ coin: 'BTC', call: 'BUY', confidence: 61 });
    await until(
      () => deliveries(sub.id),
      (d) => d.length === 1 && d[0]!.status === 'succeeded',
    );
    expect(await eventsOf(sub.id)).toEqual([before]);

    const patched = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, {
      assets: ['eth'],
      min_confidence: 70,
      url: at(other, 'moved'),
    });
    expect(patched.status, JSON.stringify(patched.body)).toBe(200);
    expect(patched.body).toMatchObject({
      id: sub.id,
      url: at(other, 'moved'),
      events: ['trade_call'],
      assets: ['ETH'],
      min_confidence: 70,
      status: 'active',
    });
    expect(patched.body.secret).toBeUndefined();
    expect(await listed(sub.id)).toMatchObject({
      assets: ['ETH'],
      min_confidence: 70,
      url: at(other, 'moved'),
    });

    // The old coin, and the new coin under the new floor: matched by the dispatcher, not taken.
    const oldCoin = await matched({ coin: 'BTC', call: 'BUY', confidence: 90 });
    const belowFloor = await matched({ coin: 'ETH', call: 'SELL', confidence: 65 });
    const after = await matched({ coin: 'ETH', call: 'SELL', confidence: 75 });
    await other.waitFor(1);
    const events = await eventsOf(sub.id);
    expect(events).toEqual([before, after].sort());
    expect(events).not.toContain(oldCoin);
    expect(events).not.toContain(belowFloor);
    // Sent to the new url, numbered after the first, signed with the secret shown at creation.
    expect(other.received).toHaveLength(1);
    const got = other.received[0]!;
    expect(got.path).toBe('/moved');
    expect(WebhookEnvelope.parse(JSON.parse(got.body)).seq).toBe(2);
    expect(verifyWebhook({ secret: sub.secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
    expect(receiver.received.filter((r) => r.path === '/edit')).toHaveLength(1);

    // A filter given null is removed: every trade call again, from the next one on.
    const cleared = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, {
      assets: null,
      min_confidence: null,
    });
    expect(cleared.status).toBe(200);
    expect(cleared.body.assets).toBeUndefined();
    expect(cleared.body.min_confidence).toBeUndefined();
    const any = await matched({ coin: 'SOL', call: 'BUY', confidence: 20 });
    await until(
      () => eventsOf(sub.id),
      (e) => e.includes(any),
    );
  });

  it('PATCH that changes nothing records nothing and answers the subscription', async () => {
    const sub = await create({ url: at(receiver, 'same'), events: ['trade_call'], assets: ['BTC'] });
    const updates = await recorded('SubscriptionUpdated');
    const res = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, {
      url: at(receiver, 'same'),
      assets: ['btc'],
    });
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: sub.id, assets: ['BTC'] });
    expect(await recorded('SubscriptionUpdated')).toBe(updates);
  });

  it('PATCH refuses what create refuses, with the same shapes, and changes nothing', async () => {
    const sub = await create({ url: at(receiver, 'refused'), events: ['trade_call'], assets: ['BTC'] });
    const path = `/api/webhooks/${sub.id}`;
    const updates = await recorded('SubscriptionUpdated');
    const refusals: [unknown, number, Record<string, unknown>][] = [
      [{}, 400, { code: 'INVALID_FIELD', field: 'body' }],
      [undefined, 400, { code: 'INVALID_FIELD', field: 'body' }],
      [null, 400, { code: 'INVALID_FIELD', field: 'body' }],
      [[], 400, { code: 'INVALID_FIELD', field: 'body' }],
      [{ bogus: 1 }, 400, { code: 'INVALID_FIELD', field: 'bogus' }],
      [{ secret: 'whsec_x' }, 400, { code: 'INVALID_FIELD', field: 'secret' }],
      [{ event_version: 1 }, 400, { code: 'INVALID_FIELD', field: 'event_version' }],
      [{ url: 'http://hooks.example.com/x' }, 400, { code: 'INVALID_URL', field: 'url' }],
      [{ url: 'https://10.0.0.1/hook' }, 400, { code: 'INVALID_URL', field: 'url' }],
      [{ url: 'https://169.254.169.254/latest' }, 400, { code: 'INVALID_URL', field: 'url' }],
      [{ url: null }, 400, { code: 'INVALID_FIELD', field: 'url' }],
      [{ events: [] }, 400, { code: 'INVALID_FIELD', field: 'events' }],
      [{ events: null }, 400, { code: 'INVALID_FIELD', field: 'events' }],
      [{ events: ['trade_call', 'trade_call'] }, 400, { code: 'INVALID_FIELD', field: 'events' }],
      [{ min_confidence: 101 }, 400, { code: 'INVALID_FIELD', field: 'min_confidence' }],
      [{ assets: ['top:500'] }, 400, { code: 'INVALID_FIELD', field: 'assets.0' }],
      [{ assets: ['BTC', 'btc'] }, 400, { code: 'INVALID_FIELD', field: 'assets' }],
      [{ assets: ['NOSUCHCOINX'] }, 404, { code: 'unknown_coin', field: 'assets' }],
      // The whole that would be left is checked: a digest needs its fields, filters need their events.
      [{ events: ['scan_digest'], assets: null }, 400, { code: 'INVALID_FIELD', field: 'timeframe' }],
      [{ events: ['subscription_disabled'] }, 400, { code: 'INVALID_FIELD', field: 'assets' }],
      [{ cadence: '1d' }, 400, { code: 'INVALID_FIELD', field: 'cadence' }],
      [
        {
          events: ['scan_digest'],
          assets: null,
          exchange: 'KRAKEN',
          timeframe: '1h',
          top_n: 5,
          cadence: '1d',
        },
        400,
        { code: 'INVALID_FIELD', field: 'exchange' },
      ],
      // Off the engine's schedule (its verdicts would be of any age): refused as create refuses it.
      [
        {
          events: ['scan_digest'],
          assets: null,
          exchange: 'BINANCE_SPOT',
          timeframe: '2h',
          top_n: 5,
          cadence: '1d',
        },
        400,
        { code: 'INVALID_FIELD', field: 'timeframe' },
      ],
    ];
    for (const [body, status, shape] of refusals) {
      const res = await stack.request('PATCH', path, key, body);
      expect([res.status, res.body], JSON.stringify(body)).toMatchObject([status, shape]);
      expect(typeof res.body.message, JSON.stringify(body)).toBe('string');
    }
    const empty = await stack.request('PATCH', path, key, {});
    expect(empty.body.message).toMatch(/at least one field/);
    expect(await recorded('SubscriptionUpdated')).toBe(updates);
    expect(await listed(sub.id)).toMatchObject({ url: at(receiver, 'refused'), assets: ['BTC'] });
    expect((await listed(sub.id)).min_confidence).toBeUndefined();

    // A digest with every field it needs, on the schedule: accepted, filters of market events removed.
    const digest = await stack.request('PATCH', path, key, {
      events: ['scan_digest'],
      assets: null,
      exchange: 'BINANCE_SPOT',
      timeframe: '1h',
      top_n: 5,
      cadence: '1d',
    });
    expect(digest.status, JSON.stringify(digest.body)).toBe(200);
    expect(digest.body).toMatchObject({ events: ['scan_digest'], exchange: 'BINANCE_SPOT', top_n: 5 });

    expect(await stack.request('PATCH', '/api/webhooks/wh_nosuch', key, { min_confidence: 5 })).toMatchObject(
      {
        status: 404,
        body: { code: 'NOT_FOUND' },
      },
    );
    expect((await stack.request('PATCH', path, null, { min_confidence: 5 })).status).toBe(401);
  });

  it('disable pauses it: nothing matched while paused, idempotent, told to the key, resumed by enable', async () => {
    const notices = await create({ url: at(receiver, 'notices'), events: ['subscription_disabled'] });
    const sub = await create({ url: at(receiver, 'paused'), events: ['trade_call'], assets: ['XRP'] });
    const first = await matched({ coin: 'XRP', call: 'BUY', confidence: 60 });
    await until(
      () => eventsOf(sub.id),
      (e) => e.length === 1,
    );

    const paused = await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key);
    expect(paused.status, JSON.stringify(paused.body)).toBe(200);
    expect(paused.body).toMatchObject({
      id: sub.id,
      status: 'disabled',
      disabled_reason: 'disabled_by_subscriber',
    });
    const disabledAt: string = paused.body.disabled_at;
    expect(Date.parse(disabledAt)).not.toBeNaN();
    expect(await recorded('SubscriptionDisabled')).toBe(1);

    // Again, with an empty object: its state, nothing recorded.
    const again = await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key, {});
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ status: 'disabled', disabled_at: disabledAt });
    expect(await recorded('SubscriptionDisabled')).toBe(1);
    const disabledList = (await stack.request('GET', '/api/webhooks?status=disabled', key)).body.webhooks;
    expect(disabledList.map((w: { id: string }) => w.id)).toEqual([sub.id]);

    // The key's subscription that takes the notice is told, with the subscriber's reason.
    await until(
      () => receiver.received.filter((r) => r.path === '/notices'),
      (r) => r.length === 1,
    );
    const notice = WebhookEnvelope.parse(
      JSON.parse(receiver.received.find((r) => r.path === '/notices')!.body),
    );
    expect(notice.data).toMatchObject({
      type: 'subscription_disabled',
      subscription_id: sub.id,
      reason: 'disabled_by_subscriber',
      disabled_at: disabledAt,
    });
    expect(notices.id).not.toBe(sub.id);

    // While paused: matched by the dispatcher (the witness has it), not taken.
    const duringPause = await matched({ coin: 'XRP', call: 'SELL', confidence: 70 });
    expect(await eventsOf(sub.id)).toEqual([first]);
    // A change while paused keeps it paused.
    const edited = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, { min_confidence: 10 });
    expect(edited.body).toMatchObject({ status: 'disabled', min_confidence: 10 });

    // Resumed with recover_since its disabled_at: what it missed while paused is delivered.
    const enabled = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: disabledAt,
    });
    expect(enabled.body).toMatchObject({ status: 'active', disabled_at: null, disabled_reason: null });
    await until(
      () => eventsOf(sub.id),
      (e) => e.includes(duringPause),
    );
    const after = await matched({ coin: 'XRP', call: 'BUY', confidence: 71 });
    await until(
      () => eventsOf(sub.id),
      (e) => e.includes(after),
    );
    expect((await eventsOf(sub.id)).sort()).toEqual([first, duringPause, after].sort());
  });

  it('a plain enable after a pause sends nothing recorded during it', async () => {
    const sub = await create({ url: at(receiver, 'plain'), events: ['trade_call'], assets: ['DOGE'] });
    expect((await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key)).status).toBe(200);
    const duringPause = await matched({ coin: 'DOGE', call: 'BUY', confidence: 60 });
    expect((await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key)).body.status).toBe('active');
    const after = await matched({ coin: 'DOGE', call: 'BUY', confidence: 61 });
    await until(
      () => eventsOf(sub.id),
      (e) => e.includes(after),
    );
    expect(await eventsOf(sub.id)).toEqual([after]);
    expect(await eventsOf(sub.id)).not.toContain(duringPause);
  });

  it('disable of one the dispatcher disabled answers it as it is; refusals', async () => {
    const sub = await create({ url: at(receiver, 'gone'), events: ['trade_call'], assets: ['BNB'] });
    await matched({ coin: 'BNB', call: 'BUY', confidence: 60 });
    const gone = await until(
      () => listed(sub.id),
      (w) => w.status === 'disabled',
    );
    expect(gone.disabled_reason).toBe('the receiver answered 410 Gone');
    const disables = await recorded('SubscriptionDisabled');
    const res = await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      status: 'disabled',
      disabled_reason: 'the receiver answered 410 Gone',
      disabled_at: gone.disabled_at,
    });
    expect(await recorded('SubscriptionDisabled')).toBe(disables);

    const path = `/api/webhooks/${sub.id}/disable`;
    expect(await stack.request('POST', path, key, { reason: 'x' })).toMatchObject({
      status: 400,
      body: { code: 'INVALID_FIELD', field: 'reason' },
    });
    expect(await stack.request('POST', path, key, null)).toMatchObject({
      status: 400,
      body: { code: 'INVALID_FIELD', field: 'body' },
    });
    expect(await stack.request('POST', '/api/webhooks/wh_nosuch/disable', key)).toMatchObject({
      status: 404,
      body: { code: 'NOT_FOUND' },
    });
    expect((await stack.request('POST', path, null)).status).toBe(401);
    expect(await recorded('SubscriptionDisabled')).toBe(disables);
  });

  it('enable takes recover_since with a UTC offset, the same instant as its Z form', async () => {
    const sub = await create({ url: at(receiver, 'offset'), events: ['trade_call'], assets: ['SOL'] });
    const paused = await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key);
    expect(paused.status).toBe(200);
    const disabledAt: string = paused.body.disabled_at;
    const duringPause = await matched({ coin: 'SOL', call: 'BUY', confidence: 62 });
    // disabled_at as a receiver in UTC+2 writes it (Python's isoformat() writes an offset, +00:00
    // in UTC): ISO 8601 like the Z form, and read as the same instant, not two hours later.
    const local = new Date(Date.parse(disabledAt) + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
    const enabled = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
      recover_since: local,
    });
    expect(enabled.status, JSON.stringify(enabled.body)).toBe(200);
    expect(enabled.body).toMatchObject({ status: 'active' });
    await until(
      () => eventsOf(sub.id),
      (e) => e.includes(duringPause),
    );
    // What is not ISO 8601 is still refused, naming the field.
    expect(
      await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
        recover_since: '2026-01-31 12:00',
      }),
    ).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'recover_since' } });
  });
});
