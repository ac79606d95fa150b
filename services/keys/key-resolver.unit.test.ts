import { describe, expect, it } from 'vitest';
import { MemoryEventStore } from '../../adapters/event-store/memory.ts';
import { MemoryProjectionStore } from '../../adapters/projection-store/memory.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { issueKey } from './key-commands.ts';
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
});
