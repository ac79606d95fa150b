import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../adapters/event-store/memory.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import { subscriptionStream } from '../services/webhooks/subscription-fold.ts';
import {
  appendVerdict,
  startApiReplica,
  startWebhookStack,
  until,
  type WebhookStack,
} from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

/**
 * What services/webhooks/README.md promises an integrator of the management API, each checked over
 * HTTP on real parts (the API on a port, the relay, the in-process bus, the dispatcher, an HTTPS
 * receiver) where no other suite pins it: the delivery log's paging fields before and past the
 * first delivery and its default page, a resend of a delivery the in-memory log has let go (same
 * delivery_id, same bytes) and after a PATCH of the url, the body and query refusals of every
 * route, recover_since's 5-minute bound, a recovery from the failing_since the list showed (which
 * re-sends the delivery that failed then), and two rotations at once on two api replicas (409
 * SECRET_ROTATION_CONFLICT).
 */
const tls = selfSignedCert();
/** A path of its own on the receiver: the receiver tells the subscriptions apart by it. */
const at = (r: Receiver, path: string) => `${new URL(r.url).origin}/${path}`;

/**
 * The log as two api replicas each reach it: through a store object of its own (a process's
 * commands on a stream queue behind each other, another process's do not). `holdReads(stream)`
 * holds that stream's next reads through either view until two have come, then lets both go: two
 * commands, one on each replica, then decide on the stream as it was and append against the same
 * revision, as two requests at once on two replicas do. It returns the barrier's release, for a
 * request that ends without reaching it (refused before its read): the other one, held, goes on,
 * and the test reads both answers instead of waiting out its timeout.
 */
function replicaViews(log: MemoryEventStore) {
  type Barrier = { stream: string; waiting: (() => void)[] };
  let held: Barrier | null = null;
  const open = (barrier: Barrier) => {
    if (held === barrier) held = null;
    for (const waiting of barrier.waiting.splice(0)) waiting();
  };
  const view = (): EventStore =>
    new Proxy(log, {
      get(target, prop) {
        if (prop === 'readStream') {
          return async (stream: string, options?: Parameters<EventStore['readStream']>[1]) => {
            const barrier = held;
            if (barrier?.stream === stream) {
              await new Promise<void>((go) => {
                barrier.waiting.push(go);
                if (barrier.waiting.length === 2) open(barrier);
              });
            }
            return target.readStream(stream, options);
          };
        }
        const value = Reflect.get(target, prop, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
    });
  return {
    view,
    holdReads(stream: string): () => void {
      const barrier: Barrier = { stream, waiting: [] };
      held = barrier;
      return () => open(barrier);
    },
  };
}

describe('the management API as its README promises it', () => {
  const store = new MemoryEventStore();
  const views = replicaViews(store);
  let stack: WebhookStack;
  let receiver: Receiver;
  let key: string;
  let keyId: string;

  beforeAll(async () => {
    stack = await startWebhookStack({
      bus: 'memory',
      store,
      env: {
        WEBHOOK_RETRY_SCHEDULE: '0',
        // The in-memory delivery log keeps 3 finished deliveries per subscription: older ones are
        // reached through the event log only.
        WEBHOOK_DELIVERY_LOG_RETENTION: '3',
        WEBHOOK_SECRET_ROTATION_OVERLAP_MS: '600000',
        WEBHOOK_MAX_PER_KEY: '20',
      },
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await startReceiver(tls);
    ({ key, keyId } = await stack.issueWithId('promises'));
  });
  afterAll(async () => {
    await stack?.close();
    await receiver?.close();
  });

  async function create(path: string, coin: string) {
    const res = await stack.request('POST', '/api/webhooks', key, {
      url: at(receiver, path),
      events: ['trade_call'],
      assets: [coin],
    });
    expect(res.status, JSON.stringify(res.body)).toBe(201);
    return res.body as { id: string; secret: string };
  }
  const at_ = (path: string) => receiver.received.filter((r) => r.path === `/${path}`);
  /** A request with a raw body (not JSON, or JSON of any shape), as a client may send it. */
  async function raw(method: string, path: string, body: string) {
    const res = await fetch(stack.url + path, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body,
    });
    const answer = (await res.json()) as Record<string, unknown>;
    // Every answer of these routes, refusals included, is not to be kept by any cache.
    expect(res.headers.get('cache-control'), `${method} ${path}`).toBe('no-store');
    return { status: res.status, body: answer };
  }
  async function recorded(): Promise<number> {
    return (await stack.store.readStream(subscriptionStream(keyId))).length;
  }

  it('pages after_seq: last_seq 0 and next_after_seq 0 before the first delivery, 50 by default, has_more until the end', async () => {
    const sub = await create('paging', 'PAGEA');
    const log = `/api/webhooks/${sub.id}/deliveries`;
    // No delivery yet: the end at 0, and a cursor past it reads on from 0.
    for (const after of [0, 7]) {
      const empty = await stack.request('GET', `${log}?after_seq=${after}`, key);
      expect(empty, `after_seq=${after}`).toMatchObject({
        status: 200,
        body: { deliveries: [], next_after_seq: 0, has_more: false, last_seq: 0 },
      });
    }
    const n = 53;
    for (let i = 0; i < n; i++)
      await appendVerdict(stack.store, { coin: 'PAGEA', call: 'BUY', confidence: 60 });
    await until(
      async () => (await stack.request('GET', `${log}?after_seq=0&limit=200`, key)).body,
      (b) => b.last_seq === n && b.deliveries.every((d: { status: string }) => d.status === 'succeeded'),
    );
    // No limit: a page of 50, in seq order, from the event log (the in-memory log keeps 3).
    const first = await stack.request('GET', `${log}?after_seq=0`, key);
    expect(first.body.deliveries.map((d: { seq: number }) => d.seq)).toEqual(
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
    expect(first.body).toMatchObject({ next_after_seq: 50, has_more: true, last_seq: n });
    const rest = await stack.request('GET', `${log}?after_seq=${first.body.next_after_seq}`, key);
    expect(rest.body.deliveries.map((d: { seq: number }) => d.seq)).toEqual([51, 52, 53]);
    expect(rest.body).toMatchObject({ next_after_seq: n, has_more: false, last_seq: n });
    // The latest, newest first; limit 200 is taken, paging fields come with after_seq only.
    const latest = await stack.request('GET', `${log}?limit=200`, key);
    expect(latest.status).toBe(200);
    const seqs = latest.body.deliveries.map((d: { seq: number }) => d.seq);
    expect(seqs.slice(0, 3)).toEqual([53, 52, 51]);
    expect(seqs).toEqual([...seqs].sort((x: number, y: number) => y - x));
    expect(latest.body).not.toHaveProperty('next_after_seq');
    const twice = await stack.request('GET', `${log}?after_seq=1&after_seq=2`, key);
    expect(twice).toMatchObject({ status: 400, body: { code: 'INVALID_PARAMETER', field: 'after_seq' } });
  });

  it('resends a delivery the in-memory log let go with its delivery_id, seq and bytes, to the url a PATCH gave', async () => {
    const sub = await create('resend', 'RESA');
    // One at a time, each finished before the next: the log lets go of finished deliveries only.
    for (let i = 1; i <= 5; i++) {
      await appendVerdict(stack.store, { coin: 'RESA', call: 'SELL', confidence: 70 + i });
      await until(
        async () => (await stack.request('GET', `/api/webhooks/${sub.id}/deliveries?after_seq=0`, key)).body,
        (b) => b.last_seq === i && b.deliveries.every((d: { status: string }) => d.status === 'succeeded'),
      );
    }
    const bySeq = new Map(at_('resend').map((r) => [JSON.parse(r.body).seq as number, r]));
    const oldest = bySeq.get(1)!;
    const oldestId = oldest.headers['x-service-delivery']!;
    const latest = await until(
      async () => (await stack.request('GET', `/api/webhooks/${sub.id}/deliveries`, key)).body.deliveries,
      (d: { delivery_id: string }[]) => d.length === 3,
    );
    expect(latest.map((d: { delivery_id: string }) => d.delivery_id)).not.toContain(oldestId);

    const resent = await stack.request('POST', `/api/webhooks/${sub.id}/deliveries/${oldestId}/resend`, key);
    expect(resent).toMatchObject({ status: 200, body: { delivery_id: oldestId, delivered: true } });
    const again = at_('resend').at(-1)!;
    expect(at_('resend')).toHaveLength(6);
    expect(again.body).toBe(oldest.body);
    expect(again.headers['x-service-delivery']).toBe(oldestId);
    expect(again.headers['x-service-sequence']).toBe('1');
    expect(verifyWebhook({ secret: sub.secret, headers: again.headers, rawBody: again.body }).ok).toBe(true);

    // After a PATCH of the url, a resend goes to the new one, the same bytes still.
    const moved = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, {
      url: at(receiver, 'moved'),
    });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    const second = bySeq.get(2)!;
    const secondId = second.headers['x-service-delivery']!;
    const resentMoved = await stack.request(
      'POST',
      `/api/webhooks/${sub.id}/deliveries/${secondId}/resend`,
      key,
    );
    expect(resentMoved.body).toMatchObject({ delivery_id: secondId, delivered: true });
    expect(at_('moved')).toHaveLength(1);
    expect(at_('moved')[0]!.body).toBe(second.body);
    expect(at_('resend')).toHaveLength(6);

    // Another subscription's delivery is not this one's: 404, nothing sent.
    const other = await create('other', 'RESB');
    const foreign = await stack.request(
      'POST',
      `/api/webhooks/${other.id}/deliveries/${secondId}/resend`,
      key,
    );
    expect(foreign).toMatchObject({ status: 404, body: { code: 'NOT_FOUND' } });
    // A paused subscription sends nothing, a resend included.
    expect((await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key)).status).toBe(200);
    const paused = await stack.request('POST', `/api/webhooks/${sub.id}/deliveries/${secondId}/resend`, key);
    expect(paused).toMatchObject({ status: 409, body: { code: 'SUBSCRIPTION_DISABLED' } });
    expect(at_('moved')).toHaveLength(1);
  });

  it('PATCH of events and timeframes: the events recorded after it are matched by the new ones, its other filters kept', async () => {
    const witness = await stack.request('POST', '/api/webhooks', key, {
      url: at(receiver, 'witness'),
      events: ['trade_call', 'regime_shift'],
      assets: ['EDTA'],
    });
    expect(witness.status).toBe(201);
    const sub = await create('edited', 'EDTA');
    const patched = await stack.request('PATCH', `/api/webhooks/${sub.id}`, key, {
      events: ['regime_shift'],
      timeframes: ['4h'],
    });
    expect(patched).toMatchObject({
      status: 200,
      body: { id: sub.id, events: ['regime_shift'], timeframes: ['4h'], assets: ['EDTA'] },
    });
    // A call and a shift on 1h, a call on 4h: none for it; a shift on 4h: its one delivery.
    await appendVerdict(stack.store, {
      coin: 'EDTA',
      timeframe: '1h',
      call: 'BUY',
      confidence: 70,
      from: 'ranging',
    });
    await appendVerdict(stack.store, { coin: 'EDTA', timeframe: '4h', call: 'SELL', confidence: 70 });
    await appendVerdict(stack.store, {
      coin: 'EDTA',
      timeframe: '4h',
      call: 'BUY',
      confidence: 71,
      from: 'ranging',
    });
    const deliveries = async (id: string) =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries?after_seq=0`, key)).body.deliveries as {
        event: string;
        status: string;
      }[];
    // The witness has all five (three calls, two shifts): the dispatcher has matched every one.
    await until(
      () => deliveries(witness.body.id),
      (d) => d.length === 5 && d.every((x) => x.status === 'succeeded'),
    );
    await until(
      () => at_('edited'),
      (r) => r.length === 1,
    );
    expect((await deliveries(sub.id)).map((d) => d.event)).toEqual(['regime_shift']);
    expect(JSON.parse(at_('edited')[0]!.body).data).toMatchObject({ type: 'regime_shift', timeframe: '4h' });
  });

  it('refuses a body that is not JSON (INVALID_JSON), not an object (INVALID_FIELD body) or with a field the route does not take, and a query parameter on every route that takes none', async () => {
    const sub = await create('bodies', 'BODA');
    const before = await recorded();
    const routes: [string, string][] = [
      ['POST', '/api/webhooks'],
      ['PATCH', `/api/webhooks/${sub.id}`],
      ['POST', `/api/webhooks/${sub.id}/test`],
      ['POST', `/api/webhooks/${sub.id}/disable`],
      ['POST', `/api/webhooks/${sub.id}/enable`],
      ['POST', `/api/webhooks/${sub.id}/rotate-secret`],
      ['POST', `/api/webhooks/${sub.id}/deliveries/x/resend`],
      ['DELETE', `/api/webhooks/${sub.id}`],
    ];
    for (const [method, path] of routes) {
      expect(await raw(method, path, '{"events":'), `${method} ${path}`).toMatchObject({
        status: 400,
        body: { code: 'INVALID_JSON' },
      });
      for (const body of ['[]', '"trade_call"', 'null', '42']) {
        expect(await raw(method, path, body), `${method} ${path} ${body}`).toMatchObject({
          status: 400,
          body: { code: 'INVALID_FIELD', field: 'body' },
        });
      }
    }
    for (const [method, path] of routes.slice(1, -1)) {
      const refused = await stack.request(
        method,
        `${path}?dry_run=1`,
        key,
        method === 'PATCH' ? { min_confidence: 5 } : undefined,
      );
      expect(refused, `${method} ${path}`).toMatchObject({
        status: 400,
        body: { code: 'UNKNOWN_FILTER', field: 'dry_run' },
      });
    }
    // A field a route does not take is refused, not ignored: a DELETE told to force deletes nothing.
    const forced = await stack.request('DELETE', `/api/webhooks/${sub.id}`, key, { force: true });
    expect(forced).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'force' } });
    expect(await recorded()).toBe(before);
    expect(at_('bodies')).toHaveLength(0);
    expect((await stack.request('DELETE', `/api/webhooks/${sub.id}`, key, {})).status).toBe(200);
  });

  it('lists failing_since while a subscription fails; an enable with recover_since it re-sends what failed since then', async () => {
    const sub = await create('failing', 'FAILA');
    let healthy = false;
    const before = receiver.behave;
    receiver.behave = (request, index) =>
      request.path === '/failing' && !healthy ? { status: 500 } : before(request, index);
    try {
      await appendVerdict(stack.store, { coin: 'FAILA', call: 'BUY', confidence: 66 });
      type Row = { id: string; status: string; failing_since: string | null; last_success_at: string | null };
      const listed = async () =>
        ((await stack.request('GET', '/api/webhooks', key)).body.webhooks as Row[]).find(
          (x) => x.id === sub.id,
        )!;
      const row = await until(listed, (w) => w.failing_since !== null);
      expect(row).toMatchObject({ status: 'active', last_success_at: null });
      const failed = at_('failing')[0]!;
      // Since the failed attempt, at or after its event.
      expect(Date.parse(row.failing_since!)).toBeGreaterThanOrEqual(
        Date.parse(JSON.parse(failed.body).created_at),
      );
      expect((await stack.request('POST', `/api/webhooks/${sub.id}/disable`, key)).status).toBe(200);
      healthy = true;
      const enabled = await stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
        recover_since: row.failing_since,
      });
      expect(enabled).toMatchObject({ status: 200, body: { status: 'active' } });
      await until(
        () => at_('failing'),
        (r) => r.length === 2,
      );
      const again = at_('failing')[1]!;
      expect(again.headers['x-service-delivery']).toBe(failed.headers['x-service-delivery']);
      expect(again.body).toBe(failed.body);
      const healed = await until(listed, (w) => w.last_success_at !== null);
      expect(healed).toMatchObject({ status: 'active', failing_since: null });
    } finally {
      receiver.behave = before;
    }
  });

  it('sends a test delivery marked test, with no seq in its body or headers', async () => {
    const sub = await create('sample', 'SAMPA');
    const sent = await stack.request('POST', `/api/webhooks/${sub.id}/test`, key);
    expect(sent).toMatchObject({ status: 200, body: { delivered: true, status: 200 } });
    const got = at_('sample')[0]!;
    const body = JSON.parse(got.body);
    expect(body).toMatchObject({ test: true, event: 'trade_call' });
    expect(body).not.toHaveProperty('seq');
    expect(got.headers).not.toHaveProperty('x-service-sequence');
    expect(got.headers['x-service-delivery']).toBe(sent.body.delivery_id);
    expect(verifyWebhook({ secret: sub.secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
  });

  it('takes a recover_since up to 5 minutes ahead of its clock, refuses one further ahead', async () => {
    const sub = await create('since', 'SINA');
    const enable = (ms: number) =>
      stack.request('POST', `/api/webhooks/${sub.id}/enable`, key, {
        recover_since: new Date(Date.now() + ms).toISOString(),
      });
    const ahead = await enable(6 * 60_000);
    expect(ahead).toMatchObject({ status: 400, body: { code: 'INVALID_FIELD', field: 'recover_since' } });
    expect((await enable(4 * 60_000)).status).toBe(200);
  });

  it('of two rotations at once (on two api replicas) answers the one recorded second 409 SECRET_ROTATION_CONFLICT, changing nothing', async () => {
    const sub = await create('rotate', 'ROTC');
    const replicas = [await startApiReplica(stack, views.view()), await startApiReplica(stack, views.view())];
    try {
      const head = await store.headPosition();
      for (const r of replicas) await r.api.runner.waitFor(head);
      const path = `/api/webhooks/${sub.id}/rotate-secret`;
      // Both read the secret current and the subscriptions' stream before either appends: the one
      // appended second loses the race, reads the stream again and finds the other's rotation.
      const release = views.holdReads(subscriptionStream(keyId));
      // Whichever request ends first opens the barrier: one that ended before its read (a replica
      // refusing it) leaves the other held alone, and the statuses below say what each answered.
      const answers = await Promise.all(replicas.map((r) => r.request('POST', path, key).finally(release)));
      expect(answers.map((a) => a.status).sort(), JSON.stringify(answers)).toEqual([200, 409]);
      const won = answers.find((a) => a.status === 200)!;
      const lost = answers.find((a) => a.status !== 200)!;
      expect(won?.body.secret).toMatch(/^whsec_[0-9a-f]{48}$/);
      expect(lost).toMatchObject({ status: 409, body: { code: 'SECRET_ROTATION_CONFLICT' } });
      expect(lost.body).not.toHaveProperty('secret');
      const rotations = (await stack.store.readStream(subscriptionStream(keyId))).filter(
        (e) => e.type === 'SubscriptionSecretRotated',
      );
      expect(rotations).toHaveLength(1);
      // The winner's rotation alone: both its secret and the one before it sign.
      await appendVerdict(stack.store, { coin: 'ROTC', call: 'BUY', confidence: 64 });
      await until(
        () => at_('rotate'),
        (r) => r.length === 1,
      );
      const got = at_('rotate')[0]!;
      for (const secret of [sub.secret, won.body.secret as string]) {
        expect(verifyWebhook({ secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
      }
      // An overlap of up to 7 days is taken.
      const asked = Date.now();
      const week = await stack.request('POST', path, key, { overlap_seconds: 604_800 });
      expect(week.status).toBe(200);
      expect(Date.parse(week.body.previous_secret_valid_until)).toBeGreaterThanOrEqual(asked + 604_800_000);
    } finally {
      for (const r of replicas) await r.close();
    }
  });
});
