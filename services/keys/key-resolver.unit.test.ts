import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { HANG_MS } from '../../test/waits.ts';
import { changeKeyPlan, issueKey, revokeKey } from './key-commands.ts';
import { keyRegistryProjection } from './key-registry.ts';
import { KeyResolver, KeyUnverifiableError } from './key-resolver.ts';

describe('KeyResolver over the key-registry projection', () => {
  it('resolves a key issued a moment ago, even before the runner was asked to wait', async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), keyRegistryProjection);
    await runner.start();
    try {
      const resolver = new KeyResolver({ runner, store });
      const issued = await issueKey(store, { plan: 'starter', owner: 'o', via: 'operator' });
      expect(await resolver.resolve(issued.key)).toMatchObject({
        status: 'active',
        record: { keyId: issued.keyId },
      });
      expect(await resolver.resolve(`sk_live_${'q'.repeat(43)}`)).toEqual({ status: 'unknown' });
    } finally {
      await runner.stop();
    }
  });

  it('is indeterminate (not unknown) when the registry is stopped or the store cannot be read', async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), keyRegistryProjection);
    const key = `sk_live_${'q'.repeat(43)}`;
    await expect(new KeyResolver({ runner, store }).resolve(key)).rejects.toThrow(KeyUnverifiableError);
    await runner.start();
    try {
      const down = {
        headPosition: async () => {
          throw new Error('store unreachable');
        },
      };
      await expect(new KeyResolver({ runner, store: down }).resolve(key)).rejects.toThrow(
        KeyUnverifiableError,
      );
    } finally {
      await runner.stop();
    }
  });

  it('reads plan changes and revocations on every call, though the key was resolved before', async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), keyRegistryProjection);
    await runner.start();
    try {
      const resolver = new KeyResolver({ runner, store });
      const issued = await issueKey(store, { plan: 'starter', owner: 'o', via: 'operator' });
      const stream = `apikey-${issued.keyId}`;
      expect(await resolver.resolve(issued.key)).toMatchObject({
        status: 'active',
        record: { plan: 'starter' },
      });
      await runner.waitFor(await changeKeyPlan(store, stream, issued.keyId, 'pro'), HANG_MS);
      expect(await resolver.resolve(issued.key)).toMatchObject({ status: 'active', record: { plan: 'pro' } });
      await runner.waitFor(await revokeKey(store, stream, issued.keyId, 'leaked'), HANG_MS);
      expect(await resolver.resolve(issued.key)).toMatchObject({ status: 'revoked' });
      // Another key after many: each resolves to its own record.
      const other = await issueKey(store, { plan: 'pro', owner: 'p', via: 'operator' });
      expect(await resolver.resolve(other.key)).toMatchObject({
        status: 'active',
        record: { keyId: other.keyId },
      });
    } finally {
      await runner.stop();
    }
  });

  it('answers at once only for a key the running registry holds; anything else is a promise', async () => {
    const store = new MemoryEventStore();
    const runner = new ProjectionRunner(store, new MemoryProjectionStore(), keyRegistryProjection);
    const resolver = new KeyResolver({ runner, store });
    const issued = await issueKey(store, { plan: 'starter', owner: 'o', via: 'operator' });
    // Not running: refused as indeterminate.
    await expect(resolver.resolve(issued.key)).rejects.toThrow(KeyUnverifiableError);
    await runner.start();
    try {
      await runner.waitFor(await store.headPosition(), HANG_MS);
      const first = resolver.resolve(issued.key);
      expect(first).toMatchObject({ status: 'active', record: { keyId: issued.keyId } });
      // Remembered until the registry changes.
      expect(resolver.resolve(issued.key)).toBe(first);
      // Not (yet) in the registry: decided after letting the registry catch up.
      const unknown = resolver.resolve(`sk_live_${'q'.repeat(43)}`);
      expect(unknown).toBeInstanceOf(Promise);
      expect(await unknown).toEqual({ status: 'unknown' });
      const stream = `apikey-${issued.keyId}`;
      await runner.waitFor(await revokeKey(store, stream, issued.keyId, 'leaked'), HANG_MS);
      expect(resolver.resolve(issued.key)).toMatchObject({ status: 'revoked' });
    } finally {
      await runner.stop();
    }
  });
});
