import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MemoryProjectionStore } from '../adapters/projection-store/memory.ts';
import { loadConfig } from '../contracts/config.ts';
import type { DeliveryView } from '../contracts/webhooks.ts';
import { Readiness } from '../services/shared/readiness.ts';
import { dispatcherComponent } from '../services/webhooks/component.ts';
import { SECRET_UNREADABLE } from '../services/webhooks/delivery-worker.ts';
import { requireNats } from './nats-server.ts';
import {
  appendVerdict,
  logger,
  startWebhookStack,
  type WebhookStack,
  webhookEnv,
} from './webhooks-harness.ts';
import { deliveryIds, type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const API_KEY = randomBytes(32).toString('hex');
const OTHER_KEY = randomBytes(32).toString('hex');
const EVENTS = 3;

// An operator restarted the dispatcher with another WEBHOOK_MASTER_KEY than the api role's: every
// delivery was recorded as a failed attempt, retried on the schedule and counted toward disabling
// the subscription, while /readyz said 200.
describe.runIf(reachable)(
  'a dispatcher whose WEBHOOK_MASTER_KEY is not the one secrets were sealed with',
  () => {
    let stack: WebhookStack;
    let receiver: Receiver;
    const running = new Set<ReturnType<typeof dispatcherComponent>>();

    function dispatcher(masterKey: string) {
      const d = dispatcherComponent({
        config: loadConfig(webhookEnv(stack.prefix, { WEBHOOK_MASTER_KEY: masterKey })),
        adapters: { eventStore: stack.store, projectionStore: new MemoryProjectionStore(), bus: stack.bus },
        logger,
        feed: stack.engine.feed,
        durablePrefix: `key${stack.prefix}`,
        settings: { tls: { ca: tls.cert } },
      });
      running.add(d);
      return d;
    }

    beforeAll(async () => {
      stack = await startWebhookStack({
        env: { WEBHOOK_MASTER_KEY: API_KEY },
        dispatcher: false,
        settings: { tls: { ca: tls.cert } },
      });
      receiver = await startReceiver(tls);
    });
    afterAll(async () => {
      for (const d of running) await d.stop();
      await receiver?.close();
      await stack?.close();
    });

    it('holds its deliveries (no attempt used, nothing counted), says so on /readyz, and sends them once restarted with the right key', async () => {
      const key = await stack.issue();
      const created = await stack.request('POST', '/api/webhooks', key, {
        url: receiver.url,
        events: ['trade_call'],
        assets: ['MKEY'],
      });
      expect(created.status).toBe(201);
      const deliveries = async () =>
        (await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries?limit=100`, key)).body
          .deliveries as DeliveryView[];

      const wrong = dispatcher(OTHER_KEY);
      await wrong.start();
      const readiness = new Readiness();
      for (const [name, check] of Object.entries(wrong.checks!())) readiness.add(name, check);
      for (let i = 0; i < EVENTS; i++)
        await appendVerdict(stack.store, { coin: 'MKEY', call: 'BUY', confidence: 50 + i });
      await expect.poll(async () => (await deliveries()).length).toBe(EVENTS);
      await expect.poll(async () => (await deliveries()).every((d) => d.attempts.length > 0)).toBe(true);
      // The retry schedule is 0, 100 and 200 ms: a second counts many times over it.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const held = await deliveries();
      for (const d of held) {
        expect(d.status).toBe('pending');
        // One held attempt each, unnumbered: no request, no retry used.
        expect(d.attempts).toMatchObject([{ attempt: null, outcome: 'held', error: SECRET_UNREADABLE }]);
      }
      expect(receiver.received).toHaveLength(0);
      const listed = await stack.request('GET', '/api/webhooks', key);
      expect(listed.body.webhooks).toMatchObject([{ status: 'active', failing_since: null }]);
      // Not ready, by a check that names the cause.
      const ready = await readiness.run();
      expect(ready.ready).toBe(false);
      expect(ready.checks.webhookSecrets).toMatchObject({ ok: false, unreadable: 1 });
      expect(String(ready.checks.webhookSecrets!.detail)).toContain('WEBHOOK_MASTER_KEY');

      running.delete(wrong);
      await wrong.stop();
      const right = dispatcher(API_KEY);
      await right.start();
      await expect.poll(() => new Set(deliveryIds(receiver)).size).toBe(EVENTS);
      await expect.poll(async () => (await deliveries()).every((d) => d.status === 'succeeded')).toBe(true);
      for (const d of await deliveries()) {
        expect(d.attempts.map((a) => [a.attempt, a.outcome])).toEqual([
          [null, 'held'],
          [1, 'succeeded'],
        ]);
      }
      expect(await right.checks!().webhookSecrets!()).toEqual({ ok: true });
    });
  },
);
