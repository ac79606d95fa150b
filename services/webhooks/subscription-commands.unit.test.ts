import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import type { EventStore } from '../../adapters/event-store/port.ts';
import { ERRORS } from '../../contracts/errors.ts';
import { SecretBox } from './secret-box.ts';
import {
  createSubscription,
  rotateSecret,
  SubscriptionChangedError,
  SubscriptionLimitError,
  updateSubscription,
} from './subscription-commands.ts';
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

  it('refuses a rotation when another one lands between its read and its append: no secret handed out that never signs', async () => {
    const store = new MemoryEventStore();
    const created = await createSubscription(store, {
      keyId: 'key_c',
      request,
      url: 'https://hooks.example.com/a',
      secrets,
      maxPerKey: 5,
    });
    const [createdEvent] = await store.readStream(subscriptionStream('key_c'));
    const original = (createdEvent!.data as { secret: Parameters<SecretBox['open']>[0] }).secret;
    const rotation = { keyId: 'key_c', subscriptionId: created.subscriptionId, secrets, overlapMs: 60_000 };
    // Another request (another replica's) rotates after this one read the original secret.
    const racer = Object.create(store) as MemoryEventStore;
    let rival: string | undefined;
    racer.append = async (...args: Parameters<MemoryEventStore['append']>) => {
      rival ??= (await rotateSecret(store, { ...rotation, expected: original })).secret;
      return store.append(...args);
    };
    await expect(rotateSecret(racer, { ...rotation, expected: original })).rejects.toBeInstanceOf(
      SubscriptionChangedError,
    );
    // One rotation recorded, and its secret (the rival's caller holds it) is the current one.
    const events = await store.readStream(subscriptionStream('key_c'));
    const rotations = events.filter((e) => e.type === 'SubscriptionSecretRotated');
    expect(rotations).toHaveLength(1);
    const current = (rotations[0]!.data as { secret: Parameters<SecretBox['open']>[0] }).secret;
    expect(secrets.open(current, created.subscriptionId)).toBe(rival);
  });

  it('tells a rotation that lost its append to other changes past its retries what happened: nothing changed, send it again', async () => {
    const store = new MemoryEventStore();
    const created = await createSubscription(store, {
      keyId: 'key_d',
      request,
      url: 'https://hooks.example.com/a',
      secrets,
      maxPerKey: 5,
    });
    const [createdEvent] = await store.readStream(subscriptionStream('key_d'));
    const original = (createdEvent!.data as { secret: Parameters<SecretBox['open']>[0] }).secret;
    // Before each of the rotation's appends, another request edits the subscription's filters.
    const racer = Object.create(store) as MemoryEventStore;
    let edits = 0;
    racer.append = async (...args: Parameters<MemoryEventStore['append']>) => {
      const confidence = 50 + edits;
      edits++;
      await updateSubscription(
        store,
        'key_d',
        {
          subscriptionId: created.subscriptionId,
          url: 'https://hooks.example.com/a',
          events: ['trade_call'],
          minConfidence: confidence + 1,
        },
        edits === 1
          ? {
              subscriptionId: created.subscriptionId,
              url: 'https://hooks.example.com/a',
              events: ['trade_call'],
            }
          : {
              subscriptionId: created.subscriptionId,
              url: 'https://hooks.example.com/a',
              events: ['trade_call'],
              minConfidence: confidence,
            },
      );
      return store.append(...args);
    };
    const refused = await rotateSecret(racer, {
      keyId: 'key_d',
      subscriptionId: created.subscriptionId,
      secrets,
      overlapMs: 60_000,
      expected: original,
    }).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(SubscriptionChangedError);
    expect(refused).toMatchObject({
      code: 'SECRET_ROTATION_RACED',
      statusCode: 409,
      retryable: true,
      message: ERRORS.SECRET_ROTATION_RACED.message,
    });
    const events = await store.readStream(subscriptionStream('key_d'));
    expect(events.filter((e) => e.type === 'SubscriptionSecretRotated')).toHaveLength(0);
    expect(edits).toBeGreaterThan(1);
  });
});
