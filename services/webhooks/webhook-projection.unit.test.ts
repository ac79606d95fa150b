import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { newEvent } from '../../contracts/events.ts';
import { foldEvents } from '../../projections/projection.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { deliveryStream } from './delivery-log-fold.ts';
import { SecretBox } from './secret-box.ts';
import { createSubscription, pauseSubscription, reEnableSubscription } from './subscription-commands.ts';
import type { SubscriptionRecord } from './subscription-fold.ts';
import { webhookProjection } from './webhook-projection.ts';

const secrets = new SecretBox('22'.repeat(32));

describe('the webhook projection', () => {
  it('rebuilds a snapshot folded before the state kept the count at a 410 and the time of a re-enable', async () => {
    const store = new MemoryEventStore();
    const keyId = 'key_p';
    const { subscriptionId } = await createSubscription(store, {
      keyId,
      request: { url: 'https://hooks.example.com/a', events: ['trade_call'] } as never,
      url: 'https://hooks.example.com/a',
      secrets,
      maxPerKey: 5,
    });
    await pauseSubscription(store, { keyId, subscriptionId, consecutiveFailures: 0 });
    await reEnableSubscription(store, keyId, subscriptionId);
    // A 410 folded, its disable not recorded yet (the process stopped in between).
    await store.append(deliveryStream('d-1'), [
      newEvent('DeliveryFailed', {
        deliveryId: 'd-1',
        subscriptionId,
        attempt: 1,
        status: 410,
        error: null,
        latencyMs: 5,
        response: null,
        nextAttemptAt: null,
      }),
    ]);
    const head = await store.headPosition();
    const folded = foldEvents(webhookProjection, await store.readAll());
    expect(folded.subscriptions.subs[subscriptionId]).toMatchObject({
      failedDeliveries: 1,
      failedDeliveriesAtGone: 1,
      enabledSincePosition: expect.any(Number),
    });
    // The same log as the fold of version 8 left it: neither field.
    const older = structuredClone(folded);
    const sub: Partial<SubscriptionRecord> = older.subscriptions.subs[subscriptionId]!;
    delete sub.failedDeliveriesAtGone;
    delete sub.enabledSince;
    delete sub.enabledSincePosition;
    const snapshots = new MemoryProjectionStore();
    await snapshots.save(webhookProjection.name, { version: 8, checkpoint: head, state: older });
    const runner = new ProjectionRunner(store, snapshots, webhookProjection);
    await runner.start();
    await runner.waitFor(head);
    expect(runner.state).toEqual(folded);
    await runner.stop();
  });
});
