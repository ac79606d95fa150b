import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createMemoryCache } from '../adapters/cache/memory.ts';
import { type LmdbEventStore, openLmdbEventStore } from '../adapters/event-store/lmdb.ts';
import type { EventStore } from '../adapters/event-store/port.ts';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import { verifyWebhook } from '../contracts/webhook-verify.ts';
import type { DeliveryView } from '../contracts/webhooks.ts';
import { runOperatorCommand } from '../services/operator/operator-commands.ts';
import { dispatcherComponent } from '../services/webhooks/component.ts';
import { SECRET_UNREADABLE } from '../services/webhooks/delivery-worker.ts';
import { resealSecrets } from '../services/webhooks/reseal.ts';
import { SecretBox } from '../services/webhooks/secret-box.ts';
import { createSubscription } from '../services/webhooks/subscription-commands.ts';
import { requireNats } from './nats-server.ts';
import {
  appendVerdict,
  logger,
  startWebhookStack,
  type WebhookStack,
  webhookEnv,
} from './webhooks-harness.ts';
import { type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const OLD = randomBytes(32).toString('hex');
const NEW = randomBytes(32).toString('hex');
const ROOT = new URL('..', import.meta.url).pathname;

/** The store as a process killed after `appends` more appends sees it: the next one never lands. */
function killedAfter(store: EventStore, appends: number): EventStore {
  let left = appends;
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'append') {
        return (...args: Parameters<EventStore['append']>) => {
          if (left-- <= 0) return Promise.reject(new Error('killed mid-run'));
          return target.append(...args);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

// The master key is rotated in place: [OLD] → [NEW, OLD] → reseal-webhook-secrets → [NEW], while
// subscribers keep verifying with the secrets they were given and change nothing.
describe.runIf(reachable)('rotating WEBHOOK_MASTER_KEY in place', () => {
  let dir: string;
  let store: LmdbEventStore;
  let stack: WebhookStack;
  let receiver: Receiver;
  const running = new Set<ReturnType<typeof dispatcherComponent>>();

  function dispatcher(env: Record<string, string>) {
    const d = dispatcherComponent({
      config: loadConfig(webhookEnv(stack.prefix, env)),
      adapters: { eventStore: store, projectionStore: new MemoryProjectionStore(), bus: stack.bus },
      logger,
      feed: stack.engine.feed,
      durablePrefix: `rot${stack.prefix}`,
      settings: { tls: { ca: tls.cert } },
    });
    running.add(d);
    return d;
  }
  async function stop(d: ReturnType<typeof dispatcherComponent>) {
    running.delete(d);
    await d.stop();
  }

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'master-key-rotation-'));
    store = await openLmdbEventStore({ path: join(dir, 'events') });
    stack = await startWebhookStack({
      store,
      env: { WEBHOOK_MASTER_KEY: OLD },
      dispatcher: false,
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    for (const d of running) await d.stop();
    await receiver?.close();
    await stack?.close();
    await store?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('keeps every delivery verifying with the unchanged secrets, holds what no listed key opens, and re-seals once', async () => {
    const { key, keyId } = await stack.issueWithId();
    const create = async (path: string) => {
      const r = await stack.request('POST', '/api/webhooks', key, {
        url: `${receiver.url}/${path}`,
        events: ['trade_call'],
        assets: ['ROTK'],
      });
      expect(r.status).toBe(201);
      return { id: r.body.id as string, secret: r.body.secret as string };
    };
    // Under OLD (the api's key): A rotated with an overlap (its previous secret still signs), C plain.
    const a = await create('a');
    const rotated = await stack.request('POST', `/api/webhooks/${a.id}/rotate-secret`, key, {
      overlap_seconds: 3600,
    });
    expect(rotated.status).toBe(200);
    const c = await create('c');
    const secrets: Record<string, string[]> = { a: [a.secret, rotated.body.secret], c: [c.secret] };
    const deliveries = async (id: string) =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries?limit=100`, key)).body
        .deliveries as DeliveryView[];
    const receivedBy = (path: string) => receiver.received.filter((r) => r.path.endsWith(`/${path}`));
    const distinct = (path: string) =>
      new Set(receivedBy(path).map((r) => r.headers['x-service-delivery'])).size;
    let verdicts = 0;
    const verdict = async () => {
      await appendVerdict(store, { coin: 'ROTK', call: 'BUY', confidence: 50 + verdicts });
      return ++verdicts;
    };

    // [OLD]
    const first = dispatcher({ WEBHOOK_MASTER_KEY: OLD });
    await first.start();
    await verdict();
    await expect.poll(() => [distinct('a'), distinct('c')]).toEqual([1, 1]);
    await stop(first);

    // [NEW, OLD]: a subscription created now is sealed under NEW; the old ones still open.
    const both = { WEBHOOK_MASTER_KEY: NEW, WEBHOOK_MASTER_KEYS_PREVIOUS: OLD };
    const box = new SecretBox(NEW, [OLD]);
    const b = await createSubscription(store, {
      keyId,
      request: { url: `${receiver.url}/b`, events: ['trade_call'], assets: ['ROTK'] },
      url: `${receiver.url}/b`,
      secrets: box,
      maxPerKey: 5,
    });
    secrets.b = [b.secret];
    const second = dispatcher(both);
    await second.start();
    await verdict();
    await expect.poll(() => [distinct('a'), distinct('b'), distinct('c')]).toEqual([2, 1, 2]);
    await stop(second);

    // [NEW] before the re-seal: A and C are under a key not listed, so theirs are held (not
    // failed, nothing sent under another secret); B's goes out.
    const early = dispatcher({ WEBHOOK_MASTER_KEY: NEW });
    await early.start();
    await verdict();
    await expect.poll(() => distinct('b')).toBe(2);
    await expect.poll(async () => (await deliveries(a.id)).length + (await deliveries(c.id)).length).toBe(6);
    await expect
      .poll(
        async () =>
          [...(await deliveries(a.id)), ...(await deliveries(c.id))].filter((d) =>
            d.attempts.some((t) => t.outcome === 'held' && t.error === SECRET_UNREADABLE),
          ).length,
      )
      .toBe(2);
    for (const d of [...(await deliveries(a.id)), ...(await deliveries(c.id))]) {
      expect(d.status).not.toBe('failed');
      expect(d.attempts.every((t) => t.outcome !== 'failed')).toBe(true);
    }
    expect([distinct('a'), distinct('c')]).toEqual([2, 2]);
    expect(await early.checks!().webhookSecrets!()).toMatchObject({ ok: false, unreadable: 2 });
    await stop(early);

    // The re-seal, killed after its first append, then run again (a restart): each subscription
    // under OLD gets exactly one event, B none.
    await expect(resealSecrets(killedAfter(store, 1), box)).rejects.toThrow('killed mid-run');
    expect(await resealSecrets(store, box)).toMatchObject({ resealed: 1, already: 2, unopened: [] });
    const output = await runOperatorCommand(['reseal-webhook-secrets'], {
      store,
      cache: createMemoryCache(),
      secrets: () => box,
    });
    expect(output).toContain('0 re-sealed');
    expect(output).toContain('3 already under it');
    const resealed = (await store.readAll({ maxCount: 100_000 })).filter(
      (e) => e.type === 'SubscriptionSecretResealed',
    );
    expect(resealed.map((e) => (e.data as { subscriptionId: string }).subscriptionId).sort()).toEqual(
      [a.id, c.id].sort(),
    );

    // [NEW] alone: the held deliveries go out, and what comes next, all verifying as before.
    const last = dispatcher({ WEBHOOK_MASTER_KEY: NEW });
    await last.start();
    await verdict();
    await expect.poll(() => [distinct('a'), distinct('b'), distinct('c')]).toEqual([4, 3, 4]);
    expect(await last.checks!().webhookSecrets!()).toEqual({ ok: true });
    for (const path of ['a', 'b', 'c']) {
      for (const got of receivedBy(path)) {
        for (const secret of secrets[path]!) {
          expect(verifyWebhook({ secret, headers: got.headers, rawBody: got.body }).ok).toBe(true);
        }
      }
    }
    // A's previous secret signed beside the new one throughout (its overlap was re-sealed too).
    expect(receivedBy('a').every((r) => r.headers['x-service-signature-new'] !== undefined)).toBe(true);
  });
});

/**
 * `npm run keys -- reseal-webhook-secrets` in a process of its own (node with tsx's loader, as npm
 * runs it) on the LMDB log in `dir`, with the master keys given; its exit code and output.
 */
async function resealCli(
  dir: string,
  keys: { WEBHOOK_MASTER_KEY: string; WEBHOOK_MASTER_KEYS_PREVIOUS?: string },
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      ['--import', 'tsx', join(ROOT, 'services/operator/cli.ts'), 'reseal-webhook-secrets'],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          EVENT_STORE: 'lmdb',
          DATA_DIR: dir,
          CACHE: 'memory',
          BUS: 'memory',
          PUBLIC_BASE_URL: 'http://127.0.0.1:9',
          WEBHOOK_MASTER_KEYS_PREVIOUS: '',
          ...keys,
        },
      },
    );
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

// A secret sealed under a key the operator no longer configures (LOST): the re-seal does all the
// others, names that one and exits 1, so a script stops before emptying WEBHOOK_MASTER_KEYS_PREVIOUS.
describe.runIf(reachable)('reseal-webhook-secrets with a secret no configured key opens', () => {
  const LOST = randomBytes(32).toString('hex');
  const keys = { WEBHOOK_MASTER_KEY: NEW, WEBHOOK_MASTER_KEYS_PREVIOUS: OLD };
  let dir: string;
  let store: LmdbEventStore;
  let stack: WebhookStack;
  let receiver: Receiver;
  let dispatcher: ReturnType<typeof dispatcherComponent> | undefined;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'master-key-unopened-'));
    store = await openLmdbEventStore({ path: join(dir, 'events') });
    stack = await startWebhookStack({
      store,
      env: keys,
      dispatcher: false,
      settings: { tls: { ca: tls.cert } },
    });
    receiver = await startReceiver(tls);
  });
  afterAll(async () => {
    await dispatcher?.stop();
    await receiver?.close();
    await stack?.close();
    await store?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('re-seals what it can, names the rest by id and exits 1; their deliveries are held until a rotate-secret', async () => {
    const { key, keyId } = await stack.issueWithId();
    const create = (path: string, box: SecretBox) =>
      createSubscription(store, {
        keyId,
        request: { url: `${receiver.url}/${path}`, events: ['trade_call'], assets: ['UNOK'] },
        url: `${receiver.url}/${path}`,
        secrets: box,
        maxPerKey: 5,
      });
    const old = await create('old', new SecretBox(OLD, []));
    const lost = await create('lost', new SecretBox(LOST, []));
    const lostVersion = new SecretBox(LOST, []).keyVersion;

    const first = await resealCli(dir, keys);
    expect(first.code).toBe(1);
    expect(first.stdout).toContain('webhook secrets: 1 re-sealed under master key');
    expect(first.stdout).not.toContain('can be emptied');
    expect(first.stderr).toContain(
      `1 webhook subscription not re-sealed: no configured master key opens its secret, left sealed as before: ${lost.subscriptionId} (sealed under ${lostVersion}).`,
    );
    expect(first.stderr).toContain('Do not empty WEBHOOK_MASTER_KEYS_PREVIOUS');
    expect(first.stderr).not.toContain(old.subscriptionId);
    for (const out of [first.stdout, first.stderr]) {
      expect(out).not.toContain(lost.secret);
      expect(out).not.toContain(old.secret);
      expect(out).not.toMatch(/^\s+at /m);
    }
    // Run again: nothing more to re-seal, the same one named, still exit 1.
    const again = await resealCli(dir, keys);
    expect(again).toMatchObject({ code: 1 });
    expect(again.stdout).toContain('0 re-sealed');
    expect(again.stdout).toContain('1 already under it');
    expect(again.stderr).toContain(`${lost.subscriptionId} (sealed under ${lostVersion})`);

    // With [NEW] alone the re-sealed one delivers; the other's delivery is held, not failed.
    dispatcher = dispatcherComponent({
      config: loadConfig(webhookEnv(stack.prefix, { WEBHOOK_MASTER_KEY: NEW })),
      adapters: { eventStore: store, projectionStore: new MemoryProjectionStore(), bus: stack.bus },
      logger,
      feed: stack.engine.feed,
      durablePrefix: `unop${stack.prefix}`,
      settings: { tls: { ca: tls.cert } },
    });
    await dispatcher.start();
    await appendVerdict(store, { coin: 'UNOK', call: 'BUY', confidence: 61 });
    const receivedBy = (path: string) => receiver.received.filter((r) => r.path.endsWith(`/${path}`));
    const deliveries = async (id: string) =>
      (await stack.request('GET', `/api/webhooks/${id}/deliveries?limit=100`, key)).body
        .deliveries as DeliveryView[];
    await expect.poll(() => receivedBy('old').length).toBe(1);
    await expect
      .poll(async () =>
        (await deliveries(lost.subscriptionId)).flatMap((d) =>
          d.attempts.map((t) => [d.status, t.outcome, t.error]),
        ),
      )
      .toContainEqual([expect.not.stringMatching(/failed/), 'held', SECRET_UNREADABLE]);
    expect(receivedBy('lost')).toHaveLength(0);

    // The subscriber rotates its secret: the new one is sealed under NEW, and the held delivery
    // goes out signed with it.
    const rotated = await stack.request('POST', `/api/webhooks/${lost.subscriptionId}/rotate-secret`, key, {
      overlap_seconds: 60,
    });
    expect(rotated.status).toBe(200);
    await expect.poll(() => receivedBy('lost').length).toBe(1);
    const got = receivedBy('lost')[0]!;
    expect(
      verifyWebhook({ secret: rotated.body.secret as string, headers: got.headers, rawBody: got.body }).ok,
    ).toBe(true);
    const last = await resealCli(dir, keys);
    expect(last.code).toBe(0);
    expect(last.stdout).toContain('every secret is sealed under WEBHOOK_MASTER_KEY');
  });
});
