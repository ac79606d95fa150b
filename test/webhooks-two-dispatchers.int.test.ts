import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireNats } from './nats-server.ts';
import { appendVerdict, dispatcherPool, startWebhookStack, type WebhookStack } from './webhooks-harness.ts';
import { deliveryIds, type Receiver, selfSignedCert, startReceiver } from './webhooks-receiver.ts';

const reachable = await requireNats();
const tls = selfSignedCert();
const EVENTS = 40;
// One request at a time per dispatcher: most deliveries wait in an endpoint queue, each dispatcher's
// backlog (about EVENTS / 2 × answerAfterMs) far longer than a claim may go without an outcome.
// Claimed at their turn (the stuck time leaves no room for claiming ahead), and claimed a round
// ahead of it (preclaimRounds 1: a claim made while the request before it runs). In both, the first
// deliveries each dispatcher queues have their turn inside their queue lease and go out unclaimed.
const cases = [
  {
    name: 'claimed at the turn',
    answerAfterMs: 250,
    env: { WEBHOOK_ENDPOINT_CONCURRENCY: '1', WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_STUCK_AFTER_MS: '2500' },
  },
  {
    name: 'claimed a round ahead',
    answerAfterMs: 400,
    env: { WEBHOOK_ENDPOINT_CONCURRENCY: '1', WEBHOOK_TIMEOUT_MS: '2000', WEBHOOK_STUCK_AFTER_MS: '6000' },
  },
];

describe.runIf(reachable).each(cases)(
  'two dispatchers sharing the work, a busy receiver, $name',
  ({ answerAfterMs, env }) => {
    let stack: WebhookStack;
    let receiver: Receiver;
    const dispatchers = dispatcherPool(() => stack, {
      tag: 'pair',
      env,
      settings: { tls: { ca: tls.cert } },
    });

    beforeAll(async () => {
      stack = await startWebhookStack({ env, dispatcher: false, settings: { tls: { ca: tls.cert } } });
      receiver = await startReceiver(tls);
      receiver.behave = () => ({ status: 200, afterMs: answerAfterMs });
      // Same store, same bus, same durable consumers: the bus hands each message to one of them.
      await dispatchers.start();
      await dispatchers.start();
    });
    afterAll(async () => {
      await dispatchers.stopAll();
      await receiver?.close();
      await stack?.close();
    });

    it('sends every delivery exactly once, however long it waits in an endpoint queue', async () => {
      const key = await stack.issue();
      const created = await stack.request('POST', '/api/webhooks', key, {
        url: receiver.url,
        events: ['trade_call'],
        assets: ['TURNA'],
      });
      expect(created.status).toBe(201);
      for (let i = 0; i < EVENTS; i++)
        await appendVerdict(stack.store, { coin: 'TURNA', call: 'BUY', confidence: 40 + (i % 50) });

      const deliveries = async () => {
        const log = await stack.request('GET', `/api/webhooks/${created.body.id}/deliveries?limit=100`, key);
        return log.body.deliveries as { delivery_id: string; status: string }[];
      };
      // Generous: only a condition that never comes ends this wait (the machine may be under load).
      await expect
        .poll(async () => (await deliveries()).filter((d) => d.status === 'succeeded').length, {
          timeout: 120_000,
          interval: 200,
        })
        .toBe(EVENTS);
      // Everything a dispatcher still holds (a superseded attempt waiting its turn) goes out or is
      // dropped before they stop: only then is the receiver's count final.
      await dispatchers.stopAll();

      const ids = (await deliveries()).map((d) => d.delivery_id);
      expect(new Set(ids).size).toBe(EVENTS);
      const times = new Map<string, number>();
      for (const id of deliveryIds(receiver)) times.set(id, (times.get(id) ?? 0) + 1);
      expect([...times.entries()].filter(([, n]) => n !== 1)).toEqual([]);
      expect([...times.keys()].sort()).toEqual([...ids].sort());
    });
  },
);
