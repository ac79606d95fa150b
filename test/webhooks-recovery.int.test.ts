import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { findDelivery, heldForDisable } from '../services/webhooks/delivery-log-fold.ts';
import { reEnableSubscription } from '../services/webhooks/subscription-commands.ts';
import { subscriptionStream } from '../services/webhooks/subscription-fold.ts';
import { consumerDrained, requireNats, streamMessageIds } from './nats-server.ts';
import {
  appendVerdict,
  dispatcherPool,
  startWebhookStack,
  until,
  type WebhookStack,
} from './webhooks-harness.ts';
import { deliveryIds, type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();

const ids = (r: Receiver, from = 0) => new Set(deliveryIds(r).slice(from));

describe.runIf(reachable)('recovery reaches everything since T, from the event log', () => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    stack = await startWebhookStack({
      env: {
        // One attempt per delivery, so each failure is final at once.
        WEBHOOK_RETRY_SCHEDULE: '0',
        WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '1000',
        WEBHOOK_RECOVER_PER_SECOND: '10000',
        WEBHOOK_MAX_PER_KEY: '5',
      },
      settings: { tls: { ca: tls.cert } },
    });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  const setUp = (coin: string) => subscribed(stack, receivers, coin);

  it('re-sends every failed delivery since T and resends one older than the in-memory log', async () => {
    const { r, key, id } = await setUp('RECA');
    r.behave = () => ({ status: 500 });
    const since = new Date(Date.now() - 1_000).toISOString();
    const n = 250; // more than the 200 the in-memory delivery log keeps
    // In batches that finish before the next begins: only finished deliveries leave the log.
    for (let batch = 1; batch <= 5; batch++) {
      for (let i = 0; i < 50; i++) {
        await appendVerdict(stack.store, { coin: 'RECA', call: 'BUY', confidence: 70 });
      }
      await r.waitFor(batch * 50, 30_000);
      await until(
        () => stack.api.runner.state.subscriptions.subs[id]?.failedDeliveries ?? 0,
        (f) => f >= batch * 50,
      );
    }
    expect(stack.api.runner.state.log.bySub[id]!.length).toBeLessThan(n);
    const failedIds = ids(r);
    expect(failedIds.size).toBe(n);
    const oldest = r.received[0]!.headers['x-service-delivery']!;

    r.behave = () => ({ status: 200 });
    const before = r.received.length;
    const enabled = await stack.request('POST', `/api/webhooks/${id}/enable`, key, { recover_since: since });
    expect(enabled.status).toBe(200);
    await r.waitFor(before + n, 30_000);
    expect(ids(r, before)).toEqual(failedIds);

    const resent = await stack.request('POST', `/api/webhooks/${id}/deliveries/${oldest}/resend`, key);
    expect(resent.status).toBe(200);
    expect(resent.body).toMatchObject({ delivery_id: oldest, delivered: true });
    const unknown = await stack.request('POST', `/api/webhooks/${id}/deliveries/nope/resend`, key);
    expect(unknown).toMatchObject({ status: 404, body: { code: 'NOT_FOUND' } });
  });

  it('delivers the events recorded while the subscription was disabled', async () => {
    const { r, key, id } = await setUp('RECB');
    r.behave = () => ({ status: 410 });
    const since = new Date(Date.now() - 1_000).toISOString();
    await appendVerdict(stack.store, { coin: 'RECB', call: 'SELL', confidence: 60 });
    await until(
      () => stack.api.runner.state.subscriptions.subs[id]?.status,
      (s) => s === 'disabled',
    );
    // Recorded while disabled: never attempted.
    for (let i = 0; i < 15; i++)
      await appendVerdict(stack.store, { coin: 'RECB', call: 'BUY', confidence: 65 });
    // Another subscription's coin: never this subscription's.
    await appendVerdict(stack.store, { coin: 'RECC', call: 'BUY', confidence: 65 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received).toHaveLength(1);

    r.behave = () => ({ status: 200 });
    const enabled = await stack.request('POST', `/api/webhooks/${id}/enable`, key, { recover_since: since });
    expect(enabled.body.status).toBe('active');
    await r.waitFor(1 + 16);
    const delivered = r.received.slice(1).map((g) => JSON.parse(g.body));
    expect(new Set(delivered.map((d) => d.delivery_id)).size).toBe(16);
    expect(delivered.every((d) => d.data.coin === 'RECB')).toBe(true);
    expect(delivered.some((d) => d.delivery_id === r.received[0]!.headers['x-service-delivery'])).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received).toHaveLength(17);
  });

  it('recovers nothing from before T', async () => {
    const { r, key, id } = await setUp('RECD');
    r.behave = () => ({ status: 410 });
    await appendVerdict(stack.store, { coin: 'RECD', call: 'BUY', confidence: 60 });
    await until(
      () => stack.api.runner.state.subscriptions.subs[id]?.status,
      (s) => s === 'disabled',
    );
    await new Promise((resolve) => setTimeout(resolve, 20));
    const since = new Date().toISOString();
    await new Promise((resolve) => setTimeout(resolve, 20));
    await appendVerdict(stack.store, { coin: 'RECD', call: 'BUY', confidence: 61 });
    r.behave = () => ({ status: 200 });
    await stack.request('POST', `/api/webhooks/${id}/enable`, key, { recover_since: since });
    await r.waitFor(2);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(r.received).toHaveLength(2);
    expect(JSON.parse(r.received[1]!.body).data.confidence).toBe(61);
  });

  it('recovers from no earlier than the subscription’s creation: reads the log from there, sends all it missed', async () => {
    // A log that does not start with the subscription (the tests above add to it).
    for (let i = 0; i < 20; i++)
      await appendVerdict(stack.store, { coin: 'RECZ', call: 'BUY', confidence: 60 });
    const { r, key, id } = await setUp('RECE');
    const sub = stack.api.runner.state.subscriptions.subs[id]!;
    expect(sub.createdPosition).toBeGreaterThan(20);
    // Where the recovery's pages of the log start.
    const pagesAfter: number[] = [];
    const readAll = stack.store.readAll.bind(stack.store);
    stack.store.readAll = (options) => {
      // Only the recovery's reads, not the projections' catch-up (also pages of 512).
      if (new Error().stack?.includes('logPages')) pagesAfter.push(options?.after ?? 0);
      return readAll(options);
    };
    try {
      const recovered = async (enable: () => Promise<unknown>, expected: number) => {
        r.behave = () => ({ status: 410 });
        const from = r.received.length;
        await appendVerdict(stack.store, { coin: 'RECE', call: 'BUY', confidence: 60 });
        await until(
          () => stack.api.runner.state.subscriptions.subs[id]?.status,
          (s) => s === 'disabled',
        );
        for (let i = 0; i < 3; i++)
          await appendVerdict(stack.store, { coin: 'RECE', call: 'SELL', confidence: 62 });
        r.behave = () => ({ status: 200 });
        pagesAfter.length = 0;
        await enable();
        await r.waitFor(from + 1 + expected);
        await new Promise((resolve) => setTimeout(resolve, 300));
        return r.received.length - from;
      };
      // Through the api: the time is taken as the creation, recorded so, and read from there.
      const first = await recovered(async () => {
        const res = await stack.request('POST', `/api/webhooks/${id}/enable`, key, {
          recover_since: '2020-01-01T00:00:00Z',
        });
        expect(res.status).toBe(200);
      }, 4);
      expect(first).toBe(5);
      const [reEnabled] = (await stack.store.readStream(subscriptionStream(sub.keyId))).filter(
        (e) =>
          e.type === 'SubscriptionReEnabled' && (e.data as { subscriptionId: string }).subscriptionId === id,
      );
      expect((reEnabled!.data as { recoverSince?: string }).recoverSince).toBe(sub.createdAt);
      expect(pagesAfter.length).toBeGreaterThan(0);
      expect(Math.min(...pagesAfter)).toBeGreaterThanOrEqual(sub.createdPosition);
      // A re-enable recorded with an earlier time (as before the api clamped it): read from the
      // creation too, and what was missed since then sent (the 4 recovered above succeeded).
      const second = await recovered(
        () => reEnableSubscription(stack.store, sub.keyId, id, '2020-01-01T00:00:00Z'),
        4,
      );
      expect(second).toBe(5);
      expect(pagesAfter.length).toBeGreaterThan(0);
      expect(Math.min(...pagesAfter)).toBeGreaterThanOrEqual(sub.createdPosition);
    } finally {
      stack.store.readAll = readAll;
    }
  });
});

describe.runIf(reachable)('a dispatcher stopped during a recovery', () => {
  const env = { WEBHOOK_RECOVER_PER_SECOND: '4', WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '1000' };
  let stack: WebhookStack;
  let receiver: Receiver | undefined;
  const dispatchers = dispatcherPool(() => stack, {
    tag: 'stop',
    env,
    settings: { tls: { ca: tls.cert } },
  });

  beforeAll(async () => {
    stack = await startWebhookStack({ env, dispatcher: false, settings: { tls: { ca: tls.cert } } });
  });
  afterAll(async () => {
    await dispatchers.stopAll();
    await receiver?.close();
    await stack?.close();
  });

  it('leaves the rest of the recovery to the next dispatcher: every event recorded while disabled is delivered', async () => {
    const first = await dispatchers.start();
    receiver = await startReceiver(tls);
    const r = receiver;
    const key = await stack.issue();
    const created = await stack.request('POST', '/api/webhooks', key, {
      url: r.url,
      events: ['trade_call'],
      assets: ['RECS'],
    });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    r.behave = () => ({ status: 410 });
    const since = new Date(Date.now() - 1_000).toISOString();
    await appendVerdict(stack.store, { coin: 'RECS', call: 'SELL', confidence: 60 });
    await until(
      () => stack.api.runner.state.subscriptions.subs[id]?.status,
      (s) => s === 'disabled',
    );
    let last = '';
    for (let i = 0; i < 12; i++)
      last = await appendVerdict(stack.store, { coin: 'RECS', call: 'BUY', confidence: 65 });
    // Handled by the dispatcher while the subscription is still disabled: one handled after the
    // enable below would go out as a fresh delivery (3 runs of 10 failed so), leaving the recovery
    // nothing to be stopped in.
    await until(async () => (await streamMessageIds(stack.stream)).includes(last), Boolean);
    await until(() => consumerDrained(stack.stream, `stop${stack.prefix}-calls`), Boolean);

    r.behave = () => ({ status: 200 });
    const enabled = await stack.request('POST', `/api/webhooks/${id}/enable`, key, { recover_since: since });
    expect(enabled.body.status).toBe('active');
    // Four claims a second: stopped after the first two, with eleven still to go.
    await r.waitFor(1 + 2);
    await dispatchers.stop(first);
    expect(ids(r).size).toBeLessThan(13);
    await dispatchers.start();
    await until(
      () => ids(r).size,
      (n) => n === 13,
      30_000,
    );
    const delivered = r.received.slice(1).map((g) => JSON.parse(g.body) as { data: { coin: string } });
    expect(delivered.every((d) => d.data.coin === 'RECS')).toBe(true);
  });
});

// One attempt per delivery, a disable at the first failure, one request at a time: the deliveries
// queued behind the failing one have their turn after the disable, and are held.
const heldEnv = {
  WEBHOOK_RETRY_SCHEDULE: '0',
  WEBHOOK_DISABLE_AFTER_FAILED_DELIVERIES: '1',
  WEBHOOK_ENDPOINT_CONCURRENCY: '1',
  // Long enough that each queued delivery is sent (here: held) under its queue record, with no
  // claim at its turn: the only record after the disable is the hold's own, as in the walk.
  WEBHOOK_STUCK_AFTER_MS: '30000',
  WEBHOOK_RECOVER_PER_SECOND: '10000',
};

interface Held {
  r: Receiver;
  key: string;
  id: string;
  /** The deliveries held for the disable. */
  held: string[];
  /** When each was queued (its `attempted_at`, the hold's attempt). */
  queuedAt: Map<string, string>;
  disabledAt: string;
}

/** A receiver of its own and a key subscribed to its trade calls for `coin`. */
async function subscribed(stack: WebhookStack, receivers: Receiver[], coin: string) {
  const r = await startReceiver(tls);
  receivers.push(r);
  const key = await stack.issue();
  const res = await stack.request('POST', '/api/webhooks', key, {
    url: r.url,
    events: ['trade_call'],
    assets: [coin],
  });
  expect(res.status).toBe(201);
  return { r, key, id: res.body.id as string };
}

/** A subscription disabled by its failing receiver, with deliveries held for that disable. */
async function disabledWithHeld(stack: WebhookStack, receivers: Receiver[], coin: string): Promise<Held> {
  const { r, key, id } = await subscribed(stack, receivers, coin);
  r.behave = () => ({ status: 500, afterMs: 300 });
  for (let i = 0; i < 6; i++) await appendVerdict(stack.store, { coin, call: 'BUY', confidence: 60 + i });
  // Every delivery has its outcome: failed (sent) or held (its turn came after the disable).
  type Row = {
    delivery_id: string;
    attempts: { outcome: string; error: string | null; attempted_at: string }[];
  };
  const rows = await until(
    async () => (await stack.request('GET', `/api/webhooks/${id}/deliveries`, key)).body.deliveries as Row[],
    // The disable marks what was pending failed at once; a held attempt's outcome comes at its turn.
    (d) => d.length === 6 && d.every((x) => x.attempts.at(-1)?.outcome !== 'pending'),
  );
  const heldRows = rows.filter(
    (x) => x.attempts.at(-1)?.outcome === 'held' && x.attempts.at(-1)?.error === 'subscription disabled',
  );
  expect(heldRows.length).toBeGreaterThan(0);
  const listed = (await stack.request('GET', '/api/webhooks?status=all', key)).body.webhooks as {
    id: string;
    status: string;
    disabled_at: string;
  }[];
  const sub = listed.find((w) => w.id === id)!;
  expect(sub.status).toBe('disabled');
  return {
    r,
    key,
    id,
    held: heldRows.map((x) => x.delivery_id),
    queuedAt: new Map(heldRows.map((x) => [x.delivery_id, x.attempts.at(-1)!.attempted_at])),
    disabledAt: sub.disabled_at,
  };
}

/**
 * Re-enables (plainly, or recovering since its `disabled_at`) and waits until every held delivery
 * arrived; answers what arrived. With `recover_since` the held deliveries must be queued before
 * `disabled_at`: the recovery skips every record before T, so only the dispatcher's retry scan
 * can send them (a test that passed through the recovery would say nothing about the scan).
 */
async function enableAndCollect(stack: WebhookStack, h: Held, recover: boolean): Promise<Set<string>> {
  if (recover)
    for (const id of h.held) expect(Date.parse(h.queuedAt.get(id)!)).toBeLessThan(Date.parse(h.disabledAt));
  h.r.behave = () => ({ status: 200 });
  const before = h.r.received.length;
  const enabled = await stack.request(
    'POST',
    `/api/webhooks/${h.id}/enable`,
    h.key,
    ...(recover ? [{ recover_since: h.disabledAt }] : []),
  );
  expect(enabled.status).toBe(200);
  return until(
    () => ids(h.r, before),
    (s) => h.held.every((d) => s.has(d)),
    15_000,
  );
}

describe.runIf(reachable).each([
  { layout: 'split', shareProjection: false },
  { layout: 'single', shareProjection: true },
])('deliveries held because the subscription was disabled ($layout layout)', ({ shareProjection }) => {
  let stack: WebhookStack;
  const receivers: Receiver[] = [];

  beforeAll(async () => {
    stack = await startWebhookStack({ env: heldEnv, settings: { tls: { ca: tls.cert } }, shareProjection });
  });
  afterAll(async () => {
    await stack?.close();
    for (const r of receivers) await r.close();
  });

  it('sends them on a plain re-enable', async () => {
    const h = await disabledWithHeld(stack, receivers, shareProjection ? 'HELDC' : 'HELDA');
    const got = await enableAndCollect(stack, h, false);
    expect([...got].sort()).toEqual([...h.held].sort());
  });

  it('sends them, by the retry scan, on a re-enable that recovers since disabled_at (queued before it)', async () => {
    const h = await disabledWithHeld(stack, receivers, shareProjection ? 'HELDD' : 'HELDB');
    const got = await enableAndCollect(stack, h, true);
    // Nothing that failed before the disable: it was not held for it.
    expect([...got].sort()).toEqual([...h.held].sort());
  });
});

describe.runIf(reachable)(
  'deliveries held because the subscription was disabled, after a dispatcher restart',
  () => {
    let stack: WebhookStack;
    const receivers: Receiver[] = [];
    const dispatchers = dispatcherPool(() => stack, {
      tag: 'held',
      env: heldEnv,
      settings: { tls: { ca: tls.cert } },
    });

    beforeAll(async () => {
      stack = await startWebhookStack({
        env: heldEnv,
        dispatcher: false,
        settings: { tls: { ca: tls.cert } },
      });
    });
    afterAll(async () => {
      await dispatchers.stopAll();
      await stack?.close();
      for (const r of receivers) await r.close();
    });

    it.each([
      { from: 'the log', snapshot: false, recover: false, coin: 'HELDR1' },
      { from: 'the log', snapshot: false, recover: true, coin: 'HELDR2' },
      { from: 'its snapshot', snapshot: true, recover: false, coin: 'HELDR3' },
      { from: 'its snapshot', snapshot: true, recover: true, coin: 'HELDR4' },
    ])(
      'a dispatcher started again (folding $from) has them in its delivery log and sends them (recover_since: $recover)',
      async ({ snapshot, recover, coin }) => {
        const projections = new MemoryProjectionStore();
        const first = await dispatchers.start(projections);
        const h = await disabledWithHeld(stack, receivers, coin);
        // Its stop saves the webhook projection's snapshot there; the next one starts from it, or
        // (a store of its own) folds the whole log again.
        await dispatchers.stop(first);
        if (snapshot) expect((await projections.load('webhooks'))?.checkpoint).toBeGreaterThan(0);
        const next = await dispatchers.start(snapshot ? projections : new MemoryProjectionStore());
        for (const id of h.held) expect(heldForDisable(findDelivery(next.runner.state.log, id)!)).toBe(true);
        const got = await enableAndCollect(stack, h, recover);
        expect([...got].sort()).toEqual([...h.held].sort());
        await dispatchers.stop(next);
      },
    );
  },
);
