import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { SecretBox } from './secret-box.ts';
import { createSubscription, SubscriptionLimitError } from './subscription-commands.ts';
import { subscriptionStream } from './subscription-fold.ts';

const secrets = new SecretBox('11'.repeat(32));
const request = { url: 'https://hooks.example.com/a', events: ['trade_call'] } as never;

/** A store where another replica's create lands between this create's read and its append. */
function racing(store: MemoryEventStore, keyId: string, maxPerKey: number): EventStore {
  const racer = Object.create(store) as MemoryEventStore;
  let raced = false;
  racer.append = async (...args: Parameters<MemoryEventStore['append']>) => {
    if (!raced) {
      raced = true;
      await createSubscription(store, {
        keyId,
        request,
        url: 'https://hooks.example.com/b',
        secrets,
        maxPerKey,
      });
    }
    return store.append(...args);
  };
  return racer;
}

describe('subscription commands', () => {
  it('decides a create that lost the race again against the new state', async () => {
    const store = new MemoryEventStore();
    const created = await createSubscription(racing(store, 'key_a', 5), {
      keyId: 'key_a',
      request,
      url: 'https://hooks.example.com/a',
      secrets,
      maxPerKey: 5,
    });
    const events = await store.readStream(subscriptionStream('key_a'));
    expect(events.map((e) => (e.data as { subscriptionId: string }).subscriptionId)).toHaveLength(2);
    expect(events.at(-1)!.data).toMatchObject({ subscriptionId: created.subscriptionId });
  });

  it('keeps the per-key cap when the retried create finds the key full', async () => {
    const store = new MemoryEventStore();
    await expect(
      createSubscription(racing(store, 'key_b', 1), {
        keyId: 'key_b',
        request,
        url: 'https://hooks.example.com/a',
        secrets,
        maxPerKey: 1,
      }),
    ).rejects.toBeInstanceOf(SubscriptionLimitError);
    expect(await store.readStream(subscriptionStream('key_b'))).toHaveLength(1);
  });
});
