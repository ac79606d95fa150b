import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import { CURRENT_EVENT_VERSION, EVENT_VERSIONS, envelopeSchema } from '../contracts/webhook-schemas.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { DELIVERY_CREATED_AT, ENVELOPE_CREATED_AT, WebhookEnvelope } from '../contracts/webhooks.ts';
import { sequenceStream } from '../services/webhooks/delivery-log-fold.ts';
import { requireNats } from './nats-server.ts';
import { appendVerdict, startWebhookStack, until, type WebhookStack } from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

describe.runIf(reachable)('what subscribers ask for: gap detection, versions, rotation, notices', () => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: { WEBHOOK_SECRET_ROTATION_OVERLAP_MS: '60000', WEBHOOK_RETRY_SCHEDULE: '0' },
      settings: { tls: { ca: tls.cert } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  async function setUp(coin: string, extra: Record<string, unknown> = {}, key?: string) {
    const r = await startReceiver(tls);
    receivers.push(r);
    const owner = key ?? (await stack.issue());
    const res = await stack.request('POST', '/api/webhooks', owner, {
      url: r.url,
      events: ['trade_call'],
      assets: [coin],
      ...extra,
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return { r, key: owner, id: res.body.id as string, secret: res.body.secret as string, body: res.body };
  }

  it('numbers each subscription’s deliveries 1, 2, 3… in the signed body and a header, and serves a missed range', async () => {
    const { r, key, id, secret } = await setUp('SEQA');
    for (let i = 0; i < 5; i++)
      await appendVerdict(stack.store, { coin: 'SEQA', call: 'BUY', confidence: 60 + i });
    await r.waitFor(5);
    const got = r.received.map((g) => ({ g, env: WebhookEnvelope.parse(JSON.parse(g.body)) }));
    expect(got.map(({ env }) => env.seq).sort()).toEqual([1, 2, 3, 4, 5]);
    for (const { g, env } of got) {
      expect(g.headers['x-service-sequence']).toBe(String(env.seq));
      expect(verifyWebhook({ secret, headers: g.headers, rawBody: g.body }).ok).toBe(true);
    }
    const bySeq = new Map(got.map(({ env }) => [env.seq, env.delivery_id]));
    const missed = await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=2`, key);
    expect(missed.status).toBe(200);
    expect(missed.body.deliveries.map((d: { seq: number }) => d.seq)).toEqual([3, 4, 5]);
    expect(missed.body.deliveries.map((d: { delivery_id: string }) => d.delivery_id)).toEqual(
      [3, 4, 5].map((s) => bySeq.get(s)),
    );
    expect(missed.body).toMatchObject({ next_after_seq: 5, has_more: false, last_seq: 5 });
    const paged = await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=0&limit=2`, key);
    expect(paged.body.deliveries.map((d: { seq: number }) => d.seq)).toEqual([1, 2]);
    expect(paged.body).toMatchObject({ next_after_seq: 2, has_more: true, last_seq: 5 });
    // A resend carries the same number and the same bytes.
    const third = got.find(({ env }) => env.seq === 3)!;
    // A body field it does not take is refused, as test, enable and rotate-secret refuse one: nothing sent.
    const before = r.received.length;
    const bogus = await stack.request(
      'POST',
      `/api/webhooks/${id}/deliveries/${third.env.delivery_id}/resend`,
      key,
      { bogus: 1 },
    );
    expect(bogus).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'bogus' } });
    expect(r.received.length).toBe(before);
    const resent = await stack.request(
      'POST',
      `/api/webhooks/${id}/deliveries/${third.env.delivery_id}/resend`,
      key,
    );
    expect(resent.body).toMatchObject({ delivered: true });
    expect(r.received.at(-1)!.body).toBe(third.g.body);
    expect(r.received.at(-1)!.headers['x-service-sequence']).toBe('3');
    const none = await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=5`, key);
    expect(none.body).toMatchObject({ deliveries: [], next_after_seq: 5, has_more: false, last_seq: 5 });
    // A cursor past the end (a saved one, after a restore): the end, and the cursor that reads on
    // from it, not the cursor given back, under which nothing would come until seq 100.
    const past = await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=99`, key);
    expect(past).toMatchObject({
      status: 200,
      body: { deliveries: [], next_after_seq: 5, has_more: false, last_seq: 5 },
    });
    for (const bad of ['-1', 'abc', '1.5', '']) {
      const res = await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=${bad}`, key);
      expect(res).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'after_seq' } });
    }
    // Another subscription counts from 1 on its own.
    const other = await setUp('SEQA');
    await appendVerdict(stack.store, { coin: 'SEQA', call: 'SELL', confidence: 70 });
    await other.r.waitFor(1);
    expect(JSON.parse(other.r.received[0]!.body).seq).toBe(1);
    await r.waitFor(7);
    expect(r.received.map((g) => JSON.parse(g.body).seq).sort()).toEqual([1, 2, 3, 3, 4, 5, 6]);
  });

  it('rotates a secret without downtime: both signatures during the overlap, then only the new one', async () => {
    const { r, key, id, secret: old } = await setUp('ROTA');
    const asked = Date.now();
    const rotated = await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, key, {});
    const answered = Date.now();
    expect(rotated.status).toBe(200);
    expect(rotated.body.secret).toMatch(/^whsec_[0-9a-f]{48}$/);
    expect(rotated.body.secret).not.toBe(old);
    const fresh = rotated.body.secret as string;
    const until = Date.parse(rotated.body.previous_secret_valid_until);
    // The 60 s overlap counts from the rotation, which happened while the request was out.
    expect(until).toBeGreaterThanOrEqual(asked + 60_000);
    expect(until).toBeLessThanOrEqual(answered + 60_000);

    await appendVerdict(stack.store, { coin: 'ROTA', call: 'BUY', confidence: 61 });
    await r.waitFor(1);
    const during = r.received[0]!;
    expect(during.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    for (const secret of [old, fresh]) {
      // A receiver on either secret accepts it, with our verifier or the standardwebhooks package.
      expect(verifyWebhook({ secret, headers: during.headers, rawBody: during.body }).ok).toBe(true);
      expect(new Webhook(secret).verify(during.body, during.headers)).toBeTruthy();
    }
    // The contract header keeps the old secret's signature for receivers that have not switched.
    expect(
      verifyWebhook({
        secret: old,
        headers: { ...during.headers, 'x-service-signature-new': undefined },
        rawBody: during.body,
      }).ok,
    ).toBe(true);

    // A rotation with no overlap: the old secret stops at once.
    const again = await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, key, {
      overlap_seconds: 0,
    });
    expect(again.status).toBe(200);
    const newest = again.body.secret as string;
    await appendVerdict(stack.store, { coin: 'ROTA', call: 'BUY', confidence: 62 });
    await r.waitFor(2);
    const after = r.received[1]!;
    expect(after.headers['x-service-signature-new']).toBeUndefined();
    expect(verifyWebhook({ secret: newest, headers: after.headers, rawBody: after.body }).ok).toBe(true);
    expect(new Webhook(newest).verify(after.body, after.headers)).toBeTruthy();
    for (const stale of [old, fresh]) {
      expect(verifyWebhook({ secret: stale, headers: after.headers, rawBody: after.body })).toEqual({
        ok: false,
        reason: 'bad_signature',
      });
      expect(() => new Webhook(stale).verify(after.body, after.headers)).toThrow();
    }
    // The secret never appears in the list.
    const list = await stack.request('GET', '/api/webhooks', key);
    expect(JSON.stringify(list.body)).not.toContain(newest);

    for (const [body, field] of [
      [{ overlap_seconds: -1 }, 'overlap_seconds'],
      [{ overlap_seconds: 604_801 }, 'overlap_seconds'],
      [{ overlap_seconds: 'soon' }, 'overlap_seconds'],
      [{ secret: 'whsec_mine' }, 'secret'],
    ] as const) {
      const res = await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, key, body);
      expect(res).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field } });
    }
    const stranger = await stack.issue();
    expect((await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, stranger, {})).status).toBe(404);
    expect((await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, null, {})).status).toBe(401);
  });

  it('keys webhook-signature as the README says: the base64 decoding of the secret after whsec_, not its hex', async () => {
    const readme = readFileSync(new URL('../services/webhooks/README.md', import.meta.url), 'utf8');
    expect(readme.replace(/\s+/g, ' ')).toContain(
      'keyed, as Standard Webhooks keys, with the base64 decoding of the secret after `whsec_`: its characters are hex, but a verifier of your own must not hex-decode them',
    );
    const { r, secret } = await setUp('STDKEYA');
    await appendVerdict(stack.store, { coin: 'STDKEYA', call: 'BUY', confidence: 64 });
    await r.waitFor(1);
    const got = r.received[0]!;
    const signed = `${got.headers['webhook-id']}.${got.headers['webhook-timestamp']}.${got.body}`;
    const sign = (key: Buffer) => `v1,${createHmac('sha256', key).update(signed).digest('base64')}`;
    const tail = secret.slice('whsec_'.length);
    expect(got.headers['webhook-signature']).toBe(sign(Buffer.from(tail, 'base64')));
    expect(got.headers['webhook-signature']).not.toBe(sign(Buffer.from(tail, 'hex')));
    expect(got.headers['webhook-signature']).not.toBe(sign(Buffer.from(secret, 'utf8')));
  });

  it('signs with two secrets at most: a rotation during an overlap ends the secret before it at once, as the README says', async () => {
    const readme = readFileSync(new URL('../services/webhooks/README.md', import.meta.url), 'utf8');
    expect(readme.replace(/\s+/g, ' ')).toContain(
      "At most two secrets sign: a `rotate-secret` during another's overlap ends the older secret at once, whatever `previous_secret_valid_until` it was given",
    );
    const { r, key, id, secret: original } = await setUp('ROTB');
    const first = await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, key, {});
    expect(first.status).toBe(200);
    // Still inside the first rotation's 60 s overlap.
    expect(Date.parse(first.body.previous_secret_valid_until)).toBeGreaterThan(Date.now());
    const second = await stack.request('POST', `/api/webhooks/${id}/rotate-secret`, key, {});
    expect(second.status).toBe(200);
    const [replaced, newest] = [first.body.secret as string, second.body.secret as string];

    await appendVerdict(stack.store, { coin: 'ROTB', call: 'BUY', confidence: 63 });
    await r.waitFor(1);
    const got = r.received[0]!;
    expect(got.headers['webhook-signature']!.split(' ')).toHaveLength(2);
    for (const secret of [replaced, newest]) {
      expect(verifyWebhook({ secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
      expect(new Webhook(secret).verify(got.body, got.headers)).toBeTruthy();
    }
    // X-Service-Signature is the replaced secret's, X-Service-Signature-New the newest one's.
    expect(
      verifyWebhook({
        secret: replaced,
        headers: { ...got.headers, 'x-service-signature-new': undefined },
        rawBody: got.body,
      }).ok,
    ).toBe(true);
    // The original secret, given an overlap by the first rotation, verifies nothing any more.
    expect(verifyWebhook({ secret: original, headers: got.headers, rawBody: got.body })).toEqual({
      ok: false,
      reason: 'bad_signature',
    });
    expect(() => new Webhook(original).verify(got.body, got.headers)).toThrow();
  });

  it('says which instant each created_at is: the body’s is its event’s, the delivery log’s the delivery’s own', async () => {
    const { r, key, id } = await setUp('WHENA');
    await appendVerdict(stack.store, { coin: 'WHENA', call: 'BUY', confidence: 70 });
    await r.waitFor(1);
    const body = WebhookEnvelope.parse(JSON.parse(r.received[0]!.body));
    const [verdict] = await stack.store.readStream('verdict-BINANCE-WHENA-1h');
    const [sequenced] = await stack.store.readStream(sequenceStream(id));
    // The body names when the verdict was recorded; the log, when the delivery was (at or after it).
    expect(body.created_at).toBe(verdict!.recordedAt);
    const log = await stack.request('GET', `/api/webhooks/${id}/deliveries`, key);
    const delivery = log.body.deliveries.find(
      (d: { delivery_id: string }) => d.delivery_id === body.delivery_id,
    );
    expect(delivery.created_at).toBe(sequenced!.recordedAt);
    expect(Date.parse(delivery.created_at)).toBeGreaterThanOrEqual(Date.parse(body.created_at));
    // And the documents say so, each naming the other.
    const schemas = await stack.request('GET', '/api/webhooks/schemas', null);
    const envelope =
      schemas.body.webhooks['trade_call.v1'].post.requestBody.content['application/json'].schema;
    expect(envelope.properties.created_at.description).toBe(ENVELOPE_CREATED_AT);
    expect(ENVELOPE_CREATED_AT).toMatch(
      /^When the event behind this delivery was recorded.*delivery log.s created_at/,
    );
    const openapi = await stack.request('GET', '/openapi.json', null);
    const deliveries =
      openapi.body.paths['/api/webhooks/{id}/deliveries'].get.responses['200'].content['application/json']
        .schema.properties.deliveries.items;
    expect(deliveries.properties.created_at.description).toBe(DELIVERY_CREATED_AT);
    expect(DELIVERY_CREATED_AT).toMatch(
      /^When this delivery was recorded.*body.s created_at is when that event/,
    );
  });

  it('tells the owner on another subscription when one is disabled, and shows it in the list', async () => {
    const dying = await setUp('GONEA');
    dying.r.behave = () => ({ status: 410 });
    const watcher = await setUp('GONEA', { events: ['subscription_disabled'], assets: undefined }, dying.key);
    const stranger = await setUp('GONEA', { events: ['subscription_disabled'], assets: undefined });
    await appendVerdict(stack.store, { coin: 'GONEA', call: 'BUY', confidence: 70 });
    await watcher.r.waitFor(1);
    const notice = WebhookEnvelope.parse(JSON.parse(watcher.r.received[0]!.body));
    expect(notice.event).toBe('subscription_disabled');
    expect(notice.seq).toBe(1);
    expect(notice.data).toMatchObject({
      type: 'subscription_disabled',
      subscription_id: dying.id,
      url: dying.r.url,
      reason: expect.stringMatching(/410/),
      // The delivery answered 410 is the first to fail: it is counted.
      consecutive_failures: 1,
    });
    expect(
      verifyWebhook({
        secret: watcher.secret,
        headers: watcher.r.received[0]!.headers,
        rawBody: watcher.r.received[0]!.body,
      }).ok,
    ).toBe(true);
    // Only the owner hears of it; the watcher never gets trade calls it did not ask for.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(stranger.r.received).toHaveLength(0);
    expect(watcher.r.received).toHaveLength(1);
    // The list shows the active subscriptions; a disabled one is listed with status=disabled or all.
    const ids = async (query: string) =>
      (await stack.request('GET', `/api/webhooks${query}`, dying.key)).body.webhooks.map(
        (w: { id: string }) => w.id,
      );
    expect(await ids('')).toEqual([watcher.id]);
    expect(await ids('?status=active')).toEqual([watcher.id]);
    expect(await ids('?status=disabled')).toEqual([dying.id]);
    for (const [query, code, field] of [
      ['?status=gone', 'INVALID_FIELD', 'status'],
      ['?status=', 'INVALID_FIELD', 'status'],
      ['?status=all&status=active', 'INVALID_PARAMETER', 'status'],
      ['?state=all', 'UNKNOWN_FILTER', 'state'],
    ]) {
      const refused = await stack.request('GET', `/api/webhooks${query}`, dying.key);
      expect(refused, query).toMatchObject({ status: 400, body: { code, field } });
    }
    const list = await stack.request('GET', '/api/webhooks?status=all', dying.key);
    const row = list.body.webhooks.find((w: { id: string }) => w.id === dying.id);
    expect(row).toMatchObject({
      status: 'disabled',
      disabled_reason: expect.stringMatching(/410/),
      last_success_at: null,
    });
    expect(row.disabled_at).toBe(
      notice.data.type === 'subscription_disabled' ? notice.data.disabled_at : null,
    );
    const watcherRow = list.body.webhooks.find((w: { id: string }) => w.id === watcher.id);
    expect(watcherRow).toMatchObject({
      status: 'active',
      last_success_at: expect.any(String),
      failing_since: null,
    });
  });

  it('pins a payload version at creation and lists every version’s schema', async () => {
    const pinned = await setUp('VERA', { event_version: 1 });
    expect(pinned.body.event_version).toBe(1);
    const defaulted = await setUp('VERA');
    expect(defaulted.body.event_version).toBe(CURRENT_EVENT_VERSION);
    for (const [value, status] of [
      [Math.max(...EVENT_VERSIONS) + 1, 400],
      [0, 400],
      ['1', 400],
      [1.5, 400],
    ] as const) {
      const res = await stack.request('POST', '/api/webhooks', pinned.key, {
        url: pinned.r.url,
        events: ['trade_call'],
        event_version: value,
      });
      expect(res).toMatchObject({ status, body: { code: 'INVALID_FIELD', field: 'event_version' } });
    }
    await appendVerdict(stack.store, { coin: 'VERA', call: 'BUY', confidence: 66 });
    await pinned.r.waitFor(1);
    const got = pinned.r.received[0]!;
    expect(got.headers['x-service-event-version']).toBe('1');
    const body = JSON.parse(got.body);
    expect(body.event_version).toBe(1);
    expect(envelopeSchema('trade_call', 1).safeParse(body).success).toBe(true);

    const doc = await stack.request('GET', '/api/webhooks/schemas', null);
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toBe('3.1.0');
    expect(Object.keys(doc.body.webhooks).sort()).toEqual(
      ['regime_shift', 'risk_shift', 'scan_digest', 'subscription_disabled', 'trade_call'].flatMap(
        (event) => [`${event}.v1`, `${event}.v2`],
      ),
    );
    const schema = doc.body.webhooks['trade_call.v1'].post.requestBody.content['application/json'].schema;
    expect(schema.properties.event).toMatchObject({ const: 'trade_call' });
    expect(schema.properties.data.required).toEqual(
      expect.arrayContaining(['coin', 'call', 'confidence', 'verify_url']),
    );
    expect(schema.required).toEqual(
      expect.arrayContaining(['event', 'delivery_id', 'event_version', 'data']),
    );
  });

  it('refuses a query parameter on the public schemas, as the keyed routes do', async () => {
    const plain = await stack.request('GET', '/api/webhooks/schemas', null);
    for (const query of ['?x=1', '?x=1&x=2', '?x']) {
      const refused = await stack.request('GET', `/api/webhooks/schemas${query}`, null);
      expect(refused, query).toMatchObject({
        status: 400,
        body: { code: 'UNKNOWN_FILTER', field: 'x', message: 'unknown parameter "x"; known: none' },
      });
    }
    expect(plain.status).toBe(200);
    expect(plain.body).toEqual((await stack.request('GET', '/api/webhooks/schemas', null)).body);
    expect(Object.keys(plain.body.webhooks)).toContain('trade_call.v2');
  });
});

/**
 * A memory store that lets the first `n` failures' appends land together, as a store that folds in
 * batches (LMDB's poll) shows them: each failure's disable check then reads the others' counts.
 */
class FailuresTogether extends MemoryEventStore {
  private waiting: (() => void)[] = [];

  constructor(private n: number) {
    super();
  }

  override async append(...args: Parameters<MemoryEventStore['append']>) {
    if (this.n > 0 && args[1].some((e) => e.type === 'DeliveryFailed')) {
      const turn = new Promise<void>((resolve) => this.waiting.push(resolve));
      if (this.waiting.length >= this.n) {
        for (const go of this.waiting.splice(0)) go();
        this.n = 0;
      }
      await turn;
    }
    return super.append(...args);
  }
}

describe.runIf(reachable)('a disable by the failed-deliveries rule', () => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    stack = await startWebhookStack({
      store: new FailuresTogether(8),
      env: {
        WEBHOOK_RETRY_SCHEDULE: '0',
        WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '3',
        WEBHOOK_ENDPOINT_CONCURRENCY: '8',
      },
      settings: { tls: { ca: tls.cert } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  it('records the threshold it crossed, however many deliveries failed beside it', async () => {
    const [failing, notices] = [await startReceiver(tls), await startReceiver(tls)];
    receivers.push(failing, notices);
    const key = await stack.issue();
    const watched = await stack.request('POST', '/api/webhooks', key, {
      url: failing.url,
      events: ['trade_call'],
      assets: ['DISC'],
    });
    const notified = await stack.request('POST', '/api/webhooks', key, {
      url: notices.url,
      events: ['subscription_disabled'],
    });
    expect([watched.status, notified.status]).toEqual([201, 201]);
    // Eight deliveries, each failing its one attempt, recorded together: the count runs past 3
    // before the disable is decided.
    failing.behave = () => ({ status: 500 });
    for (let i = 0; i < 8; i++)
      await appendVerdict(stack.store, { coin: 'DISC', call: 'BUY', confidence: 60 + i });
    await notices.waitFor(1, 30_000);
    const notice = JSON.parse(notices.received[0]!.body) as {
      data: { reason: string; consecutive_failures: number };
    };
    expect(notice.data).toMatchObject({
      reason: '3 consecutive deliveries failed every attempt',
      consecutive_failures: 3,
    });
    const listed = await stack.request('GET', '/api/webhooks?status=disabled', key);
    const sub = listed.body.webhooks.find((w: { id: string }) => w.id === watched.body.id);
    expect(sub).toMatchObject({
      status: 'disabled',
      disabled_reason: '3 consecutive deliveries failed every attempt',
    });
  });
});

describe.runIf(reachable)('the failed-deliveries rule counts deliveries, not re-sends', () => {
  let stack: WebhookStack;
  let receiver: Receiver | undefined;

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: { WEBHOOK_RETRY_SCHEDULE: '0', WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '3' },
      settings: { tls: { ca: tls.cert } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  it('does not disable a subscription whose one failed delivery was resent and failed again', async () => {
    receiver = await startReceiver(tls);
    const r = receiver;
    r.behave = () => ({ status: 500 });
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['RSND'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const listed = async () =>
      ((await stack.request('GET', '/api/webhooks?status=all', key)).body.webhooks as { id: string }[]).find(
        (w) => w.id === id,
      );
    await appendVerdict(stack.store, { coin: 'RSND', call: 'BUY', confidence: 60 });
    await r.waitFor(1);
    const first = r.received[0]!.headers['x-service-delivery']!;
    await until(
      () => stack.api.runner.state.subscriptions.subs[id]?.failedDeliveries ?? 0,
      (n) => n === 1,
    );
    // The same delivery failing twice more (its resends): one delivery in a row, not three. A
    // resend answers once its outcome, and the disable it calls for, are recorded.
    for (let i = 0; i < 2; i++) {
      const resent = await stack.request('POST', `/api/webhooks/${id}/deliveries/${first}/resend`, key);
      expect(resent).toMatchObject({ status: 200, body: { delivery_id: first, delivered: false } });
    }
    expect(r.received).toHaveLength(3);
    expect(await listed()).toMatchObject({ status: 'active', disabled_reason: null });
    // Two more deliveries failing make three in a row.
    for (let i = 0; i < 2; i++)
      await appendVerdict(stack.store, { coin: 'RSND', call: 'SELL', confidence: 61 + i });
    const disabled = await until(
      listed,
      (w) => (w as { status?: string } | undefined)?.status === 'disabled',
    );
    expect(disabled).toMatchObject({ disabled_reason: '3 consecutive deliveries failed every attempt' });
  });
});
